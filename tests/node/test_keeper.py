"""Issue 21: every coin back. A job whose client is gone is settled by the keeper of another
node once its deadline passed, and the client, restarted, reconciles its row with the chain."""
from __future__ import annotations

import pytest
import trio

from contracts import JobStatus
from node.datadir import load_seed, open_datadir
from node.roles.chain import ETHER
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.keeper import keeper_of
from node.runtime import Node

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job

PRICE, STAKE = ETHER, ETHER


@pytest.mark.slow
@trio_test(timeout=240)
async def test_an_unfilled_job_whose_client_is_gone_is_refunded_by_another_nodes_keeper(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        await role(provider, "provider")
        chain = context_of(provider).chain
        s = chain.settlement
        stake_before = (await chain.run(s.node, chain.account)).stake
        # Two seats wanted, one provider: the job is unfilled, and its client's process ends
        # (as `gavel submit` used to) before the refund.
        with trio.CancelScope() as client_life:
            async with trio.open_nursery() as inner:
                client = await start_node(inner, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
                client_role = await role(client, "client")
                job_id = await client_role.submit(job_file, SubmitOptions(
                    providers=2, price=PRICE, stake=STAKE, accept_within=15, provider_addrs=provider.host.listen_addrs))
                assert client_role.jobs[job_id].state == "unfilled"
                client_account = context_of(client).chain.account
                client_life.cancel()
        assert (await chain.run(s.job, job_id)).status == JobStatus.OPEN  # nobody settled it yet
        assert (await chain.run(s.node, chain.account)).locked == STAKE
        client_balance = await chain.run(chain.chain.balance, client_account)

        # The provider's node settles it: its keeper, not its provider role (whose job failed).
        await wait_for(lambda: (k := keeper_of(provider)) is not None and job_id in k.settled, timeout=120)
        assert (await chain.run(s.job, job_id)).status == JobStatus.REFUNDED
        provider_after = await chain.run(s.node, chain.account)
        assert provider_after.locked == 0 and provider_after.stake == stake_before  # its stake free, nothing taken
        assert await chain.run(s.credit_of, client_account) == PRICE  # the price is the client's again
        # the keeper says it settled before it stores the final row (from a worker thread): wait for the row
        await wait_for(lambda: provider.storage.final_status(job_id) == "REFUNDED", timeout=30)

        # The client restarts: before any work it reconciles its row with the chain, and withdraws.
        config = open_datadir(tmp_path / "client")
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        client_role = await role(restarted, "client")
        await wait_for(lambda: client_role.ready.is_set(), timeout=60)
        cj = client_role.jobs[job_id]
        await wait_for(cj.done.is_set, timeout=30)
        assert cj.state == "refunded" and restarted.storage.get_job(job_id).state == "refunded"
        assert cj.record["result"]["ended"] == "unfilled" and "result_dir" not in cj.record["result"]
        assert await chain.run(s.credit_of, client_account) == 0
        gas_allowance = ETHER // 100
        assert await chain.run(chain.chain.balance, client_account) >= client_balance + PRICE - gas_allowance
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@trio_test(timeout=120)
async def test_a_disputed_job_whose_referee_is_gone_is_lapsed_and_settled_by_a_keeper(tmp_path):
    from contracts import DisputeOpened, DisputeStatus, NodeStatus, Role
    from node.roles.chain import _embedded_chain
    from node.roles.context import encode_record
    from node.storage import Job

    async with trio.open_nursery() as nursery:
        watcher = await start_node(nursery, tmp_path / "auditor", ["auditor"])
        await role(watcher, "auditor")
        shared = _embedded_chain()
        binding = context_of(watcher).chain
        # A job played on the real contract by accounts of no node here: two providers commit
        # different roots, one disputes the other, and the client (its referee) vanishes.
        as_ = binding.settlement.connect
        job_id = bytes(range(32))
        with shared.lock:
            # Accounts no node registered (this process's chain is shared by its tests' nodes).
            client, p1, p2 = [a for a in shared.chain.accounts
                              if binding.settlement.node(a).status == NodeStatus.NONE][-3:]
            for i, p in enumerate((p1, p2)):
                as_(p).register(bytes([i + 1]) * 32, Role.PROVIDER, stake=2 * ETHER)
            now = shared.chain.now()
            as_(client).open_job(job_id, price=PRICE, providers_wanted=2, provider_stake=STAKE, accept_by=now + 100,
                                 commit_by=now + 200, challenge_by=now + 300, ruling_period=50)
            for p in (p1, p2):
                as_(p).accept(job_id)
            for i, p in enumerate((p1, p2)):
                as_(p).commit(job_id, bytes([9 + i]) * 32)
            dispute = as_(p1).open_dispute(job_id, p2).one(DisputeOpened).dispute_id
        # The node knows the job (an auditor's row); nobody rules by the ruling deadline.
        await watcher.storage.run(watcher.storage.put_job, Job(job_id, encode_record({}), "auditor", "watching"))
        advance_embedded_chain(400)
        await wait_for(lambda: (k := keeper_of(watcher)) is not None and job_id in k.settled, timeout=60)
        s = binding.settlement
        assert (await binding.run(s.dispute, dispute)).status == DisputeStatus.LAPSED
        assert (await binding.run(s.job, job_id)).status == JobStatus.FINALIZED  # both roots stood: both paid
        for p in (p1, p2):
            assert (await binding.run(s.node, p)).locked == 0
            assert await binding.run(s.credit_of, p) == PRICE // 2
        nursery.cancel_scope.cancel()
