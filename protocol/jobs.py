"""A job's terms, its id, and the checkpoint schedule.

`JobTerms` is the protocol-level job spec the client signs and announces: what is
trained (the hash of the training configuration, the committed step program, the
data's content root, the initial state hash), how long and how often it is
checkpointed, what it pays, and the dispute rules. It is not the trainer's TOML
spec (`repops_cupy.jobspec`), whose canonical identity goes in `config_hash`.

The job id is the BLAKE3 hash of the canonical encoding of the signed terms, so
every message that names the job names exactly these terms, and two jobs with
equal terms differ by their `nonce`.

Schedule: steps are numbered 1..T; step s turns state s-1 into state s; state 0 is
the initial state. Checkpoint c is the state after step min(c*k, T) for
c = 0..C with C = ceil(T / k): every k steps, and the final step always.
Interval c (0 <= c < C) is steps c*k+1 .. min((c+1)*k, T).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import blake3

from .errors import LocalProtocolError
from .identity import DOMAIN_JOB_TERMS, NODE_ID_SIZE, SIGNATURE_SIZE, Identity, verify_signature
from .merkle import HASH_SIZE, MAX_TREE_SIZE
from .wire import Bytes, Nested, UInt, WireStruct, wire

MAX_STEPS = 1 << 40
# The referee's own time, on top of the game's: the challenger reaching it after the
# chain opened the dispute (the contract's ruling period starts there), the recompute of
# the disputed node that ends the game, and the `rule` transaction being mined.
RULING_MARGIN_MS = 120_000
_JOB_ID_DOMAIN = b"gavel/job-id/v1\0"
_H = Bytes(HASH_SIZE)


@dataclass(frozen=True)
class DisputeRules(WireStruct):
    """Time limits of the dispute game, in milliseconds.

    move_timeout_ms: the most one reply may take. clock_ms: a party's total budget
    for all its replies in one dispute (a chess clock), so nobody can stretch a game
    by using every per-move deadline to the end.
    """

    move_timeout_ms: int = field(metadata=wire(UInt(1, 1 << 40)))
    clock_ms: int = field(metadata=wire(UInt(1, 1 << 44)))

    @property
    def ruling_period(self) -> int:
        """Seconds the contract gives the referee to rule, from the dispute's opening on
        chain: both parties' whole clocks, one move timeout more (a last request sent as
        a clock runs out), and RULING_MARGIN_MS; rounded up to whole seconds."""
        return -(-(2 * self.clock_ms + self.move_timeout_ms + RULING_MARGIN_MS) // 1000)


@dataclass(frozen=True)
class JobTerms(WireStruct):
    client: bytes = field(metadata=wire(Bytes(NODE_ID_SIZE)))
    config_hash: bytes = field(metadata=wire(_H))
    program_root: bytes = field(metadata=wire(_H))
    program_size: int = field(metadata=wire(UInt(2, MAX_TREE_SIZE)))
    data_root: bytes = field(metadata=wire(_H))
    initial_state: bytes = field(metadata=wire(_H))
    steps: int = field(metadata=wire(UInt(1, MAX_STEPS)))
    checkpoint_every: int = field(metadata=wire(UInt(1, MAX_STEPS)))
    payment: int = field(metadata=wire(UInt()))
    stake: int = field(metadata=wire(UInt()))
    deadline: int = field(metadata=wire(UInt()))
    nonce: int = field(metadata=wire(UInt()))
    rules: DisputeRules = field(metadata=wire(Nested(DisputeRules)))

    @property
    def schedule(self) -> CheckpointSchedule:
        return CheckpointSchedule(self.steps, self.checkpoint_every)

    @property
    def graph_nodes(self) -> int:
        """Operator nodes of the step program (the last program leaf lists the state outputs)."""
        return self.program_size - 1


@dataclass(frozen=True)
class SignedJobTerms(WireStruct):
    terms: JobTerms = field(metadata=wire(Nested(JobTerms)))
    signature: bytes = field(metadata=wire(Bytes(SIGNATURE_SIZE)))

    @classmethod
    def sign(cls, identity: Identity, terms: JobTerms) -> SignedJobTerms:
        if terms.client != identity.node_id:
            raise LocalProtocolError("only the job's client signs its terms")
        return cls(terms, identity.sign(DOMAIN_JOB_TERMS, terms.encode()))

    def verify(self) -> bool:
        return verify_signature(self.terms.client, DOMAIN_JOB_TERMS, self.terms.encode(), self.signature)

    @property
    def job_id(self) -> bytes:
        return job_id(self)


def job_id(signed: SignedJobTerms) -> bytes:
    """The 32-byte job id: BLAKE3 of the canonical encoding of the signed terms."""
    return blake3.blake3(_JOB_ID_DOMAIN + signed.encode()).digest()


@dataclass(frozen=True)
class CheckpointSchedule:
    steps: int
    every: int

    def __post_init__(self) -> None:
        for name in ("steps", "every"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise LocalProtocolError(f"schedule {name} must be a positive int, got {value!r}")

    @property
    def intervals(self) -> int:
        """C: the number of checkpoint intervals (checkpoints are 0..C)."""
        return -(-self.steps // self.every)

    @property
    def checkpoints(self) -> int:
        """C + 1: leaves of the trace tree."""
        return self.intervals + 1

    def checkpoint_step(self, c: int) -> int:
        """The step after which checkpoint `c` is taken (0 for the initial state)."""
        self._check_checkpoint(c)
        return min(c * self.every, self.steps)

    def interval_steps(self, c: int) -> range:
        """Steps of interval `c`: from checkpoint c to checkpoint c+1."""
        if type(c) is not int or not 0 <= c < self.intervals:
            raise LocalProtocolError(f"interval {c!r} is outside 0..{self.intervals - 1}")
        return range(c * self.every + 1, min((c + 1) * self.every, self.steps) + 1)

    def interval_of_step(self, step: int) -> int:
        if type(step) is not int or not 1 <= step <= self.steps:
            raise LocalProtocolError(f"step {step!r} is outside 1..{self.steps}")
        return (step - 1) // self.every

    def is_checkpoint(self, step: int) -> bool:
        """True for a step after which a checkpoint is taken (0 counts: the initial state)."""
        return step == self.steps or (0 <= step <= self.steps and step % self.every == 0)

    def interval_leaves(self, c: int) -> int:
        """Leaves of interval c's tree: the state at checkpoint c, then one per step."""
        return len(self.interval_steps(c)) + 1

    def _check_checkpoint(self, c: int) -> None:
        if type(c) is not int or not 0 <= c <= self.intervals:
            raise LocalProtocolError(f"checkpoint {c!r} is outside 0..{self.intervals}")
