"""speco3.engine"""
