"""keccak256 for the protocol's trees and hashes: one function, the fastest backend installed.

eth-hash picks pycryptodome when it is installed, whose per-call object costs about 8 µs; the
C extension of (safe-)pysha3, when present, hashes 32 bytes in about 1.5 µs, and a job's element
specs and a fourth level's trace trees hash hundreds of thousands of leaves. Both are keccak256 (the
Ethereum one, not SHA3-256): the bytes are the same, only the time differs.
"""
from __future__ import annotations

from typing import Callable

try:
    import sha3 as _sha3  # safe-pysha3's module

    def keccak(data: bytes) -> bytes:
        return _sha3.keccak_256(data).digest()

except ImportError:  # pragma: no cover - the eth-hash backend is then the one
    from eth_hash.auto import keccak as _eth_keccak

    keccak: Callable[[bytes], bytes] = _eth_keccak  # type: ignore[no-redef]

__all__ = ["keccak"]
