"""Front-running the job id (economics §4, §12): an attacker opens a job with the victim's next nonce
under its own account. Ids are keyed by the caller, so the victim's job opens under its own id and
goes through; the victim's signed offer cannot be re-addressed to the attacker's job (the
provider refuses it); the attacker's job is taken by nobody and refunded, its gas spent."""
from __future__ import annotations

import dataclasses

import pytest
import trio

from contracts.settlement_v2 import JobOpened, JobStatus, SeatStatus
from node.errors import PeerError
from node.framing import pack
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.jobfiles import load_training
from node.roles.job_protocols import JOB_LIMITS, JOB_PROTOCOL, Offer
from node.roles.v2.client import CATCH_BPS, terms_for
from node.roles.v2.offer import SignedOffer
from node.training_oracle import job_terms
from protocol import DisputeRules

from ..conftest import trio_test
from ..test_roles_support import wait_for
from . import Books, on_chain, settled, start_network


@trio_test(timeout=240)
async def test_a_front_runner_opens_a_job_nobody_takes_and_the_victims_job_goes_through(tmp_path):
    async with trio.open_nursery() as nursery:
        net = await start_network(nursery, tmp_path)
        victim, honest, attacker = net.accounts
        s = net.settlement
        books = await Books.open(s, net.accounts)
        wallet_before = await on_chain(s.chain.balance, attacker)

        # the attacker opens first, with the nonce the victim's client will take next
        nonce = int(net.client.nonces.path.read_text()) if net.client.nonces.path.exists() else 1
        training = await trio.to_thread.run_sync(load_training, net.job_file)
        spec = job_terms(training, net.adversary_identity, rules=DisputeRules(10_000, 60_000), nonce=nonce)
        settings = await on_chain(s.chain_settings)
        stolen = terms_for(training, spec, nonce=nonce, providers=1, price=10**18, stake=10**18,
                           catch_bps=CATCH_BPS, accept_window=120, settings=settings)
        opened = await on_chain(net.adversary.open_job, stolen, spec.encode())
        attacker_job = opened.one(JobOpened).job_id

        job_id = await net.client.submit(net.job_file, SubmitOptions(providers=1, accept_within=120))
        cj = net.client.jobs[job_id]
        assert job_id != attacker_job and SignedOffer.decode(cj.record["offer"]).terms.nonce == nonce

        # the victim's signed offer, re-addressed to the attacker's account (its job's id): refused
        victim_offer = SignedOffer.decode(cj.record["offer"])
        readdressed = dataclasses.replace(victim_offer, client_account=attacker)
        assert readdressed.job_id == attacker_job
        wire = Offer(readdressed.encode(), cj.record["bundle"], s.address, attacker, [])
        peer = net.provider.ctx.host.peer_id
        await net.client.ctx.reach(peer, net.provider.ctx.host.listen_addrs)
        with pytest.raises(PeerError, match="signature"):
            await net.client.ctx.host.request(peer, JOB_PROTOCOL, pack(wire.to_wire()), limits=JOB_LIMITS)

        await wait_for(lambda: job_id in context_of(net.provider.ctx.node).trained, timeout=60)
        summary = await settled(net, job_id)
        assert summary["status"] == "FINALIZED" and summary["result_from"]
        assert (await on_chain(s.seat, job_id, honest)).status == SeatStatus.PAID
        assert await on_chain(s.seats, attacker_job) == ()
        await on_chain(net.adversary.settle, attacker_job)  # nobody took it: its escrow comes back
        assert (await on_chain(s.job, attacker_job)).status == JobStatus.REFUNDED

        nets = await books.nets()
        spent = wallet_before - await on_chain(s.chain.balance, attacker)
        assert nets[attacker] == 0 and spent > 0  # its escrow back, its gas gone
        assert nets[attacker] - spent < 0
        price = SignedOffer.decode(cj.record["offer"]).terms.price
        assert nets[honest] == price > 0  # the one seat's pay
        assert nets[victim] == -price  # it paid for the result it holds, nothing more
        nursery.cancel_scope.cancel()
