"""A job's settings, declared once: the windows of its deadlines, its dispute clocks, the audit rate.

`JobSettings` is the one table. Each field carries its default, its unit and a one-line
meaning; the client's submit options, ``gavel submit``'s flags, the node's ``audit_rate``
setting and the testnet's options are derived from it (a testnet overrides some values
in one place, saying why). What follows from the settings is computed here, not where it
is used: the dispute rules a job's terms carry (`JobSettings.rules`), the windows sized
for the job's work (`JobSettings.sized_for`); the contract's ruling period is
`DisputeRules.ruling_period`, an auditor's sample `sampling.sample_size`.

The three windows fix a job's deadlines at submission: accept_by = now + accept_within,
commit_by = accept_by + commit_within, challenge_by = commit_by + challenge_within. The
job settles only after the last, however early the work is done.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import LocalProtocolError
from .jobs import DisputeRules

# Windows left unset are sized for the job: its estimated work and a margin (loading the
# job, chain transactions, gossip), never below the floor. Seconds.
WINDOW_FLOOR = 60.0
WINDOW_MARGIN = 30.0
SIZED_WINDOWS = ("commit_within", "challenge_within")


def _setting(default: Any, unit: str, who: str, meaning: str) -> Any:
    return field(default=default, metadata={"unit": unit, "who": who, "meaning": meaning})


@dataclass(frozen=True)
class JobSettings:
    """The settings of one job, with their defaults (None: sized for the job, `sized_for`)."""

    accept_within: float | None = _setting(
        30.0, "s", "client", "from submission, for providers to take a seat (fetch the bundle, build the program, lock a stake)")
    commit_within: float | None = _setting(
        None, "s", "client", "after the acceptance deadline, to train and commit a result (default: from the job's size)")
    challenge_within: float | None = _setting(
        None, "s", "client", "after the commit deadline, for auditors to replay and challenge; the job settles when it closes "
                   "(default: from the job's size)")
    move_timeout: float = _setting(60.0, "s", "client", "a dispute party has for one move")
    clock: float = _setting(600.0, "s", "client", "a dispute party has for all its moves in one dispute (a chess clock)")
    audit_rate: float = _setting(
        1.0, "fraction", "auditor", "auditor: fraction of each provider's checkpoint intervals it replays (1: all)")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise LocalProtocolError(f"{f.name} must be a positive number, got {value!r}")
        if self.audit_rate > 1:
            raise LocalProtocolError(f"audit_rate is at most 1, got {self.audit_rate!r}")

    @property
    def rules(self) -> DisputeRules:
        """The dispute rules a job with these settings carries in its terms (milliseconds)."""
        return DisputeRules(move_timeout_ms=int(self.move_timeout * 1000), clock_ms=int(self.clock * 1000))

    def sized_for(self, work_seconds: float) -> JobSettings:
        """These settings with every window left unset sized for a job of ``work_seconds``
        (its estimated time to train, or to replay: providers train the whole job in the
        commit window, an auditor replays it in the challenge window)."""
        window = float(max(WINDOW_FLOOR, math.ceil(WINDOW_MARGIN + work_seconds)))
        return replace(self, **{name: window for name in SIZED_WINDOWS if getattr(self, name) is None})


@dataclass(frozen=True)
class JobSetting:
    """One row of the table, for front ends: a flag, its default, its help."""

    name: str
    default: Any
    unit: str
    who: str  # the role that applies it: the client (in the job's terms and deadlines) or an auditor
    meaning: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


JOB_SETTINGS: tuple[JobSetting, ...] = tuple(
    JobSetting(f.name, f.default, f.metadata["unit"], f.metadata["who"], f.metadata["meaning"])
    for f in fields(JobSettings))
CLIENT_SETTINGS = tuple(row.name for row in JOB_SETTINGS if row.who == "client")
DEFAULT_JOB_SETTINGS = JobSettings()


def job_setting(name: str) -> JobSetting:
    """The row of setting ``name``."""
    for row in JOB_SETTINGS:
        if row.name == name:
            return row
    raise LocalProtocolError(f"no job setting named {name!r}")


__all__ = ["CLIENT_SETTINGS", "DEFAULT_JOB_SETTINGS", "JOB_SETTINGS", "JobSetting", "JobSettings", "job_setting"]
