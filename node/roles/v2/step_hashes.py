"""The state hash after every step of a provider's run, recorded while it trains (economics §8: a
defender's steps list is a lookup, not a recompute).

One file in the job directory, ``step_hashes.bin``: T + 1 records of 32 bytes, record s at
byte 32·s (s = 0: the initial state), written in place as each step ends, so a run killed
mid-job keeps what it recorded and a resumed run writes the same bytes again. A record of
32 zero bytes was never written (no state hashes to zero). `interval(c)` reads the k + 1
hashes of interval c: the state at checkpoint c, then the state after each of its steps.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from protocol import CheckpointSchedule

from ..runner import JobRun

STEP_HASHES_FILE = "step_hashes.bin"
HASH = 32
_UNWRITTEN = bytes(HASH)


class StepHashesMissing(LookupError):
    """A step's hash was never recorded (the run did not reach it, or ran where nothing recorded)."""


class StepHashes:
    """The step-hash file of one run; `record` from the training thread, reads from anywhere."""

    def __init__(self, path: Path, schedule: CheckpointSchedule) -> None:
        self.path = Path(path)
        self.schedule = schedule
        size = HASH * (schedule.steps + 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as f:  # created once, sized once; never shortened
            if f.tell() < size:
                f.truncate(size)

    @classmethod
    def in_dir(cls, directory: Path, schedule: CheckpointSchedule) -> "StepHashes":
        return cls(Path(directory) / STEP_HASHES_FILE, schedule)

    def record(self, step: int, digest: bytes) -> None:
        if not 0 <= step <= self.schedule.steps or len(digest) != HASH or digest == _UNWRITTEN:
            raise ValueError(f"step {step} / a {len(digest)}-byte hash does not fit a record of this run")
        fd = os.open(self.path, os.O_WRONLY)
        try:
            os.pwrite(fd, digest, HASH * step)
        finally:
            os.close(fd)

    def record_all(self, hashes: list[bytes]) -> None:
        """Every step's hash at once (a run computed in memory: a cheat's deviating run)."""
        if len(hashes) != self.schedule.steps + 1:
            raise ValueError(f"{len(hashes)} hashes for a run of {self.schedule.steps} steps")
        self.path.write_bytes(b"".join(hashes))

    def _read(self, first: int, count: int) -> list[bytes]:
        with open(self.path, "rb") as f:
            f.seek(HASH * first)
            raw = f.read(HASH * count)
        out = [raw[i:i + HASH] for i in range(0, len(raw), HASH)]
        missing = [first + i for i, h in enumerate(out) if h == _UNWRITTEN]
        if len(out) != count or missing:
            raise StepHashesMissing(f"steps {missing or [first + count - 1]} were not recorded in {self.path}")
        return out

    def get(self, step: int) -> bytes:
        return self._read(step, 1)[0]

    def interval(self, c: int) -> list[bytes]:
        """The state hashes of interval c: checkpoint c's, then after each of its steps."""
        steps = self.schedule.interval_steps(c)
        return self._read(steps.start - 1, len(steps) + 1)

    def complete(self) -> bool:
        try:
            self._read(0, self.schedule.steps + 1)
        except StepHashesMissing:
            return False
        return True


class RecordingProgram:
    """A training program whose every step records the state it produced (the training loop's
    ``program.run_step``): one state hash a step, on the host copy of the state."""

    def __init__(self, program: Any, hashes: StepHashes) -> None:
        self._program = program
        self._hashes = hashes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._program, name)

    def initial_state(self) -> Any:
        state = self._program.initial_state()
        self._hashes.record(0, _state_hash(state))
        return state

    def run_step(self, state: Any, **kwargs: Any) -> Any:
        outcome = self._program.run_step(state, **kwargs)
        step = int(_host_value(outcome.state["step"]))
        self._hashes.record(step, _state_hash(outcome.state))
        return outcome


class RecordedRun(JobRun):
    """Version 1's training run (honest, or a ``--cheat`` strategy's) that also fills the job's
    step-hash file: from inside the loop, or from a deviating run's oracle. One worker: a
    batch cut over processes steps outside ``program.run_step``, where nothing records. (A
    rounding-log job trains outside this loop and records nothing yet.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers = 1
        self.step_hashes = StepHashes.in_dir(self.run_dir.parent, self.schedule)

    def loop_program(self) -> Any:
        return RecordingProgram(self.training, self.step_hashes)

    def deviated(self, oracle: Any) -> None:
        self.step_hashes.record_all(list(oracle.state_hashes))

    def oracle(self, trace: Any) -> RecordedStepsOracle:
        """The run's dispute oracle, its steps lists looked up in what the run recorded."""
        return RecordedStepsOracle(super().oracle(trace), self.step_hashes)


class RecordedStepsOracle:
    """A run's dispute oracle whose steps lists are read from its step-hash file: `postSteps` is due
    E_list = 2Δ after the game opens, less than recomputing an interval takes on a slow device (§8.4).
    Everything else, and an interval the file does not hold, is the run's oracle's."""

    def __init__(self, oracle: Any, hashes: StepHashes) -> None:
        self._oracle = oracle
        self._hashes = hashes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._oracle, name)

    def step_states(self, checkpoint: int) -> list[bytes]:
        try:
            return self._hashes.interval(checkpoint)
        except StepHashesMissing:
            return list(self._oracle.step_states(checkpoint))


def _host_value(value: Any) -> Any:
    from repops_cupy._backend import to_numpy

    return to_numpy(value)


def _state_hash(state: dict[str, Any]) -> bytes:
    from repops_cupy.checkpoint import state_hash

    return state_hash({k: _host_value(v) for k, v in state.items()})


__all__ = ["RecordedRun", "RecordedStepsOracle", "RecordingProgram", "STEP_HASHES_FILE", "StepHashes", "StepHashesMissing"]
