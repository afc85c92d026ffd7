"""The claim game of GavelSettlementV2 (docs/economics.md, section 8), as the Python client sees it.

GavelSettlementV2 runs these moves by delegatecall into its module GavelGamesV2, so they are
called on the settlement's own address; `SettlementV2` mixes `GameMovesV2` in and merges the
module's ABI into its own. Records here mirror the module's structs and events.

    game = s.connect(auditor).open_game(job_id, root, c).one(GameOpened).game_id
    s.connect(seat).post_steps(game, steps, proof_from, proof_to)
    claim = s.connect(auditor).pick_step(game, steps_root, step).one(ClaimPicked).claim_id
    s.connect(seat).post_nodes(claim, nodes, proof)
    node_claim = s.connect(auditor).pick_node(claim, nodes_root, n).one(ClaimPicked).claim_id
    s.connect(seat).post_evidence(node_claim, evidence_hash)
    s.connect(client).rule(node_claim, defender_right, transcript_hash)   # settlement_v2_referees
    s.timeout(node_claim); s.timeout(claim); s.resolve_game(game)
    s.settle_step_game(game_id)   # a duel of the fourth level (settlement_v2_referees' open_step_game), once decided
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.economics import Bonds
from protocol.statements import SeatStatement, SignedStatement

from .records import SettlementEvent, _FromAbi

GAMES_CONTRACT_NAME = "GavelGamesV2"
INTERVAL, STEP, NODE = 0, 1, 2

# Gas limits of the moves: about twice the most measured on the embedded EVM with one seat
# (scripts/bench_settlement.py); timeouts loop over the seats (MAX_PROVIDERS at most).
GAS_LIMITS_GAMES: dict[str, int] = {
    "openGame": 500_000,      # 247k
    "postSteps": 3_000_000,   # 104k + 1.2k an entry: 1.3M at MAX_LIST
    "endorse": 150_000,
    "pickStep": 500_000,      # 239k
    "postNodes": 3_000_000,   # 652k at N = 471
    "pickNode": 450_000,      # 210k
    "postEvidence": 160_000,  # 75k
    "timeout": 1_500_000,      # node, LostGame: 205k; 458k with MAX_REIMBURSED_DEMANDS demanders paid back
    "resolveGame": 1_500_000,  # SilentDefender: 153k; 409k, the same
    "slashEquivocation": 800_000,   # 388k with MAX_REIMBURSED_DEMANDS demanders paid back from the lock
    "slashContradiction": 800_000,  # 381k, the same
    "settleStepGame": 1_500_000,    # a won duel, the defender forfeiting: 0.21M (loops over the seats, as timeout)
}


class ClaimStatus(enum.IntEnum):
    NONE = 0
    OPEN = 1
    FAILED = 2
    VOID = 3
    UPHELD = 4


@dataclass(frozen=True)
class ClaimInfo(_FromAbi):
    """A claim as stored; the interval claim's id is its game's, and its parent is the job id."""

    game_id: bytes
    parent: bytes
    list_root: bytes
    author: str
    level: int
    status: ClaimStatus
    upheld_child: bool
    void_child: bool
    ruled: bool
    defender_right: bool
    reimbursed: bool
    index: int
    open_children: int
    answer_by: int
    pick_until: int
    rule_by: int
    first_nodes_by: int
    bond: int


@dataclass(frozen=True)
class GameOpened(SettlementEvent):
    EVENT_NAME = "GameOpened"
    game_id: bytes
    job_id: bytes
    trace_root: bytes
    interval: int
    opener: str
    steps_by: int


@dataclass(frozen=True)
class ClaimPicked(SettlementEvent):
    EVENT_NAME = "ClaimPicked"
    claim_id: bytes
    parent: bytes
    author: str
    level: int
    list_root: bytes
    index: int
    answer_by: int


@dataclass(frozen=True)
class ClaimJoined(SettlementEvent):
    EVENT_NAME = "ClaimJoined"
    claim_id: bytes
    account: str


@dataclass(frozen=True)
class ListPosted(SettlementEvent):
    EVENT_NAME = "ListPosted"
    claim_id: bytes
    seat: str
    list_root: bytes
    entries: tuple[bytes, ...]  # the list itself (`SettlementV2.posted_list` checks it)


@dataclass(frozen=True)
class ListEndorsed(SettlementEvent):
    EVENT_NAME = "ListEndorsed"
    claim_id: bytes
    seat: str
    list_root: bytes


@dataclass(frozen=True)
class EvidencePosted(SettlementEvent):
    EVENT_NAME = "EvidencePosted"
    claim_id: bytes
    seat: str
    evidence_hash: bytes
    rule_by: int


@dataclass(frozen=True)
class PathReimbursed(SettlementEvent):
    EVENT_NAME = "PathReimbursed"
    claim_id: bytes
    amount: int


@dataclass(frozen=True)
class ClaimResolved(SettlementEvent):
    EVENT_NAME = "ClaimResolved"
    claim_id: bytes
    outcome: ClaimStatus


@dataclass(frozen=True)
class BondForfeited(SettlementEvent):
    EVENT_NAME = "BondForfeited"
    claim_id: bytes
    author: str
    bond: int
    to_referee: int
    to_each: int
    seats: int
    burned: int


@dataclass(frozen=True)
class StepGameSettled(SettlementEvent):
    """A duel of the fourth level settled; `outcome` is OneStepVerifier's (protocol.step_game.OUTCOME_CODES)."""

    EVENT_NAME = "StepGameSettled"
    claim_id: bytes
    id: int
    outcome: int
    challenger: str
    defender: str


