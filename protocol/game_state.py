"""The dispute game's states and transitions, for all three roles, in one table.

Theory of operation
-------------------
Two parties that ran the same job hold signed trace roots that differ. The
*challenger* opens a dispute at the *referee* (the job's client) naming both roots;
the *defender* is the signer of the other. From then on the referee asks, both
parties answer, in rounds: each round the referee sends the same request to both
and waits for both answers, each under its own deadline and chess clock.

The referee descends three Merkle trees, always into the leftmost child where the
two parties' hashes differ:

1. CHECKPOINTS: the trace trees (state hashes at checkpoints 0..C), down to the
   first differing checkpoint c+1 (checkpoint c agrees). If that is checkpoint 0,
   the job's initial state hash decides at once.
2. INTERVAL_COMMIT, STEPS: both recompute interval c from the agreed state and
   commit a tree of its per-step states (its first and last leaves tied to their
   own checkpoints c and c+1); descend to the first differing step s.
3. STEP_COMMIT, NODES: both commit a tree over the output hashes of step s's nodes
   followed by the state after s (tied to their step-s state); descend to the first
   differing node n.
4. EVIDENCE: both give node n's program entry (proven against the job's program
   root), their claimed output and its inputs, each proven against a hash both
   agree on. The referee recomputes that one node and rules: whoever's claim
   matches wins; if neither does, both lose.

A commit round also reveals the children of the new tree's root, so each level
costs as many rounds as the depth of the leaf it finds. A party that misses a
deadline, sends a proof that does not hold, contradicts its own earlier commitment
or equivocates loses at once (the other wins by default).

Parties follow the referee: a party's state is the level it is answering at. The
challenger starts by sending OpenDispute; the defender joins on its first request.

Events are names: a party's events are the requests it receives (and the
challenger's own open); the referee's events are what a round came to.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import LocalProtocolError
from .jobs import DisputeRules
from .messages import (
    EvidenceRequest, IntervalCommit, IntervalRequest, NodeEvidence, RevealChildren, RevealRequest,
    StepCommit, StepRequest, Verdict,
)

CHALLENGER, DEFENDER, REFEREE = "challenger", "defender", "referee"
ROLES = (CHALLENGER, DEFENDER, REFEREE)

# states
IDLE = "IDLE"                        # party: not in a dispute yet
OPENED = "OPENED"                    # challenger: sent OpenDispute, waiting for the first request
AWAIT_OPEN = "AWAIT_OPEN"            # referee: no dispute yet
CHECKPOINTS = "CHECKPOINTS"          # level 1 descent
INTERVAL_COMMIT = "INTERVAL_COMMIT"  # referee: waiting for interval commitments
STEPS = "STEPS"                      # level 2 descent
STEP_COMMIT = "STEP_COMMIT"          # referee: waiting for step commitments
NODES = "NODES"                      # level 3 descent
EVIDENCE = "EVIDENCE"                # node evidence asked for (referee) / given (party)
DONE = "DONE"

# referee events: what a round (or a clock) came to
OPENED_DISPUTE = "opened"        # a valid OpenDispute arrived
DESCENDED = "descended"          # both answered; the descent went one level down
LOCATED = "located"              # both answered; the descent reached the first differing leaf
RULED = "ruled"                  # the referee recomputed and ruled
DEFAULTED = "defaulted"          # a party timed out, sent an invalid move or equivocated

# party events: its own open, and the requests it receives
SEND_OPEN = "send-open"
PARTY_EVENTS = {RevealRequest: "reveal", IntervalRequest: "interval", StepRequest: "step",
                EvidenceRequest: "evidence", Verdict: "verdict"}

_PARTY_ANSWERING = {
    CHECKPOINTS: {"reveal": CHECKPOINTS, "interval": STEPS, "verdict": DONE},
    STEPS: {"reveal": STEPS, "step": NODES, "verdict": DONE},
    NODES: {"reveal": NODES, "evidence": EVIDENCE, "verdict": DONE},
    EVIDENCE: {"verdict": DONE},
    DONE: {},
}

TRANSITIONS: dict[str, dict[str, dict[str, str]]] = {
    CHALLENGER: {
        IDLE: {SEND_OPEN: OPENED},
        OPENED: {"reveal": CHECKPOINTS, "verdict": DONE},
        **_PARTY_ANSWERING,
    },
    DEFENDER: {
        IDLE: {"reveal": CHECKPOINTS, "verdict": DONE},
        **_PARTY_ANSWERING,
    },
    REFEREE: {
        AWAIT_OPEN: {OPENED_DISPUTE: CHECKPOINTS},
        CHECKPOINTS: {DESCENDED: CHECKPOINTS, LOCATED: INTERVAL_COMMIT, RULED: DONE, DEFAULTED: DONE},
        INTERVAL_COMMIT: {DESCENDED: STEPS, LOCATED: STEP_COMMIT, DEFAULTED: DONE},
        STEPS: {DESCENDED: STEPS, LOCATED: STEP_COMMIT, DEFAULTED: DONE},
        STEP_COMMIT: {DESCENDED: NODES, LOCATED: EVIDENCE, DEFAULTED: DONE},
        NODES: {DESCENDED: NODES, LOCATED: EVIDENCE, DEFAULTED: DONE},
        EVIDENCE: {RULED: DONE, DEFAULTED: DONE},
        DONE: {},
    },
}
INITIAL = {CHALLENGER: IDLE, DEFENDER: IDLE, REFEREE: AWAIT_OPEN}

# the referee: which move it waits for in each state, and at which tree level
EXPECTED_MOVE = {CHECKPOINTS: RevealChildren, INTERVAL_COMMIT: IntervalCommit, STEPS: RevealChildren,
                 STEP_COMMIT: StepCommit, NODES: RevealChildren, EVIDENCE: NodeEvidence}
LEVEL = {CHECKPOINTS: 1, INTERVAL_COMMIT: 2, STEPS: 2, STEP_COMMIT: 3, NODES: 3}
# a party: the tree level whose reveals it answers in each state
PARTY_LEVEL = {CHECKPOINTS: 1, STEPS: 2, NODES: 3}


class GameState:
    """One role's place in the table. `fire` is the only way the state changes."""

    def __init__(self, role: str) -> None:
        if role not in ROLES:
            raise LocalProtocolError(f"role must be one of {ROLES}, got {role!r}")
        self.role = role
        self.state = INITIAL[role]

    def allows(self, event: str) -> bool:
        return event in TRANSITIONS[self.role][self.state]

    def peek(self, event: str) -> str:
        """The state `event` would lead to (LocalProtocolError if it is not allowed)."""
        try:
            return TRANSITIONS[self.role][self.state][event]
        except KeyError:
            raise LocalProtocolError(f"{self.role} in state {self.state} cannot take event {event!r}") from None

    def fire(self, event: str) -> str:
        try:
            self.state = TRANSITIONS[self.role][self.state][event]
        except KeyError:
            raise LocalProtocolError(f"{self.role} in state {self.state} cannot take event {event!r}") from None
        return self.state


