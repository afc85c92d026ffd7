"""`gavel testnet --settlement 2 --processes`: every provider and auditor its own `gavel node start`
process and every job its own `gavel submit` (a client playing settlement 2), on one anvil chain
running GavelSettlementV2: what a user runs, node by node. The cheaters forfeit their seats, the
honest are paid, and the report's money is the ledger's, read from the contract's events and checked
against the contract's own reads before the chain stops."""
from __future__ import annotations

import json
import os

import pytest

from contracts import find_anvil
from node.cli import testnet as testnet_cli

pytestmark = [pytest.mark.slow, pytest.mark.anvil, pytest.mark.usefixtures("thread_limits_restored"),
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]

# strategies the roles end without a game, each by a forfeit the contract records
EXPECTED_FORFEIT = {"silent-seat": "NO_REVEAL", "copy-root": "NO_REVEAL"}


def test_a_v2_testnet_of_processes_makes_its_cheaters_forfeit_and_pays_the_honest(tmp_path, capsys):
    out = tmp_path / "out"
    status = testnet_cli.testnet_main([
        "--settlement", "2", "--processes", "--strategies", ",".join(EXPECTED_FORFEIT), "--nodes", "2",
        "--auditors", "1", "--clients", "1", "--jobs", "1", "--steps", "3", "--seed", "23",
        "--out", str(out), "--plain", "--json",
    ])
    printed = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["mode"] == "processes" and report["config"]["chain"] == "anvil"
    # every node was a process of its own (and none of them this one)
    pids = [n["pid"] for n in report["nodes"]]
    assert all(pids) and len(set(pids)) == len(pids) and os.getpid() not in pids
    # each job went in through a `gavel submit` whose client played version 2 to the end
    clients = [n["name"] for n in report["nodes"] if n["role"] == "client"]
    assert len(clients) == len(report["jobs"]) == report["summary"]["jobs_settled"] == len(EXPECTED_FORFEIT)
    for name in clients:
        config = (out / "nodes" / name / "config.toml").read_text()
        assert 'settlement = "2"' in config, name
    for job in report["jobs"]:
        assert job["status"] == "FINALIZED", job
        assert (job["client_result"] or {}).get("result_from"), job  # its client holds a checked result
    assert sorted(c["strategy"] for c in report["cheats"]) == sorted(EXPECTED_FORFEIT)
    for cheat in report["cheats"]:
        assert cheat["caught"] and cheat["forfeit"] == EXPECTED_FORFEIT[cheat["strategy"]], cheat
    for job in report["jobs"]:
        for seat in job["seats"]:
            if not seat["cheater"]:
                assert seat["paid"] > 0 and seat["root_honest"] is True, seat
    parties = report["parties"]
    assert all(p["net_wei"] < 0 for p in parties if p["cheater"] and p["role"] == "provider")
    assert all(p.get("net_beyond_results_wei", p["net_wei"]) >= 0 for p in parties if not p["cheater"])
    assert report["ledger_mismatches"] == []
    assert report["summary"]["ok"], report["summary"]["failures"]
    assert status == testnet_cli.EXIT_OK and "HELD" in printed
