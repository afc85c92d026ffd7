"""Seat statements between settlement-2 nodes on loopback (economics §10): a seat signs each steps list
it hands a sampler over /gavel/steps/2.0.0 with its account key; the samplers' statements keepers share
what they were told on gossip, and the one that holds two different signed lists for one interval takes
them to the contract (`slashEquivocation`). An answer not signed by the seat is refused by name.

The seat is the `equivocate` adversary (node/roles/v2/adversaries.py): its first sampler of an interval
gets its true list, the second one with an entry changed. The samplers are auditor nodes (their role
starts the keeper and its `told_steps` is what their audit calls for each sampled interval; the replay
itself is left out, `audit_jobs = 0`). Money is read from the contract."""
from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from eth_account import Account
from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, JobOpened, JobStatus, commitment_of, trace_root
from contracts.settlement_v2_games import EquivocationSlashed
from node.config import Settings
from node.roles.chain import account_key, open_binding_sync
from node.roles.jobfiles import job_dir
from node.errors import RemoteError, StreamClosed
from node.framing import pack
from node.roles.v2.data import (
    STEPS_LIMITS, STEPS_PER_ASK, STEPS_PROTOCOL, StatementRefused, statement_domain, steps_statement, told_steps_of_answer,
)
from node.roles.v2.statements_keeper import StatementsKeeper
from node.roles.v2.trained import TrainedJob
from node.roles.jobfiles import encode_bundle
from protocol.statements import SignedStatement, signable, sign_statement

from ..conftest import trio_test
from ...contracts.settlement_world_v2 import default_terms
from ..test_roles_support import TINY_JOB, role, start_node
from .test_data_v2 import ready, signed_spec_of, write_run


class RecordedSteps:
    """The seat's run as its defender and data service read it: each interval's steps list."""

    def __init__(self, trace: list[bytes]) -> None:
        self.lists = [[trace[c], keccak(b"inside interval %d" % c), trace[c + 1]] for c in range(len(trace) - 1)]

    def step_states(self, c: int) -> list[bytes]:
        return self.lists[c]


def holdings(binding, account: str) -> int:
    """What the account has in the contract: its stake (locked or not) and its credit."""
    s = binding.settlement
    return s.node(account).stake + s.credit_of(account)


@trio_test(timeout=180)
async def test_a_seat_that_signs_two_steps_lists_for_one_interval_is_slashed_by_a_sampler(tmp_path):
    async with trio.open_nursery() as nursery:
        seat_node = await start_node(nursery, tmp_path / "seat", ["provider"], settlement="2", cheat="equivocate")
        hub = seat_node.host.listen_addrs
        samplers = [await start_node(nursery, tmp_path / f"sampler-{i}", ["auditor"], settlement="2", audit_jobs=0.0,
                                     bootstrap=hub) for i in range(2)]
        seat = await ready(seat_node)
        roles = [await role(node, "auditor") for node in samplers]
        client = open_binding_sync(Settings(settlement="2"), b"statements v2 client " + os.urandom(8))
        client_key = os.urandom(32)
        await client.run(client.ensure_registered_sync, client_key, Role.CLIENT, 0)

        trace, files = write_run(tmp_path / "files", "run", 3)  # C = 2 intervals of 2 steps
        spec = signed_spec_of(tmp_path)
        terms = default_terms(client_key, client_referees=False, nonce=int.from_bytes(os.urandom(7), "big"),
                              initial_state=trace[0], steps=4, checkpoint_every=2, providers_wanted=1,
                              spec_hash=keccak(spec))
        s = seat.chain.settlement
        jid = (await client.run(client.settlement.open_job, terms, spec)).one(JobOpened).job_id
        directory = job_dir(seat_node.config.data_dir, jid)
        directory.parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "files").rename(directory)
        salt = os.urandom(32)
        cheater = seat.chain.account
        reporters = [r.ctx.chain.account for r in roles]
        before = {a: await client.run(holdings, client, a) for a in (cheater, *reporters, client.account)}
        await seat.chain.run(s.accept, jid)
        await seat.chain.run(s.commit, jid, commitment_of(jid, cheater, trace_root(trace), salt))
        run = RecordedSteps(trace)

        async def oracle():
            await trio.lowlevel.checkpoint()
            return run

        bundle_id = await seat_node.blobs.store.put(encode_bundle(TINY_JOB, {}))
        await seat.trained.add(TrainedJob(jid, directory, tuple(trace), salt, bundle_id, tuple(files),
                                          oracle_factory=oracle))
        await seat.chain.run(s.reveal, jid, trace, salt)
        stake_of_seat = before[cheater] - await client.run(holdings, client, cheater)
        assert stake_of_seat == 0  # the lock is still its stake until it forfeits

        # Each sampler asks interval 1's steps list as its audit does: the first is told the truth.
        slot, truth = (jid, cheater, 1, 1), steps_statement(jid, cheater, 1, run.lists[1]).value
        for sampler in roles:
            await sampler.auditor.told_steps(jid, cheater, {1: run.lists[1]})
        assert list(roles[0].statements.held[slot])[0] == truth
        with trio.fail_after(60):  # until the statements met on gossip and one keeper reported them
            while (await client.run(s.seat, jid, cheater)).forfeit == ForfeitReason.NONE:
                await trio.sleep(0.1)
        assert (await client.run(s.seat, jid, cheater)).forfeit == ForfeitReason.EQUIVOCATED
        (slashed,) = [e.event for e in await client.run(s.events, 0, None)
                      if isinstance(e.event, EquivocationSlashed) and e.event.job_id == jid]
        assert slashed.seat == cheater and slashed.reporter in reporters and (slashed.kind, slashed.index) == (1, 1)
        reporter = roles[reporters.index(slashed.reporter)]
        assert [what for what, _ in reporter.statements.slashed] == ["equivocation"]
        held = reporter.statements.held[slot]
        assert len(held) == 2 and truth in held and all(h.verify(reporter.statements.domain) for h in held.values())
        # the evidence was on disk before it was shared: a restarted keeper holds both lists
        kept = StatementsKeeper(reporter.ctx.chain, reporter.statements.domain, data_dir=reporter.ctx.config.data_dir)
        assert kept.held[slot] == held

        # One ask carries several intervals, each list signed for its own; a malformed ask has its stream
        # closed (the asker is at fault), and the seat serves on.
        asker = roles[0].ctx
        told = await asker.job_data.fetch_steps(jid, cheater, [1, 0])
        assert [t.signed.statement.index for t in told] == [1, 0] and list(told[1].steps) == run.lists[0]
        with pytest.raises(RemoteError, match=r"intervals 0\.\.1, not 2"):
            await asker.job_data.fetch_steps(jid, cheater, [0, 2])
        for bad in ({"job": jid, "intervals": []}, {"job": jid, "intervals": [0, 0]}, {"job": jid, "interval": 1},
                    {"job": jid, "intervals": list(range(STEPS_PER_ASK + 1))}, {"job": jid[:8], "intervals": [0]}):
            with pytest.raises(StreamClosed):
                await asker.host.request(seat_node.host.peer_id, STEPS_PROTOCOL, pack(bad), limits=STEPS_LIMITS)
        assert [list(t.steps) for t in await asker.job_data.fetch_steps(jid, cheater, [0])] == [run.lists[0]]

        info = await client.run(s.job, jid)
        await client.run(client.chain.mine, (await client.run(s.deadlines, jid)).final_by + 1)
        with trio.fail_after(60):  # the nodes' keepers settle it (or this call does)
            while (await client.run(s.job, jid)).status == JobStatus.RUNNING:
                try:
                    await client.run(s.settle, jid)
                except Exception:  # settled by a keeper in between
                    pass
                await trio.sleep(0.1)
        after = {a: await client.run(holdings, client, a) for a in before}
        assert after[cheater] - before[cheater] == -info.provider_stake < 0
        share = info.provider_stake * (await client.run(s.chain_settings)).winner_share_bps // 10_000
        assert after[slashed.reporter] - before[slashed.reporter] == share > 0
        other = next(a for a in reporters if a != slashed.reporter)
        assert after[other] == before[other]
        assert after[client.account] - before[client.account] == info.price  # nobody was paid: P back
        nursery.cancel_scope.cancel()


