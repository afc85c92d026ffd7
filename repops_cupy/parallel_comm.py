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
        torch, _ = _torch()
        x = np.moveaxis(np.asarray(x), axis, 0)
        longest = max(lengths)
        pad = np.zeros((longest,) + x.shape[1:], x.dtype)
        pad[: x.shape[0]] = x
        mine = self._tensor(pad)
        parts = [torch.empty_like(mine) for _ in range(self.size)]
        self.group.allgather([parts], [mine]).wait()
        joined = np.concatenate([p.numpy()[:n] for p, n in zip(parts, lengths)])
        if x.dtype == np.bool_:
            joined = joined.view(np.bool_)
        return np.moveaxis(joined, 0, axis)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every worker (pickled; for the start state, not per step)."""
        import pickle  # noqa: PLC0415

        data = np.frombuffer(pickle.dumps(obj), np.uint8) if self.rank == 0 else np.zeros(0, np.uint8)
        length = int(self.max(np.array([data.size], np.int64))[0])
        buf = np.zeros(length, np.uint8)
        buf[: data.size] = data
        torch, _ = _torch()
        t = torch.from_numpy(buf)
        self.group.broadcast([t]).wait()
        return pickle.loads(t.numpy().tobytes())

    def barrier(self) -> None:
        self.max(np.zeros(1, np.int64))


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