@dataclass
class ChessClock:
    """Each party's remaining time; a request starts its clock, an accepted answer stops it.

    A request sent at t must be answered by t + min(move timeout, time left); the
    time taken is charged to the party's clock.
    """

    rules: DisputeRules
    parties: tuple[bytes, ...]
    left: dict[bytes, int] = field(init=False)
    asked_at: dict[bytes, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.left = {p: self.rules.clock_ms for p in self.parties}

    def start(self, party: bytes, now: int) -> int:
        """Start `party`'s clock; returns its deadline."""
        if party in self.asked_at:
            raise LocalProtocolError("this party's clock is already running")
        self.asked_at[party] = now
        return self.deadline(party)

    def deadline(self, party: bytes) -> int:
        return self.asked_at[party] + min(self.rules.move_timeout_ms, self.left[party])

    def stop(self, party: bytes, now: int) -> None:
        asked = self.asked_at.pop(party)
        self.left[party] = max(0, self.left[party] - (now - asked))

    @property
    def running(self) -> tuple[bytes, ...]:
        return tuple(p for p in self.parties if p in self.asked_at)

    def overdue(self, now: int) -> list[bytes]:
        return [p for p in self.running if now > self.deadline(p)]

    def next_deadline(self) -> int | None:
        return min((self.deadline(p) for p in self.running), default=None)
