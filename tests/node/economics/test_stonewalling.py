"""Stonewalling (economics §7, §12): seats compute right and withhold their data. One job, three
seats: an honest one and two stonewallers.

- One refuses the client's demand and calls no witness: it forfeits (Unavailable) and loses its
  stake; the client gets its p back and w·S.
- One refuses the client but calls a witness and serves it: it cheated nowhere and loses nothing on
  chain; the data gets out (the client receives the item from the witness); the client's loss is
  §7's residual D = f_W + γ·(G_callWitness + G_attest), which nobody can tell from a lying
  demander's, and the witness is paid its fee and gas.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from contracts import ETHER, Role
from contracts.settlement_v2 import ForfeitReason, JobOpened, SeatStatus, commitment_of, trace_root
from contracts.settlement_v2_demands import DataDemanded, DemandStage
from node.roles.client import SubmitOptions
from protocol import Identity
from protocol.economics import DRAW_DELAY, ESTIMATED_GAS

from ..conftest import trio_test
from ..test_roles_support import role, start_node, wait_for, write_job
from ..v2.test_data_v2 import ready
from ..v2.test_follower import fresh_contract
from ..v2.test_witness import keepers_quick, refuse, start_witness_node, wait_stage
from . import Books, Network, on_chain, settled, submit_with_adversary_seat


def computed_trace(job_file: Path) -> list[bytes]:
    """The job's true trace, as the adversary computes it itself: the state hash at each checkpoint."""
    from node.roles.jobfiles import load_training
    from repops_cupy.hashing import state_hash
    from repops_cupy.train import checkpoint_steps

    training = load_training(job_file)
    state = training.initial_state()
    hashes = [state_hash(state)] + training.state_hashes(state, training.spec.steps)
    return [hashes[step] for step in checkpoint_steps(training.spec.steps, training.spec.checkpoint_interval)]


async def committed_and_revealed(net: Network, job_id: bytes, trace: list[bytes]) -> None:
    """The adversary's seat commits ``trace`` and reveals it once the honest seat committed too."""
    s, salt = net.settlement, os.urandom(32)
    await on_chain(net.adversary.commit, job_id, commitment_of(job_id, net.adversary.account, trace_root(trace), salt))
    for _ in range(600):  # the reveal window opens once every seat committed
        if (info := await on_chain(s.job, job_id)).commitments == info.providers_wanted:
            break
        await trio.sleep(0.1)
    await on_chain(net.adversary.reveal, job_id, trace, salt)


async def stonewalling_network(nursery: trio.Nursery, tmp_path: Path) -> tuple[Network, Any, Any]:
    """On a contract whose referee registry holds only this test's witness node: a client, an honest
    provider, a stonewalling provider node (it serves everyone but the client) and the adversary's
    account of `start_network`, which runs no node at all. Returns (network, stonewall, witness)."""
    contract = fresh_contract()
    client_node = await start_node(nursery, tmp_path / "client", ["client"], settlement="2", contract=contract)
    hub = client_node.host.listen_addrs
    honest_node, stonewall_node = [
        await start_node(nursery, tmp_path / name, ["provider"], settlement="2", contract=contract, bootstrap=hub)
        for name in ("honest", "stonewall")]
    witness_node = await start_witness_node(nursery, tmp_path / "witness", contract=contract,
                                            bootstrap=hub + stonewall_node.host.listen_addrs)
    client_role, honest_role = await role(client_node, "client"), await role(honest_node, "provider")
    stonewall, witness = await ready(stonewall_node), await ready(witness_node)
    await keepers_quick(client_role.ctx, honest_role.ctx, stonewall, witness)
    refuse(stonewall, lambda peer, item: peer == client_node.host.peer_id)
    s = client_role.ctx.chain.settlement
    identity = Identity.generate()

    def make_adversary() -> Any:
        adversary = s.connect(s.chain.new_account(100 * ETHER))
        adversary.register(identity.node_id, Role.PROVIDER | Role.CLIENT, stake=5 * ETHER)
        return adversary

    net = Network(client_role, honest_role, s, await on_chain(make_adversary), identity, write_job(tmp_path))
    return net, stonewall, witness


def watch_retries(net: Network, job_id: bytes, seats: tuple[str, ...]) -> dict[str, bool]:
    """Wraps the client's data-service fetch: for each of `seats`, whether its item was demanded on chain
    when the client asked for it a second time."""
    service = net.client.ctx.job_data
    fetch, calls, seen = service.fetch_item, {seat: 0 for seat in seats}, {}

    async def counted(job: bytes, seat: str, item: int, **kwargs: Any) -> Any:
        if job == job_id and seat in calls:
            calls[seat] += 1
            if calls[seat] == 2:
                seen[seat] = any(isinstance(e.event, DataDemanded) and e.event.seat == seat and e.event.job_id == job
                                 for e in await on_chain(net.settlement.events, 0, None))
        return await fetch(job, seat, item, **kwargs)

    service.fetch_item = counted
    return seen


