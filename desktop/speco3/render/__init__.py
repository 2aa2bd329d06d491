"""speco3.render"""
