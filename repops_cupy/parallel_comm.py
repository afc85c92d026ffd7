"""The workers' collectives: a torch.distributed process group (gloo on CPU) over NumPy arrays.

Only exact collectives are used: MAX of float32 values and SUM of int64 values are the
same whatever order the engine combines them in, and a gather moves bits unchanged. The
group is a `ProcessGroupGloo` object of its own, not torch's default group, so one
process may hold several (a provider running two jobs, a test running workers as
threads).

Rendezvous: a TCP store at (host, port) that rank 0 opens, the others join; or, under
torchrun, the standard variables MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE.
"""
from __future__ import annotations

import datetime
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import OpError

TIMEOUT = datetime.timedelta(minutes=10)  # a peer that stops answering ends the run, not hangs it
_TORCH_DTYPES = (np.float32, np.float64, np.int64, np.int32, np.uint8)


class WorkerError(OpError):
    """Workers that cannot be started or joined: a bad count, a missing torch, a lost peer."""


def _torch():
    try:
        import torch  # noqa: PLC0415 - several workers need torch.distributed; one does not
        import torch.distributed as dist  # noqa: PLC0415
    except ImportError:
        raise WorkerError("several workers need the torch package (pip install torch)") from None
    if not dist.is_available():
        raise WorkerError("this torch has no torch.distributed")
    return torch, dist


@dataclass
class Communicator:
    """Rank `rank` of `size` workers joined by a gloo process group."""

    rank: int
    size: int
    group: Any

    def _tensor(self, x: np.ndarray):
        torch, _ = _torch()
        x = np.ascontiguousarray(x)
        if x.dtype == np.bool_:
            x = x.view(np.uint8)
        if x.dtype.type not in _TORCH_DTYPES:
            raise WorkerError(f"cannot send {x.dtype} between workers")
        return torch.from_numpy(x.copy())

    def _all_reduce(self, x: np.ndarray, op: str) -> np.ndarray:
        _, dist = _torch()
        t = self._tensor(x)
        opts = dist.AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, op)
        self.group.allreduce([t], opts).wait()
        return t.numpy().reshape(x.shape)

    def max(self, x: np.ndarray) -> np.ndarray:
        """Elementwise maximum over the workers (exact: a maximum has no rounding)."""
        return self._all_reduce(x, "MAX")

    def sum_int64(self, x: np.ndarray) -> np.ndarray:
        """Elementwise sum of int64 arrays over the workers (exact below 2^63)."""
        if x.dtype != np.int64:
            raise WorkerError(f"sum_int64 takes int64, got {x.dtype}")
        return self._all_reduce(x, "SUM")

    def gather(self, x: np.ndarray, axis: int, lengths: tuple[int, ...]) -> np.ndarray:
        """The workers' arrays joined along `axis` in rank order; worker r's has lengths[r] there."""
        return self.gather_many([(x, axis, lengths)])[0]

    def gather_many(self, items: list[tuple[np.ndarray, int, tuple[int, ...]]]) -> list[np.ndarray]:
        """`gather` of several arrays in one collective (their bytes sent as one buffer)."""
        if not items:
            return []
        torch, _ = _torch()
        moved = [np.ascontiguousarray(np.moveaxis(np.asarray(x), axis, 0)) for x, axis, _ in items]
        row_bytes = [m[0:1].nbytes if m.shape[0] else m.dtype.itemsize * math.prod(m.shape[1:]) for m in moved]
        sizes = [[n * rb for n in lengths] for (_, _, lengths), rb in zip(items, row_bytes)]
        totals = [sum(col) for col in zip(*sizes)]  # bytes each rank sends
        buf = np.zeros(max(totals), np.uint8)
        flat = np.concatenate([m.reshape(-1).view(np.uint8) for m in moved]) if moved else buf[:0]
        buf[: flat.size] = flat
        mine = torch.from_numpy(buf)
        parts = [torch.empty_like(mine) for _ in range(self.size)]
        self.group.allgather([parts], [mine]).wait()
        got = [p.numpy() for p in parts]
        out = []
        offsets = [0] * self.size
        for (x, axis, lengths), m, sz in zip(items, moved, sizes):
            pieces = []
            for r in range(self.size):
                raw = got[r][offsets[r]: offsets[r] + sz[r]]
                offsets[r] += sz[r]
                pieces.append(raw.view(m.dtype).reshape((lengths[r],) + m.shape[1:]))
            out.append(np.moveaxis(np.concatenate(pieces), 0, axis))
        return out

    def broadcast_message(self, kind: int, payload: bytes = b"") -> tuple[int, bytes]:
        """Rank 0's (kind, payload) on every worker: one collective when the payload is empty
        (a per-step command), two when it carries bytes (a state, once)."""
        torch, _ = _torch()
        header = torch.tensor([kind, len(payload)] if self.rank == 0 else [0, 0], dtype=torch.int64)
        self.group.broadcast([header]).wait()
        kind, length = (int(v) for v in header.tolist())
        if not length:
            return kind, b""
        buf = np.frombuffer(payload, np.uint8).copy() if self.rank == 0 else np.zeros(length, np.uint8)
        data = torch.from_numpy(buf)
        self.group.broadcast([data]).wait()
        return kind, data.numpy().tobytes()


def connect(rank: int, size: int, *, host: str = "127.0.0.1", port: int = 0, store: Any = None,
            prefix: str = "gavel") -> Communicator:
    """Join a group of `size` workers as `rank`: through `store` (a torch Store) when given,
    else a TCP store that rank 0 serves at (host, port)."""
    _, dist = _torch()
    if not 0 <= rank < size:
        raise WorkerError(f"rank {rank} is outside 0..{size - 1}")
    if store is None:
        if not port:
            raise WorkerError("workers need the rendezvous port that rank 0 serves")
        store = dist.TCPStore(host, port, size, rank == 0, TIMEOUT)
    group = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size, TIMEOUT)
    return Communicator(rank, size, group)


def connect_from_env() -> Communicator:
    """Join the group torchrun describes (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    try:
        host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError) as exc:
        raise WorkerError(f"torchrun variables missing or malformed: {exc}") from None
    _, dist = _torch()
    # torchrun's agent already serves the store at MASTER_PORT; rank 0 serves it only without one
    serve = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    return connect(rank, size, store=dist.TCPStore(host, port, size, serve, TIMEOUT))
