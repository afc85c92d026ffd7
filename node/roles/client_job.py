"""A client's job, apart from the network: its life as one table, where it stands, its size.

Theory of operation. A job at its client lives through the states below (the state of
its row in storage); `JOB_LIFE` says, for each state, which event takes it where, and
`ClientJob.apply` is the one place its state changes. The client role (`client.py`)
does the work of each state, which ends in one of that state's events:

  submitted  terms signed, bundle stored, the job's row written; opening it on chain
             (``openJob``, escrowing the price)
                 opened   the chain holds the job                       -> opened
                 missing  after a restart: the chain never got it        -> failed
  opened     offering seats (``/gavel/job/1.0.0``; each provider checks the terms and
             locks its stake on chain) until the acceptance deadline
                 filled   the wanted number of providers took a seat     -> handed
                 unfilled the acceptance deadline came first             -> unfilled
  handed     announced on gossip; waiting for every seat's trace report
                 reported every report in, or the commit deadline passed -> verifying
  verifying  reports checked against their signed and committed roots; roots that
             differ disputed (one provider asked to challenge the other; the client
             referees every dispute of the job, auditors' included: `referee.py`); the
             result fetched from a provider that did not lose, checked against its root
                 checked  every dispute ruled, the result in hand or none -> verified
  verified   waiting for the challenge window to close, then settling on chain; the
             result handed over only if its provider's root stood (committed, never
             slashed) in a finalized job, else dropped (and another that stood fetched)
                 finalized paid out: honest providers paid, losers slashed  -> settled
                 refunded  no root stood: the price back, no result          -> refunded
  unfilled   settling on chain (anyone may, after the acceptance deadline): the price back
                 refunded                                                   -> refunded

Reconciling after a restart, before any work: a job the chain settled while the client
was away moves by ``finalized`` (from verified) or ``refunded`` (from any state); one
the chain no longer knows is ``lost`` (``missing``; ``failed`` when it was never opened).
The same ``missing`` ends a job whose chain restarted under the running client (the
node's chain watch: `chain_watch.ChainWatch`).
A job is over (``done``) when it reached a state with no way out; every other state is
resumed from its row after a restart.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import trio

from protocol.settings import CLIENT_SETTINGS, DEFAULT_JOB_SETTINGS, JobSettings

from ..errors import LocalError
from .chain import ETHER
from .context import terms_of
from .disputes import RefereeSession

SUBMITTED, OPENED, HANDED, VERIFYING, VERIFIED = "submitted", "opened", "handed", "verifying", "verified"
UNFILLED = "unfilled"  # not done: waiting for its refund
SETTLED, REFUNDED, FAILED, LOST = "settled", "refunded", "failed", "lost"
DONE_STATES = (SETTLED, REFUNDED, FAILED, LOST)
# events: what the work of a state came to
JOB_OPENED, JOB_MISSING = "opened", "missing"
SEATS_FILLED, SEATS_UNFILLED = "filled", "unfilled"
REPORTS_IN, RESULT_CHECKED = "reported", "checked"
JOB_FINALIZED, JOB_REFUNDED = "finalized", "refunded"  # the job's final status on chain

JOB_LIFE: dict[str, dict[str, str]] = {
    SUBMITTED: {JOB_OPENED: OPENED, JOB_MISSING: FAILED, JOB_REFUNDED: REFUNDED},
    OPENED: {SEATS_FILLED: HANDED, SEATS_UNFILLED: UNFILLED, JOB_MISSING: LOST, JOB_REFUNDED: REFUNDED},
    HANDED: {REPORTS_IN: VERIFYING, JOB_MISSING: LOST, JOB_REFUNDED: REFUNDED},
    VERIFYING: {RESULT_CHECKED: VERIFIED, JOB_MISSING: LOST, JOB_REFUNDED: REFUNDED},
    VERIFIED: {JOB_FINALIZED: SETTLED, JOB_MISSING: LOST, JOB_REFUNDED: REFUNDED},
    # Seats the client lost track of (it stopped while handing the job out) may still have filled.
    UNFILLED: {JOB_REFUNDED: REFUNDED, JOB_FINALIZED: SETTLED, JOB_MISSING: LOST},
}

# How a job ended, as `gavel submit --wait` reports it (``ended`` in its summary).
ENDED_FINALIZED, ENDED_REFUNDED, ENDED_UNFILLED, ENDED_FAILED = "finalized", "refunded", "unfilled", "failed"


@dataclass
class ClientJob:
    """A job of this client: its row (``state`` and ``record``) and what runs beside it."""

    job_id: bytes
    record: dict
    state: str
    training: Any = None
    sessions: list[RefereeSession] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    drive_scope: trio.CancelScope | None = None  # the task doing its states' work, while one does

    def apply(self, event: str) -> bool:
        """Move the job on by ``event`` (its state's row of JOB_LIFE); True when its life is
        over. An event its state has no row for is the client's own bug: LocalError."""
        try:
            self.state = JOB_LIFE[self.state][event]
        except KeyError:
            raise LocalError(f"job {self.job_id.hex()[:12]}: no event {event!r} in state {self.state!r}") from None
        return self.state not in JOB_LIFE

    def notify(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    @property
    def terms(self) -> Any:
        return terms_of(self.record)

    def phase(self, now: float) -> "Phase":
        """Where the job stands at chain time ``now``."""
        return phase_of(self.state, self.record, now, disputes_running=sum(1 for s in self.sessions if not s.recorded))


@dataclass
class SubmitOptions:
    """What a job is submitted with: the client's settings of `protocol.settings.JobSettings`
    (seconds; None: the table's default, the windows sized for the job when it is submitted)
    and the client's own choices. The job's row keeps them, every setting filled in."""

    providers: int = 1
    price: int = ETHER
    stake: int = ETHER
    accept_within: float | None = None  # from submission
    commit_within: float | None = None  # after the acceptance deadline
    challenge_within: float | None = None  # after the commit deadline
    move_timeout: float | None = None
    clock: float | None = None
    provider_addrs: list[str] = field(default_factory=list)
    out: str = ""
    # Version 2: the terms carry the step graph's element spec root, so node claims on covered operators
    # are played on OneStepVerifier, no referee needed (docs/onchain-step.md); a job with no step graph
    # (rounding-log) has none. False keeps every claim on the referee path.
    on_chain_step: bool = True
    # Version 2: the step cost σ the terms declare is the step graph's estimate times this; a machine
    # whose cores many nodes share (an in-process testnet) runs each one's work that much slower.
    step_cost_scale: float = 1.0

    def job_settings(self, work_seconds: float) -> JobSettings:
        """The job's settings: those given, the table's defaults, windows sized for ``work_seconds``."""
        given = {name: getattr(self, name) for name in CLIENT_SETTINGS if getattr(self, name) is not None}
        return JobSettings(**given).sized_for(work_seconds)


# A step's cost on a busy CPU, from its step graph: per operator node (the interpreter's
# overhead, which dominates small models), per multiply-add of its matrix products, per
# element written. Measured on this project's 2-core machines: the MLP of
# scripts/jobs/mlp.toml takes 15 ms a step alone, 0.32 s in a provider beside two other
# nodes and a test suite (estimated 0.22 s, so its windows are 74 s); the tiny GPT 0.25 s
# alone (estimated 2.8 s). A GPU only finishes sooner. The windows it sizes: `JobSettings.sized_for`.
STEP_SECONDS_PER_NODE = 4e-3
STEP_SECONDS_PER_MAC = 4e-9
STEP_SECONDS_PER_ELEMENT = 2e-8


def estimate_step_seconds(graph: Any) -> float:
    """An upper estimate of one training step's seconds on a CPU, from its operator graph."""
    macs = elements = 0
    for node in graph.nodes:
        size = math.prod(node.shape)
        if node.op == "matmul":
            a = graph.nodes[node.inputs[0]].shape
            macs += size * (a[-2] if node.attrs.get("transpose_a") else a[-1])
        else:
            elements += size
    return (STEP_SECONDS_PER_NODE * len(graph.nodes) + STEP_SECONDS_PER_MAC * macs
            + STEP_SECONDS_PER_ELEMENT * elements)


def step_seconds(training: Any) -> float:
    """An upper estimate of one step's seconds: from the step graph, or the program's own
    (a rounding-log job has no graph)."""
    if hasattr(training, "step_seconds"):
        return training.step_seconds()
    return estimate_step_seconds(training.graph)


def default_windows(training: Any) -> dict[str, float]:
    """The accept, commit and challenge windows (seconds) of a job, when not given: the
    table's accept window; the commit and challenge windows sized for the job's estimated work."""
    sized = DEFAULT_JOB_SETTINGS.sized_for(training.spec.steps * step_seconds(training))
    return {name: getattr(sized, name) for name in ("accept_within", "commit_within", "challenge_within")}


@dataclass(frozen=True)
class Phase:
    """Where a client's job stands: ``name`` changes when the job moves on; ``doing`` says
    what it waits for; ``window`` and ``deadline`` name the on-chain deadline that bounds
    the wait (unix seconds, chain time; 0 when none)."""

    name: str
    doing: str
    window: str = ""
    deadline: int = 0


def phase_of(state: str, record: dict, now: float, *, disputes_running: int = 0) -> Phase:
    """The phase of a job from its row (state and record) at chain time ``now``."""
    deadlines = record.get("deadlines", {})
    seats = record.get("seats", {})
    wanted = (record.get("options") or {}).get("providers") or len(seats)
    accept_by, commit_by = deadlines.get("accept_by", 0), deadlines.get("commit_by", 0)
    challenge_by = deadlines.get("challenge_by", 0)
    reports = sum(1 for seat in seats.values() if seat.get("report") is not None)
    if state == "submitted":
        return Phase("submitted", "opening the job on chain (escrowing its price)", "accept", accept_by)
    if state == "opened":
        return Phase("opened", f"waiting for providers to take a seat ({len(seats)} of {wanted} taken)",
                     "accept", accept_by)
    if state == "handed":
        return Phase("handed", f"providers training ({reports} of {len(seats)} results in)", "commit", commit_by)
    if state == "verifying":
        what = f"refereeing {disputes_running} dispute(s)" if disputes_running else "checking the results"
        return Phase("verifying", what, "challenge", challenge_by)
    if state == "verified":
        if disputes_running:
            return Phase("disputed", f"result in hand; refereeing {disputes_running} dispute(s), then settling",
                         "challenge", challenge_by)
        if now < challenge_by:
            return Phase("verified", "result in hand; auditors may still challenge a provider, then settlement",
                         "challenge", challenge_by)
        return Phase("settling", "challenge window closed; paying the honest providers on chain")
    if state == "settled":
        status = (record.get("result") or {}).get("status", "")
        return Phase("settled", f"done on chain{f' ({status})' if status else ''}")
    if state == "unfilled":
        return Phase("unfilled", "not enough providers took a seat; refunding the price on chain")
    if state == "refunded":
        return Phase("refunded", "done on chain (REFUNDED): the price is back, no result")
    return Phase(state, state)


def verified_summary(cj: ClientJob) -> dict:
    """A verified job's summary, before settlement: the checked result and where it came from."""
    r = cj.record
    providers = {key: {"peer": seat["peer"], "account": seat["account"],
                       "outcome": "reported" if seat.get("report") is not None else "no result"}
                 for key, seat in r["seats"].items()}
    return {"job": cj.job_id.hex(), "state": cj.state, "result_dir": r.get("result_dir"),
            "result_from": r.get("result_from"), "trace_root": r.get("trace_root"), "providers": providers,
            "verdicts": r["verdicts"], "challenge_by": r["deadlines"]["challenge_by"]}


def ended(state: str, record: dict) -> str:
    """How a job that is over ended: finalized, refunded, unfilled or failed (lost with its chain too)."""
    if state == SETTLED:
        return ENDED_FINALIZED
    if state == REFUNDED:
        return ENDED_UNFILLED if record.get("unfilled") else ENDED_REFUNDED
    return ENDED_FAILED


__all__ = ["ClientJob", "JOB_LIFE", "Phase", "SubmitOptions", "default_windows", "ended", "estimate_step_seconds", "phase_of", "step_seconds", "verified_summary"]