# The step cost the terms declare, times the estimate: 1 makes the seats' challenge window (a whole
# replay, s·T·σ + 2Δ) shorter than one more fetch attempt and a demand's Δ, so a seat that answered
# nothing is demanded before the client tries again; 400 makes it minutes, and the seat is retried first.
WINDOW_CLOSING, WINDOW_OPEN = 1.0, 400.0


@pytest.mark.slow
@pytest.mark.parametrize("step_cost_scale", [WINDOW_CLOSING, WINDOW_OPEN])
@trio_test(timeout=240)
async def test_a_stonewalling_seat_forfeits_unless_it_serves_a_witness_and_then_the_client_pays_only_the_residual(
        tmp_path, step_cost_scale):
    async with trio.open_nursery() as nursery:
        net, stonewall, witness = await stonewalling_network(nursery, tmp_path)
        client, honest, mute = net.accounts
        walled = stonewall.chain.account
        books = await Books.open(net.settlement, net.accounts + [walled, witness.chain.account])
        s = net.settlement
        job_id, cj = await submit_with_adversary_seat(net, SubmitOptions(providers=3, accept_within=120,
                                                                         step_cost_scale=step_cost_scale))
        assert set(await on_chain(s.seats, job_id)) == {honest, walled, mute}
        trace = await trio.to_thread.run_sync(computed_trace, net.job_file)
        assert trace[0] == (await on_chain(s.job, job_id)).initial_state
        demanded_before_retry = watch_retries(net, job_id, (walled, mute))
        await committed_and_revealed(net, job_id, trace)  # a right trace: the mute seat's only fault is silence

        with trio.fail_after(120):  # the client samples every seat: both stonewallers are demanded
            while len(found := {e.event.seat: e.event for e in await on_chain(s.events, 0, None)
                                if isinstance(e.event, DataDemanded) and e.event.job_id == job_id}) < 2:
                await trio.sleep(0.2)
        assert set(found) == {walled, mute} and {d.demander for d in found.values()} == {client}
        roots = {(await on_chain(s.seat, job_id, seat)).trace_root for seat in (honest, walled, mute)}
        assert len(roots) == 1  # all three computed the same: withholding data is the only fault here
        await on_chain(s.chain.mine, max(d.serve_by for d in found.values()))  # the client got nothing by serveBy
        witnessed = found[walled].demand_id
        await wait_stage(stonewall, witnessed, DemandStage.DRAWING)  # the stonewalling node called a witness
        for _ in range(DRAW_DELAY):
            await on_chain(s.chain.mine)
        served = await wait_stage(stonewall, witnessed, DemandStage.SERVED, DemandStage.REFUSED)
        assert served.stage == DemandStage.SERVED and served.witness == witness.chain.account
        await wait_for(lambda: witnessed in net.client.ctx.job_data.received, timeout=30)  # the data got out

        summary = await settled(net, job_id)
        assert summary["status"] == "FINALIZED" and summary["result_from"]
        # the seat that refused was demanded before the client tried again (retries on a loaded network
        # can outlast the window demands open in); the one that answered nothing, after its retries,
        # unless one more attempt could outlast its window
        assert demanded_before_retry == {walled: True, mute: step_cost_scale == WINDOW_CLOSING}
        assert (await on_chain(s.seat, job_id, mute)).forfeit == ForfeitReason.UNAVAILABLE
        for seat in (honest, walled):
            assert (await on_chain(s.seat, job_id, seat)).status == SeatStatus.PAID
        (terms,) = [e.event.terms for e in await on_chain(s.events, 0, None)
                    if isinstance(e.event, JobOpened) and e.event.job_id == job_id]
        pay, stake, bond = terms.price // 3, terms.provider_stake, await on_chain(s.demand_bond_of, job_id)
        share = stake * (await on_chain(s.chain_settings)).winner_share_bps // 10_000
        calls, attest = terms.gas_price_cap * ESTIMATED_GAS.call_witness, terms.gas_price_cap * ESTIMATED_GAS.attest
        assert bond == terms.witness_fee + calls + attest
        nets = await books.nets()
        assert nets[mute] == -stake < 0  # refused and called no witness: Unavailable
        assert nets[walled] == pay + calls >= 0  # cheated nowhere: paid, and its calls paid from D
        assert nets[honest] == pay > 0
        assert nets[witness.chain.account] == terms.witness_fee + attest > 0  # its fee and its attestation's gas
        # Two seats paid; the mute seat's p back and w·S of its lock; §7's residual D, f_W + γ·(G_cw + G_attest),
        # for the item the witness relayed (the other demand's D came back).
        assert nets[client] == -2 * pay + share - bond
        nursery.cancel_scope.cancel()
