"""The dispute game for rounding-log runs: checkpoints, then steps, then one replayed step.

Theory of operation. Two parties trained the same ``torch-roundlog`` job and signed
different trace roots (the Merkle root over their checkpoint state hashes). The
referee walks down both trace trees at once (`Descent`), one `ChildrenProof` per
party per round, to the first checkpoint ``k`` where they differ: checkpoint
``k - 1`` is agreed. Each party then signs an *interval* root over its per-step
state hashes from checkpoint ``k - 1`` to checkpoint ``k`` (both ends included and
proven against the trace tree), and the referee walks down those to the first step
``s`` whose state hash differs; state ``s - 1`` is agreed.

At that leaf each party opens the agreed state (its tensors and the previous log's
digest, which must hash to the agreed state hash) and hands its own step-``s`` log
with a proof that the log's digest is the ``roundlog.log`` leaf of its claimed state
``s``. The referee replays step ``s`` from the agreed state with each party's log
(the caller's `ReplayStep`: this module does no I/O) and finds a party at fault when
its log is not committed in its claimed state, when replay flags implausible log
entries (positions far from any rounding boundary: a forged log), when its log cannot
be replayed at all, or when replay does not reach its claimed state hash.

A party whose answer does not verify against its own signed roots (or that fails to
answer) loses at once: an invalid move. Rounds: ``ceil(log2 C)`` over ``C``
checkpoints plus ``ceil(log2 (I + 1))`` over an interval of ``I`` steps, plus four
fixed exchanges (trace roots, interval roots, the step's two hashes, leaf evidence).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from repops_cupy.hashing import (LOG_LEAF, log_digest, roundlog_named_hashes, roundlog_state_hash, sorted_names,
                                 state_leaf, state_leaves)
from repops_cupy.merkle import leaf_hash

from .commitments import SignedRoot
from .errors import LocalProtocolError
from .merkle import ChildrenProof, Descent, InclusionProof, MerkleTree

SIDES = ("challenger", "defender")

__all__ = [
    "IntervalOpening", "LOG_LEAF", "RoundLogParty", "RoundLogReferee", "ReplayStep", "StateOpening",
    "StepEvidence", "StepPair", "Verdict", "log_digest", "log_leaf_proof", "opened_state_hash",
]


@dataclass(frozen=True)
class StateOpening:
    """The named float32 tensors of a state and the digest of the log of the step that made it."""

    tensors: Mapping[str, np.ndarray]
    log_hash: bytes | None  # None for the initial state


def opened_state_hash(opening: StateOpening) -> bytes:
    """The state hash of an opening (`repops_cupy.hashing.roundlog_state_hash`)."""
    return roundlog_state_hash(opening.tensors, opening.log_hash)


def log_leaf_proof(state: StateOpening) -> InclusionProof:
    """Proof that ``state.log_hash`` is the log leaf of the state's hash (for a party's own state)."""
    if state.log_hash is None:
        raise LocalProtocolError("the initial state has no log leaf")
    hashes = roundlog_named_hashes(state.tensors, state.log_hash)
    return MerkleTree.from_data(state_leaves(hashes)).inclusion_proof(sorted_names(hashes).index(LOG_LEAF))


@dataclass(frozen=True)
class IntervalOpening:
    """A party's per-step hashes of checkpoint interval `index` (checkpoint index-1 .. index).

    `start`/`end` are its checkpoint state hashes, proven in its trace tree
    (`start_in_trace`, `end_in_trace`) and as the first and last leaves of the signed
    interval tree (`start_in_interval`, `end_in_interval`).
    """

    root: SignedRoot
    start: bytes
    end: bytes
    start_in_trace: InclusionProof
    end_in_trace: InclusionProof
    start_in_interval: InclusionProof
    end_in_interval: InclusionProof


@dataclass(frozen=True)
class StepPair:
    """State hashes before and after the disputed step, proven in the party's interval tree."""

    before: bytes
    after: bytes
    before_proof: InclusionProof
    after_proof: InclusionProof


@dataclass(frozen=True)
class StepEvidence:
    """What a party hands at the leaf: the agreed state, its own log, the log's place in its state."""

    agreed_state: StateOpening
    log_bytes: bytes
    log_proof: InclusionProof


class RoundLogParty(Protocol):
    def trace_commitment(self) -> SignedRoot: ...
    def trace_children(self, lo: int, hi: int) -> ChildrenProof: ...
    def interval_opening(self, index: int) -> IntervalOpening: ...
    def interval_children(self, index: int, lo: int, hi: int) -> ChildrenProof: ...
    def step_pair(self, index: int, leaf: int) -> StepPair: ...
    def step_evidence(self, step: int) -> StepEvidence: ...


