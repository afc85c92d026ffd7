"""Canonical tensor hashing: BLAKE3 over dtype, shape and little-endian C-order bytes."""
from __future__ import annotations

import struct
from typing import Any

import blake3
import numpy as np

from ._backend import to_numpy

_DOMAIN = b"gavel/tensor/v1\0"


def canonical_array(x: Any) -> np.ndarray:
    """Host copy in C order with little-endian dtype: the layout that is hashed and stored."""
    arr = to_numpy(x)
    if arr.dtype == object:
        raise TypeError("object arrays have no canonical encoding")
    # asarray(order="C") keeps a 0-d array 0-d (np.ascontiguousarray would make it 1-d)
    arr = np.asarray(arr, dtype=arr.dtype.newbyteorder("<"), order="C")
    if arr.dtype.kind in "fc" and np.isnan(arr).any():
        # CPUs and GPUs produce NaNs with different sign and payload bits; a NaN is
        # a NaN, so every NaN hashes as the one canonical quiet NaN.
        arr = np.where(np.isnan(arr), arr.dtype.type(np.nan), arr)
    return arr


def hash_tensor(x: Any) -> bytes:
    """32-byte BLAKE3 digest of domain tag, dtype string, rank, shape (u64 each) and bytes."""
    arr = canonical_array(x)
    code = arr.dtype.str.encode()
    h = blake3.blake3(_DOMAIN)
    h.update(struct.pack("<B", len(code)) + code)
    h.update(struct.pack(f"<I{arr.ndim}Q", arr.ndim, *arr.shape))
    h.update(memoryview(arr.reshape(-1)).cast("B"))
    return h.digest()
