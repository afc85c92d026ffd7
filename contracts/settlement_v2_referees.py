"""Rulings, drawn referees and appeals of GavelSettlementV2 (docs/economics.md, section 9).

GavelSettlementV2 runs these calls by delegatecall into its module GavelRefereesV2 (its fallback
sends their selectors there, every other one to GavelGamesV2); `SettlementV2` mixes
`RefereeMovesV2` in and merges the module's ABI into its own.

    s.connect(client).rule(node_claim, defender_right, transcript_hash)      # the first ruling
    s.connect(watcher).appeal(node_claim)                                    # locks A, arms a draw
    s.draw_referee(node_claim)                                               # from 3 blocks later
    s.connect(drawn).rule_appeal(node_claim, defender_right, transcript_hash)
    s.timeout_referee(node_claim)                                            # a silent referee's bond burned

The fourth level (docs/onchain-step.md), on a job whose terms carry an elementSpecRoot:

    opened = s.connect(auditor).open_step_game(node_claim, setup, proofs, defender)   # a duel on OneStepVerifier
    game_id = opened.one(StepGameOpened).id          # played there (contracts.step_verifier), then
    s.settle_step_game(game_id)                      # settlement_v2_games: the duel's money
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.element_specs import StepGameProofs
from protocol.step_game import StepSetup

from .records import SettlementEvent, _FromAbi

REFEREES_CONTRACT_NAME = "GavelRefereesV2"
REFEREE_FUNCTIONS = ("rule", "appeal", "drawReferee", "ruleAppeal", "timeoutReferee", "getRuling", "openStepGame",
                     "getStepGame", "getStepClaim")

# Gas limits: about twice the most measured on the embedded EVM (scripts/bench_settlement.py);
# a draw probes up to 8 registry entries.
GAS_LIMITS_REFEREES: dict[str, int] = {
    "rule": 120_000,
    "appeal": 200_000,
    "drawReferee": 600_000,  # 300k a draw whose PROBES looks and SCAN-long walk all miss (nodes short of stake)
    "ruleAppeal": 300_000,
    "timeoutReferee": 200_000,
    "openStepGame": 1_000_000,  # OneStepVerifier's open, the spec and tensor proofs: 0.41M (mlp's relu), 0.42M (matmul)
}


class AppealStage(enum.IntEnum):
    NONE = 0
    OPEN = 1
    ENDED = 2


@dataclass(frozen=True)
class RulingInfo(_FromAbi):
    """`getRuling(claimId)`: a node claim's referees (zeros before any ruling or draw)."""

    referee: str
    armed_block: int
    draws: int
    referees_out: bool
    overturned: bool
    appeal: AppealStage
    ruler: str
    appeal_by: int
    appellant: str
    appeal_rule_by: int
    appeal_referee: str


@dataclass(frozen=True)
class StepGameInfo(_FromAbi):
    """`getStepGame(id)`: a duel of the fourth level by OneStepVerifier's game id (zeros: not the settlement's)."""

    claim_id: bytes
    challenger: str
    step_by: int
    defender: str
    settled: bool
    depth: int  # levels of its trace tree: the bond is B_node + γ·G_duel(depth)


@dataclass(frozen=True)
class StepClaimInfo(_FromAbi):
    """`getStepClaim(claimId)`: a node claim's duels (zeros: none, the claim is the referees')."""

    games: int
    open: int
    upheld: bool


@dataclass(frozen=True)
class ClaimRuled(SettlementEvent):
    EVENT_NAME = "ClaimRuled"
    claim_id: bytes
    referee: str
    defender_right: bool
    transcript_hash: bytes
    appeal_by: int


@dataclass(frozen=True)
class RefereeDrawArmed(SettlementEvent):
    EVENT_NAME = "RefereeDrawArmed"
    claim_id: bytes
    draw_block: int
    draws: int


@dataclass(frozen=True)
class RefereeDrawn(SettlementEvent):
    EVENT_NAME = "RefereeDrawn"
    claim_id: bytes
    referee: str
    appeal: bool
    rule_by: int


@dataclass(frozen=True)
class RefereeTimedOut(SettlementEvent):
    EVENT_NAME = "RefereeTimedOut"
    claim_id: bytes
    referee: str
    burned: int


@dataclass(frozen=True)
class RefereesExhausted(SettlementEvent):
    EVENT_NAME = "RefereesExhausted"
    claim_id: bytes
    appeal: bool


@dataclass(frozen=True)
class AppealOpened(SettlementEvent):
    EVENT_NAME = "AppealOpened"
    claim_id: bytes
    appellant: str
    bond: int
    draw_block: int


