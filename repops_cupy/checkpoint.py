"""Checkpoints: the named training state in a safetensors file, and its state hash.

The state hash is `repops_cupy.hashing.state_hash` (re-exported here for the callers
that save and load states): the Merkle root over one leaf
``u16 len(name) || name || hash_tensor(tensor)`` per tensor, in the order of the
names' UTF-8 bytes. The file stores the tensors (canonical little-endian C order)
and, as metadata, the format, the state hash in hex and the step; loading recomputes
the hash and refuses a file whose tensors do not match it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .hashing import canonical_array, sorted_names, state_hash

__all__ = ["CHECKPOINT_FORMAT", "CheckpointError", "load_checkpoint", "save_checkpoint", "state_hash"]

CHECKPOINT_FORMAT = "gavel-checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint file that is missing, malformed or does not match its state hash."""


def _safetensors():
    """(safe_open, save_file), imported when a file is read or written: hashing needs neither."""
    try:
        from safetensors import safe_open  # noqa: PLC0415 - optional until a file is touched
        from safetensors.numpy import save_file  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("checkpoint files need the safetensors package (pip install safetensors)") from exc
    return safe_open, save_file


def save_checkpoint(path: str | Path, state: Mapping[str, Any], *, step: int) -> bytes:
    """Write the state atomically; returns its state hash."""
    _, save_file = _safetensors()
    path = Path(path)
    # canonical_array makes 0-d arrays 1-d (np.ascontiguousarray does); keep the shape
    tensors = {n: canonical_array(state[n]).reshape(np.shape(state[n])) for n in sorted_names(state)}
    digest = state_hash(tensors)
    meta = {"format": CHECKPOINT_FORMAT, "state_hash": digest.hex(), "step": str(int(step))}
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, path)
    return digest


def load_checkpoint(path: str | Path) -> tuple[dict[str, np.ndarray], int, bytes]:
    """(state, step, state hash) of a checkpoint file, after checking the hash."""
    safe_open, _ = _safetensors()
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint")
    try:
        with safe_open(str(path), framework="np") as f:
            meta = f.metadata() or {}
            state = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as exc:  # safetensors raises its own types for a damaged file
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: not a {CHECKPOINT_FORMAT} file")
    digest = state_hash(state)
    if digest.hex() != meta.get("state_hash"):
        raise CheckpointError(f"{path}: tensors hash to {digest.hex()}, the file claims {meta.get('state_hash')}")
    return state, int(meta["step"]), digest