def test_a_steps_answer_not_signed_by_the_seat_is_refused_by_name(tmp_path):
    binding = open_binding_sync(Settings(settlement="2"), b"statements v2 forger")
    domain = statement_domain(binding)
    seat_key, forger_key = account_key(b"a seat"), account_key(b"a forger")
    seat = Account.from_key(seat_key).address
    jid, steps = os.urandom(32), [os.urandom(32) for _ in range(3)]
    honest = sign_statement(steps_statement(jid, seat, 0, steps), seat_key, domain)
    assert told_steps_of_answer({"steps": steps, "signature": honest.signature}, jid, seat, 0, domain, None).signed \
        == honest
    forged = bytes(Account.sign_message(signable(steps_statement(jid, seat, 0, steps), domain), forger_key).signature)
    with pytest.raises(StatementRefused, match=f"interval 0 is not signed by seat {seat}"):
        told_steps_of_answer({"steps": steps, "signature": forged}, jid, seat, 0, domain, None)
    with pytest.raises(StatementRefused, match="interval 0 comes without the seat's 65-byte signature"):
        told_steps_of_answer({"steps": steps}, jid, seat, 0, domain, None)
    other_list = [steps[0], os.urandom(32), steps[2]]  # the seat's signature over another list
    with pytest.raises(StatementRefused, match="not signed by seat"):
        told_steps_of_answer({"steps": other_list, "signature": honest.signature}, jid, seat, 0, domain, None)
    keeper = StatementsKeeper(binding, domain)
    assert not trio.run(keeper.add, SignedStatement(honest.statement, forged)) and not keeper.held


def test_a_keeper_shares_again_only_the_statements_it_took_in_first_hand():
    """A sampler's keeper repeats what its sampler was told; what gossip brought is its sharer's to repeat
    (every node re-sharing all it held every few seconds flooded the v2 testnet's one event loop)."""
    binding = open_binding_sync(Settings(settlement="2"), b"statements v2 sharer")
    binding.ensure_funds_sync(10**18)  # the embedded EVM refuses even a read from an account that cannot pay gas
    domain = statement_domain(binding)
    seat_key = account_key(b"a seat")
    seat = Account.from_key(seat_key).address
    jid = os.urandom(32)
    told, gossiped = (sign_statement(steps_statement(jid, seat, c, [os.urandom(32) for _ in range(3)]), seat_key, domain)
                      for c in (0, 1))
    shared: list[int] = []

    async def publish(signed: SignedStatement) -> None:
        shared.append(signed.statement.index)

    keeper = StatementsKeeper(binding, domain, publish=publish, share_every=10.0)

    async def main() -> None:
        assert await keeper.add(told)  # handed by our sampler: shared at once
        assert await keeper.add(gossiped, share=False)  # brought by gossip: kept, not shared
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keeper.republish)
            await trio.sleep(25)  # two periods
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert shared == [0, 0, 0]
    assert set(keeper.held) == {told.statement.slot, gossiped.statement.slot}  # both kept as evidence