@dataclass(frozen=True)
class EquivocationSlashed(SettlementEvent):
    EVENT_NAME = "EquivocationSlashed"
    job_id: bytes
    seat: str
    reporter: str
    kind: int
    index: int


GAME_EVENT_TYPES = (EquivocationSlashed, GameOpened, ClaimPicked, ClaimJoined, ListPosted, ListEndorsed, EvidencePosted,
                    ClaimResolved, BondForfeited, PathReimbursed, StepGameSettled)


def _b32(value: bytes) -> bytes:
    if len(value) != 32:
        raise ValueError(f"expected 32 bytes, got {len(value)}")
    return bytes(value)


def _hashes(values) -> list[bytes]:
    return [_b32(v) for v in values]


def _statement(statement: SeatStatement) -> tuple:
    if not isinstance(statement, SeatStatement):
        raise TypeError("only seat statements are slashable on chain")
    return (statement.job_id, statement.seat, statement.kind, statement.index, statement.value)


class GameMovesV2:
    """The moves and views of section 8 (mixed into SettlementV2: `_transact` and `_call` are its)."""

    def open_game(self, job_id: bytes, root: bytes, interval: int):
        """Opens the game on `interval` of `root` with bond B_open, or joins it."""
        return self._transact("openGame", _b32(job_id), _b32(root), interval)

    def post_steps(self, game_id: bytes, steps, proof_from, proof_to):
        """Posts the interval's k_c + 1 state hashes with proofs of both ends against the root."""
        return self._transact("postSteps", _b32(game_id), _hashes(steps), _hashes(proof_from), _hashes(proof_to))

    def endorse(self, claim_id: bytes, list_root: bytes):
        """Covers this seat with a list another seat posted under the claim."""
        return self._transact("endorse", _b32(claim_id), _b32(list_root))

    def pick_step(self, game_id: bytes, list_root: bytes, step: int):
        """Claims step `step` of the steps list is wrong (bond B_step), or joins that claim."""
        return self._transact("pickStep", _b32(game_id), _b32(list_root), step)

    def post_nodes(self, claim_id: bytes, nodes, proof):
        """Posts the step's N node-output hashes and the state after it (proven against the steps list)."""
        return self._transact("postNodes", _b32(claim_id), _hashes(nodes), _hashes(proof))

    def pick_node(self, step_claim_id: bytes, node_root: bytes, node: int):
        """Claims node `node` of the node list is wrong (bond B_node), or joins that claim."""
        return self._transact("pickNode", _b32(step_claim_id), _b32(node_root), node)

    def post_evidence(self, claim_id: bytes, evidence_hash: bytes):
        """Records that this seat sent its evidence to the referee."""
        return self._transact("postEvidence", _b32(claim_id), _b32(evidence_hash))

    def timeout(self, claim_id: bytes):
        """Ends a step or node claim whose deadlines passed (anyone)."""
        return self._transact("timeout", _b32(claim_id))

    def settle_step_game(self, game_id: int):
        """Settles a duel of the fourth level once OneStepVerifier decided it, or from its stepBy (anyone)."""
        return self._transact("settleStepGame", game_id)

    def resolve_game(self, game_id: bytes):
        """Ends a game once its deadlines passed and its claims ended (anyone)."""
        return self._transact("resolveGame", _b32(game_id))

    def slash_equivocation(self, a: SignedStatement, b: SignedStatement):
        """Slashes the seat that signed both (same job, kind and index, different values); w·S to the caller."""
        return self._transact("slashEquivocation", _statement(a.statement), a.signature,
                              _statement(b.statement), b.signature)

    def slash_contradiction(self, signed: SignedStatement):
        """Slashes the seat whose signed list is not the one the chain holds for it; w·S to the caller."""
        return self._transact("slashContradiction", _statement(signed.statement), signed.signature)

    def statement_digest(self, statement: SeatStatement) -> bytes:
        """The EIP-712 digest the contract recovers from (protocol.statements.digest computes it too)."""
        return self._call("statementDigest", _statement(statement))[0]

    def claim(self, claim_id: bytes) -> ClaimInfo:
        (raw,) = self._call("getClaim", _b32(claim_id))
        return ClaimInfo.from_abi(raw)

    def answer_of(self, claim_id: bytes, seat: str) -> bytes:
        return self._call("answerOf", _b32(claim_id), seat)[0]

    def busy_until(self, job_id: bytes, root: bytes) -> int:
        return self._call("busyUntil", _b32(job_id), _b32(root))[0]

    def bonds_of(self, job_id: bytes) -> Bonds:
        """`bondsOf(jobId)` and `demandBondOf(jobId)`: every field of `protocol.economics.Bonds`."""
        open_game, pick_step, pick_node, referee, appeal = self._call("bondsOf", _b32(job_id))[0]
        demand = self._call("demandBondOf", _b32(job_id))[0]
        return Bonds(open_game=open_game, pick_step=pick_step, pick_node=pick_node, referee=referee, demand=demand,
                     appeal=appeal)


__all__ = [
    "BondForfeited", "ClaimInfo", "EquivocationSlashed", "ClaimJoined", "ClaimPicked", "ClaimResolved", "ClaimStatus",
    "EvidencePosted", "GAME_EVENT_TYPES", "GAMES_CONTRACT_NAME", "GAS_LIMITS_GAMES", "GameMovesV2", "GameOpened",
    "ListEndorsed", "ListPosted", "PathReimbursed", "NODE", "STEP", "INTERVAL", "StepGameSettled",
]
