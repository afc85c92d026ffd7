"""Late reveal (economics §5, §6, §12): a seat that computed the right trace and commits to it, but
holds its reveal back (to see the others' first, or to shorten the audits of its root), finds the
window closed: the reveal after ``revealBy`` is refused, the keeper closes the seat (NoReveal), it
loses its stake; the client gets its p back and w·S, the honest seat is paid."""
from __future__ import annotations

import os

import pytest
import trio

from contracts import ContractRevert
from contracts.settlement_v2 import ForfeitReason, SeatStatus, commitment_of, trace_root
from node.roles.client import SubmitOptions
from node.roles.context import context_of

from ..conftest import trio_test
from ..test_roles_support import wait_for
from ..v2.test_witness import keepers_quick
from . import Books, advance, on_chain, settled, start_network, submit_with_adversary_seat
from .test_stonewalling import computed_trace


@trio_test(timeout=240)
async def test_a_reveal_after_reveal_by_is_refused_and_the_late_seat_forfeits(tmp_path):
    async with trio.open_nursery() as nursery:
        net = await start_network(nursery, tmp_path)
        await keepers_quick(net.client.ctx, net.provider.ctx)
        client, honest, late = net.accounts
        books = await Books.open(net.settlement, net.accounts)
        job_id, cj = await submit_with_adversary_seat(net, SubmitOptions(providers=2, accept_within=120))
        s = net.settlement
        info = await on_chain(s.job, job_id)
        trace, salt = await trio.to_thread.run_sync(computed_trace, net.job_file), os.urandom(32)
        await on_chain(net.adversary.commit, job_id, commitment_of(job_id, late, trace_root(trace), salt))
        await wait_for(lambda: job_id in context_of(net.provider.ctx.node).trained, timeout=60)  # honest revealed

        reveal_by = (await on_chain(s.deadlines, job_id)).reveal_by
        await advance(max(0, reveal_by - await on_chain(s.chain.now)))
        with pytest.raises(ContractRevert) as refused:
            await on_chain(net.adversary.reveal, job_id, trace, salt)  # the right trace, opened too late
        assert refused.value.name == "JobDeadlinePassed"
        assert (await on_chain(s.seat, job_id, late)).status == SeatStatus.COMMITTED

        summary = await settled(net, job_id)
        assert summary["status"] == "FINALIZED" and summary["result_from"]
        assert (await on_chain(s.seat, job_id, late)).forfeit == ForfeitReason.NO_REVEAL
        assert (await on_chain(s.seat, job_id, honest)).status == SeatStatus.PAID
        pay, stake = info.price // 2, info.provider_stake
        share = stake * (await on_chain(s.chain_settings)).winner_share_bps // 10_000
        nets = await books.nets()
        assert nets[late] == -stake < 0
        assert nets[honest] == pay > 0
        assert nets[client] == -pay + share  # paid the honest seat; the late seat's p back and w·S
        assert summary["credited"] == info.price - pay
        nursery.cancel_scope.cancel()
