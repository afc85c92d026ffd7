"""Demands of data and their witnesses in GavelSettlementV2 (docs/economics.md, section 7).

GavelSettlementV2 runs these calls by delegatecall into its module GavelDemandsV2 (its fallback
sends their selectors there); `SettlementV2` mixes `DemandMovesV2` in and merges the module's ABI.

    d = s.connect(auditor).demand_data(job_id, seat, item).one(DataDemanded).demand_id  # locks D
    s.connect(auditor).release_demand(d)          # it got the item: D back
    s.connect(seat).call_witness(d)               # from serveBy for Δ: arms a witness's draw
    s.draw_witness(d)                             # from 3 blocks later (anyone)
    s.connect(witness).attest_served(d, True)     # f_W to the witness, the seat's calls paid from D
    s.fail_demand(d)                              # no witness, no draw, or every witness refused
    s.timeout_witness(d)                          # a silent witness's bond burned, another drawn

Items: 0 is the job's bundle, c + 1 is checkpoint c (c = 0..C).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .records import SettlementEvent, _FromAbi
from .settlement import _bytes32 as _b32

DEMANDS_CONTRACT_NAME = "GavelDemandsV2"

# Gas limits: about twice the most measured on the embedded EVM (scripts/bench_settlement.py);
# a draw probes up to 8 registry entries, failDemand and a served attestation pay up to
# MAX_DRAWS refusers.
GAS_LIMITS_DEMANDS: dict[str, int] = {
    "demandData": 400_000,
    "releaseDemand": 150_000,
    "callWitness": 150_000,
    "drawWitness": 600_000,  # 300k a draw whose PROBES looks and SCAN-long walk all miss (nodes short of stake)
    "attestServed": 550_000,  # 262k served: MAX_DRAWS − 1 refusers charged, the demand recorded for reimbursement
    "failDemand": 950_000,    # 460k: MAX_DRAWS refusers and MAX_REIMBURSED_DEMANDS demanders paid from the lock
    "timeoutWitness": 200_000,
}

BUNDLE = 0  # item 0; checkpoint c is item c + 1


def checkpoint_item(c: int) -> int:
    """The item number of checkpoint c."""
    return c + 1


class DemandStage(enum.IntEnum):
    NONE = 0
    OPEN = 1
    DRAWING = 2
    WITNESSING = 3
    REFUSED = 4
    RELEASED = 5
    SERVED = 6
    FAILED = 7
    VOID = 8


@dataclass(frozen=True)
class DemandInfo(_FromAbi):
    """`getDemand(id)`: `deadline` is serveBy (OPEN), the draw's deadline (DRAWING) or attestBy (WITNESSING)."""

    job_id: bytes
    seat: str
    item: int
    stage: DemandStage
    draws: int
    demander: str
    deadline: int
    witness: str
    armed_block: int
    bond: int


@dataclass(frozen=True)
class DataDemanded(SettlementEvent):
    EVENT_NAME = "DataDemanded"
    demand_id: bytes
    job_id: bytes
    seat: str
    demander: str
    item: int
    bond: int
    serve_by: int


@dataclass(frozen=True)
class DemandReleased(SettlementEvent):
    EVENT_NAME = "DemandReleased"
    demand_id: bytes


@dataclass(frozen=True)
class WitnessCalled(SettlementEvent):
    EVENT_NAME = "WitnessCalled"
    demand_id: bytes
    draw_block: int
    draws: int
    draw_by: int


@dataclass(frozen=True)
class WitnessDrawn(SettlementEvent):
    EVENT_NAME = "WitnessDrawn"
    demand_id: bytes
    witness: str
    attest_by: int


@dataclass(frozen=True)
class DemandAttested(SettlementEvent):
    EVENT_NAME = "DemandAttested"
    demand_id: bytes
    witness: str
    served: bool


@dataclass(frozen=True)
class WitnessTimedOut(SettlementEvent):
    EVENT_NAME = "WitnessTimedOut"
    demand_id: bytes
    witness: str
    burned: int


@dataclass(frozen=True)
class DemandFailed(SettlementEvent):
    EVENT_NAME = "DemandFailed"
    demand_id: bytes
    seat: str


@dataclass(frozen=True)
class DemandVoided(SettlementEvent):
    EVENT_NAME = "DemandVoided"
    demand_id: bytes


@dataclass(frozen=True)
class DemandReimbursed(SettlementEvent):
    """A forfeited seat's lock paid a demander back the D it paid for an item served only to a witness."""

    EVENT_NAME = "DemandReimbursed"
    job_id: bytes
    seat: str
    demander: str
    amount: int


DEMAND_EVENT_TYPES = (DataDemanded, DemandReleased, WitnessCalled, WitnessDrawn, DemandAttested, WitnessTimedOut,
                      DemandFailed, DemandVoided, DemandReimbursed)


class DemandMovesV2:
    """The calls and views of section 7 (mixed into SettlementV2: `_transact` and `_call` are its)."""

    def demand_data(self, job_id: bytes, seat: str, item: int):
        """Demands item `item` of `seat` (BUNDLE, or `checkpoint_item(c)`), locking D."""
        return self._transact("demandData", _b32(job_id), seat, item)

    def release_demand(self, demand_id: bytes):
        """The demander got the item: its bond back."""
        return self._transact("releaseDemand", _b32(demand_id))

    def call_witness(self, demand_id: bytes):
        """The seat, from serveBy for Δ: arms a witness's draw."""
        return self._transact("callWitness", _b32(demand_id))

    def draw_witness(self, demand_id: bytes):
        """Draws the demand's witness (anyone), or re-arms a draw whose seed block is out of reach."""
        return self._transact("drawWitness", _b32(demand_id))

    def attest_served(self, demand_id: bytes, served: bool):
        """The drawn witness's word on whether the seat served it the item."""
        return self._transact("attestServed", _b32(demand_id), served)

    def fail_demand(self, demand_id: bytes):
        """Forfeits a seat that did not serve (anyone, once its time is over)."""
        return self._transact("failDemand", _b32(demand_id))

    def timeout_witness(self, demand_id: bytes):
        """Burns a silent witness's bond and draws another (anyone)."""
        return self._transact("timeoutWitness", _b32(demand_id))

    def demand(self, demand_id: bytes) -> DemandInfo:
        (raw,) = self._call("getDemand", _b32(demand_id))
        return DemandInfo.from_abi(raw)

    def refusers_of(self, demand_id: bytes) -> tuple[str, ...]:
        """The witnesses that attested "not served", in order."""
        return tuple(self._call("refusersOf", _b32(demand_id))[0])

    def demand_bond_of(self, job_id: bytes) -> int:
        """D for this job (`protocol.economics.bonds(...).demand`)."""
        return self._call("demandBondOf", _b32(job_id))[0]


__all__ = [
    "BUNDLE", "DEMAND_EVENT_TYPES", "DEMANDS_CONTRACT_NAME", "DataDemanded", "DemandAttested", "DemandFailed",
    "DemandInfo", "DemandMovesV2", "DemandReimbursed", "DemandReleased", "DemandStage", "DemandVoided",
    "GAS_LIMITS_DEMANDS",
    "WitnessCalled", "WitnessDrawn", "WitnessTimedOut", "checkpoint_item",
]
