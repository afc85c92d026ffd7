"""An auditor's asks of the seats' signed steps lists (economics §10): each (job, seat, interval) once,
one ask per seat at a time, carrying every interval due meanwhile (`data.STEPS_PER_ASK` at most).

An own run checks every interval of a job at once; its asks, one stream each and opened together by
every auditor, timed the seats' connections out in the full v2 testnet: with one ask at a time per
seat, 62 of the 117 stream openings that timed out on the busiest honest provider were still these
asks, one per interval. An ask now carries the intervals that came due while the one before it ran.
"""
from __future__ import annotations

from typing import Awaitable, Callable

import trio

# (job, seat, {c: our replay's steps list}) -> None: the seat's signed steps lists asked for in one ask, kept
ToldStepsSource = Callable[[bytes, str, dict[int, list]], Awaitable[None]]


class StepsAsks:
    def __init__(self, told_steps: ToldStepsSource | None) -> None:
        self.told_steps = told_steps
        self.asked: set[tuple[bytes, str, int]] = set()        # (job, seat, c) whose signed list was asked
        self._locks: dict[str, trio.Lock] = {}                   # seat -> one ask of its lists at a time
        self._due: dict[str, dict[tuple[bytes, int], list]] = {}  # seat -> (job, c) -> our list, not yet asked

    async def ask(self, job_id: bytes, seat: str, c: int, ours: list) -> None:
        """Seat's signed list of interval c asked for (once), with the others due when its turn comes."""
        from .data import STEPS_PER_ASK

        if self.told_steps is None or (job_id, seat, c) in self.asked:
            await trio.lowlevel.checkpoint()
            return
        self.asked.add((job_id, seat, c))
        self._due.setdefault(seat, {})[(job_id, c)] = ours
        await trio.lowlevel.checkpoint()  # the other intervals due now join this one's ask
        async with self._locks.setdefault(seat, trio.Lock()):
            due = self._due.pop(seat, {})  # empty: an ask before this one carried it
            for job in dict.fromkeys(j for j, _ in due):
                lists = [(i, lst) for (j, i), lst in sorted(due.items()) if j == job]
                for start in range(0, len(lists), STEPS_PER_ASK):
                    await self.told_steps(job, seat, dict(lists[start:start + STEPS_PER_ASK]))

    def forget(self, job_id: bytes) -> None:
        """A settled job: nothing of it is asked again."""
        self.asked = {t for t in self.asked if t[0] != job_id}


__all__ = ["StepsAsks", "ToldStepsSource"]
