"""The bytes both parties hash: tensors, named leaves, state hashes, the rounding log's leaf.

Every hashed layout that a trainer writes and a referee recomputes is encoded here
and nowhere else (the Merkle tree over leaves is `repops_cupy.merkle`); checkpoints,
data sets, the rounding-log mode and `protocol` import these functions. One differing
bit between two encoders would make an honest party lose a dispute, so
`tests/test_layering.py` fails when a second encoder appears. Torch-free: numpy and
blake3 only.

- Tensor hash: BLAKE3 over the domain tag ``gavel/tensor/v1\\0``, the dtype string
  (u8 length first), the rank (u32) and each dimension (u64), then the bytes of the
  canonical array (C order, little-endian, every NaN the one quiet NaN).
- Named leaf: ``u16 little-endian length of the name || name (UTF-8) || 32-byte hash``,
  so a name and its hash can never be confused with another pair. Names are 1 to
  65535 bytes.
- State hash: the Merkle root over the named leaves of a state's tensor hashes, in
  the order of the names' UTF-8 bytes. A data set's root is the same tree over its
  arrays' roots (`repops_cupy.data`).
- Rounding-log state: the tensors' hashes plus, after a step, the leaf ``roundlog.log``
  holding the step log's digest (`hash_tensor` of its bytes as a uint8 array).
"""
from __future__ import annotations

import math
import struct
from typing import Any, Mapping, Sequence

import blake3
import numpy as np

from ._backend import to_numpy
from .merkle import merkle_root

_DOMAIN = b"gavel/tensor/v1\0"
HASH_SIZE = 32
MAX_NAME_BYTES = (1 << 16) - 1
LOG_LEAF = "roundlog.log"  # the state leaf holding the digest of the step's rounding log

__all__ = [
    "HASH_SIZE", "LOG_LEAF", "canonical_array", "hash_tensor", "log_digest", "roundlog_named_hashes",
    "roundlog_state_hash", "sorted_names", "state_hash", "state_leaf", "state_leaves", "state_root", "tensor_layout",
    "tensor_message",
]


# --- tensors ---------------------------------------------------------------------------


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


def _header(arr: np.ndarray) -> bytes:
    return _header_of(arr.dtype, arr.shape)


def _header_of(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    code = dtype.str.encode()
    return _DOMAIN + struct.pack("<B", len(code)) + code + struct.pack(f"<I{len(shape)}Q", len(shape), *shape)


def hash_tensor(x: Any) -> bytes:
    """32-byte BLAKE3 digest of domain tag, dtype string, rank, shape (u64 each) and bytes."""
    arr = canonical_array(x)
    h = blake3.blake3(_header(arr))
    h.update(memoryview(arr.reshape(-1)).cast("B"))
    return h.digest()


def tensor_message(x: Any) -> tuple[bytes, int]:
    """(the bytes `hash_tensor` hashes, the header's length): element i's bytes start at
    header + i * itemsize, which is what a chunk proof against the tensor hash opens (issue 18)."""
    arr = canonical_array(x)
    header = _header(arr)
    return header + arr.reshape(-1).tobytes(), len(header)


def tensor_layout(shape: Sequence[int], dtype: Any) -> tuple[int, int, int]:
    """(the header's length, the whole message's, bytes per element) of `tensor_message` for a tensor
    of this shape and dtype, without its bytes: where a chunk proof finds element i (issue 18)."""
    dt = np.dtype(dtype).newbyteorder("<")  # canonical_array's
    shape = tuple(int(d) for d in shape)
    header = len(_header_of(dt, shape))
    return header, header + math.prod(shape) * dt.itemsize, dt.itemsize


# --- named leaves and state hashes -------------------------------------------------------


def sorted_names(named: Mapping[str, Any]) -> list[str]:
    """The names of a state (or data set) in leaf order: by their UTF-8 bytes."""
    return sorted(named, key=lambda n: n.encode())


def state_leaf(name: str, digest: bytes) -> bytes:
    """Leaf data of one named hash: u16 LE name length || name || the 32-byte hash.

    Raises ValueError for an empty name, a name over 65535 bytes of UTF-8, or a
    hash that is not 32 bytes.
    """
    raw = name.encode()
    if not 1 <= len(raw) <= MAX_NAME_BYTES:
        raise ValueError(f"names in a state are 1 to {MAX_NAME_BYTES} bytes of UTF-8, got {len(raw)}: {name[:40]!r}")
    if type(digest) is not bytes or len(digest) != HASH_SIZE:
        raise ValueError(f"the hash of {name[:40]!r} is not {HASH_SIZE} bytes")
    return struct.pack("<H", len(raw)) + raw + digest


def state_leaves(named_hashes: Mapping[str, bytes]) -> list[bytes]:
    """The leaves of named hashes in leaf order (for a root, or an inclusion proof of one)."""
    return [state_leaf(n, named_hashes[n]) for n in sorted_names(named_hashes)]


def state_root(named_hashes: Mapping[str, bytes]) -> bytes:
    """The Merkle root over the named leaves of `named_hashes` (the empty root for none)."""
    return merkle_root(state_leaves(named_hashes))


def state_hash(state: Mapping[str, Any]) -> bytes:
    """The state hash of named tensors: `state_root` of their tensor hashes."""
    return state_root({name: hash_tensor(value) for name, value in state.items()})


# --- rounding-log states ---------------------------------------------------------------


def log_digest(log_bytes: bytes) -> bytes:
    """The digest of a step's rounding log, as its state holds it: the hash of its bytes as uint8."""
    return hash_tensor(np.frombuffer(log_bytes, dtype=np.uint8))


def roundlog_named_hashes(tensors: Mapping[str, Any], log_hash: bytes | None) -> dict[str, bytes]:
    """The named hashes of a rounding-log state: its tensors', and the log's digest after a step."""
    hashes = {name: hash_tensor(value) for name, value in tensors.items()}
    if log_hash is not None:
        hashes[LOG_LEAF] = log_hash
    return hashes


def roundlog_state_hash(tensors: Mapping[str, Any], log_hash: bytes | None) -> bytes:
    """The state hash of a rounding-log state (`log_hash` None for the initial state)."""
    return state_root(roundlog_named_hashes(tensors, log_hash))
