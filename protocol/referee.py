"""The referee (the job's client): runs one dispute, recomputes one node, rules.

`Referee` takes the challenger's OpenDispute, then in each round sends one request
to both parties, checks each answer on its own (signed root, Merkle proofs, ties to
the party's earlier commitments) and, when both are in, moves down the descent.
Transitions follow the table in `game_state`. Time is given with every event; a
party whose clock or move deadline runs out, or whose move does not hold, loses at
once. At the bottom the referee checks both parties' node evidence and recomputes
the node on its CPU with `repops_cupy.registry.run`.

The verdict is signed by the referee and carries the transcript hash: a hash chain
over every message the referee sent or accepted (and every timeout), in order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import blake3

from repops_cupy import registry
from repops_cupy.merkle import leaf_hash

from .actions import Action, GameOver, MonotonicTime, Outbox, Received, Send
from .claim_evidence import BadEvidence, batch_hash, operator_output, proven_entry
from .commitments import CommitmentStore, EquivocationProof, SignedRoot, state_leaf, state_root
from .envelope import MAX_MESSAGE_SIZE, MAX_TENSOR_MESSAGE_SIZE, NEVER, Envelope, ReplayGuard, decode_envelope
from .errors import LocalProtocolError, RemoteProtocolError
from .game_state import (
    AWAIT_OPEN, DEFAULTED, DESCENDED, DONE, EVIDENCE, EXPECTED_MOVE, INTERVAL_COMMIT, LEVEL,
    LOCATED, OPENED_DISPUTE, REFEREE, RULED, STEP_COMMIT, ChessClock, GameState,
)
from .identity import Identity
from .jobs import SignedJobTerms
from .merkle import Descent
from .messages import (
    CONTRADICTION, EQUIVOCATION, INVALID_MOVE, TIMEOUT, UNCOMPUTABLE, WRONG_RESULT, EvidenceRequest, Fault,
    IntervalCommit, IntervalRequest, NodeEvidence, OpenDispute, RevealChildren, RevealRequest, StepCommit,
    StepRequest, Verdict, dispute_id_of,
)
from .oracle import BatchOracle
from .program import StateOutputs
from .wire import packb

_TRANSCRIPT_DOMAIN = b"gavel/transcript/v1\0"


def max_rounds(intervals: int, steps_per_interval: int, graph_nodes: int) -> int:
    """Most request rounds a dispute can take: ceil(log2 C) + ceil(log2 k) + ceil(log2 nodes) + 4.

    Each level costs the depth of the leaf it finds, at most ceil(log2(leaves)),
    with C + 1, k + 1 and nodes + 1 leaves; one more round fetches node evidence.
    """
    for name, value in (("intervals", intervals), ("steps_per_interval", steps_per_interval),
                        ("graph_nodes", graph_nodes)):
        if type(value) is not int or value < 1:
            raise LocalProtocolError(f"{name} must be a positive int, got {value!r}")
    return _ceil_log2(intervals) + _ceil_log2(steps_per_interval) + _ceil_log2(graph_nodes) + 4


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


class Transcript:
    """Hash chain over the records of a dispute: (kind, time, bytes), kind "sent", "received" or "timeout"."""

    def __init__(self, dispute_id: bytes) -> None:
        self.dispute_id = dispute_id
        self.head = blake3.blake3(_TRANSCRIPT_DOMAIN + dispute_id).digest()
        self.records: list[tuple[str, int, bytes]] = []

    def append(self, kind: str, now: int, data: bytes) -> None:
        self.records.append((kind, now, data))
        self.head = blake3.blake3(self.head + packb([kind, now, data])).digest()

    @classmethod
    def replay(cls, dispute_id: bytes, records: list[tuple[str, int, bytes]]) -> Transcript:
        t = cls(dispute_id)
        for record in records:
            t.append(*record)
        return t


class _Foul(Exception):
    """A move that loses: raised inside the checks, turned into a Fault."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass
class _Answer:
    """What one valid move adds, applied only once the move is accepted."""

    children: tuple[bytes, bytes] | None = None
    root: SignedRoot | None = None
    agreed: bytes | None = None          # a state both must share (checkpoint c, state before step s)
    output: bytes | None = None          # the claimed node output (evidence)
    evidence: Any = None


@dataclass
class _Side:
    node_id: bytes
    role: str
    roots: dict[int, SignedRoot]
    answer: _Answer | None = None
    leaf: dict[int, bytes] = field(default_factory=dict)  # leaf hash where each level's descent ended


