"""The auditor's replays of one interval of a revealed trace: from the seat's checkpoint, or, when
the seat does not serve it, from the auditor's own run of the job.

The challenge window of a seat is a whole replay of the job from its reveal (W_replay = s·T·σ + 2Δ):
enough to run the job from its initial state, which the job's bundle carries, but with no time in it
for moving checkpoints. On a congested network an auditor that only fetched the seat's checkpoints
skipped every sample it could not fetch, and a cheat it found later was paid (the full v2 testnet);
one that fetched again for each later sample spent a fetch timeout on each and still found the cheat
after its window. So the first checkpoint a seat does not serve makes the audit of that root its own
run's: the run needs no transfer and, once made, checks every interval of the trace, not only the
sampled ones. The first interval whose end it computes differently from the trace is the one to
dispute, and its own state at that interval's start is the seat's (their hashes agree).

A sample of every interval is the whole job: the own run then replays exactly as much and fetches
nothing, so such an audit starts from it (each sampled checkpoint fetched would be one more stream on
the seat's connection, and under congestion one more timeout before the window closes). Any later
replay of an interval whose start the own run shares with the trace (a game an auditor watches, a
duel's node values) is taken from that run too (`own_replay`).
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Sequence

import trio

from ...errors import LocalError, PeerError
from ...training_oracle import TrainingOracle

log = logging.getLogger(__name__)
RUN_RETRY, RUN_RETRY_MAX = 2.0, 30.0  # a job's bundle asked again after 2, 4, 8, 16, 30, 30, ... s


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


class OwnRuns:
    """An auditor's runs of its jobs from their initial states: one per job (its roots share it), made
    when first asked for and trained by the first blocking call on it; one such call at a time."""

    def __init__(self, training_of: Callable[[bytes], Awaitable[Any]], programs: dict[bytes, Any]) -> None:
        self.training_of = training_of
        self.programs = programs  # job -> its program, shared with the replays from a seat's checkpoint
        self.runs: dict[bytes, TrainingOracle] = {}
        self.lock = trio.Lock()

    def __contains__(self, job_id: bytes) -> bool:
        return job_id in self.runs

    async def patiently(self, job_id: bytes, wanted: Callable[[], Awaitable[bool]]) -> TrainingOracle | None:
        """`of`, asked again while the job's program cannot be had (its bundle fetched from no seat) and
        `wanted()` (the audit still may open a game); None once it is not. Under congestion every seat's
        bundle timed out at once for every auditor of a job in the full v2 testnet, each gave up its
        own run, and the cheater of that job was paid."""
        delay = RUN_RETRY
        while True:
            try:
                return await self.of(job_id)
            except (PeerError, LocalError) as error:
                if not await wanted():
                    log.warning("auditor: job %s: no own run: %s", job_id.hex()[:12], error)
                    return None
                log.info("auditor: job %s: no own run yet: %s", job_id.hex()[:12], error)
            await trio.sleep(delay)
            delay = min(2 * delay, RUN_RETRY_MAX)

    async def of(self, job_id: bytes) -> TrainingOracle:
        if job_id not in self.runs:
            training = await self.training_of(job_id)
            self.runs.setdefault(job_id, TrainingOracle(training, program=self.programs.get(job_id)))
        return self.runs[job_id]

    async def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a worker thread, after any other call on a run has ended."""
        async with self.lock:
            return await trio.to_thread.run_sync(fn, *args)

    def forget(self, job_id: bytes) -> None:
        self.runs.pop(job_id, None)


def replay_from_own_run(own: TrainingOracle, c: int) -> ReplayOracle:
    """The replay of interval c from ``own`` run of the job (blocking: it trains the whole job once)."""
    return ReplayOracle(own.training, c, own.checkpoint_state(c), program=own.program())


def own_replay(own: TrainingOracle, trace: Sequence[bytes], c: int) -> ReplayOracle | None:
    """The replay of interval c from ``own`` run when the run's checkpoint c is the trace's (its state
    is then the seat's), else None (blocking: it trains the whole job once)."""
    return replay_from_own_run(own, c) if own.checkpoint_states()[c] == trace[c] else None


def own_steps_list(own: TrainingOracle, c: int) -> list[bytes]:
    """Interval c's steps list as ``own`` run computed it (its per-step state hashes; no recomputation)."""
    schedule = own.schedule
    own.train()
    return list(own.state_hashes[schedule.checkpoint_step(c):schedule.checkpoint_step(c + 1) + 1])


def own_audit(own: TrainingOracle, trace: Sequence[bytes]) -> tuple[dict[int, bool], ReplayOracle | None]:
    """Every interval of ``trace`` checked against ``own`` run of the job (blocking: it trains the
    whole job once): interval -> its end agrees, up to the first that does not, and the replay of that
    one to dispute (None when the run agrees with the whole trace)."""
    hashes = own.checkpoint_states()
    results: dict[int, bool] = {}
    for c in range(len(trace) - 1):
        results[c] = hashes[c + 1] == trace[c + 1]
        if not results[c]:
            return results, replay_from_own_run(own, c)
    return results, None
