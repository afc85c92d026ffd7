"""The testnet's own answer to "what should each job have given?", recomputed here.

The report judges the network against this, not against what the nodes claim:

- `honest_run`: the job trained with the reproducible training code; its checkpoint
  state hashes and trace root are what an honest provider commits.
- `replay_run`: a provider's run as it lies on disk (``trace.json`` and checkpoint
  files), each checkpoint interval recomputed from the run's own checkpoint. An
  interval whose replay does not end on the run's next checkpoint is *corrupted*:
  an auditor that samples it sees the mismatch. The count of such intervals is the
  ``corrupted`` of the sampling arithmetic (`protocol.sampling`).

Both are blocking (seconds per job): call them from a worker thread or after the run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from protocol import hash_tree


@dataclass(frozen=True)
class HonestRun:
    checkpoints: tuple[bytes, ...]  # state hashes at checkpoints 0..C
    root: bytes
    seconds: float

    @property
    def intervals(self) -> int:
        return len(self.checkpoints) - 1


@dataclass(frozen=True)
class ReplayedRun:
    root: bytes                       # the trace root of the run's own checkpoints
    checkpoints: tuple[bytes, ...]
    corrupted: tuple[int, ...]        # intervals whose replay does not reach the next checkpoint
    seconds: float

    @property
    def intervals(self) -> int:
        return len(self.checkpoints) - 1


@lru_cache(maxsize=64)
def _training(job_file: str):
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import TrainingProgram

    training = TrainingProgram(load_job(job_file))
    training.graph  # trace the step graph once
    return training


def honest_run(job_file: Path) -> HonestRun:
    from ..training_oracle import TrainingOracle

    started = time.perf_counter()
    states = tuple(TrainingOracle(_training(str(job_file))).checkpoint_states())
    return HonestRun(states, hash_tree(list(states)).root, time.perf_counter() - started)


def replay_run(job_file: Path, run_dir: Path) -> ReplayedRun:
    """Every interval of the run in ``run_dir`` replayed from its own checkpoints."""
    from repops_cupy.train import TRACE_FILE, Trace, replay

    started = time.perf_counter()
    training = _training(str(job_file))
    trace = Trace.load(Path(run_dir) / TRACE_FILE)
    corrupted = tuple(c for c in range(len(trace.checkpoints) - 1)
                      if not replay(training.spec, run_dir, c, program=training).matches)
    checkpoints = tuple(bytes.fromhex(c["state_hash"]) for c in trace.checkpoints)
    return ReplayedRun(trace.root, checkpoints, corrupted, time.perf_counter() - started)
