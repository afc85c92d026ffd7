"""What a version-2 duty follows, kept across a restart: one JSON file in the node's data directory.

The chain follower hands no event twice (it resumes after the last one it handed), so what a
duty learnt from an event before a restart exists only where the duty wrote it. The game keeper,
the auditor, the demand keeper and the witness duty each keep theirs in a `DutyState`: written
whole each time the duty learns something, before its handler returns (the follower stores its
position after the handler), to a temporary file renamed over the old one (a crash leaves the
old file or the new, never half of one); read once when the duty is made. Each duty prunes what
the chain says is over, so a file holds only what is still open.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

import trio

from ...atomic_file import write_atomic

log = logging.getLogger(__name__)


class DutyState:
    """The file ``name`` in ``data_dir``; with no data directory (a duty made by hand in a test of its
    moves) nothing is written and nothing survives the object."""

    def __init__(self, data_dir: Path | None, name: str) -> None:
        self.path = None if data_dir is None else Path(data_dir) / name
        self._lock = trio.Lock()  # one writer at a time: the last state taken is the last written

    def restore(self, parse: Callable[[dict], None]) -> None:
        """Hand the stored state to ``parse`` (the duty fills itself from it); a state that does not
        parse (a damaged file, one of another version) is one warning, and the duty starts empty of
        what it had not parsed yet."""
        state = self.load()
        if not state:
            return
        try:
            parse(state)
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            log.warning("%s: ignoring state that does not parse: %s: %s", self.path, type(error).__name__, error)

    def load(self) -> dict:
        """The stored state; {} when there is none, or when the file does not read (logged)."""
        if self.path is None:
            return {}
        try:
            state = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("%s: ignoring unreadable state: %s", self.path, error)
            return {}
        if not isinstance(state, dict):
            log.warning("%s: ignoring state that is not an object", self.path)
            return {}
        return state

    async def save(self, state: Callable[[], dict]) -> None:
        """Write ``state()``, taken once the previous write finished, so a later call never loses to
        an earlier one."""
        if self.path is None:
            await trio.lowlevel.checkpoint()
            return
        async with self._lock:
            text = json.dumps(state(), sort_keys=True)
            await trio.to_thread.run_sync(write_atomic, self.path, text)




__all__ = ["DutyState"]
