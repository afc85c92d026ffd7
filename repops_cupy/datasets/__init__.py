"""Data files shipped with the library (see README.md)."""
