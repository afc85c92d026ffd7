"""Workers for one training job: rank 0 drives, ranks 1..N-1 follow, every step the same bits.

Rank 0 is the calling process (it keeps the trace, the checkpoints and the progress
callback); the others are processes started with multiprocessing's "spawn" (or by
torchrun on other hosts, see `serve_from_env`). Every worker holds the whole state; per
step rank 0 says "step" (or sends a state to start from, once), each worker runs the
step graph on its share of the batch (`parallel.execute_share`) and all end with the
same next state, so nothing but the collectives inside the step crosses between them.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from typing import Any, Iterator

from ._backend import to_numpy
from .parallel import SplitError, Share, counts_by_how, execute_share, shares, split_plan
from .parallel_comm import Communicator, WorkerError, connect, connect_from_env

_STEP, _STATE, _STOP = 1, 2, 3  # rank 0's commands
JOIN_SECONDS = 60.0
WATCH_SECONDS = 0.2  # how often rank 0 looks at its workers while they join


def limit_threads(n: int | None) -> None:
    """This worker's numba and torch kernels on at most `n` threads (None: as they are)."""
    if n is None:
        return
    try:
        import numba  # noqa: PLC0415
        numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    except ImportError:
        pass
    try:
        import torch  # noqa: PLC0415
        torch.set_num_threads(max(1, n))
    except ImportError:
        pass


class SplitProgram:
    """A training program's step graph with its split plan, run as one worker of a group."""

    def __init__(self, program: Any, comm: Communicator) -> None:
        """`program`: a `train.TrainingProgram` (not imported here: train imports this module)."""
        batch = program.spec.batch_size
        self.program, self.comm = program, comm
        self.share = Share(comm.rank, shares(batch, comm.size))
        self.plan = split_plan(program.graph, batch, program.at_batch_size(batch + 1).graph, batch + 1)

    def step(self, state: dict[str, Any]) -> tuple[dict[str, Any], float]:
        host = {k: to_numpy(v) for k, v in state.items()}
        outputs = execute_share(self.program.graph, self.plan, self.program.leaf_values(host), self.share, self.comm)
        loss = float(outputs.pop(self.program.loss_output))
        return outputs, loss


def serve(split: SplitProgram) -> None:
    """Follow rank 0: steps from the state it last sent, until it says stop."""
    state: dict[str, Any] | None = None
    while True:
        kind, payload = split.comm.broadcast_message(0)
        if kind == _STOP:
            return
        if kind == _STATE:
            state = pickle.loads(payload)
        if state is None:
            raise WorkerError("rank 0 asked for a step before sending a state")
        state, _ = split.step(state)


def _worker_main(rank: int, size: int, port: int, program: Any, threads: int | None) -> None:
    # Ctrl-C reaches the whole process group: rank 0 alone handles it and stops the workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit_threads(threads)
    try:
        comm = connect(rank, size, port=port)
        serve(SplitProgram(program, comm))
    except BaseException:  # noqa: BLE001 - a worker says why it stopped, then exits non-zero
        traceback.print_exc(file=sys.stderr)
        sys.exit(1)


def env_rank() -> int:
    """This process's rank under torchrun (RANK), 0 when it is not set."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        raise WorkerError(f"RANK={os.environ['RANK']!r} is not an integer") from None


def serve_from_env(program: Any, threads: int | None = None) -> None:
    """A worker of ranks >= 1 under torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)."""
    limit_threads(threads)
    serve(SplitProgram(program, connect_from_env()))


@contextmanager
def env_pool(program: Any, *, threads: int | None = None) -> Iterator[WorkerPool]:
    """Rank 0 of a group torchrun started (on one host or several); the others run `serve_from_env`."""
    limit_threads(threads)
    comm = connect_from_env()
    if comm.rank != 0:
        raise WorkerError(f"rank {comm.rank} follows rank 0: it serves steps, it does not drive a run")
    shares(program.spec.batch_size, comm.size)
    pool = WorkerPool(SplitProgram(program, comm))
    yield pool
    # only between steps; after an error rank 0's exit closes its connections, which ends the others
    pool.stop()


class WorkerPool:
    """Rank 0's handle: `run_step(state)` gives the next state and the loss, as one device would."""

    def __init__(self, split: SplitProgram) -> None:
        self.split = split
        self._last: dict[str, Any] | None = None

    @property
    def workers(self) -> int:
        return self.split.comm.size

    def plan_counts(self) -> dict[str, int]:
        return counts_by_how(self.split.plan)

    def run_step(self, state: dict[str, Any]) -> tuple[dict[str, Any], float]:
        try:
            if state is self._last:
                self.split.comm.broadcast_message(_STEP)
            else:
                host = {k: to_numpy(v) for k, v in state.items()}
                self.split.comm.broadcast_message(_STATE, pickle.dumps(host))
            new_state, loss = self.split.step(state)
        except RuntimeError as exc:  # gloo: a peer closed its connection or timed out
            raise WorkerError(f"a worker stopped: {exc}") from None
        self._last = new_state
        return new_state, loss

    def stop(self) -> None:
        try:
            self.split.comm.broadcast_message(_STOP)
        except RuntimeError:  # the others are gone already
            pass


def _free_store(size: int):
    from .parallel_comm import TIMEOUT, _torch  # noqa: PLC0415

    _, dist = _torch()
    return dist.TCPStore("127.0.0.1", 0, size, True, TIMEOUT, wait_for_workers=False)


def _join_watching(procs: list[Any], workers: int, store: Any) -> Communicator:
    """Rank 0's side of the rendezvous, given up when a worker process dies first (else
    rank 0 would wait for it until the rendezvous timeout)."""
    joined: dict[str, Any] = {}

    def join() -> None:
        try:
            joined["comm"] = connect(0, workers, store=store)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            joined["error"] = exc

    thread = threading.Thread(target=join, name="gavel-rendezvous", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(WATCH_SECONDS)
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead and thread.is_alive():
            raise WorkerError(f"a worker process stopped before joining (exit status {dead}); its error is above")
    if "error" in joined:
        raise WorkerError(f"the workers could not join: {joined['error']}")
    return joined["comm"]


@contextmanager
def worker_pool(program: Any, workers: int, *, threads: int | None = None) -> Iterator[WorkerPool]:
    """Start `workers` - 1 processes on this machine (gloo on 127.0.0.1) and join them as rank 0."""
    shares(program.spec.batch_size, workers)  # refuses a count the batch cannot feed, before starting any
    store = _free_store(workers)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker_main, args=(r, workers, store.port, program, threads), daemon=True)
             for r in range(1, workers)]
    for p in procs:
        p.start()
    finished = False
    try:
        pool = WorkerPool(SplitProgram(program, _join_watching(procs, workers, store)))
        yield pool
        pool.stop()  # between steps: the workers wait for rank 0's next command
        finished = True
    finally:
        for p in procs:
            # after an error or Ctrl-C rank 0 may have left a step half done, the workers
            # waiting inside it for a collective that will not come: they are ended
            if finished:
                p.join(JOIN_SECONDS)
            if p.is_alive():
                p.terminate()
                p.join()
    failed = [p.exitcode for p in procs if p.exitcode not in (0, None)]
    if failed:
        raise WorkerError(f"{len(failed)} worker process(es) failed (exit status {failed})")


__all__ = ["SplitError", "SplitProgram", "WorkerError", "WorkerPool", "env_pool", "env_rank", "serve", "serve_from_env",
           "worker_pool"]
