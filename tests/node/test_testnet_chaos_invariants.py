"""The chaos run's invariants over books the real settlement contract wrote (embedded EVM):
each holds on an honest story, and each fails, naming its cause, when its books are broken."""
from __future__ import annotations

import copy
import dataclasses
import hashlib

import pytest

from contracts import ETHER, EmbeddedChain, JobStatus, Outcome, Role, Settlement
from node.testnet.chaos import CHAIN, Fault, choose_victim, describe_recovery, plan_faults
from node.testnet.invariants import (
    BALANCE_SUM, ESCROW_BACK, NO_COIN_LOCKED, NO_HONEST_LOSS, NO_WRONG_RESULT, BalanceRead, Segment,
    check_invariants, lost_segments,
)
from node.testnet.launcher import BURN_ADDRESS
from node.testnet.ledger import Ledger
from node.testnet.report import Submission

STAKE = 5 * ETHER
SEAT = ETHER
PRICE = 3 * ETHER


def _h(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _read(chain, settlement, ledger, label: str) -> BalanceRead:
    head = chain.block_number()
    ledger.feed(settlement.events(ledger.last_block + 1, head), float(head))
    return BalanceRead(label, float(head), head, settlement.balance(), chain.balance(BURN_ADDRESS), ledger.money())


@pytest.fixture(scope="module")
def story():
    """A cheat caught and slashed, the honest provider paid and withdrawing, the client holding the honest root."""
    chain = EmbeddedChain()
    settlement = Settlement.deploy(chain, unbonding_delay=1000, min_stake=ETHER, winner_share_bps=5000)
    client, honest, cheat, auditor = chain.accounts[1:5]
    ledger = Ledger()
    ledger.last_block = chain.block_number()
    segment = Segment(0, ledger, 0.0, settlement.balance(), chain.balance(BURN_ADDRESS))
    for i, (account, roles) in enumerate(((honest, Role.PROVIDER), (cheat, Role.PROVIDER), (auditor, Role.AUDITOR))):
        settlement.connect(account).register(_h(f"key {i}"), roles, stake=STAKE)
    segment.reads.append(_read(chain, settlement, ledger, "registered"))
    now = chain.now()
    job_id = _h("job")
    settlement.connect(client).open_job(job_id, price=PRICE, providers_wanted=2, provider_stake=SEAT,
                                        accept_by=now + 100, commit_by=now + 200, challenge_by=now + 300,
                                        ruling_period=50)
    for provider, root in ((honest, _h("honest root")), (cheat, _h("cheat root"))):
        settlement.connect(provider).accept(job_id)
    for provider, root in ((honest, _h("honest root")), (cheat, _h("cheat root"))):
        settlement.connect(provider).commit(job_id, root)
    dispute_id = settlement.connect(auditor).open_dispute(job_id, cheat).events[0].dispute_id
    segment.reads.append(_read(chain, settlement, ledger, "disputed"))
    settlement.connect(client).rule(dispute_id, Outcome.CHALLENGER_WINS, step=1, node=1, transcript_hash=_h("t"))
    chain.mine(now + 400)
    settlement.settle(job_id)
    settlement.connect(honest).withdraw()
    segment.reads.append(_read(chain, settlement, ledger, "end"))
    segment.chain_now = chain.now()
    sub = Submission(0, "client-00", "job.toml", 0.0, job_id=job_id, result={"trace_root": _h("honest root").hex()})
    names = {client: "client", honest: "honest", cheat: "cheat", auditor: "auditor"}
    return {"segment": segment, "sub": sub, "honest_roots": {job_id: _h("honest root")}, "names": names,
            "honest_accounts": {client, honest, auditor}, "accounts": (client, honest, cheat, auditor), "job_id": job_id}


def _checks(story, *, segment=None, subs=None, honest_accounts=None, earlier=()):
    segments = [*earlier, segment or story["segment"]]
    checks = check_invariants(segments, subs if subs is not None else [story["sub"]], story["honest_roots"],
                              honest_accounts if honest_accounts is not None else story["honest_accounts"],
                              story["names"])
    return {c.name: c for c in checks}


def test_every_invariant_holds_on_the_honest_story_with_its_evidence(story):
    checks = _checks(story)
    assert all(c.ok for c in checks.values()), {n: c.failures for n, c in checks.items()}
    client, honest, cheat, auditor = story["accounts"]
    assert checks[NO_COIN_LOCKED].evidence["jobs_final"] == 1 and checks[NO_COIN_LOCKED].evidence["locked"] == {}
    assert checks[NO_WRONG_RESULT].evidence["results_held"] == 1
    nets = checks[NO_HONEST_LOSS].evidence["net_wei"]
    assert nets == {"client": 0, "honest": PRICE, "auditor": SEAT // 2}  # the price bought the honest result
    assert checks[ESCROW_BACK].evidence["paid_for_verified_result"] == 1
    reads = checks[BALANCE_SUM].evidence["reads"]
    assert [r["label"] for r in reads] == ["registered", "disputed", "end"] and all(r["ok"] for r in reads)
    end = reads[-1]
    assert end["burn_gained_wei"] == end["burned"] == SEAT // 2 and end["withdrawn"] == PRICE
    assert end["contract_gained_wei"] == end["held"] == 3 * STAKE - SEAT + SEAT // 2  # the cheat's seat: half burned, half credited


def test_a_job_left_unsettled_past_its_deadline_is_a_locked_coin(story):
    segment = copy.deepcopy(story["segment"])
    client, honest, cheat, auditor = story["accounts"]
    segment.ledger.jobs[story["job_id"]].status = JobStatus.COMMITTED
    segment.ledger.book(honest).locked = SEAT
    check = _checks(story, segment=segment)[NO_COIN_LOCKED]
    assert not check.ok
    assert any("is COMMITTED" in f and "past its final deadline" in f for f in check.failures), check.failures
    assert f"honest still has {SEAT} wei locked" in check.failures
    # the same job, its deadline not yet passed when the run ended: the run ended too early, said so
    segment.chain_now = segment.ledger.jobs[story["job_id"]].final_deadline - 10
    assert any("10 s before its final deadline" in f for f in _checks(story, segment=segment)[NO_COIN_LOCKED].failures)


def test_a_client_holding_the_cheats_root_is_a_wrong_result_and_an_unserved_escrow(story):
    wrong = dataclasses.replace(story["sub"], result={"trace_root": _h("cheat root").hex()})
    checks = _checks(story, subs=[wrong])
    assert not checks[NO_WRONG_RESULT].ok and "holds root" in checks[NO_WRONG_RESULT].failures[0]
    assert not checks[ESCROW_BACK].ok and "holds no honest result" in checks[ESCROW_BACK].failures[0]
    assert not checks[NO_HONEST_LOSS].ok and "client is down" in checks[NO_HONEST_LOSS].failures[0]


def test_an_honest_party_slashed_is_a_loss_with_its_cause(story):
    client, honest, cheat, auditor = story["accounts"]
    check = _checks(story, honest_accounts=story["honest_accounts"] | {cheat})[NO_HONEST_LOSS]
    assert not check.ok
    assert check.failures == [f"cheat is down {SEAT} wei: slashed {SEAT} wei in job {story['job_id'].hex()[:12]} (dispute 1)"]


def test_a_reading_that_does_not_add_up_breaks_the_balance_sum(story):
    segment = copy.deepcopy(story["segment"])
    segment.reads[1].contract += 1  # a wei the events do not account for
    segment.reads[2].burn -= 7      # a burn the chain did not see
    check = _checks(story, segment=segment)[BALANCE_SUM]
    assert not check.ok and len(check.failures) == 2
    assert "disputed: the contract gained" in check.failures[0] and "end: the burn address gained" in check.failures[1]
    assert [r["ok"] for r in check.evidence["reads"]] == [True, False, False]


def test_a_killed_chain_is_listed_as_lost_by_design_not_as_a_locked_coin(story):
    lost = copy.deepcopy(story["segment"])
    lost.ledger.jobs[story["job_id"]].status = JobStatus.COMMITTED  # it never settled: its chain died first
    lost.lost_at = 12.5
    fresh = Segment(1, Ledger(), 13.0)
    fresh.reads.append(BalanceRead("end", 20.0, 5, 0, 0, fresh.ledger.money()))
    checks = _checks(story, segment=fresh, subs=[story["sub"]], earlier=[lost])
    assert all(c.ok for c in checks.values()), {n: c.failures for n, c in checks.items()}
    (segment,) = lost_segments([lost, fresh], story["names"])
    assert segment["killed_at"] == 12.5 and segment["jobs_unsettled"] == [story["job_id"].hex()]
    assert segment["escrow_unsettled_wei"] == PRICE and "unrecoverable by design" in segment["note"]


def test_the_fault_schedule_is_drawn_from_the_seed_and_spread_over_the_span():
    kinds = ("provider", "auditor", "client")
    first = plan_faults(7, 10, 100.0, kinds=kinds, chain_at=40.0)
    assert first == plan_faults(7, 10, 100.0, kinds=kinds, chain_at=40.0) != plan_faults(8, 10, 100.0, kinds=kinds,
                                                                                           chain_at=40.0)
    assert sum(f.kind == CHAIN for f in first) == 1 and len(first) == 11
    assert [f.at for f in first] == sorted(f.at for f in first) and 0 < first[0].at and first[-1].at < 100
    with pytest.raises(ValueError, match="--kills"):
        plan_faults(7, -1, 100.0, kinds=kinds, chain_at=None)
    # a victim of the planned kind when one is up, else of another kind, else none
    planned = next(f for f in first if f.kind == "auditor")
    assert choose_victim(planned, {"auditor": ["auditor-00"], "provider": ["provider-00"]}) == ("auditor", "auditor-00")
    assert choose_victim(planned, {"provider": ["provider-00"]}) == ("provider", "provider-00")
    assert choose_victim(planned, {}) is None
    assert Fault(0, "provider", "provider-00", 1.0, 2.0).as_dict()["recovery"] == []


def test_each_fault_says_what_became_of_its_victims_jobs(story):
    client, honest, cheat, auditor = story["accounts"]
    segment, job = story["segment"], story["segment"].ledger.jobs[story["job_id"]]
    accounts = {"honest": honest, "cheat": cheat, "client-00": client}
    committed_at = job.commits[honest][1]
    kill = Fault(0, "provider", "honest", committed_at + 0.5, 3.0, restarted_at=committed_at + 3.5)
    lines = describe_recovery(kill, [segment], accounts, [story["sub"]], [], {0: "client-00"})
    assert lines == [f"restarted at {committed_at + 3.5:.1f} s",
                     f"job {story['job_id'].hex()[:12]}: its root committed at {committed_at:.1f} s (before the kill); "
                     f"job FINALIZED at {job.settled_at:.1f} s"]
    cheat_kill = Fault(1, "provider", "cheat", committed_at + 0.5, 3.0)
    assert "seat forfeited (lost a dispute)" in describe_recovery(cheat_kill, [segment], accounts, [], [], {})[1]
    client_kill = Fault(2, "client", "client-00", 1.0, 3.0, restarted_at=4.0)
    assert describe_recovery(client_kill, [segment], accounts, [story["sub"]], [], {0: "client-00"})[1] == \
        f"job 0: FINALIZED at {job.settled_at:.1f} s; the client holds a result"
    # the same client's job on a chain killed later: lost, by design
    lost = dataclasses.replace(segment, lost_at=50.0)
    fresh = Segment(1, Ledger(), 51.0)
    assert describe_recovery(client_kill, [lost, fresh], accounts, [story["sub"]], [], {0: "client-00"})[1] == \
        "job 0: lost with the chain restart at 50.0 s (unrecoverable by design)"


def test_a_job_open_on_a_killed_chain_is_lost_even_if_the_harness_missed_it():
    """A `gavel submit` restarted by an earlier fault told the harness its job id only after
    the chain was killed: the report still counts the job as lost with that chain, not as a
    client left unserved on the new one."""
    from types import SimpleNamespace

    from node.testnet.run import _opened_on_a_killed_chain

    def ledger(**jobs):
        return SimpleNamespace(jobs={bytes.fromhex(k[1:]): SimpleNamespace(settled=v) for k, v in jobs.items()})

    old = SimpleNamespace(lost_at=80.8, ledger=ledger(j01=False, j02=True))
    new = SimpleNamespace(lost_at=None, ledger=ledger(j03=False))
    submissions = [SimpleNamespace(index=i, job_id=job) for i, job in
                   enumerate([bytes.fromhex("01"), bytes.fromhex("02"), bytes.fromhex("03"), None])]
    records = SimpleNamespace(segments=[old, new], submissions=submissions)
    assert _opened_on_a_killed_chain(records) == {0}  # settled on the old chain, or on the new one: judged
