"""The version-2 duties survive a restart: each duty is made, handed its events by a real chain
follower over the node's database, dropped, and made anew on the same data directory with a new
follower on the same database. The new follower resumes after the last event handed and hands
none of them again, so what the new duty knows of its work came from its own file; the contract's
state proves that it finishes the work."""
from __future__ import annotations

import json
import logging
import os
from contextlib import asynccontextmanager

import trio

from eth_utils import keccak

from contracts import ETHER, Role
from contracts.settlement_v2 import ForfeitReason, JobOpened, commitment_of, trace_root
from contracts.settlement_v2_demands import DataDemanded, DemandStage
from contracts.settlement_v2_games import ClaimStatus
from node.config import Settings
from node.datadir import load_seed, open_datadir
from node.framing import pack, unpack
from node.roles.chain import open_binding_sync
from node.roles.jobfiles import encode_bundle, job_dir
from node.roles.v2 import data, demands, game_keeper, referee, witness
from node.roles.v2.demands import FAIL_DEMAND, DemandKeeper
from node.roles.v2.follower import ChainFollower
from node.roles.v2.game_keeper import DRAW_REFEREE, RESOLVE_GAME, TIMEOUT, TIMEOUT_REFEREE, GameKeeper
from node.roles.v2.trained import TrainedJob
from node.roles.v2.witness import witness_of
from node.runtime import Node
from node.storage import Storage
from repops_cupy.checkpoint import load_checkpoint
from protocol.economics import DRAW_DELAY
from tests.contracts.game_world_v2 import CHEAT, TRUTH, WRONG_NODE, register_auditors

from ..conftest import trio_test
from ..economics import on_chain
from ..test_roles_support import TINY_JOB, start_node, wait_for
from ...contracts.settlement_world_v2 import default_terms
from .claim_world import GameTable, binding, cast_v2, _stage_v2  # noqa: F401  (the fixtures)
from .test_data_v2 import ready, signed_spec_of, write_run
from .test_follower import Bound, fresh_contract
from .test_keeper_v2 import NODE_STAKE, Job
from .test_defender import runs  # noqa: F401  (a small MLP job's honest and cheating runs)
from .test_referee_v2 import C_BAD, S_BAD, _picked
from .test_witness import WITNESS_FEE, _revealed, keepers_quick, refuse, start_witness_node, wait_stage


@asynccontextmanager
async def following(chain, storage: Storage, duty):
    """`duty` subscribed to a chain follower of the node's database, which ran until it handed
    every event on chain; the follower (and with it the duty's life) stops at the block's end."""
    follower = ChainFollower(Bound(chain, storage), poll=0.05)
    duty.subscribe(follower)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower.run)
        while follower.position is None:  # resumed first: with nothing new on chain no read would wake the wait
            await trio.sleep(0.01)
        await follower.wait_caught_up()
        yield follower
        nursery.cancel_scope.cancel()


def stored(directory, name: str) -> dict:
    return json.loads((directory / name).read_text())


