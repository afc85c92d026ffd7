"""The testnet plan: who plays what, which jobs, all from the options and the seed."""
from __future__ import annotations

import pytest

from node.testnet.plan import AUDITOR, CLIENT, PROVIDER, TestnetOptions, TestnetPlan, cheat_strategies, make_plan
from repops_cupy.jobspec import load_job


def test_the_plan_follows_the_options_and_the_seed(tmp_path):
    options = TestnetOptions(nodes=12, cheaters=10, auditors=2, clients=3, jobs=7, seed=5, steps=4, checkpoint_every=2)
    plan = make_plan(options, tmp_path / "a")
    again = make_plan(options, tmp_path / "b")
    assert [(n.name, n.seed, n.cheat) for n in plan.nodes] == [(n.name, n.seed, n.cheat) for n in again.nodes]
    assert [len(plan.of_role(r)) for r in (PROVIDER, AUDITOR, CLIENT)] == [12, 2, 3]
    assert len({n.seed for n in plan.nodes}) == len(plan.nodes)
    cheats = [n.cheat for n in plan.nodes if n.cheater]
    assert len(cheats) == 10 and all(n.role == PROVIDER for n in plan.nodes if n.cheater)
    # every strategy once before any repeats
    assert len(set(cheats)) == min(10, len(cheat_strategies())) and set(cheats) <= set(cheat_strategies())
    assert [j.client for j in plan.jobs] == ["client-00", "client-01", "client-02"] * 2 + ["client-00"]
    assert all(len(j.providers) == 1 for j in plan.jobs)
    assert len({j.providers for j in plan.jobs}) == 7  # spread over the providers, not the same cheapest ones
    specs = [load_job(j.job_file) for j in plan.jobs]
    assert {(s.steps, s.checkpoint_interval) for s in specs} == {(4, 2)}
    assert len({s.seed for s in specs}) == 7  # every job its own computation
    other = make_plan(TestnetOptions(nodes=12, cheaters=10, seed=6), tmp_path / "c")
    assert [n.seed for n in other.nodes] != [n.seed for n in plan.nodes]


def test_replicas_are_distinct_providers_and_every_provider_gets_work(tmp_path):
    plan = make_plan(TestnetOptions(nodes=5, cheaters=1, jobs=10, replicas=2), tmp_path)
    assert all(len(set(j.providers)) == 2 for j in plan.jobs)
    counts = {n.name: sum(n.name in j.providers for j in plan.jobs) for n in plan.of_role(PROVIDER)}
    assert set(counts.values()) == {4}


@pytest.mark.parametrize("seed", range(4))
def test_cheaters_get_their_share_of_few_jobs(tmp_path, seed):
    plan = make_plan(TestnetOptions(nodes=180, cheaters=18, jobs=20, seed=seed), tmp_path)
    cheaters = {n.name for n in plan.nodes if n.cheater}
    assert sum(j.providers[0] in cheaters for j in plan.jobs) == 2
    assert len({j.providers for j in plan.jobs}) == 20
    # one cheater among fifteen and four jobs (the 20-process scale run): it still gets one
    small = make_plan(TestnetOptions(nodes=15, cheaters=1, jobs=4, seed=seed), tmp_path / "small")
    assert sum(n.cheater for j in small.jobs for n in small.nodes if n.name in j.providers) == 1


def test_strategies_can_be_chosen(tmp_path):
    plan = make_plan(TestnetOptions(nodes=3, cheaters=3, strategies=("skip-step",)), tmp_path)
    assert [n.cheat for n in plan.nodes if n.cheater] == ["skip-step"] * 3
    with pytest.raises(ValueError, match="unknown cheat"):
        make_plan(TestnetOptions(nodes=3, cheaters=1, strategies=("bribe",)), tmp_path)


@pytest.mark.parametrize("bad", [dict(cheaters=7), dict(audit_rate=1.5), dict(replicas=0), dict(clients=0),
                                 dict(steps=0), dict(max_running=-1), dict(commit_within=0)])
def test_impossible_options_are_refused(bad):
    with pytest.raises(ValueError):
        TestnetOptions(nodes=6, **bad)


def test_repeated_gossip_thins_out_as_the_network_grows(tmp_path):
    from node.testnet.launcher import (GOSSIP_DELIVERIES, ADVERT_INTERVAL, REGOSSIP_INTERVAL, advert_interval,
                                       regossip_interval)

    small = TestnetOptions()  # the default testnet keeps the base advert interval and repeats its gossip twice
    plan = make_plan(small, tmp_path / "small")
    assert advert_interval(plan) == ADVERT_INTERVAL
    assert REGOSSIP_INTERVAL <= regossip_interval(plan, small.jobs) <= small.challenge_within / 2
    for providers in (45, 190):
        options = TestnetOptions(nodes=providers, cheaters=1, auditors=5, clients=5, jobs=20, replicas=2)
        plan = make_plan(options, tmp_path / f"{providers}")
        everyone = providers + 10
        # every message reaches every node: deliveries per second stay at the budget
        assert providers / advert_interval(plan) * everyone == pytest.approx(GOSSIP_DELIVERIES)
        # each running job repeats its announcement and one commitment notice per provider
        assert 20 * 3 / regossip_interval(plan, 20) * everyone == pytest.approx(GOSSIP_DELIVERIES)
        assert regossip_interval(plan, 4) == pytest.approx(regossip_interval(plan, 20) / 5)
        # a --processes run leaves its clients out of the plan (they run as processes of their own)
        staked = TestnetPlan(options, tuple(n for n in plan.nodes if n.role != CLIENT), plan.jobs)
        assert (advert_interval(staked), regossip_interval(staked, 20)) == (advert_interval(plan),
                                                                            regossip_interval(plan, 20))


def test_a_settlement_2_plan_counts_its_own_nodes_for_gossip(tmp_path):
    """A settlement-2 testnet plans a provider per strategy whatever --nodes says: its gossip is paced on
    the nodes it runs (on --nodes' 6 its 17 providers advertised every 5 s, and with every seat
    statement re-shared by every node the one event loop of 28 nodes saturated)."""
    from node.testnet.launcher import GOSSIP_DELIVERIES, advert_interval, regossip_interval

    options = TestnetOptions(settlement="2")
    plan = make_plan(options, tmp_path)
    providers, everyone = len(plan.of_role(PROVIDER)), len(plan.nodes)
    assert providers > options.nodes
    assert providers / advert_interval(plan) * everyone == pytest.approx(GOSSIP_DELIVERIES)
    seats = max(len(job.providers) for job in plan.jobs)
    assert 4 * (1 + seats) / regossip_interval(plan, 4) * everyone == pytest.approx(GOSSIP_DELIVERIES)
