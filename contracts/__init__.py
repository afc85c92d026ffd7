"""The settlement contract and its Python client."""
