"""speco3.spectra"""
