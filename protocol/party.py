"""A party of a dispute (challenger or defender): answers the referee from its `TraceOracle`.

The party checks that the referee asks in order -- each reveal is a child of the
previous node, each commit request names the leaf the last descent reached -- and
answers honestly from its own trees. State changes go through `game_state`.
"""
from __future__ import annotations

from typing import Any

from repops_cupy.merkle import split_point

from .actions import Action, GameOver, MonotonicTime, Outbox, Received, Send
from .commitments import SignedRoot, commit_trace, hash_tree, state_tree
from .envelope import Envelope, ReplayGuard, decode_envelope
from .errors import LocalProtocolError, RemoteProtocolError
from .game_state import CHALLENGER, DEFENDER, PARTY_EVENTS, PARTY_LEVEL, SEND_OPEN, GameState
from .identity import Identity
from .jobs import SignedJobTerms
from .merkle import MerkleTree
from .messages import (
    EvidenceRequest, InputEvidence, IntervalCommit, IntervalRequest, NodeEvidence, OpenDispute,
    RevealChildren, RevealRequest, StepCommit, StepRequest, TensorPayload, Verdict, dispute_id_of,
)
from .oracle import TraceOracle
from .program import Program, StateOutputs

class DisputeParty:
    """One side of one dispute. `side` is CHALLENGER or DEFENDER; `role` is the commitment role ("provider")."""

    def __init__(self, *, identity: Identity, terms: SignedJobTerms, oracle: TraceOracle, role: str, side: str,
                 first_seq: int = 1, guard: ReplayGuard | None = None) -> None:
        if side not in (CHALLENGER, DEFENDER):
            raise LocalProtocolError(f"a party is the {CHALLENGER} or the {DEFENDER}, not {side!r}")
        self.identity = identity
        self.terms = terms.terms
        self.job_id = terms.job_id
        self.referee = self.terms.client
        self.schedule = self.terms.schedule
        self.oracle = oracle
        self.role = role
        self.side = side
        self.game = GameState(side)
        self.dispute_id: bytes | None = None
        self.verdict: Verdict | None = None
        self._outbox = Outbox(identity, self.job_id, first_seq)
        self._guard = guard if guard is not None else ReplayGuard()
        self._time = MonotonicTime()
        self._program: Program | None = None
        self._trace: MerkleTree | None = None
        self._trace_root: SignedRoot | None = None
        self._trees: dict[int, MerkleTree] = {}       # level -> this dispute's tree
        self._leaves: dict[int, list[bytes]] = {}     # level -> that tree's leaf data
        self._roots: dict[int, SignedRoot] = {}       # level -> its signed root
        self._last_range: dict[int, tuple[int, int]] = {}
        self._checkpoint: int | None = None            # interval under dispute
        self._step: int | None = None                  # step under dispute

    # --- what this party committed to -----------------------------------------------------

    @property
    def state(self) -> str:
        return self.game.state

    @property
    def trace_root(self) -> SignedRoot:
        """This party's signed trace root (the same bytes it published: Ed25519 is deterministic)."""
        if self._trace_root is None:
            states = list(self.oracle.checkpoint_states())
            if len(states) != self.schedule.checkpoints:
                raise LocalProtocolError(f"the oracle gave {len(states)} checkpoint states, the job has "
                                         f"{self.schedule.checkpoints}")
            self._trace = hash_tree(states)
            self._trace_root = commit_trace(self.identity, job_id=self.job_id, role=self.role,
                                            checkpoint_states=states)
        return self._trace_root

    @property
    def program(self) -> Program:
        if self._program is None:
            program = self.oracle.program()
            if program.root != self.terms.program_root or program.size != self.terms.program_size:
                raise LocalProtocolError("the oracle's program is not the one the job's terms commit to")
            self._program = program
        return self._program

    @property
    def next_seq(self) -> int:
        return self._outbox.next_seq

    # --- events -----------------------------------------------------------------------------

    def open_dispute(self, defender_root: SignedRoot, *, now: int) -> Send:
        """The challenger's first move: name both roots. Valid until one move timeout from now."""
        self._time.advance(now)
        if self.side != CHALLENGER:
            raise LocalProtocolError("only the challenger opens a dispute")
        if defender_root.statement == self.trace_root.statement:
            raise LocalProtocolError("the defender's trace root equals ours: there is nothing to dispute")
        body = OpenDispute(self.trace_root, defender_root)
        envelope = self._outbox.seal(body, now + self.terms.rules.move_timeout_ms)
        self.game.fire(SEND_OPEN)
        self.dispute_id = dispute_id_of(envelope)
        return Send(self.referee, envelope)

    def receive_bytes(self, data: bytes, *, now: int) -> Received:
        envelope = decode_envelope(data)  # a party receives requests and verdicts: never tensors
        return Received(envelope, self.receive(envelope, now=now))

    def receive(self, envelope: Envelope, *, now: int) -> list[Action]:
        """Handle one message from the referee. Raises RemoteProtocolError for anything out of order."""
        self._time.advance(now)
        if envelope.sender != self.referee:
            raise RemoteProtocolError("only the job's client referees its disputes")
        self._guard.check(envelope, now=now, job_id=self.job_id)
        body = envelope.body
        event = PARTY_EVENTS.get(type(body))
        if event is None or not self.game.allows(event):
            raise RemoteProtocolError(f"{type(body).__name__} is not expected from the referee in state {self.state}")
        if self.dispute_id is not None and body.dispute_id != self.dispute_id:
            raise RemoteProtocolError("message for another dispute")
        answer = self._answer(body)
        self._guard.accept(envelope, now=now, job_id=self.job_id)
        self.game.fire(event)
        self.dispute_id = body.dispute_id  # the defender learns of the dispute from its first request
        if isinstance(body, Verdict):
            self.verdict = body
            return [GameOver(body, envelope)]
        return [Send(self.referee, self._outbox.seal(answer, envelope.deadline))]

    # --- answers ----------------------------------------------------------------------------

    def _answer(self, body: Any) -> Any:
        """The move that answers `body`; raises RemoteProtocolError, before changing anything, if out of order."""
        if isinstance(body, RevealRequest):
            return self._reveal(body)
        if isinstance(body, IntervalRequest):
            return self._commit_interval(body)
        if isinstance(body, StepRequest):
            return self._commit_step(body)
        if isinstance(body, EvidenceRequest):
            return self._evidence(body)
        if self.identity.node_id not in (body.challenger, body.defender):
            raise RemoteProtocolError("the verdict does not name this party")
        return None

    def _ensure_trace(self) -> None:
        if 1 not in self._trees:
            root = self.trace_root
            self._trees[1], self._roots[1] = self._trace, root
            self._leaves[1] = list(self.oracle.checkpoint_states())

    def _reveal(self, req: RevealRequest) -> RevealChildren:
        level = PARTY_LEVEL[self.game.peek(PARTY_EVENTS[RevealRequest])]
        if req.level != level:
            raise RemoteProtocolError(f"reveal at level {req.level} while the dispute is at level {level}")
        self._ensure_trace()
        tree = self._trees[level]
        if level in self._last_range:
            lo, hi = self._last_range[level]
            m = lo + split_point(hi - lo)
            allowed = {(lo, m), (m, hi)}
        else:
            allowed = {(0, tree.size)}  # the first reveal of the trace is of its root
        if (req.lo, req.hi) not in allowed or req.hi - req.lo < 2:
            raise RemoteProtocolError(f"reveal of [{req.lo}, {req.hi}) does not follow the descent")
        self._last_range[level] = (req.lo, req.hi)
        return RevealChildren(req.dispute_id, level, self._roots[level], tree.children_proof(req.lo, req.hi))

    def _check_found_leaf(self, level: int, leaf: int) -> None:
        """`leaf` must be a leaf child of the last node revealed at `level`."""
        if level not in self._last_range:
            raise RemoteProtocolError(f"no descent at level {level} has been made")
        lo, hi = self._last_range[level]
        m = lo + split_point(hi - lo)
        if not ((leaf == lo and m - lo == 1) or (leaf == m and hi - m == 1)):
            raise RemoteProtocolError(f"leaf {leaf} is not where the level-{level} descent ended")

    def _commit_interval(self, req: IntervalRequest) -> IntervalCommit:
        c = req.checkpoint
        if not 0 <= c < self.schedule.intervals:
            raise RemoteProtocolError(f"interval {c} does not exist")
        self._check_found_leaf(1, c + 1)
        states = list(self.oracle.step_states(c))
        if len(states) != self.schedule.interval_leaves(c):
            raise LocalProtocolError(f"the oracle gave {len(states)} states for interval {c}, "
                                     f"expected {self.schedule.interval_leaves(c)}")
        tree = hash_tree(states)
        root = SignedRoot.sign(self.identity, job_id=self.job_id, role=self.role, kind="interval", sequence=c,
                               leaf_count=tree.size, root=tree.root)
        trace, checkpoints = self._trees[1], self._leaves[1]
        self._checkpoint = c
        self._trees[2], self._roots[2], self._leaves[2] = tree, root, states
        self._last_range[2] = (0, tree.size)
        return IntervalCommit(
            req.dispute_id, c,
            checkpoints[c], trace.inclusion_proof(c),
            checkpoints[c + 1], trace.inclusion_proof(c + 1),
            root,
            states[0], tree.inclusion_proof(0),
            states[-1], tree.inclusion_proof(tree.size - 1),
            tree.children_proof(0, tree.size),
        )

    def _commit_step(self, req: StepRequest) -> StepCommit:
        c = self._checkpoint
        if req.step not in self.schedule.interval_steps(c):
            raise RemoteProtocolError(f"step {req.step} is not in interval {c}")
        j = req.step - self.schedule.checkpoint_step(c)
        self._check_found_leaf(2, j)
        interval, states = self._trees[2], self._leaves[2]
        outputs = list(self.oracle.node_outputs(req.step))
        if len(outputs) != self.terms.graph_nodes:
            raise LocalProtocolError(f"the oracle gave {len(outputs)} node outputs, the program has "
                                     f"{self.terms.graph_nodes} nodes")
        leaves = outputs + [states[j]]  # the state after the step closes the step tree
        tree = hash_tree(leaves)
        root = SignedRoot.sign(self.identity, job_id=self.job_id, role=self.role, kind="step", sequence=req.step,
                               leaf_count=tree.size, root=tree.root)
        self._step = req.step
        self._trees[3], self._roots[3], self._leaves[3] = tree, root, leaves
        self._last_range[3] = (0, tree.size)
        return StepCommit(
            req.dispute_id, req.step,
            states[j - 1], interval.inclusion_proof(j - 1),
            states[j], interval.inclusion_proof(j),
            root,
            leaves[-1], tree.inclusion_proof(tree.size - 1),
            tree.children_proof(0, tree.size),
        )

    def _evidence(self, req: EvidenceRequest) -> NodeEvidence:
        if req.step != self._step:
            raise RemoteProtocolError(f"evidence asked for step {req.step}, the dispute is at step {self._step}")
        self._check_found_leaf(3, req.node)
        n, s = req.node, req.step
        program, tree, leaves = self.program, self._trees[3], self._leaves[3]
        entry = program.entry(n)
        inputs: list[InputEvidence] = []
        if isinstance(entry, StateOutputs):
            inputs = [InputEvidence(leaves[m], tree.inclusion_proof(m), None) for m in entry.nodes]
        elif entry.is_leaf and entry.leaf_role == "state":
            hashes = dict(self.oracle.state_tensor_hashes(s - 1))
            state, names = state_tree(hashes)
            inputs = [InputEvidence(hashes[entry.leaf_name], state.inclusion_proof(names.index(entry.leaf_name)), None)]
        elif not entry.is_leaf:
            arrays = list(self.oracle.node_inputs(s, n))
            if len(arrays) != len(entry.inputs):
                raise LocalProtocolError(f"the oracle gave {len(arrays)} inputs for node {n}, it has {len(entry.inputs)}")
            inputs = [InputEvidence(leaves[m], tree.inclusion_proof(m), TensorPayload.from_array(a))
                      for m, a in zip(entry.inputs, arrays)]
        # a batch leaf needs no inputs: the referee rebuilds the batch itself
        return NodeEvidence(req.dispute_id, s, n, program.leaves[n], program.proof(n),
                            leaves[n], tree.inclusion_proof(n), tuple(inputs))
