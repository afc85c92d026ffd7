"""The auditor's replays of one interval of a revealed trace: from the seat's checkpoint, or, when
the seat does not serve it, from the auditor's own run of the job.

The challenge window of a seat is a whole replay of the job from its reveal (W_replay = s·T·σ + 2Δ):
enough to run the job from its initial state, which the job's bundle carries, but with no time in it
for moving checkpoints. On a congested network an auditor that only fetched the seat's checkpoints
skipped every sample it could not fetch, and a cheat it found later was paid (the full v2 testnet).
Its own run needs no transfer: the first interval whose end it computes differently from the trace
is the one to dispute, and its own state at that interval's start is the seat's (their hashes agree).
"""
from __future__ import annotations

from typing import Any, Sequence

from ...errors import LocalError
from ...training_oracle import TrainingOracle


class ReplayOracle(TrainingOracle):
    """The job's own program run over one interval from a seat's checkpoint: the auditor's lists."""

    def __init__(self, training: Any, c: int, start: Any, *, program: Any = None) -> None:
        super().__init__(training, program=program)
        self.c, self._start = c, start

    def checkpoint_state(self, c: int) -> Any:
        if c != self.c:
            raise LocalError(f"this replay starts at checkpoint {self.c}, not {c}")
        return self._start

    def state_after(self, s: int) -> Any:
        c = self.schedule.interval_of_step(s)
        return self._interval_states(c)[s - self.schedule.checkpoint_step(c)]


def own_replay(own: TrainingOracle, trace: Sequence[bytes], c: int) -> ReplayOracle:
    """The replay of interval c from ``own`` run of the job (blocking: it trains the whole job once),
    or of the first interval before c whose end ``own`` computes differently from ``trace``: a game on
    c would then start from a state the trace has wrong."""
    hashes = own.checkpoint_states()
    first = next((i for i in range(c) if hashes[i + 1] != trace[i + 1]), c)
    return ReplayOracle(own.training, first, own.checkpoint_state(first), program=own.program())
