"""What the v2 auditor keeps of an audited root and of the games on it (`auditor.Auditor`): the
audit and each followed game as written to ``auditor.json``, and a watched game with its replay."""
from __future__ import annotations

from dataclasses import dataclass, field
import trio

from .replays import ReplayOracle


@dataclass
class Watched:
    """A game on a root this node audited, and what its replay of the game's interval says."""

    job_id: bytes
    root: bytes
    interval: int
    oracle: ReplayOracle
    lock: trio.Lock = field(default_factory=trio.Lock)  # one recompute at a time (the oracle keeps one)


@dataclass
class Followed:
    """A game on a root this node audited, as kept on disk: enough to take it up from the chain."""

    job_id: bytes
    root: bytes
    interval: int
    block: int                                                  # its events are at or after this block
    answered: set[tuple[bytes, bytes]] = field(default_factory=set)  # (claim, list root) looked at

    def to_record(self) -> dict:
        return {"job": self.job_id.hex(), "root": self.root.hex(), "interval": self.interval, "block": self.block,
                "answered": sorted(f"{c.hex()}:{r.hex()}" for c, r in self.answered)}

    @classmethod
    def from_record(cls, record: dict) -> "Followed":
        answered = {tuple(bytes.fromhex(x) for x in pair.split(":")) for pair in record["answered"]}
        return cls(bytes.fromhex(record["job"]), bytes.fromhex(record["root"]), int(record["interval"]),
                   int(record["block"]), answered)


@dataclass
class Audit:
    """A revealed root this node audits: the seat that revealed it first and where."""

    seat: str
    block: int     # the block of its TraceRevealed (the trace is read again from it)
    done: bool = False
    trace: tuple[bytes, ...] = ()  # the revealed trace once read (in memory only)