@trio_test(60)
async def test_a_restarted_game_keeper_ends_the_game_from_what_it_wrote_sending_nothing_that_reverts(
        cast_v2, tmp_path, caplog):
    """The client never rules: the auditor's keeper times it out, then restarts. Without what it wrote
    (the game, its answered claims, the client's bond burned) it would keep nothing, or time the
    client out again and the claims as unanswered, each refused; it draws, times out and resolves."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    cheater = w.providers[1]
    t = GameTable(w, (TRUTH, CHEAT))
    game, step, node = t.path_to_evidence(auditor, cheater, C_BAD, S_BAD, WRONG_NODE)
    t.after(w.settlement.claim(node).rule_by)
    directory = tmp_path / "auditor"
    caplog.set_level(logging.INFO, logger="node.roles.v2.game_keeper")
    with Storage(tmp_path / "db") as storage:
        keeper = GameKeeper(binding(w, auditor), data_dir=directory)
        async with following(keeper.chain, storage, keeper) as follower:
            assert await keeper.keep_once() == [(TIMEOUT_REFEREE, node)]
            await follower.wait_caught_up()  # RefereeTimedOut: the client holds no claim of the job now
        assert stored(directory, game_keeper.STATE_FILE)["kept"] == [game.hex()]

        keeper = GameKeeper(binding(w, auditor), data_dir=directory)
        moves = []
        async with following(keeper.chain, storage, keeper) as follower:
            assert follower.handed == 0  # nothing handed again: the keeper's games are its file's
            for _ in range(40):  # the chain is read and moved under its lock: the follower reads it meanwhile
                if (await keeper.chain.run(w.settlement.claim, game)).status != ClaimStatus.OPEN:
                    break
                moves += await keeper.keep_once()
                await keeper.chain.run(lambda: w.chain.mine(w.chain.now() + 600))
                await follower.wait_caught_up()
    assert [m for m, _ in moves] == [DRAW_REFEREE] * 3 + [TIMEOUT, TIMEOUT, RESOLVE_GAME]
    assert [c for _, c in moves[-3:]] == [node, step, game]
    assert all(w.settlement.claim(c).status == ClaimStatus.VOID for c in (node, step, game))
    assert not [r for r in caplog.records if "refused" in r.getMessage()]
    assert stored(directory, game_keeper.STATE_FILE) == {"games": {}, "kept": []}  # the ended game pruned
    w.assert_every_coin_accounted()


@trio_test(60)
async def test_a_restarted_demand_keeper_fails_the_demand_it_kept_and_prunes_it(tmp_path):
    job = Job("restart demand keeper")
    s, jid = job.client.settlement, job.job_id
    _revealed(job)
    mute = job.providers[0]  # runs nothing: neither serves nor calls a witness
    demander = open_binding_sync(Settings(settlement="2", contract=s.address), b"restart demand keeper demander")
    demander.ensure_registered_sync(os.urandom(32), Role.AUDITOR, NODE_STAKE)
    demanded = demander.settlement.demand_data(jid, mute.account, 1).one(DataDemanded)
    directory = tmp_path / "demander"
    with Storage(tmp_path / "db") as storage:
        keeper = DemandKeeper(demander, data_dir=directory)
        async with following(demander, storage, keeper):
            assert await keeper.keep_once() == []  # serveBy not passed: the seat may still serve
        assert stored(directory, demands.STATE_FILE) == {"kept": [demanded.demand_id.hex()]}

        job.at(demanded.serve_by + s.chain_settings().margin)
        keeper = DemandKeeper(demander, data_dir=directory)
        async with following(demander, storage, keeper) as follower:
            assert follower.handed == 0
            assert await keeper.keep_once() == [(FAIL_DEMAND, demanded.demand_id)]
            assert await keeper.keep_once() == []  # ended: dropped, nothing sent twice
    assert s.demand(demanded.demand_id).stage == DemandStage.FAILED
    assert s.seat(jid, mute.account).forfeit == ForfeitReason.UNAVAILABLE
    assert stored(directory, demands.STATE_FILE) == {"kept": []} and keeper.refused == 0


async def one_seat_job(seat, seat_node, tmp_path) -> bytes:
    """A one-seat job opened by a client of its own and revealed by ``seat``'s node by hand, its
    checkpoints in the seat's job directory (as test_witness plays it)."""
    client = open_binding_sync(Settings(settlement="2", contract=seat.chain.settlement.address), os.urandom(32))
    client_key = os.urandom(32)
    await client.run(client.ensure_registered_sync, client_key, Role.CLIENT, 0)
    trace, files = write_run(tmp_path / "files", "seat", 3)
    spec = signed_spec_of(tmp_path)
    terms = default_terms(client_key, client_referees=False, nonce=int.from_bytes(os.urandom(7), "big"),
                          initial_state=trace[0], steps=2, checkpoint_every=1, providers_wanted=1,
                          spec_hash=keccak(spec), witness_fee=WITNESS_FEE, gas_price_cap=10**9)
    s = seat.chain.settlement
    jid = (await client.run(client.settlement.open_job, terms, spec)).one(JobOpened).job_id
    directory = job_dir(seat_node.config.data_dir, jid)
    directory.parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "files").rename(directory)
    salt = os.urandom(32)
    await seat.chain.run(s.accept, jid)
    await seat.chain.run(s.commit, jid, commitment_of(jid, seat.chain.account, trace_root(trace), salt))
    bundle_id = await seat_node.blobs.store.put(encode_bundle(TINY_JOB, {}))
    await seat.chain.run(s.reveal, jid, trace, salt)
    await seat.trained.add(TrainedJob(jid, directory, tuple(trace), salt, bundle_id, tuple(files)))
    return jid


