"""contracts/records.py mirrors the compiled contract's ABI by hand: this keeps the two equal.

Every event of the ABI has a record class with the same fields in the same order (Solidity
names in snake_case), every record class names an event that exists, and every struct
getter's components are the fields of its record. A change to the contract that the
records do not follow fails here, not in a node decoding a log.
"""
from __future__ import annotations

from dataclasses import fields

import pytest

from contracts import records
from contracts.artifacts import load_artifact
from contracts.records import EVENT_TYPES, _snake

ABI = load_artifact("GavelSettlement").abi
GETTERS = {"getNode": records.NodeInfo, "getJob": records.JobInfo, "getSeat": records.SeatInfo,
           "getDispute": records.DisputeInfo}


def _abi_events() -> dict[str, list[str]]:
    return {e["name"]: [_snake(i["name"]) for i in e["inputs"]] for e in ABI if e["type"] == "event"}


def test_every_event_has_its_record_and_every_record_its_event():
    assert sorted(EVENT_TYPES) == sorted(_abi_events())


@pytest.mark.parametrize("name", sorted(_abi_events()))
def test_event_fields_follow_the_abi(name):
    assert [f.name for f in fields(EVENT_TYPES[name])] == _abi_events()[name]


@pytest.mark.parametrize("getter", sorted(GETTERS))
def test_struct_records_follow_the_abi(getter):
    (entry,) = [e for e in ABI if e["type"] == "function" and e["name"] == getter]
    components = [_snake(c["name"]) for c in entry["outputs"][0]["components"]]
    assert [f.name for f in fields(GETTERS[getter])] == components
