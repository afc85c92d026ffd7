"""`gavel testnet --settlement 2`: a network of real nodes (libp2p on loopback, GavelSettlementV2 on the
embedded EVM) with one provider per strategy beside honest ones, one of them slow; the report's money
and verdict checked against the contract's own reads and events, not the roles' logs."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio

from contracts import NodeRegistered
from contracts.settlement_v2 import ForfeitReason, SeatStatus
from contracts.settlement_v2_demands import DemandStage
from node.cheats import STRATEGIES
from node.config import make_config
from node.roles.chain import DEV_MARGIN_V2, open_binding_sync
from node.roles.context import context_of
from node.roles.v2.adversaries import HONEST, adversary_of, strategy_names
from node.testnet.launcher import IN_PROCESS_MARGIN_PER_NODE
from node.testnet.plan import CLIENT, TestnetOptions, make_plan
from node.testnet.run import run_testnet

from .economics import contract_money
from .test_roles_support import advance_embedded_chain

# the strategies the built roles end without a game: the client's own sampling and its demands
NO_GAME = ("silent-seat", "garbage-commit", "stonewall", "copy-root")
# A garbage trace's seat serves nothing: the client's demand ends it (Unavailable), or first an auditor,
# served no checkpoint, replays the job from its own run and opens a game it cannot defend.
EXPECTED_FORFEIT = {"silent-seat": {ForfeitReason.NO_REVEAL},
                    "garbage-commit": {ForfeitReason.UNAVAILABLE, ForfeitReason.SILENT_DEFENDER},
                    "stonewall": {ForfeitReason.UNAVAILABLE}, "copy-root": {ForfeitReason.NO_REVEAL}}
SEED = 7_717  # accounts of their own on the process's embedded chain
CLIENT_DONE = ("verified", "settled", "refunded", "failed", "lost")


def test_each_strategy_name_is_a_behaviour_and_a_wrong_one_is_refused_by_name():
    assert adversary_of("", STRATEGIES) is HONEST
    assert adversary_of("slow", STRATEGIES).honest and not adversary_of("stonewall", STRATEGIES).honest
    assert adversary_of("wrong-lr", STRATEGIES).run_cheat == "wrong-lr"
    assert "honest" not in strategy_names(STRATEGIES) and "slow" not in strategy_names(STRATEGIES)
    with pytest.raises(ValueError, match="unknown cheat 'no-such'"):
        adversary_of("no-such", STRATEGIES)
    with pytest.raises(ValueError, match="perturb-weight"):  # late-reveal's run needs node.cheats
        adversary_of("late-reveal", None)


def test_the_v2_plan_seats_every_cheater_beside_an_honest_provider(tmp_path):
    plan = make_plan(TestnetOptions(settlement="2", strategies=NO_GAME, nodes=2, clients=1, jobs=1), tmp_path)
    cheaters = {n.name for n in plan.nodes if n.cheater}
    honest = [n for n in plan.of_role("provider") if not n.cheater]
    assert sorted(n.cheat for n in plan.nodes if n.cheater) == sorted(NO_GAME)
    assert [n.cheat for n in honest] == ["slow", ""]
    assert len(plan.jobs) == len(NO_GAME)
    for job in plan.jobs:
        assert len(job.providers) == 2 and job.providers[0] in cheaters and job.providers[1] not in cheaters
    with pytest.raises(ValueError, match="unknown settlement-2 strategies: copy-everything"):
        make_plan(TestnetOptions(settlement="2", strategies=("copy-everything",)), tmp_path)


def _next_demand_time(demand, margin: int, *, now: int) -> int | None:
    """Where the clock may jump for an open demand: past serveBy + Δ (the seat called no witness: the
    client fails it), to attestBy − Δ while a witness is drawn and no further (its own timer attests
    then: a jump past attestBy would burn an honest witness's bond; None: hold), a second on while a
    draw waits for its seed block."""
    if demand.stage == DemandStage.OPEN:
        return demand.deadline + margin + 1
    if demand.stage == DemandStage.WITNESSING:
        return demand.deadline - margin if now < demand.deadline - margin else None
    return now + 1


RUN_WALL_LIMIT = 900  # seconds: a run this test's clock has not ended by then has a job nobody settles


async def close_windows(network) -> None:
    """The test's clock: once every client verified its job, move the chain to the next thing waiting
    on a deadline (a demand's serveBy + Δ, which the client then fails; a job's finalBy, which the
    keepers settle), instead of sleeping through the windows. It fails the run after RUN_WALL_LIMIT
    (the run's own deadline waits out the chain's lead, which earlier tests of the process grew)."""
    with trio.fail_after(RUN_WALL_LIMIT):
        await _close_windows(network)


async def _close_windows(network) -> None:
    s = network._settlement
    margin = (await network._binding.run(s.chain_settings)).margin
    while True:
        await trio.sleep(0.5)
        subs = network.submissions
        if len(subs) < len(network.plan.jobs) or any(sub.job_id is None and sub.error is None for sub in subs):
            continue
        clients = [context_of(network.nodes[n.name]).roles["client"] for n in network.plan.of_role(CLIENT)]
        if any(cj.state not in CLIENT_DONE for c in clients for cj in c.jobs.values()):
            continue
        ledger = network.ledger
        demands = [await network._binding.run(s.demand, d.demand_id) for d in ledger.demands.values()
                   if d.outcome == "open"]
        deadlines = [_next_demand_time(d, margin, now=await network._binding.run(network._binding.chain.now))
                     for d in demands]
        if None in deadlines:  # a witness is at work: its window is its own
            continue
        if not deadlines:
            deadlines = [(await network._binding.run(s.job, j.job_id)).final_by + 1
                         for j in ledger.jobs.values() if not j.settled]
        now = await network._binding.run(network._binding.chain.now)
        if deadlines and min(deadlines) > now:
            await trio.to_thread.run_sync(advance_embedded_chain, min(deadlines) - now)


def contract_nets(tmp_path: Path, contract: str, accounts: list[str]) -> tuple[dict[str, int], object]:
    """Each account's money from the run's contract alone: stake and credit read now, plus withdrawals,
    less stake sent and prices escrowed (every account is new to the contract in this test)."""
    binding = open_binding_sync(make_config(tmp_path / "reader", {"chain": "embedded", "settlement": "2",
                                                                 "contract": contract}), bytes(range(32)))
    binding.ensure_funds_sync(0)
    s = binding.settlement
    return contract_money(s, accounts, 0), s


@pytest.mark.slow
def test_a_v2_testnet_catches_each_strategy_and_reports_who_gained_and_lost(tmp_path):
    # a client per job: each client's net is then the money of one job
    options = TestnetOptions(settlement="2", strategies=NO_GAME, nodes=2, auditors=1, clients=len(NO_GAME), jobs=1, steps=3,
                             checkpoint_every=1, seed=SEED)
    report = run_testnet(options, tmp_path / "out", clock=close_windows)

    parties = {p["name"]: p for p in report["parties"]}
    nets, s = contract_nets(tmp_path, report["config"]["contract"], [p["account"] for p in parties.values()])
    for p in parties.values():
        assert p["net_wei"] == nets[p["account"]], p["name"]
    # the run's own deployment: witnesses and referees are drawn among its nodes only, none of an
    # earlier network of this process
    registered = {e.event.account for e in s.events(0, None) if isinstance(e.event, NodeRegistered)}
    assert registered == {p["account"] for p in parties.values()}
    # its Δ stretched for the nodes that share this process's loop, as the report says
    assert s.chain_settings().margin == report["config"]["margin_s"] == \
        DEV_MARGIN_V2 + math.ceil(IN_PROCESS_MARGIN_PER_NODE * len(parties))
    stake = report["jobs"][0]["provider_stake"]
    # a client whose planned honest provider is busy offers the job to another advert, a cheater's
    # among them: a cheater may hold seats of several jobs, and it forfeits each one
    seats_of: dict[str, int] = {}
    for cheat in report["cheats"]:
        job_id = bytes.fromhex(cheat["job_id"])
        assert s.seat(job_id, cheat["account"]).forfeit in EXPECTED_FORFEIT[cheat["strategy"]]
        assert cheat["caught"] and cheat["uncaught_reason"] is None
        seats_of[cheat["account"]] = seats_of.get(cheat["account"], 0) + 1
    for account, seats in seats_of.items():
        assert nets[account] == -seats * stake < 0  # it loses its lock of each seat and is paid for none
    assert sorted({c["strategy"] for c in report["cheats"]}) == sorted(NO_GAME), report["summary"]["failures"]
    for job in report["jobs"]:
        for seat in job["seats"]:
            if not seat["cheater"]:  # the honest seat (the slow one among them) revealed the job's root, was paid
                assert s.seat(bytes.fromhex(job["job_id"]), seat["account"]).status == SeatStatus.PAID
                assert seat["root_honest"] is True
    honest = [p for p in parties.values() if not p["cheater"]]
    # a client's price for the results it checked counts as bought (it may pay for the honest seat's and
    # get no share of the cheater's lock: that goes to whoever ended the seat, its demand or a game)
    beyond = {p["name"]: nets[p["account"]] + p.get("paid_for_results_wei", 0) for p in honest}
    assert all(net >= 0 for net in beyond.values()), {name: net for name, net in beyond.items() if net < 0}
    (slow,) = [p for p in parties.values() if p["strategy"] == "slow"]
    assert nets[slow["account"]] > 0  # the slow provider earned its pay
    assert report["summary"]["cheats_caught"] == len(report["cheats"])
    assert report["summary"]["ok"], report["summary"]["failures"]
    assert report["summary"]["cheaters_net_wei"] == -len(report["cheats"]) * stake
    assert (tmp_path / "out" / "report.html").read_text().count("NOT HELD") == 0