@trio_test(timeout=90)
async def test_a_witness_restarted_mid_duty_takes_its_draw_up_again_and_attests_before_attest_by(tmp_path):
    """The seat withholds the item from the witness. The witness's node goes down while it waits for the
    item and is restarted on its data directory: handed no WitnessDrawn again, it still attests (not
    served, at attestBy − Δ) instead of being timed out at attestBy with its bond burned."""
    contract = fresh_contract()  # its referee registry holds only this test's witness
    async with trio.open_nursery() as nursery:
        seat_node = await start_node(nursery, tmp_path / "seat", ["provider"], settlement="2", contract=contract)
        seat = await ready(seat_node)
        directory = tmp_path / "witness"
        with trio.CancelScope() as witness_life:
            async with trio.open_nursery() as inner:
                witness_node = await start_witness_node(inner, directory, contract=contract,
                                                        bootstrap=seat_node.host.listen_addrs)
                first = await ready(witness_node)
                await keepers_quick(seat, first)
                refuse(seat, lambda peer, item: peer == witness_node.host.peer_id)
                jid = await one_seat_job(seat, seat_node, tmp_path)
                demander = open_binding_sync(Settings(settlement="2", contract=contract), os.urandom(32))
                await demander.run(demander.ensure_registered_sync, os.urandom(32), Role.AUDITOR, NODE_STAKE)
                demanded = (await demander.run(demander.settlement.demand_data, jid, seat.chain.account, 2)).one(
                    DataDemanded)  # the demander runs no node: it never fetches nor releases
                demand_id, s = demanded.demand_id, seat.chain.settlement
                await on_chain(s.chain.mine, demanded.serve_by)
                await wait_stage(seat, demand_id, DemandStage.DRAWING)  # the seat called a witness
                for _ in range(DRAW_DELAY):
                    await on_chain(s.chain.mine)
                info = await wait_stage(seat, demand_id, DemandStage.WITNESSING)
                account = first.chain.account
                assert info.witness == account
                await wait_for(lambda: (directory / witness.STATE_FILE).exists(), timeout=30)
                assert stored(directory, witness.STATE_FILE) == {"pending": [demand_id.hex()]}
                witness_life.cancel()  # down mid-duty, before attestBy − Δ

        config = open_datadir(directory)
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        again = await ready(restarted)
        await keepers_quick(again)
        assert (await on_chain(s.demand, demand_id)).stage == DemandStage.WITNESSING  # it still waits for the item
        await on_chain(s.chain.mine, info.deadline - (await on_chain(s.chain_settings)).margin)
        await wait_stage(seat, demand_id, DemandStage.DRAWING, DemandStage.VOID)
        assert await on_chain(s.refusers_of, demand_id) == (account,)  # its attestation, not a timeout
        assert witness_of(again).attested == {demand_id: False}
        assert (await on_chain(s.node, account)).stake == ETHER  # nothing burned
        assert stored(directory, witness.STATE_FILE) == {"pending": []}
        nursery.cancel_scope.cancel()


