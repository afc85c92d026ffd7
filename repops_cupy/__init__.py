"""Bitwise-reproducible operators over NumPy (CPU) and CuPy (GPU)."""
from .errors import OpError
from .hashing import hash_tensor

__all__ = ["OpError", "hash_tensor"]
