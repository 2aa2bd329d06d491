"""Model catalog, local model store, hub download and verification."""
