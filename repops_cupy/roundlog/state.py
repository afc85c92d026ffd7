"""State hashes and checkpoints of a rounding-log run.

The state after a step is the set of named tensors that carries into the next
step: ``param.<name>`` and ``buffer.<name>`` (float32: every value is one),
``optim.<param>.<slot>`` and ``optim.steps``, ``data.step`` (the data cursor), and
the leaf ``roundlog.log``: the hash of the step's rounding log (``hash_tensor`` of
its bytes as a uint8 array), so a state hash commits to the decisions that produced
it. The state hash is the project's (``repops_cupy.hashing``, which also owns the log
leaf: ``protocol.roundlog_dispute`` recomputes these hashes without torch): the
Merkle root over the leaves ``u16 len(name) || name || hash_tensor(tensor)`` in the
order of the names' UTF-8 bytes, so the protocol's inclusion proofs work on these
states too. A job's trace is the Merkle root over the state hashes of its
checkpoints, in step order.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from ..hashing import LOG_LEAF, log_digest
from ..hashing import roundlog_state_hash as state_hash
from ..merkle import merkle_root

__all__ = ["LOG_LEAF", "load_checkpoint", "log_digest", "save_checkpoint", "state_hash", "to_canonical",
           "trace_root", "write_trace"]


def to_canonical(t: torch.Tensor) -> np.ndarray:
    """float64 tensors holding float32 values become float32; everything else as is."""
    a = t.detach().cpu().numpy()
    if a.dtype == np.float64:  # in NumPy: half the time of the same checks in torch, for 88 small tensors a step
        f = a.astype(np.float32)
        if not np.array_equal(f, a) and not np.isnan(a).any():
            raise ValueError("state tensor holds values that are not float32 values")
        a = f
    return a


def trace_root(checkpoint_hashes: list[bytes]) -> bytes:
    return merkle_root(list(checkpoint_hashes))


def save_checkpoint(path: Path, tensors: Mapping[str, np.ndarray], step: int, digest: bytes,
                    log_hash: bytes | None) -> None:
    meta = {"step": str(step), "state_hash": digest.hex(), "log_digest": log_hash.hex() if log_hash else ""}
    save_file({k: np.array(v, order="C") for k, v in tensors.items()}, str(path), metadata=meta)  # ascontiguousarray would make 0-d arrays 1-d


def load_checkpoint(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors import safe_open  # noqa: PLC0415

    with safe_open(str(path), framework="numpy") as f:
        meta = dict(f.metadata() or {})
    return dict(load_file(str(path))), meta


def write_trace(path: Path, checkpoints: list[tuple[int, bytes]], extra: Mapping | None = None) -> bytes:
    root = trace_root([h for _, h in checkpoints])
    doc = {"checkpoints": [{"step": s, "state_hash": h.hex()} for s, h in checkpoints],
           "trace_root": root.hex(), **(extra or {})}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return root
