"""A small testnet end to end: real nodes on loopback, the embedded EVM, real training and audits."""
from __future__ import annotations

import json

import pytest

from node.cli import testnet as testnet_cli

from .test_roles_support import advance_embedded_chain

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("thread_limits_restored")]


def test_a_small_in_process_testnet_catches_its_cheater_and_serves_every_client(tmp_path, capsys):
    # Earlier tests in the process move the shared embedded chain's clock: an hour ahead must not stall the run.
    advance_embedded_chain(3600)
    out = tmp_path / "out"
    status = testnet_cli.testnet_main([
        "--nodes", "2", "--cheaters", "1", "--auditors", "1", "--clients", "1", "--jobs", "2",
        "--steps", "4", "--checkpoint-every", "1", "--strategies", "perturb-weight",
        "--accept-within", "20", "--commit-within", "30", "--challenge-within", "15",
        "--seed", "3", "--out", str(out), "--plain", "--json",
    ])
    summary_line = capsys.readouterr().out.strip().splitlines()[-1]
    report = json.loads((out / "report.json").read_text())
    summary = report["summary"]
    assert json.loads(summary_line) == summary
    assert status == testnet_cli.EXIT_OK and summary["ok"], summary["failures"]
    # one job each: the cheater's is audited in full, disputed, slashed and refunded
    assert (summary["jobs_planned"], summary["jobs"], summary["jobs_settled"], summary["cheats"]) == (2, 2, 2, 1)
    assert summary["cheats_audited"] == summary["cheats_caught"] == 1 and summary["honest_slashed"] == 0
    assert summary["clients_served"] == 2 and summary["clients_refunded"] == 1
    (cheated,) = [j for j in report["jobs"] if any(not c["honest"] for c in j["commitments"])]
    (commit,) = cheated["commitments"]
    assert commit["provider"] == next(n["name"] for n in report["nodes"] if n["cheat"] == "perturb-weight")
    assert len(commit["corrupted_intervals"]) == 1 and commit["slashed"] and commit["predicted_catch"] == 1.0
    (dispute,) = report["disputes"]
    assert dispute["losers"] == [commit["provider"]] and dispute["rounds"] > 0 and dispute["bytes_to_referee"] > 0
    assert report["ledger_mismatches"] == []
    honest = next(j for j in report["jobs"] if j is not cheated)
    assert honest["client_outcome"] == "honest result" and honest["paid"]
    assert (out / "report.html").read_text().count("data:image/png;base64,") >= 4