@dataclass(frozen=True)
class AppealRuled(SettlementEvent):
    EVENT_NAME = "AppealRuled"
    claim_id: bytes
    referee: str
    defender_right: bool
    transcript_hash: bytes
    overturned: bool


@dataclass(frozen=True)
class AppealSettled(SettlementEvent):
    EVENT_NAME = "AppealSettled"
    claim_id: bytes
    loser: str
    amount: int
    to_appellant: int
    to_referee: int
    to_favoured: int
    burned: int


@dataclass(frozen=True)
class StepGameOpened(SettlementEvent):
    EVENT_NAME = "StepGameOpened"
    claim_id: bytes
    id: int
    challenger: str
    defender: str
    clock: int
    step_by: int
    setup: tuple  # OneStepVerifier.Setup as opened, decoded as the call's argument is (`duels.setup_of`)


REFEREE_EVENT_TYPES = (ClaimRuled, RefereeDrawArmed, RefereeDrawn, RefereeTimedOut, RefereesExhausted, AppealOpened,
                       AppealRuled, AppealSettled, StepGameOpened)


def _b32(value: bytes) -> bytes:
    if len(value) != 32:
        raise ValueError(f"expected 32 bytes, got {len(value)}")
    return bytes(value)


class RefereeMovesV2:
    """The calls and views of section 9 (mixed into SettlementV2: `_transact` and `_call` are its)."""

    def rule(self, claim_id: bytes, defender_right: bool, transcript_hash: bytes):
        """The first verdict on a node claim, by the referee holding it (the client, or a drawn one)."""
        return self._transact("rule", _b32(claim_id), defender_right, _b32(transcript_hash))

    def appeal(self, claim_id: bytes):
        """Appeals the claim's ruling before its appealBy, locking A; arms the appeal referee's draw."""
        return self._transact("appeal", _b32(claim_id))

    def draw_referee(self, claim_id: bytes):
        """Draws the referee the claim or its appeal lacks, or arms (re-arms) the draw (anyone)."""
        return self._transact("drawReferee", _b32(claim_id))

    def rule_appeal(self, claim_id: bytes, defender_right: bool, transcript_hash: bytes):
        """The drawn appeal referee's final verdict."""
        return self._transact("ruleAppeal", _b32(claim_id), defender_right, _b32(transcript_hash))

    def timeout_referee(self, claim_id: bytes):
        """Burns the bond of a referee past its allowance and arms the next draw (anyone)."""
        return self._transact("timeoutReferee", _b32(claim_id))

    def open_step_game(self, claim_id: bytes, setup: StepSetup, proofs: StepGameProofs, defender: str):
        """Opens a duel of the fourth level on the node claim against `defender` (a seat covering its node
        list), locking B_node: `setup` is the game's (this claimant's output first), `proofs` place its
        tensors in the node list and its spec in the terms' elementSpecRoot (`protocol.element_specs`)."""
        return self._transact("openStepGame", _b32(claim_id), setup.as_abi(), proofs.as_abi(), defender)

    def step_game(self, game_id: int) -> StepGameInfo:
        (raw,) = self._call("getStepGame", game_id)
        return StepGameInfo.from_abi(raw)

    def step_game_bond(self, job_id: bytes, length: int) -> int:
        """`stepGameBondOf(jobId, length)`: what a duel on a setup of `length` steps locks (wei)."""
        (bond,) = self._call("stepGameBondOf", _b32(job_id), length)
        return bond

    def step_claim(self, claim_id: bytes) -> StepClaimInfo:
        (raw,) = self._call("getStepClaim", _b32(claim_id))
        return StepClaimInfo.from_abi(raw)

    def ruling(self, claim_id: bytes) -> RulingInfo:
        (raw,) = self._call("getRuling", _b32(claim_id))
        return RulingInfo.from_abi(raw)

    def referees(self) -> tuple[str, ...]:
        """The registry the draws probe, in index order."""
        return tuple(self._call("referees")[0])


__all__ = [
    "AppealOpened", "AppealRuled", "AppealSettled", "AppealStage", "ClaimRuled", "GAS_LIMITS_REFEREES",
    "REFEREE_EVENT_TYPES", "REFEREE_FUNCTIONS", "REFEREES_CONTRACT_NAME", "RefereeDrawArmed", "RefereeDrawn",
    "RefereeMovesV2", "RefereeTimedOut", "RefereesExhausted", "RulingInfo", "StepClaimInfo", "StepGameInfo",
    "StepGameOpened",
]
