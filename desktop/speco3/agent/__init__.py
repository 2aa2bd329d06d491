"""speco3.agent"""
