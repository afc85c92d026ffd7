"""Issue 21, on anvil: a node follows its chain's blocks. A reorganisation that drops the
block in which a job was settled is said in one line, and the keeper, which had marked the
job final, reads it again and settles it again on the new branch. A final status counts
only once it is the chain watch's ``confirmations`` blocks deep."""
from __future__ import annotations

import os

import pytest
import trio

from contracts import AnvilProcess, JobStatus, RpcChain, Settlement, find_anvil
from node.roles.context import context_of, encode_record
from node.roles.keeper import keeper_of
from node.storage import Job

from .conftest import trio_test
from .test_e2e_network import rows
from .test_job_faults_chain import Lines
from .test_roles_support import role, start_node, wait_for

pytestmark = [pytest.mark.anvil,
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]
ETHER = 10**18


async def node_and_unfilled_job(nursery, tmp_path, url: str):
    """A client node on ``url`` whose database holds a job another account opened on chain,
    one seat wanted and none taken: its keeper refunds it once acceptance closed."""
    node = await start_node(nursery, tmp_path / "node", ["client"], chain=url)
    await role(node, "client")
    await wait_for(lambda: keeper_of(node) is not None, timeout=60)
    ctx = context_of(node)
    rpc = RpcChain(url)
    opener = Settlement(rpc, ctx.chain.address, rpc.accounts[3])
    job_id = os.urandom(32)
    now = rpc.now()
    opener.open_job(job_id, price=ETHER, providers_wanted=1, provider_stake=ETHER, accept_by=now + 30,
                    commit_by=now + 60, challenge_by=now + 90, ruling_period=30)
    await node.storage.run(node.storage.put_job, Job(job_id, encode_record({"note": "opened by another account"}),
                                                     "client", "unfilled"))
    return node, rpc, opener, job_id


def final_block(node, job_id: bytes) -> int | None:
    found = rows(node.config.data_dir, "SELECT block FROM final_on_chain WHERE job_id=?", job_id)
    return found[0][0] if found else None


@pytest.mark.slow
@trio_test(timeout=240)
async def test_a_reorganisation_that_drops_a_settlement_is_said_once_and_the_keeper_settles_again(tmp_path, monkeypatch):
    lines = Lines("node.roles.chain_watch", monkeypatch)
    with AnvilProcess() as anvil:
        async with trio.open_nursery() as nursery:
            node, rpc, opener, job_id = await node_and_unfilled_job(nursery, tmp_path, anvil.url)
            watch, keeper, storage = context_of(node).chain_watch, keeper_of(node), node.storage
            settled_when_stored = []  # how many settlements the keeper had said as each final row was written
            mark_final = storage.mark_final

            def mark_final_seen(job, status, block):
                settled_when_stored.append(keeper.settled.count(job))
                mark_final(job, status, block)
            monkeypatch.setattr(storage, "mark_final", mark_final_seen)
            opened_at = rpc.block_number()
            await wait_for(lambda: max(watch.blocks, default=0) >= opened_at, timeout=30)
            mark = rpc.snapshot()  # the branch the chain goes back to: the job open, acceptance not closed

            rpc.advance_time(60)  # acceptance closes; the keeper refunds the job
            await wait_for(lambda: storage.final_status(job_id) == "REFUNDED", timeout=60)
            assert keeper.settled == [job_id]
            settled_at = final_block(node, job_id)
            assert settled_at > opened_at
            await wait_for(lambda: max(watch.blocks) >= settled_at, timeout=30)

            rpc.revert(mark)  # the settlement's block is gone; a new branch grows from the mark
            rpc.advance_time(60)
            rpc.mine()
            rpc.mine()
            await wait_for(lambda: keeper.settled.count(job_id) == 2, timeout=90)
            assert opener.job(job_id).status == JobStatus.REFUNDED  # settled again, on the new branch
            await wait_for(lambda: storage.final_status(job_id) == "REFUNDED", timeout=30)
            # A reader of the row written from another thread sees the settlement that led to it.
            assert settled_when_stored == [1, 2]
            (line,) = [m for m in lines.lines if "reorganised" in m]
            (first, last), = watch.reorgs
            assert line == (f"the settlement chain reorganised: blocks {first}..{last} replaced; "
                            f"reading again what was decided in them")
            assert opened_at < first <= settled_at <= last  # the settlement's block among those replaced
            nursery.cancel_scope.cancel()


@pytest.mark.slow
@trio_test(timeout=240)
async def test_a_final_status_is_acted_on_only_once_it_is_confirmations_deep(tmp_path):
    with AnvilProcess() as anvil:
        async with trio.open_nursery() as nursery:
            node, rpc, opener, job_id = await node_and_unfilled_job(nursery, tmp_path, anvil.url)
            watch, keeper, storage = context_of(node).chain_watch, keeper_of(node), node.storage
            watch.confirmations = 2
            rpc.advance_time(60)
            await wait_for(lambda: job_id in keeper.settled, timeout=60)
            assert opener.job(job_id).status == JobStatus.REFUNDED
            settled_at = rpc.block_number()  # nothing else is mined on this quiet chain
            passes = keeper.passes
            await wait_for(lambda: keeper.passes >= passes + 2, timeout=60)
            assert storage.final_status(job_id) is None  # REFUNDED, but not two blocks deep yet
            rpc.mine()
            passes = keeper.passes
            await wait_for(lambda: keeper.passes >= passes + 2, timeout=60)
            assert storage.final_status(job_id) is None  # one block deep
            rpc.mine()
            await wait_for(lambda: storage.final_status(job_id) == "REFUNDED", timeout=60)
            assert final_block(node, job_id) == settled_at  # recorded where it was first seen final
            assert keeper.settled == [job_id]
            nursery.cancel_scope.cancel()
