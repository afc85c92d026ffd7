"""report.html, its figures, the catch-rate section and the progress lines, from a judged run."""
from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from types import SimpleNamespace

from contracts import Outcome
from node.testnet.display import LiveDisplay, status_line
from node.testnet.html import render_html, write_html
from node.testnet.plan import TestnetOptions, make_plan
from node.testnet.report import Audit, build_report
from node.testnet.sweep import catch_section, samples_for, trials
from node.testnet.truth import ReplayedRun

from .test_testnet_report import AUDITOR, C, CHEAT, HONEST, NODES, Chain, h, observed

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(audit_rate: float, caught: list[bool]) -> dict:
    """A judged run at one audit rate: one single-provider cheating job per entry of ``caught``."""
    chain = Chain()
    jobs, results, replays, audits = {}, {}, {}, []
    m = samples_for(audit_rate, C)
    for i, slashed in enumerate(caught):
        jid = chain.job(f"r{audit_rate} j{i}", {CHEAT: f"cheat {i}"})
        if slashed:
            chain.dispute(jid, i + 1, AUDITOR, CHEAT, Outcome.CHALLENGER_WINS, loser=CHEAT, winner=AUDITOR,
                          bond=10**18)
        chain.settle(jid, [] if slashed else [CHEAT])
        jobs[jid], results[jid] = f"r{audit_rate} j{i}", None if slashed else f"cheat {i}"
        replays[(jid, CHEAT)] = ReplayedRun(h("x"), (), (C - 1,), 0.1)
        sample = (C - 1,) + tuple(range(m - 1)) if slashed else tuple(range(m))
        audits.append(Audit("auditor-00", jid, CHEAT, "challenged" if slashed else "ok", C, sample))
    obs = observed(chain, jobs, results, replays=replays, audits=audits)
    return build_report(obs, config={"audit_rate": audit_rate, "accept_within": 30, "commit_within": 60,
                                     "challenge_within": 30, "command": "gavel testnet --sweep"}, timings={})


def test_catch_section_counts_trials_against_the_sampling_arithmetic():
    reports = [_run(0.25, [True] * 3 + [False] * 9), _run(0.75, [True] * 9 + [False] * 3)]
    assert len(trials(reports[0])) == 12
    catch = catch_section(reports)
    low, high = catch["points"][0], catch["points"][1]
    assert (low["trials"], low["caught"], low["samples"]) == (12, 3, [2])
    assert low["predicted"] == 0.25 and high["predicted"] == 0.75  # one corrupted interval of 8: m / C
    assert low["ci_low"] < 0.25 < low["ci_high"] and low["agrees"] and high["agrees"]
    assert catch["agree"] == catch["rated"] == 2
    # the curve is the same arithmetic: m = ceil(rate * C), at least 1
    rates, predicted = catch["curve"]["rates"], catch["curve"]["predicted"]
    assert predicted[rates.index(0.0)] == 1 / C and predicted[rates.index(0.5)] == 0.5 and predicted[-1] == 1.0
    # a run whose catches disagree with the arithmetic is flagged
    off = catch_section([_run(0.25, [True] * 12)])
    assert off["points"][0]["agrees"] is False


def test_report_html_embeds_every_figure_as_png(tmp_path):
    chain = Chain()
    jid = chain.job("fig", {HONEST: "fig honest", CHEAT: "fig cheat"})
    chain.dispute(jid, 1, HONEST, CHEAT, Outcome.CHALLENGER_WINS, loser=CHEAT, winner=HONEST)
    chain.settle(jid, [HONEST])
    obs = observed(chain, {jid: "fig"}, {jid: "fig honest"},
                   replays={(jid, CHEAT): ReplayedRun(h("x"), (), (2,), 0.1)}, verdicts={1: {"rounds": 9, "bytes_to_referee": 4096}})
    report = build_report(obs, config={"audit_rate": 1.0, "command": "gavel testnet"}, timings={})
    report["catch"] = catch_section([_run(0.5, [True, False, True, True])])
    path = write_html(report, tmp_path)
    text = path.read_text()
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    assert len(images) == 5  # catch rate, timeline, settle times, disputes, balances
    assert all(base64.b64decode(data).startswith(PNG_MAGIC) for data in images)
    assert "<b>ok</b>" in text and "provider-01" in text and "gavel testnet" in text
    failed = dict(report, summary=dict(report["summary"], ok=False, failures=["honest node x slashed"]))
    assert "FAILED" in render_html(failed) and "honest node x slashed" in render_html(failed)


def test_plain_progress_lines_report_counts_from_the_ledger(tmp_path):
    chain = Chain()
    jid = chain.job("p", {CHEAT: "p cheat"})
    chain.dispute(jid, 1, AUDITOR, CHEAT, Outcome.CHALLENGER_WINS, loser=CHEAT, winner=AUDITOR, bond=10**18)
    plan = make_plan(TestnetOptions(nodes=2, cheaters=1, jobs=1, clients=1), Path(tmp_path))
    infos = {n.name: n for n in NODES}
    network = SimpleNamespace(plan=plan, ledger=chain.ledger, submissions=[], phase="running jobs", infos=infos,
                              names={n.account: n.name for n in NODES}, now=lambda: 12.5)
    line = status_line(network)
    assert "jobs 0/1 submitted, 1 opened, 0 settled" in line and "disputes 0 open, 1 settled" in line
    assert "slashes 1" in line
    stream = io.StringIO()
    with LiveDisplay(stream, live=False, plain_interval=0) as display:
        display.update(network)
        display.update(network)  # nothing changed: no second line
    assert stream.getvalue().count("\n") == 1
    live = LiveDisplay(io.StringIO(), live=True)
    rendered = live.render(network)  # the rich table: one row per node
    assert rendered is not None
