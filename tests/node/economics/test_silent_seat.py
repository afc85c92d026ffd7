"""Silent seat (economics §12): a seat commits and never reveals. `closeSeat` at `revealBy` forfeits
it (NoReveal), settle pays revealed seats only: the client gets the silent seat's p back and w·S,
the honest seat is paid, the silent one loses its stake."""
from __future__ import annotations

import os

import trio

from contracts.settlement_v2 import ForfeitReason, SeatStatus, commitment_of, trace_root
from node.roles.client import SubmitOptions
from node.roles.context import context_of

from ..conftest import trio_test
from ..test_roles_support import wait_for
from . import Books, on_chain, settled, start_network, submit_with_adversary_seat


@trio_test(timeout=240)
async def test_a_seat_that_commits_and_never_reveals_forfeits_and_the_client_is_refunded(tmp_path):
    async with trio.open_nursery() as nursery:
        net = await start_network(nursery, tmp_path)
        client, honest, silent = net.accounts
        books = await Books.open(net.settlement, net.accounts)
        job_id, cj = await submit_with_adversary_seat(net, SubmitOptions(providers=2, accept_within=120))
        info = await on_chain(net.settlement.job, job_id)
        # the silent seat commits to something it will never open
        fake = [info.initial_state] + [os.urandom(32) for _ in range(info.trace_length - 1)]
        await on_chain(net.adversary.commit, job_id, commitment_of(job_id, silent, trace_root(fake), os.urandom(32)))
        await wait_for(lambda: job_id in context_of(net.provider.ctx.node).trained, timeout=120)

        summary = await settled(net, job_id)
        assert summary["status"] == "FINALIZED"
        silent_seat = await on_chain(net.settlement.seat, job_id, silent)
        assert silent_seat.forfeit == ForfeitReason.NO_REVEAL
        assert (await on_chain(net.settlement.seat, job_id, honest)).status == SeatStatus.PAID
        pay, stake = info.price // 2, info.provider_stake
        share = stake * (await on_chain(net.settlement.chain_settings)).winner_share_bps // 10_000
        nets = await books.nets()
        assert nets[silent] == -stake < 0
        assert nets[honest] == pay > 0
        assert nets[client] == -pay + share  # paid one seat for the result; the silent one's p and w·S back
        assert summary["credited"] == info.price - pay  # ClientRefunded: P − p·paid (w·S is credited apart)
        nursery.cancel_scope.cancel()
