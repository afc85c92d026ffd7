"""contracts/settlement_v2.py mirrors GavelSettlementV2's ABI by hand: this keeps the two equal."""
from __future__ import annotations

from dataclasses import fields

import pytest

from contracts.records import _snake
from contracts.settlement_v2 import (
    EVENT_TYPES_V2, Deadlines, JobAllowances, JobInfo, JobTerms, SeatInfo, abi_entries_v2)
from contracts.settlement_v2_games import ClaimInfo
from contracts.settlement_v2_referees import RulingInfo, StepClaimInfo, StepGameInfo
from protocol.economics import Allowances

pytestmark = pytest.mark.settlement

ABI = abi_entries_v2()  # the contract's and its game module's
GETTERS = {"getJob": JobInfo, "getSeat": SeatInfo, "deadlinesOf": Deadlines, "allowancesOf": Allowances,
           "getClaim": ClaimInfo, "getRuling": RulingInfo, "getStepGame": StepGameInfo, "getStepClaim": StepClaimInfo}


def _abi_events() -> dict[str, list[str]]:
    return {e["name"]: [_snake(i["name"]) for i in e["inputs"]] for e in ABI if e["type"] == "event"}


def _function(name: str) -> dict:
    (entry,) = [e for e in ABI if e["type"] == "function" and e["name"] == name]
    return entry


def test_every_event_has_its_record_and_every_record_its_event():
    assert sorted(EVENT_TYPES_V2) == sorted(_abi_events())


@pytest.mark.parametrize("name", sorted(_abi_events()))
def test_event_fields_follow_the_abi(name):
    assert [f.name for f in fields(EVENT_TYPES_V2[name])] == _abi_events()[name]


@pytest.mark.parametrize("getter", sorted(GETTERS))
def test_struct_records_follow_the_abi(getter):
    components = [_snake(c["name"]) for c in _function(getter)["outputs"][0]["components"]]
    assert [f.name for f in fields(GETTERS[getter])] == components


def test_terms_and_stored_allowances_follow_the_abi():
    terms = _function("openJob")["inputs"][0]["components"]
    assert [f.name for f in fields(JobTerms)] == [_snake(c["name"]) for c in terms]
    (allowed,) = [c for c in _function("getJob")["outputs"][0]["components"] if c["name"] == "allowed"]
    assert [f.name for f in fields(JobAllowances)] == [_snake(c["name"]) for c in allowed["components"]]