# replay(agreed_state, step, log_bytes) -> (state hash reached, implausible log entries);
# raises ValueError or RuntimeError when the log cannot be applied to the step
ReplayStep = Callable[[StateOpening, int, bytes], tuple[bytes, int]]


@dataclass
class Verdict:
    """`winner` is "challenger", "defender" or None (both at fault, or no fault found)."""

    winner: str | None
    faults: dict[str, str] = field(default_factory=dict)  # side -> why it lost
    level: str = "commitments"  # where the game ended: commitments, checkpoints, steps, replay
    checkpoint: int | None = None  # index of the first disputed checkpoint
    step: int | None = None  # the disputed step
    rounds: int = 0

    @property
    def decided(self) -> bool:
        return self.winner is not None


class _InvalidMove(Exception):
    def __init__(self, faults: dict[str, str]):
        super().__init__(faults)
        self.faults = faults


def max_rounds(checkpoint_steps: Sequence[int]) -> int:
    """The most rounds a game over this job can take."""
    c = len(checkpoint_steps)
    widest = max((b - a for a, b in zip(checkpoint_steps, checkpoint_steps[1:])), default=0)
    return 4 + math.ceil(math.log2(c)) + math.ceil(math.log2(widest + 1))


class RoundLogReferee:
    """Plays one dispute between two `RoundLogParty` objects; pure, all inputs given.

    `checkpoint_steps` are the job's checkpoint steps (0 first), `initial_state_hash`
    the state every honest run starts from (it follows from the job spec alone).
    """

    def __init__(self, *, job_id: bytes, checkpoint_steps: Sequence[int], initial_state_hash: bytes,
                 replay: ReplayStep) -> None:
        steps = list(checkpoint_steps)
        if not steps or steps[0] != 0 or any(b <= a for a, b in zip(steps, steps[1:])):
            raise LocalProtocolError(f"checkpoint steps must start at 0 and increase, got {steps}")
        self.job_id = job_id
        self.checkpoint_steps = steps
        self.initial_state_hash = initial_state_hash
        self.replay = replay

    # ------------------------------------------------------------------ driving

    def play(self, challenger: RoundLogParty, defender: RoundLogParty) -> Verdict:
        parties = {"challenger": challenger, "defender": defender}
        verdict = Verdict(winner=None)
        try:
            self._play(parties, verdict)
        except _InvalidMove as invalid:
            verdict.faults = invalid.faults
            verdict.winner = _winner(invalid.faults)
        return verdict

    def _ask(self, parties, verdict: Verdict, question: str, *args, check) -> dict:
        """One round: both parties answer; an answer that raises or fails `check` is an invalid move."""
        verdict.rounds += 1
        answers, faults = {}, {}
        for side in SIDES:
            answer = None
            try:
                answer = getattr(parties[side], question)(*args)
                problem = check(side, answer)
            except Exception as exc:  # a party that cannot answer loses, whatever the reason
                problem = f"{question} failed: {type(exc).__name__}: {exc}"
            if problem:
                faults[side] = f"{question}: {problem}"
            answers[side] = None if problem else answer
        if faults:
            raise _InvalidMove(faults)
        return answers

    def _play(self, parties, verdict: Verdict) -> None:
        n = len(self.checkpoint_steps)
        roots = self._ask(parties, verdict, "trace_commitment", check=lambda side, r: self._check_root(r, "trace", n - 1, n))
        signers = {side: roots[side].signer for side in SIDES}
        trace = {side: roots[side].root for side in SIDES}
        if trace["challenger"] == trace["defender"]:
            verdict.level = "agreed"
            return

        verdict.level = "checkpoints"
        walk = Descent(n)
        node = dict(trace)  # each side's hash of the current node, ending at its leaf's hash
        while not walk.done:
            lo, hi = walk.lo, walk.hi
            kids = self._ask(parties, verdict, "trace_children", lo, hi,
                             check=lambda side, p: None if isinstance(p, ChildrenProof) and p.verify(trace[side], size=n, lo=lo, hi=hi)
                             else "children proof does not verify against the signed trace root")
            left_differs = kids["challenger"].left != kids["defender"].left
            walk.choose(left_differs)
            node = {side: kids[side].left if left_differs else kids[side].right for side in SIDES}
        k = walk.leaf
        verdict.checkpoint = k
        if k == 0:  # the initial state itself differs; it follows from the job alone
            raise _InvalidMove({side: "trace: checkpoint 0 is not the job's initial state"
                                for side in SIDES if node[side] != leaf_hash(self.initial_state_hash)})

        verdict.level = "steps"
        lo_step, hi_step = self.checkpoint_steps[k - 1], self.checkpoint_steps[k]
        size = hi_step - lo_step + 1
        openings = self._ask(parties, verdict, "interval_opening", k,
                             check=lambda side, o: self._check_interval(o, trace[side], signers[side], k, size))
        interval = {side: openings[side].root.root for side in SIDES}
        walk = Descent(size)
        while not walk.done:
            lo, hi = walk.lo, walk.hi
            kids = self._ask(parties, verdict, "interval_children", k, lo, hi,
                             check=lambda side, p: None if isinstance(p, ChildrenProof) and p.verify(interval[side], size=size, lo=lo, hi=hi)
                             else "children proof does not verify against the signed interval root")
            walk.choose(kids["challenger"].left != kids["defender"].left)
        j = walk.leaf  # >= 1: leaf 0, the agreed checkpoint, is equal on both sides
        step = lo_step + j
        verdict.step = step
        pairs = self._ask(parties, verdict, "step_pair", k, j,
                          check=lambda side, p: self._check_pair(p, interval[side], size, j))
        agreed = pairs["challenger"].before
        claimed = {side: pairs[side].after for side in SIDES}

        verdict.level = "replay"
        evidence = self._ask(parties, verdict, "step_evidence", step,
                             check=lambda side, e: self._check_evidence(e, agreed, claimed[side]))
        faults = {}
        for side in SIDES:
            problem = self._replay_fault(evidence[side], step, claimed[side])
            if problem:
                faults[side] = f"step {step}: {problem}"
        verdict.faults = faults
        verdict.winner = _winner(faults)

    # ------------------------------------------------------------------ checks (None: fine)

    def _check_root(self, root, kind: str, sequence: int, leaf_count: int, signer: bytes | None = None) -> str | None:
        if not isinstance(root, SignedRoot) or not root.verify():
            return "not a validly signed root"
        if (root.job_id, root.kind, root.sequence, root.leaf_count) != (self.job_id, kind, sequence, leaf_count):
            return f"signed root is not the {kind} root {sequence} of this job over {leaf_count} leaves"
        if signer is not None and root.signer != signer:
            return "signed by another key than the trace root"
        return None

    def _check_interval(self, o, trace_root: bytes, signer: bytes, k: int, size: int) -> str | None:
        if not isinstance(o, IntervalOpening):
            return "not an interval opening"
        problem = self._check_root(o.root, "interval", k, size, signer)
        if problem:
            return problem
        n = len(self.checkpoint_steps)
        if not (o.start_in_trace.verify(trace_root, o.start, size=n, index=k - 1)
                and o.end_in_trace.verify(trace_root, o.end, size=n, index=k)):
            return "interval ends are not the checkpoints of the signed trace"
        if not (o.start_in_interval.verify(o.root.root, o.start, size=size, index=0)
                and o.end_in_interval.verify(o.root.root, o.end, size=size, index=size - 1)):
            return "interval tree does not begin and end at those checkpoints"
        return None

    @staticmethod
    def _check_pair(p, interval_root: bytes, size: int, j: int) -> str | None:
        if not isinstance(p, StepPair):
            return "not a step pair"
        if not (p.before_proof.verify(interval_root, p.before, size=size, index=j - 1)
                and p.after_proof.verify(interval_root, p.after, size=size, index=j)):
            return "state hashes are not the signed interval's leaves"
        return None

    @staticmethod
    def _check_evidence(e, agreed: bytes, claimed: bytes) -> str | None:
        if not isinstance(e, StepEvidence) or not isinstance(e.log_bytes, bytes):
            return "not step evidence"
        if opened_state_hash(e.agreed_state) != agreed:
            return "opened state does not hash to the agreed state"
        return None

    def _replay_fault(self, e: StepEvidence, step: int, claimed: bytes) -> str | None:
        if not (isinstance(e.log_proof, InclusionProof)
                and e.log_proof.verify(claimed, state_leaf(LOG_LEAF, log_digest(e.log_bytes)))):
            return "its log is not the one committed in its claimed state"
        try:
            reached, implausible = self.replay(e.agreed_state, step, e.log_bytes)
        except (ValueError, RuntimeError) as exc:
            return f"its log cannot be replayed ({type(exc).__name__}: {exc})"
        if implausible:
            return f"its log has {implausible} implausible entries (forged rounding decisions)"
        if reached != claimed:
            return "replaying its own log does not reach its claimed state"
        return None


def _winner(faults: Mapping[str, str]) -> str | None:
    losers = set(faults)
    if len(losers) == 1:
        return next(side for side in SIDES if side not in losers)
    return None
