"""Copy-root (economics §6, §12): a seat that wants another's root learns nothing before every
commitment is fixed (the honest provider serves no trace and no item before its reveal), and a
commitment copied from the honest seat names the honest account, so the copier cannot open it
even with the honest trace and salt in hand after the reveal: it forfeits (NoReveal)."""
from __future__ import annotations

import pytest
import trio

from contracts import SettlementError
from contracts.settlement_v2 import ForfeitReason, SeatStatus, TraceRevealed
from node.errors import PeerError
from node.framing import pack
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.job_protocols import JOB_LIMITS, JOB_PROTOCOL, trace_request

from ..conftest import trio_test
from ..test_roles_support import wait_for
from . import Books, on_chain, settled, start_network, submit_with_adversary_seat


@trio_test(timeout=240)
async def test_a_copied_commitment_cannot_be_revealed_and_nothing_is_served_before_the_reveal(tmp_path):
    async with trio.open_nursery() as nursery:
        net = await start_network(nursery, tmp_path)
        client, honest, copier = net.accounts
        books = await Books.open(net.settlement, net.accounts)
        job_id, _ = await submit_with_adversary_seat(net, SubmitOptions(providers=2, accept_within=120))
        s = net.settlement
        for _ in range(1200):
            if (await on_chain(s.seat, job_id, honest)).status == SeatStatus.COMMITTED:
                break
            await trio.sleep(0.1)
        honest_seat = await on_chain(s.seat, job_id, honest)
        assert honest_seat.status == SeatStatus.COMMITTED and honest_seat.trace_root == bytes(32)

        # before every seat committed, the honest provider hands out neither a trace nor an item
        asker = net.client.ctx
        peer = net.provider.ctx.host.peer_id
        await asker.reach(peer, net.provider.ctx.host.listen_addrs)
        with pytest.raises(PeerError, match="does not serve 'trace'"):
            await asker.host.request(peer, JOB_PROTOCOL, pack(trace_request(job_id)), limits=JOB_LIMITS)
        for item in (1, (await on_chain(s.job, job_id)).trace_length):  # checkpoint 0, the result
            with pytest.raises(PeerError, match="refused"):  # no seat revealed here yet
                await asker.job_data.fetch_item(job_id, honest, item, peer=peer)

        # the copier commits the honest seat's commitment; the reveal window opens, the honest seat reveals
        await on_chain(net.adversary.commit, job_id, honest_seat.commitment)
        await wait_for(lambda: job_id in context_of(net.provider.ctx.node).trained, timeout=60)

        def honest_reveal():
            (logged,) = [e for e in s.events(0, None) if isinstance(e.event, TraceRevealed)
                         and e.event.job_id == job_id and e.event.seat == honest]
            return s.revealed_trace(logged), s.call_of(logged)[1][2]

        trace, salt = await on_chain(honest_reveal)
        with pytest.raises(SettlementError):  # the commitment binds the honest account, not the copier's
            await on_chain(net.adversary.reveal, job_id, list(trace), salt)

        summary = await settled(net, job_id)
        assert (await on_chain(s.seat, job_id, copier)).forfeit == ForfeitReason.NO_REVEAL
        assert (await on_chain(s.seat, job_id, honest)).status == SeatStatus.PAID
        assert summary["status"] == "FINALIZED" and summary["result_from"]
        info = await on_chain(s.job, job_id)
        pay, stake = info.price // 2, info.provider_stake
        nets = await books.nets()
        assert nets[copier] == -stake < 0
        assert nets[honest] == pay > 0
        assert nets[client] >= -pay  # it paid one seat, for a result it holds
        nursery.cancel_scope.cancel()
