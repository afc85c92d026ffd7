"""Garbage commit (economics §6, §7, §12): a seat reveals a list that is no computation (``trace[0]``
right, since the reveal checks it; the rest junk). No checkpoint hashes to it: the client's own
sampling asks the seat for one, it cannot serve it, the client demands it on chain and the seat
forfeits (Unavailable): it loses its stake, the client gets its p back and w·S, the honest seat
is paid. (The claim game on interval 0, the auditor's, is the other way it loses.)"""
from __future__ import annotations

import os

import pytest
import trio

from contracts.settlement_v2 import ForfeitReason, SeatStatus, commitment_of, trace_root
from node.roles.client import SubmitOptions
from node.roles.context import context_of

from ..conftest import trio_test
from ..test_roles_support import wait_for
from . import Books, on_chain, settled, start_network, submit_with_adversary_seat


@pytest.mark.slow
@trio_test(timeout=240)
async def test_a_garbage_trace_cannot_be_served_and_its_seat_forfeits_to_the_clients_demand(tmp_path):
    async with trio.open_nursery() as nursery:
        net = await start_network(nursery, tmp_path)
        client, honest, garbage = net.accounts
        books = await Books.open(net.settlement, net.accounts)
        job_id, cj = await submit_with_adversary_seat(net, SubmitOptions(providers=2, accept_within=120))
        s = net.settlement
        info = await on_chain(s.job, job_id)
        garbage_trace = [info.initial_state] + [os.urandom(32) for _ in range(info.trace_length - 1)]
        salt = os.urandom(32)
        await on_chain(net.adversary.commit, job_id, commitment_of(job_id, garbage, trace_root(garbage_trace), salt))
        # the reveal window opens once the honest seat committed too (its training may be slow under load)
        while (await on_chain(s.job, job_id)).commitments < 2:
            await trio.sleep(0.1)
        await on_chain(net.adversary.reveal, job_id, garbage_trace, salt)
        assert (await on_chain(s.seat, job_id, garbage)).status == SeatStatus.REVEALED
        await wait_for(lambda: job_id in context_of(net.provider.ctx.node).trained, timeout=60)
        await wait_for(lambda: cj.state == "verified", timeout=60)
        (demanded,) = [seat for seat in cj.record["seats"].values() if seat.get("demand")]
        assert demanded["account"] == garbage  # the honest seat served every sample; the garbage seat none

        summary = await settled(net, job_id)
        assert summary["status"] == "FINALIZED" and summary["result_from"]
        assert (await on_chain(s.seat, job_id, garbage)).forfeit == ForfeitReason.UNAVAILABLE
        assert (await on_chain(s.seat, job_id, honest)).status == SeatStatus.PAID
        nets = await books.nets()
        pay, stake = info.price // 2, info.provider_stake
        share = stake * (await on_chain(s.chain_settings)).winner_share_bps // 10_000
        assert nets[garbage] == -stake < 0
        assert nets[honest] == pay > 0
        assert nets[client] == -pay + share  # it paid the honest seat for the result; got p and w·S back
        nursery.cancel_scope.cancel()