class Referee:
    """Referees one dispute of one job. `batch_hashes(step)` gives the client's own batch tensor hashes."""

    def __init__(self, *, identity: Identity, terms: SignedJobTerms, batch_hashes: BatchOracle | None = None,
                 first_seq: int = 1, guard: ReplayGuard | None = None) -> None:
        if identity.node_id != terms.terms.client:
            raise LocalProtocolError("the referee of a job is its client")
        self.identity = identity
        self.terms = terms.terms
        self.job_id = terms.job_id
        self.schedule = self.terms.schedule
        self.batch_hashes = batch_hashes
        self.game = GameState(REFEREE)
        self.dispute_id: bytes | None = None
        self.transcript: Transcript | None = None
        self.verdict: Verdict | None = None
        self.verdict_envelope: Envelope | None = None
        self.rounds = 0
        self._outbox = Outbox(identity, self.job_id, first_seq)
        self._guard = guard if guard is not None else ReplayGuard()
        self._time = MonotonicTime()
        self._store = CommitmentStore()
        self._sides: dict[bytes, _Side] = {}
        self._clock: ChessClock | None = None
        self._descent: Descent | None = None
        self._agreed: bytes | None = None
        self._located: list[int] = []   # first differing checkpoint, step, node, as found

    @property
    def state(self) -> str:
        return self.game.state

    @property
    def next_deadline(self) -> int | None:
        """The earliest time at which a party's silence will lose it the game (call `tick` then)."""
        return None if self._clock is None or self.state == DONE else self._clock.next_deadline()

    # --- events ---------------------------------------------------------------------------------

    def receive_bytes(self, data: bytes, *, now: int) -> Received:
        limit = MAX_TENSOR_MESSAGE_SIZE if self.state == EVIDENCE else MAX_MESSAGE_SIZE
        envelope = decode_envelope(data, max_size=limit)
        return Received(envelope, self.receive(envelope, now=now))

    def tick(self, *, now: int) -> list[Action]:
        """Time passes: rule against parties whose deadline is behind `now`."""
        self._time.advance(now)
        return [] if self.state == DONE else self._expire(now)

    def receive(self, envelope: Envelope, *, now: int) -> list[Action]:
        self._time.advance(now)
        if self.state == DONE:
            raise RemoteProtocolError("the dispute is over")
        expired = self._expire(now)
        if expired:
            return expired  # the verdict is out; this message came too late to matter
        self._guard.check(envelope, now=now, job_id=self.job_id)
        if self.state == AWAIT_OPEN:
            return self._open(envelope, now)
        side = self._sides.get(envelope.sender)
        if side is None:
            raise RemoteProtocolError("only the two parties move in a dispute")
        body = envelope.body
        root = getattr(body, "root", None)
        if isinstance(root, SignedRoot):
            equivocation = self._store.add(root)
            if equivocation is not None:
                self._accept(envelope, now)
                return self._finish({side.node_id: (EQUIVOCATION, "signed two different roots for one key")},
                                    now, equivocation=equivocation)
        if type(body) is not EXPECTED_MOVE[self.state] or body.dispute_id != self.dispute_id:
            raise RemoteProtocolError(f"{type(body).__name__} is not a move of this dispute in state {self.state}")
        if side.node_id not in self._clock.running:
            raise RemoteProtocolError("this party has already moved this round")
        try:
            answer = self._check(side, body)
        except _Foul as foul:
            self._accept(envelope, now)
            return self._finish({side.node_id: (foul.reason, foul.detail)}, now)
        self._accept(envelope, now)
        side.answer = answer
        if answer.root is not None:
            side.roots[LEVEL[self.state]] = answer.root
        if answer.agreed is not None:
            self._agreed = answer.agreed
        if self._clock.running:
            return []  # the other party has yet to move
        return self._complete_round(now)

    def _accept(self, envelope: Envelope, now: int) -> None:
        self._guard.accept(envelope, now=now, job_id=self.job_id)
        self.transcript.append("received", now, envelope.encode())
        if envelope.sender in self._clock.running:
            self._clock.stop(envelope.sender, now)

    def _expire(self, now: int) -> list[Action]:
        if self._clock is None:
            return []
        late = self._clock.overdue(now)
        for party in late:
            self.transcript.append("timeout", now, party)
        return self._finish({p: (TIMEOUT, "did not answer in time") for p in late}, now) if late else []

    # --- opening --------------------------------------------------------------------------------

    def _open(self, envelope: Envelope, now: int) -> list[Action]:
        body = envelope.body
        if not isinstance(body, OpenDispute):
            raise RemoteProtocolError("a dispute starts with OpenDispute")
        ch, de = body.challenger_root, body.defender_root
        last = self.schedule.checkpoints - 1
        for root in (ch, de):
            if root.leaf_count != self.schedule.checkpoints or root.sequence != last:
                raise RemoteProtocolError("a disputed trace root covers every checkpoint of the job")
        if ch.statement == de.statement:
            raise RemoteProtocolError("the two trace roots agree: there is nothing to dispute")
        if self.identity.node_id in (ch.signer, de.signer):
            raise RemoteProtocolError("the referee is not a party of its own dispute")
        self._guard.accept(envelope, now=now, job_id=self.job_id)
        self.dispute_id = dispute_id_of(envelope)
        self.transcript = Transcript(self.dispute_id)
        self.transcript.append("received", now, envelope.encode())
        for root in (ch, de):
            self._store.add(root)
            self._sides[root.signer] = _Side(root.signer, root.role, {1: root})
        self._clock = ChessClock(self.terms.rules, (ch.signer, de.signer))
        self.game.fire(OPENED_DISPUTE)
        self._descent = Descent(self.schedule.checkpoints)
        return self._request(RevealRequest(self.dispute_id, 1, 0, self.schedule.checkpoints), now)

    def _request(self, body: Any, now: int) -> list[Action]:
        self.rounds += 1
        actions: list[Action] = []
        for party in self._sides:
            self._sides[party].answer = None
            envelope = self._outbox.seal(body, self._clock.start(party, now))
            self.transcript.append("sent", now, envelope.encode())
            actions.append(Send(party, envelope))
        return actions

    # --- checking one move ---------------------------------------------------------------------

    def _check(self, side: _Side, body: Any) -> _Answer:
        if isinstance(body, RevealChildren):
            return self._check_reveal(side, body)
        if isinstance(body, IntervalCommit):
            return self._check_interval(side, body)
        if isinstance(body, StepCommit):
            return self._check_step(side, body)
        return self._check_evidence(side, body)

    def _check_reveal(self, side: _Side, body: RevealChildren) -> _Answer:
        level = LEVEL[self.state]
        committed = side.roots[level]
        if body.level != level:
            raise _Foul(INVALID_MOVE, f"revealed at level {body.level}, the dispute is at level {level}")
        if body.root.key != committed.key or body.root.statement != committed.statement:
            raise _Foul(INVALID_MOVE, "revealed for a root other than the one committed")
        d = self._descent
        if not body.proof.verify(committed.root, size=committed.leaf_count, lo=d.lo, hi=d.hi):
            raise _Foul(INVALID_MOVE, f"children of [{d.lo}, {d.hi}) do not hash to the committed root")
        return _Answer(children=(body.proof.left, body.proof.right))

    def _check_root(self, side: _Side, root: SignedRoot, sequence: int, leaf_count: int) -> None:
        if root.role != side.role or root.sequence != sequence or root.leaf_count != leaf_count:
            raise _Foul(INVALID_MOVE, f"committed {root.kind} root #{root.sequence} of {root.leaf_count} leaves as "
                                      f"{root.role!r}; expected #{sequence} of {leaf_count} as {side.role!r}")

    def _check_agreed(self, value: bytes, what: str) -> None:
        if self._agreed is not None and value != self._agreed:
            raise _Foul(CONTRADICTION, f"{what} differs from the other party's, though the descent found it equal")

    def _check_interval(self, side: _Side, body: IntervalCommit) -> _Answer:
        c = self._located[0] - 1
        size = self.schedule.interval_leaves(c)
        checkpoints = self.schedule.checkpoints
        root, trace = body.root, side.roots[1].root
        if body.checkpoint != c:
            raise _Foul(INVALID_MOVE, f"committed interval {body.checkpoint}, asked for {c}")
        self._check_root(side, root, c, size)
        if not body.trace_start_proof.verify(trace, body.trace_start, size=checkpoints, index=c):
            raise _Foul(INVALID_MOVE, f"checkpoint {c} is not proven in the party's trace")
        if not body.trace_end_proof.verify(trace, body.trace_end, size=checkpoints, index=c + 1) \
                or leaf_hash(body.trace_end) != side.leaf[1]:
            raise _Foul(INVALID_MOVE, f"checkpoint {c + 1} is not proven in the party's trace")
        if not body.interval_start_proof.verify(root.root, body.interval_start, size=size, index=0) \
                or not body.interval_end_proof.verify(root.root, body.interval_end, size=size, index=size - 1):
            raise _Foul(INVALID_MOVE, "the interval's first or last state is not proven in its root")
        if body.interval_start != body.trace_start or body.interval_end != body.trace_end:
            raise _Foul(CONTRADICTION, f"the interval does not run from its own checkpoint {c} to checkpoint {c + 1}")
        if not body.children.verify(root.root, size=size, lo=0, hi=size):
            raise _Foul(INVALID_MOVE, "the interval root's children do not hash to it")
        self._check_agreed(body.trace_start, f"checkpoint {c}")
        return _Answer(children=(body.children.left, body.children.right), root=root, agreed=body.trace_start)

    def _check_step(self, side: _Side, body: StepCommit) -> _Answer:
        c, s = self._located[0] - 1, self._located[1]
        j = s - self.schedule.checkpoint_step(c)
        size, interval = self.schedule.interval_leaves(c), side.roots[2].root
        nodes = self.terms.program_size
        root = body.root
        if body.step != s:
            raise _Foul(INVALID_MOVE, f"committed step {body.step}, asked for {s}")
        self._check_root(side, root, s, nodes)
        if not body.before_proof.verify(interval, body.before, size=size, index=j - 1):
            raise _Foul(INVALID_MOVE, f"the state before step {s} is not proven in the party's interval")
        if not body.after_proof.verify(interval, body.after, size=size, index=j) or leaf_hash(body.after) != side.leaf[2]:
            raise _Foul(INVALID_MOVE, f"the state after step {s} is not proven in the party's interval")
        if not body.state_after_proof.verify(root.root, body.state_after, size=nodes, index=nodes - 1):
            raise _Foul(INVALID_MOVE, "the step tree's last leaf is not proven in its root")
        if body.state_after != body.after:
            raise _Foul(CONTRADICTION, f"the step tree ends in a state other than the party's state after step {s}")
        if not body.children.verify(root.root, size=nodes, lo=0, hi=nodes):
            raise _Foul(INVALID_MOVE, "the step root's children do not hash to it")
        self._check_agreed(body.before, f"the state before step {s}")
        return _Answer(children=(body.children.left, body.children.right), root=root, agreed=body.before)

    def _check_evidence(self, side: _Side, body: NodeEvidence) -> _Answer:
        s, n = self._located[1], self._located[2]
        nodes = self.terms.program_size
        step_root = side.roots[3].root
        if body.step != s or body.node != n:
            raise _Foul(INVALID_MOVE, f"evidence for step {body.step} node {body.node}, asked for step {s} node {n}")
        try:
            entry = proven_entry(body.entry, body.entry_proof, program_root=self.terms.program_root,
                                 program_size=nodes, node=n)
        except BadEvidence as exc:
            raise _Foul(INVALID_MOVE, str(exc)) from None
        if not body.output_proof.verify(step_root, body.output, size=nodes, index=n) \
                or leaf_hash(body.output) != side.leaf[3]:
            raise _Foul(INVALID_MOVE, f"the output of node {n} is not the one committed")
        inputs = body.inputs
        if isinstance(entry, StateOutputs):
            if len(inputs) != len(entry.names):
                raise _Foul(INVALID_MOVE, f"{len(inputs)} output hashes for {len(entry.names)} state tensors")
            for ev, m in zip(inputs, entry.nodes):
                self._check_node_hash(ev, m, n, step_root, tensor=False)
            evidence: Any = ("outputs", dict(zip(entry.names, (ev.hash for ev in inputs))))
        elif entry.is_leaf and entry.leaf_role == "state":
            if len(inputs) != 1 or inputs[0].tensor is not None \
                    or not inputs[0].proof.verify(self._agreed, state_leaf(entry.leaf_name, inputs[0].hash)):
                raise _Foul(INVALID_MOVE, f"state tensor {entry.leaf_name!r} is not proven in the agreed state")
            evidence = ("state", inputs[0].hash)
        elif entry.is_leaf:
            if inputs:
                raise _Foul(INVALID_MOVE, "a batch leaf takes no inputs")
            evidence = ("batch", batch_hash(self.batch_hashes, s, entry.leaf_name))
        else:
            if entry.op not in registry.names():
                raise LocalProtocolError(f"this referee has no operator {entry.op!r}: load it and retry")
            if len(inputs) != len(entry.inputs):
                raise _Foul(INVALID_MOVE, f"{len(inputs)} inputs for node {n}, which takes {len(entry.inputs)}")
            for ev, m in zip(inputs, entry.inputs):
                self._check_node_hash(ev, m, n, step_root, tensor=True)
            evidence = ("op", entry, tuple(ev.tensor for ev in inputs))
        return _Answer(output=body.output, evidence=evidence)

    def _check_node_hash(self, ev: Any, m: int, n: int, step_root: bytes, *, tensor: bool) -> None:
        nodes = self.terms.program_size
        if m >= n:
            raise _Foul(INVALID_MOVE, f"node {n} reads node {m}, which does not come before it")
        if not ev.proof.verify(step_root, ev.hash, size=nodes, index=m):
            raise _Foul(INVALID_MOVE, f"the output hash of node {m} is not proven in the step root")
        if (ev.tensor is not None) != tensor:
            raise _Foul(INVALID_MOVE, f"input from node {m} {'lacks' if tensor else 'has'} a tensor")
        if tensor and ev.tensor.tensor_hash() != ev.hash:
            raise _Foul(INVALID_MOVE, f"the tensor given for node {m} does not have the agreed hash")

    # --- completing a round ---------------------------------------------------------------------

    def _complete_round(self, now: int) -> list[Action]:
        sides = list(self._sides.values())
        state = self.state
        if state == EVIDENCE:
            return self._rule(now)
        level = LEVEL[state]
        if state in (INTERVAL_COMMIT, STEP_COMMIT):
            self._descent = Descent(sides[0].roots[level].leaf_count)
        went_left = sides[0].answer.children[0] != sides[1].answer.children[0]
        self._descent.choose(went_left)
        d = self._descent
        if not d.done:
            self.game.fire(DESCENDED)
            return self._request(RevealRequest(self.dispute_id, level, d.lo, d.hi), now)
        for side in sides:
            side.leaf[level] = side.answer.children[0 if went_left else 1]
        if level == 1:
            self._located.append(d.leaf)
            if d.leaf == 0:
                return self._rule_initial_state(now)
            self.game.fire(LOCATED)
            return self._request(IntervalRequest(self.dispute_id, d.leaf - 1), now)
        if level == 2:
            c = self._located[0] - 1
            step = self.schedule.checkpoint_step(c) + d.leaf
            self._located.append(step)
            self._agreed = None
            self.game.fire(LOCATED)
            return self._request(StepRequest(self.dispute_id, step), now)
        self._located.append(d.leaf)
        self.game.fire(LOCATED)
        return self._request(EvidenceRequest(self.dispute_id, self._located[1], d.leaf), now)

    def _rule_initial_state(self, now: int) -> list[Action]:
        expected = self.terms.initial_state
        faults = {side.node_id: (WRONG_RESULT, "checkpoint 0 is not the job's initial state")
                  for side in self._sides.values() if side.leaf[1] != leaf_hash(expected)}
        return self._finish(faults, now, recomputed=expected, event=RULED)

    def _rule(self, now: int) -> list[Action]:
        sides = list(self._sides.values())
        evidence = sides[0].answer.evidence  # both are proven against agreed hashes: either one will do
        kind = evidence[0]
        if kind == "op":
            _, entry, tensors = evidence
            try:
                expected = operator_output(entry, [t.to_array() for t in tensors])
            except BadEvidence as exc:  # the operator fails on agreed inputs: no claimed output can be right
                return self._finish({side.node_id: (UNCOMPUTABLE, str(exc)[:256]) for side in sides}, now, event=RULED)
        elif kind == "outputs":
            expected = state_root(evidence[1])
        else:
            expected = evidence[1]
        faults = {side.node_id: (WRONG_RESULT, f"claimed {side.answer.output[:4].hex()}..., recomputed "
                                               f"{expected[:4].hex()}...")
                  for side in sides if side.answer.output != expected}
        return self._finish(faults, now, recomputed=expected, event=RULED)

    # --- the verdict ------------------------------------------------------------------------------

    def _finish(self, faults: dict[bytes, tuple[str, str]], now: int, *, recomputed: bytes = b"",
                event: str = DEFAULTED, equivocation: EquivocationProof | None = None) -> list[Action]:
        self.game.fire(event)
        challenger, defender = self._sides
        located = self._located + [0] * (3 - len(self._located))
        verdict = Verdict(
            self.dispute_id, challenger, defender,
            tuple(Fault(p, *faults[p]) for p in (challenger, defender) if p in faults),
            len(self._located), *located, recomputed, self.rounds, self.transcript.head, equivocation,
        )
        envelope = self._outbox.seal(verdict, NEVER)
        self.verdict, self.verdict_envelope = verdict, envelope
        return [Send(challenger, envelope), Send(defender, envelope), GameOver(verdict, envelope)]