@trio_test(timeout=90)
async def test_a_restarted_data_service_reads_the_reveal_back_from_the_chain_and_keeps_serving_its_relays(tmp_path):
    """A node fetches a seat's checkpoint and relays it (as a witness does), goes down and starts again
    on its data directory: its follower hands no TraceRevealed again, yet it fetches and checks another
    checkpoint of the seat (the reveal read back from the chain) and still serves what it relayed."""
    async with trio.open_nursery() as nursery:
        seat_node = await start_node(nursery, tmp_path / "seat", ["provider"], settlement="2")
        seat = await ready(seat_node)
        directory = tmp_path / "fetcher"
        with trio.CancelScope() as first_life:
            async with trio.open_nursery() as inner:
                first_node = await start_witness_node(inner, directory, bootstrap=seat_node.host.listen_addrs)
                first = await ready(first_node)
                jid = await one_seat_job(seat, seat_node, tmp_path)
                account, trace = seat.chain.account, seat.trained[jid].trace
                await first.follower.wait_caught_up()
                _, blob_id = await first.job_data.fetch_checked(jid, account, 2)  # checkpoint 1
                await first.job_data.relay(jid, account, 2, blob_id)
                first_life.cancel()
        assert stored(directory, data.STATE_FILE) == {"relays": [[jid.hex(), account.lower(), 2, blob_id.hex()]]}

        config = open_datadir(directory)
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        again = await ready(restarted)
        await again.follower.wait_caught_up()
        assert again.follower.handed == 0  # nothing handed again: the reveal is not in memory
        path = await again.job_data.fetch_item(jid, account, 3)  # checkpoint 2, checked against trace[2]
        assert load_checkpoint(path)[2] == trace[2]
        asked = pack(data.DataRequest(jid, 2, account).to_wire())  # the demander's request, as it arrives
        assert unpack(await again.job_data.serve(seat_node.host.peer_id, asked)) == {"blob": blob_id}
        nursery.cancel_scope.cancel()


@trio_test(120)
async def test_a_restarted_client_referee_holds_and_rules_a_claim_whose_evidence_is_posted_after_the_restart(
        cast_v2, runs, tmp_path):
    """The client's referee duty learns its job from JobOpened and is restarted before any game: the
    new duty is handed no JobOpened, and still holds the node claim whose EvidencePosted comes later
    (the cheater posts its hash and never sends the evidence) and rules it at ruleBy − Δ."""
    from node.roles.v2.referee import NO_EVIDENCE, RULE, RefereeDuty

    from .claim_world import ClaimRoles, EventPump
    from .test_defender import CHEATED_STEP, auditor_of, revealed_job

    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    cheater = w.providers[1]
    roles = ClaimRoles(w, jid, {w.providers[0]: honest, cheater: cheat}, tmp_path, honest.training, referee=False)
    roles.silent.add(cheater)
    client_dir = tmp_path / w.client
    first = RefereeDuty(binding(w, w.client), client_dir, roles.spawn, roles.training_of)
    pump = EventPump(w.settlement)
    first.subscribe(pump)
    await pump.deliver()
    assert stored(client_dir, referee.STATE_FILE) == {"jobs": [jid.hex()]}
    await roles.play()  # the node's follower is past JobOpened: the restarted duty is handed it no more

    duty = roles.referee(w.client)
    path = _picked(w, auditor, jid, cheat, CHEATED_STEP, cheated_node)
    moves = []
    for _ in range(3):  # game, step claim, node claim: each picked once the defenders' list is on chain
        moves.append(next(path))
        await roles.play()
    game, claim = moves[0], moves[-1]
    assert claim in duty.holding and not w.settlement.claim(claim).ruled
    w.mine_at(w.settlement.claim(claim).rule_by - w.settlement.chain_settings().margin)
    (ruled,) = await duty.rule_overdue()
    assert ruled.move == RULE and ruled.judgement == NO_EVIDENCE
    assert w.settlement.claim(claim).ruled
    roles.keep(auditor)
    await roles.finish([game])
    roles.settle()
    await roles.play()  # JobSettled: the job is forgotten
    assert stored(client_dir, referee.STATE_FILE) == {"jobs": []}
