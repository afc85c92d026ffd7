"""`gavel testnet --chaos --processes`: real node processes killed with SIGKILL and restarted,
the anvil chain killed and started afresh once, and the report's invariants checked."""
from __future__ import annotations

import json

import pytest

from contracts import find_anvil
from node.cli import testnet as testnet_cli
from node.testnet.invariants import INVARIANTS

pytestmark = [pytest.mark.slow, pytest.mark.anvil, pytest.mark.usefixtures("thread_limits_restored"),
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]


def test_a_chaos_run_of_processes_kills_restarts_and_keeps_its_invariants(tmp_path, capsys):
    out = tmp_path / "out"
    status = testnet_cli.testnet_main([
        "--processes", "--chaos", "--kills", "3", "--nodes", "2", "--cheaters", "0", "--auditors", "1",
        "--clients", "1", "--jobs", "2", "--steps", "2", "--accept-within", "15", "--commit-within", "30",
        "--challenge-within", "15", "--seed", "11", "--out", str(out), "--plain", "--json",
    ])
    printed = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    chaos = report["chaos"]
    # every planned fault fired on a live victim, each killed process is a real one and came back under a new pid
    node_faults = [f for f in chaos["faults"] if f["kind"] != "chain"]
    assert chaos["kills"] == 3 and len(node_faults) == 3, chaos["faults"]
    for fault in node_faults:
        assert fault["target"] and fault["pid"] and fault["new_pid"] not in (None, fault["pid"]), fault
        assert fault["restarted_at"] > fault["at"] and fault["recovery"], fault
    (chain,) = [f for f in chaos["faults"] if f["kind"] == "chain"]
    assert chain["restarted_at"] > chain["at"] and chain["new_pid"] != chain["pid"]
    (lost,) = chaos["lost_with_chain"]["segments"]  # the first chain, listed as lost by design
    assert lost["killed_at"] == chain["at"] and "unrecoverable by design" in lost["note"]
    # every invariant named, with its evidence; the balances read on both chains, around every kill
    checks = {c["name"]: c for c in chaos["invariants"]}
    assert tuple(checks) == INVARIANTS
    reads = checks["balance_sum"]["evidence"]["reads"]
    assert {r["chain"] for r in reads} == {0, 1} and len(reads) >= 2 * len(node_faults) + 3
    failures = {name: c["failures"] for name, c in checks.items() if not c["ok"]}
    assert not failures, failures
    assert chaos["invariants_ok"] and report["summary"]["invariants_ok"]
    assert status == testnet_cli.EXIT_OK and report["summary"]["ok"], report["summary"]["failures"]
    for name in INVARIANTS:
        assert f"invariant {name}: holds" in printed
    assert printed.count("] kill ") == 4
