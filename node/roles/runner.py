"""A party's training run of one job, on disk, and the dispute oracle over it.

An honest run is `repops_cupy.train.train` into the job's ``run/`` directory: a
checkpoint file every k steps and ``trace.json`` (a rounding-log job's run is
`roundlog_jobs.train_roundlog_run`, in the same files). It resumes from the last checkpoint
of an earlier, interrupted run of the same job (a node killed mid-job), and the resumed
run passes through the same bits. A stop flag checked after every step lets the node
end a run promptly on shutdown; the next start resumes it.

A deviating run (a provider started with ``--cheat STRATEGY``, for tests) is one of the
strategies in the table the run is given (`node.cheats.STRATEGIES`, passed in by whoever
starts a cheating node; honest code never imports it): the honest run is computed in
memory first (the cheat needs it to pick a deviation that survives to a checkpoint), then
the cheat's run, whose checkpoints are written in the same format. Its choices are seeded by the job id, so a
restarted cheater cheats the same way.

`StoredRunOracle` answers a dispute from the checkpoint files of a finished run: it
loads a checkpoint's state when the game needs it and recomputes from there.

Kernel threads. A node shares its cores: its own event loop, other roles, and, on a
machine that runs a small network, other nodes training the same job at once. The
compiled kernels fan out in gangs (numba's prange over libgomp, oneDNN's int8 GEMM over
torch's libgomp) whose parallel regions end at a barrier every thread must reach, and
whose idle workers spin. When more threads want the cores than there are cores, every
one of the thousands of small parallel regions of a step waits for a descheduled gang
member: on 2 busy cores a provider trained the MLP job at 3 steps/s, and at 260 with the
limit below (`scripts/bench_node.py --speed-only`). A run therefore trains with
`kernel_threads` (every core but one, at most what the process allows), set for its
worker thread only; the bits do not depend on the thread count.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from repops_cupy.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from repops_cupy.train import TRACE_FILE, Trace, TrainingError, checkpoint_file, train

from ..errors import LocalError
from ..threads import kernel_threads, limit_kernel_threads
from ..training_oracle import CheatContext, StageTimer, TrainingOracle, schedule_of
from .roundlog_jobs import RoundLogProgram, train_roundlog_run

log = logging.getLogger(__name__)

# a strategy's name -> its deviating run (node.cheats.STRATEGIES); None: the node trains honestly
Cheats = Mapping[str, Callable[[CheatContext], Any]]


class RunStopped(Exception):
    """The node asked the run to stop (it resumes from its last checkpoint next time)."""


class RunFailed(LocalError):
    """The run cannot produce a trace (damaged files, a cheat that finds no deviation)."""


class StoredRunOracle(TrainingOracle):
    """A `TrainingOracle` whose checkpoints are the files of a finished run."""

    def __init__(self, training: Any, run_dir: Path, hashes: list[bytes], files: list[str], *, program: Any) -> None:
        super().__init__(training, program=program)
        self._run_dir = Path(run_dir)
        self._hashes = list(hashes)
        self._files = list(files)
        self._loaded: dict[int, dict[str, Any]] = {}

    def train(self, *, prefix: Any = None, prefix_steps: int = 0) -> list[bytes]:
        return list(self._hashes)

    def checkpoint_state(self, c: int) -> dict[str, Any]:
        if c not in self._loaded:
            state, _, digest = load_checkpoint(self._run_dir / self._files[c])
            if digest != self._hashes[c]:
                raise RunFailed(f"checkpoint {c} on disk no longer matches the committed trace")
            if len(self._loaded) >= 2:  # a dispute needs one interval at a time
                self._loaded.pop(next(iter(self._loaded)))
            self._loaded[c] = state
        return self._loaded[c]


class JobRun:
    """One job's training run in ``run_dir``."""

    def __init__(self, training: Any, program: Any, run_dir: Path, *, job_id: bytes, cheat: str = "",
                 cheats: Cheats | None = None, device: str = "cpu", workers: int = 1) -> None:
        """workers > 1: the run cuts each batch over that many processes (step-graph jobs on
        CPU; the bits are those of one worker)."""
        self.training = training
        self.program = program
        self.run_dir = Path(run_dir)
        self.job_id = job_id
        self.cheat = cheat
        self.cheats = cheats
        self.device = device
        # several workers run a step graph on CPU; other programs (rounding-log jobs) train on one
        self.workers = workers if device == "cpu" and hasattr(training, "at_batch_size") else 1
        self.schedule = schedule_of(training)
        self._cheat_oracle: TrainingOracle | None = None
        self._cheat_rewrite: Any = None
        self.trained_steps = 0  # steps this process trained in the last call of `train_sync`
        self.train_seconds = 0.0  # and the seconds they took

    # -- running -----------------------------------------------------------------------

    def finished_trace(self) -> Trace | None:
        """The trace of a finished run in ``run_dir``, if there is one."""
        path = self.run_dir / TRACE_FILE
        if not path.exists():
            return None
        try:
            trace = Trace.load(path)
        except TrainingError as error:
            raise RunFailed(str(error)) from None
        if trace.steps != self.schedule.steps or len(trace.checkpoints) != self.schedule.checkpoints:
            return None
        return trace

    def train_sync(self, stop: threading.Event) -> Trace:
        """Train (or resume) to the end; blocking, for a worker thread (whose kernel
        threads it sets for the run, see the module's docstring)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.trained_steps, self.train_seconds = 0, 0.0
        with limit_kernel_threads(max(1, kernel_threads() // self.workers)):
            return self._train(stop)

    def _train(self, stop: threading.Event) -> Trace:
        done = self.finished_trace()
        if self.cheat:
            if done is None or self._cheat_oracle is None:
                done = self._deviate(stop)
            return done
        if done is not None:
            return done
        started = time.perf_counter()

        def on_step(step: int, loss: float) -> None:
            self.trained_steps += 1
            self.train_seconds = time.perf_counter() - started
            if stop.is_set():
                raise RunStopped(f"stopped after step {step}")

        resume = (self.run_dir / TRACE_FILE).exists()
        if resume:
            log.info("job %s: resuming its training run from the last checkpoint", self.job_id.hex()[:12])
        try:
            if isinstance(self.training, RoundLogProgram):
                trace = train_roundlog_run(self.training, self.run_dir, on_step=on_step)
            else:
                trace = train(self.training.spec, self.run_dir, resume=resume, device=self.device, on_step=on_step,
                              program=self.loop_program(), workers=self.workers,
                              threads=max(1, kernel_threads() // self.workers))
        except (TrainingError, CheckpointError) as error:  # a damaged or foreign run directory
            raise RunFailed(str(error)) from None
        if len(trace.checkpoints) != self.schedule.checkpoints:
            raise RunFailed(f"the run produced {len(trace.checkpoints)} checkpoints, the job has {self.schedule.checkpoints}")
        return trace

    def _deviate(self, stop: threading.Event) -> Trace:
        if self.cheat not in (self.cheats or {}):
            raise RunFailed(f"unknown cheat {self.cheat!r}")
        timer = StageTimer()
        honest = TrainingOracle(self.training, timer=timer, program=self.program)
        honest.train()
        if stop.is_set():
            raise RunStopped("stopped before deviating")
        rng = random.Random(int.from_bytes(self.job_id[:8], "big"))
        try:
            cheat = self.cheats[self.cheat](CheatContext(self.training, honest, rng, timer))
        except RuntimeError as error:
            raise RunFailed(f"cheat {self.cheat}: {error}") from None
        cheat.oracle.train(prefix=honest, prefix_steps=(cheat.truth.step or 1) - 1)
        log.warning("job %s: cheating on purpose (%s): %s", self.job_id.hex()[:12], self.cheat, cheat.description)
        self._cheat_oracle, self._cheat_rewrite = cheat.oracle, cheat.rewrite
        self.deviated(cheat.oracle)
        trace = Trace(self.training.spec.name, self.training.identity().hex(), self.schedule.steps, self.schedule.every)
        for c, digest in enumerate(cheat.oracle.checkpoint_states()):
            step = self.schedule.checkpoint_step(c)
            written = save_checkpoint(self.run_dir / checkpoint_file(step), cheat.oracle.checkpoint_state(c), step=step)
            assert written == digest
            trace.checkpoints.append({"index": c, "step": step, "state_hash": digest.hex(), "file": checkpoint_file(step)})
        trace.save(self.run_dir)
        return trace

    # -- what a subclass may add to a run (settlement version 2 records every step's state) ---

    def loop_program(self) -> Any:
        """The program the training loop steps (the job's own)."""
        return self.training

    def deviated(self, oracle: TrainingOracle) -> None:
        """A deviating run was computed in memory (its oracle holds every step's state hash)."""

    # -- answering disputes ------------------------------------------------------------

    def oracle(self, trace: Trace) -> TrainingOracle:
        """The dispute oracle of this run (a cheat answers from its own deviating run)."""
        if self.cheat:
            if self._cheat_oracle is None:
                self._deviate(threading.Event())
            return self._cheat_oracle
        return StoredRunOracle(self.training, self.run_dir, trace_hashes(trace),
                               [c["file"] for c in trace.checkpoints], program=self.program)

    @property
    def rewrite(self) -> Any:
        """The cheat's rewrite of its dispute moves, if its strategy has one."""
        return self._cheat_rewrite


def resolve_device(setting: str) -> str:
    """``auto``: the GPU when CuPy finds one, else the CPU (the bits are the same)."""
    if setting != "auto":
        return setting
    from repops_cupy._backend import gpu_available

    return "gpu" if gpu_available() else "cpu"


def trace_hashes(trace: Trace) -> list[bytes]:
    return [bytes.fromhex(c["state_hash"]) for c in trace.checkpoints]


def checkpoint_paths(run_dir: Path, trace: Trace) -> list[Path]:
    return [Path(run_dir) / c["file"] for c in trace.checkpoints]
