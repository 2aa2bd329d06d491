"""speco3.vetting"""
