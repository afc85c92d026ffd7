"""Judging a run: the summary's counts follow from the chain's events and the recomputed truth."""
from __future__ import annotations

import hashlib
import json

from contracts import (
    ETHER, DisputeOpened, DisputeRuled, JobAdvanced, JobOpened, JobStatus, LoggedEvent, Outcome, ProviderAccepted,
    ProviderPaid, StakeSlashed, StakeUnlocked, TraceCommitted, ClientRefunded,
)
from protocol import catch_probability
from node.testnet.ledger import Ledger
from node.testnet.report import (
    Audit, NodeInfo, Observed, Submission, audit_from_entry, build_report, summarize, write_report,
)
from node.testnet.truth import HonestRun, ReplayedRun

CLIENT, HONEST, CHEAT, AUDITOR = (f"0x{i:040x}" for i in (1, 2, 3, 4))
PRICE, SEAT = 2 * ETHER, ETHER
C = 8


def h(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


class Chain:
    """Events as the contract would emit them, one transaction per call."""

    def __init__(self) -> None:
        self.ledger = Ledger()
        self.block = 0
        self.t = 0.0

    def tx(self, *events) -> None:
        self.block += 1
        self.t += 1.0
        tx_hash = h(f"tx {self.block}")
        self.ledger.feed([LoggedEvent(e, self.block, tx_hash, i) for i, e in enumerate(events)], self.t)

    def job(self, label: str, commits: dict[str, str]) -> bytes:
        jid = h(label)
        self.tx(JobOpened(jid, CLIENT, CLIENT, PRICE, SEAT, len(commits), 10, 20, 30, 5))
        for provider in commits:
            self.tx(ProviderAccepted(jid, provider, SEAT))
        for provider, root in commits.items():
            self.tx(TraceCommitted(jid, provider, h(root)))
        return jid

    def dispute(self, jid: bytes, dispute_id: int, challenger: str, respondent: str, outcome: Outcome,
                loser: str, winner: str, bond: int = 0) -> None:
        self.tx(DisputeOpened(dispute_id, jid, challenger, respondent, bond, 99))
        self.tx(DisputeRuled(dispute_id, outcome, 3, 9, h("transcript")),
                StakeSlashed(jid, loser, SEAT, winner, SEAT // 2, SEAT // 2))

    def settle(self, jid: bytes, paid: list[str], others: list[str] = ()) -> None:
        events = [JobAdvanced(jid, JobStatus.FINALIZED if paid else JobStatus.REFUNDED)]
        for p in paid:
            events += [StakeUnlocked(jid, p, SEAT), ProviderPaid(jid, p, PRICE // len(paid))]
        if not paid:
            events.append(ClientRefunded(jid, CLIENT, PRICE))
        self.tx(*events)


NODES = [NodeInfo("provider-00", "provider", HONEST, "p0"), NodeInfo("provider-01", "provider", CHEAT, "p1", "skip-step", 1.0),
         NodeInfo("auditor-00", "auditor", AUDITOR, "a0"), NodeInfo("client-00", "client", CLIENT, "c0")]


def honest(label: str) -> HonestRun:
    return HonestRun(tuple(h(f"{label} state {c}") for c in range(C + 1)), h(f"{label} honest"), 0.1)


def observed(chain: Chain, jobs: dict[bytes, str], results: dict[bytes, str | None], **kw) -> Observed:
    subs = [Submission(i, "client-00", f"job-{i}.toml", 0.5, jid, result=(
        {"trace_root": h(results[jid]).hex()} if results.get(jid) else None)) for i, jid in enumerate(jobs)]
    return Observed(NODES, subs, chain.ledger, {jid: honest(label) for jid, label in jobs.items()}, **kw)


def replay(corrupted: tuple[int, ...]) -> ReplayedRun:
    return ReplayedRun(h("x"), (), corrupted, 0.1)


def test_a_disputed_cheat_is_caught_and_the_client_gets_the_honest_result():
    chain = Chain()
    jid = chain.job("a", {HONEST: "a honest", CHEAT: "a cheat"})
    chain.dispute(jid, 1, HONEST, CHEAT, Outcome.CHALLENGER_WINS, loser=CHEAT, winner=HONEST)
    chain.settle(jid, [HONEST])
    obs = observed(chain, {jid: "a"}, {jid: "a honest"}, replays={(jid, CHEAT): replay((2,))})
    s = summarize(obs)
    assert (s["cheats"], s["cheats_audited"], s["cheats_caught"], s["honest_slashed"]) == (1, 1, 1, 0)
    assert (s["clients_served"], s["clients_unserved"], s["ok"]) == (1, 0, True)


def test_a_cheat_no_sample_reached_is_a_missed_client_not_a_failure():
    chain = Chain()
    jid = chain.job("b", {CHEAT: "b cheat"})
    chain.settle(jid, [CHEAT])
    audit = Audit("auditor-00", jid, CHEAT, "ok", C, (0, 1), "replayed intervals [0, 1]")
    obs = observed(chain, {jid: "b"}, {jid: "b cheat"}, replays={(jid, CHEAT): replay((5,))}, audits=[audit])
    s = summarize(obs)
    assert (s["cheats"], s["cheats_audited"], s["cheats_unaudited"], s["clients_missed"]) == (1, 0, 1, 1)
    assert s["unaudited_reasons"] == {"sampled out": 1} and s["cheats_sampled_out"] == 1
    assert s["ok"] is True
    report = build_report(obs, config={}, timings={})
    (commit,) = report["jobs"][0]["commitments"]
    assert commit["predicted_catch"] == float(catch_probability(C, 1, 2)) == 0.25
    assert commit["audited"] is False and report["jobs"][0]["client_outcome"] == "missed cheat"
    assert commit["unaudited_reason"] == "sampled out"


def _unaudited_cheat(audits: list[Audit]) -> dict:
    chain = Chain()
    jid = chain.job("u", {CHEAT: "u cheat"})
    chain.settle(jid, [CHEAT])
    for a in audits:
        a.job_id = jid
    return summarize(observed(chain, {jid: "u"}, {jid: "u cheat"}, replays={(jid, CHEAT): replay((5,))},
                              audits=audits))


def test_a_cheat_nobody_audited_fails_the_run_with_its_reason():
    s = _unaudited_cheat([])
    assert (s["cheats_unaudited"], s["cheats_sampled_out"], s["clients_missed"]) == (1, 0, 0)
    assert s["unaudited_reasons"] == {"no auditor audited it": 1} and s["ok"] is False
    assert any("unaudited: no auditor audited it" in f for f in s["failures"])


def test_a_cheat_whose_audit_failed_fails_the_run_even_when_another_audit_sampled_it_out():
    # the provider refused the trace to one auditor: a refusal, not the draw, kept the cheat hidden
    refused = Audit("auditor-01", b"", CHEAT, "failed", C, None, "the provider refused the trace request")
    sampled = Audit("auditor-00", b"", CHEAT, "ok", C, (0, 1), "replayed intervals [0, 1]")
    s = _unaudited_cheat([sampled, refused])
    assert s["unaudited_reasons"] == {"audit failed": 1} and s["ok"] is False
    (failure,) = [f for f in s["failures"] if "unaudited" in f]
    assert "auditor-01" in failure and "refused the trace request" in failure


def test_a_cheat_whose_audit_never_finished_fails_the_run():
    s = _unaudited_cheat([Audit("auditor-00", b"", CHEAT, "auditing", C, None)])
    assert s["unaudited_reasons"] == {"audit unfinished when the run ended": 1} and s["ok"] is False


def test_an_auditor_that_sampled_a_corrupted_interval_and_passed_it_fails_the_run():
    chain = Chain()
    jid = chain.job("c", {CHEAT: "c cheat"})
    chain.settle(jid, [CHEAT])
    audit = audit_from_entry("auditor-00", jid, {"account": CHEAT, "state": "ok",
                                                  "detail": "replayed intervals [4, 5]"}, C)
    assert audit.sample == (4, 5)
    obs = observed(chain, {jid: "c"}, {jid: "c cheat"}, replays={(jid, CHEAT): replay((5,))}, audits=[audit])
    s = summarize(obs)
    assert (s["cheats_audited"], s["cheats_caught"], s["clients_unserved"], s["ok"]) == (1, 0, 1, False)
    assert any("not slashed" in f for f in s["failures"])


def test_an_honest_provider_that_loses_is_counted_and_fails_the_run():
    chain = Chain()
    jid = chain.job("d", {HONEST: "d honest"})
    chain.dispute(jid, 1, AUDITOR, HONEST, Outcome.CHALLENGER_WINS, loser=HONEST, winner=AUDITOR, bond=SEAT)
    chain.settle(jid, [])
    s = summarize(observed(chain, {jid: "d"}, {jid: None}))
    assert (s["honest_slashed"], s["cheats"], s["clients_refunded"], s["ok"]) == (1, 0, 1, False)


def test_an_auditor_that_challenges_a_cheat_and_loses_is_an_honest_node_slashed():
    chain = Chain()
    jid = chain.job("e", {CHEAT: "e cheat"})
    chain.dispute(jid, 1, AUDITOR, CHEAT, Outcome.RESPONDENT_WINS, loser=AUDITOR, winner=CHEAT, bond=SEAT)
    chain.settle(jid, [CHEAT])
    obs = observed(chain, {jid: "e"}, {jid: "e cheat"}, replays={(jid, CHEAT): replay((1,))})
    s = summarize(obs)
    assert (s["honest_slashed"], s["cheats_audited"], s["cheats_caught"], s["clients_unserved"]) == (1, 1, 0, 1)


def test_a_seat_that_never_committed_counts_against_honest_nodes_only():
    chain = Chain()
    jid = h("f")
    chain.tx(JobOpened(jid, CLIENT, CLIENT, PRICE, SEAT, 1, 10, 20, 30, 5))
    chain.tx(ProviderAccepted(jid, HONEST, SEAT))
    chain.tx(JobAdvanced(jid, JobStatus.REFUNDED), StakeSlashed(jid, HONEST, SEAT, CLIENT, SEAT // 2, SEAT // 2),
             ClientRefunded(jid, CLIENT, PRICE))
    s = summarize(observed(chain, {jid: "f"}, {jid: None}))
    assert (s["honest_slashed"], s["clients_refunded"], s["ok"]) == (1, 1, False)


def test_report_json_names_nodes_and_round_trips(tmp_path):
    chain = Chain()
    jid = chain.job("g", {HONEST: "g honest", CHEAT: "g cheat"})
    chain.dispute(jid, 7, HONEST, CHEAT, Outcome.CHALLENGER_WINS, loser=CHEAT, winner=HONEST)
    chain.settle(jid, [HONEST])
    obs = observed(chain, {jid: "g"}, {jid: "g honest"}, replays={(jid, CHEAT): replay((2,))},
                   verdicts={7: {"rounds": 11, "bytes_to_referee": 12345, "depth": 3}})
    path = write_report(build_report(obs, config={"nodes": 2}, timings={"wall_s": 1.0}), tmp_path)
    report = json.loads(path.read_text())
    (dispute,) = report["disputes"]
    assert (dispute["challenger"], dispute["respondent"], dispute["losers"]) == ("provider-00", "provider-01", ["provider-01"])
    assert (dispute["rounds"], dispute["bytes_to_referee"], dispute["outcome"]) == (11, 12345, "CHALLENGER_WINS")
    assert report["slashes"][0]["loser"] == "provider-01" and report["payments"][0]["to"] == "provider-00"
    # the honest provider: seat unlocked, paid the price and half the cheater's seat
    assert report["balances"]["provider-00"]["rows"][-1][1:] == [0, 0, PRICE + SEAT // 2, 0]
    assert report["summary"]["ok"] is True and report["jobs"][0]["submit_to_settled_s"] > 0


def test_a_job_no_provider_took_is_refunded_and_fails_the_run():
    chain = Chain()
    unfilled = h("g")
    chain.tx(JobOpened(unfilled, CLIENT, CLIENT, PRICE, SEAT, 1, 10, 20, 30, 5))
    chain.tx(JobAdvanced(unfilled, JobStatus.REFUNDED), ClientRefunded(unfilled, CLIENT, PRICE))
    s = summarize(observed(chain, {unfilled: "g"}, {unfilled: None}))
    assert (s["clients_refunded"], s["clients_unserved"], s["jobs_unfilled"], s["ok"]) == (1, 0, 1, False)
    assert s["failures"] == ["job 0 found no provider before its acceptance deadline"]
