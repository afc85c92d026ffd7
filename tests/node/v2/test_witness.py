"""Section 7 after ``serveBy`` (docs/economics.md): the demand keeper's moves read from the contract's
guards, its pushes on a hand-driven job (a seat that calls no witness is failed, a silent witness is
timed out, nothing sent reverts), and the witness flow over libp2p on the embedded EVM: a seat that
refuses its demander calls a witness, the drawn node fetches, relays and attests, the demander gets
the item from the witness, and D pays the witness its fee and the seat its calls; an item the seat
withholds from the witness too is attested "not served" before attestBy."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trio.testing
from eth_utils import keccak

from contracts import ETHER, Role
from contracts.settlement_v2 import ForfeitReason, JobOpened, commitment_of, trace_root
from contracts.settlement_v2_demands import DataDemanded, DemandInfo, DemandStage, WitnessDrawn
from node.config import Settings
from node.datadir import init_datadir, load_seed
from node.errors import PeerError
from node.roles.chain import DEV_WINNER_SHARE_BPS, open_binding_sync
from node.roles.jobfiles import encode_bundle, job_dir
from node.roles.v2.data import DATA_LIMITS, DATA_PROTOCOL, DataRequest
from node.roles.v2.demands import (
    CALL_WITNESS, DRAW_WITNESS, FAIL_DEMAND, TIMEOUT_WITNESS, DemandKeeper, demand_keeper_of, due_move,
)
from node.roles.v2.keeper import keeper_v2_of
from node.roles.v2.trained import TrainedJob
from node.roles.v2.witness import WitnessDuty, witness_of
from node.testnet.ledger_v2 import LedgerV2
from node.errors import BadMessage, RemoteError
from node.framing import pack, unpack
from node.runtime import Node
from node.streams import RequestRefused
from protocol import Identity
from protocol.economics import DRAW_DELAY, ESTIMATED_GAS
from repops_cupy.checkpoint import load_checkpoint

from ..conftest import trio_test
from ..economics import Books, on_chain
from ...contracts.settlement_world_v2 import default_terms, trace_of
from ..test_roles_support import TINY_JOB, start_node
from .claim_world import EventPump
from .test_data_v2 import ready, signed_spec_of, write_run
from .test_follower import fresh_contract
from .test_keeper_v2 import NODE_STAKE, Job

ME, OTHER, SEAT = "0x" + "aa" * 20, "0x" + "bb" * 20, "0x" + "cc" * 20
NOBODY = "0x" + "00" * 20
MARGIN = 10
WITNESS_FEE = 10**15
GAMMA = 10**9


def demand(stage: DemandStage, *, deadline: int = 100, armed: int = 0, witness: str = NOBODY) -> DemandInfo:
    return DemandInfo(job_id=b"\x01" * 32, seat=SEAT, item=1, stage=stage, draws=0, demander=OTHER,
                      deadline=deadline, witness=witness, armed_block=armed, bond=1)


def test_due_moves_follow_the_contracts_guards():
    def move(info, who=ME, now=100, block=50):
        return due_move(info, account=who, now=now, block=block, margin=MARGIN)

    opened = demand(DemandStage.OPEN)  # deadline: serveBy
    assert move(opened, SEAT, now=99) is None  # the demander may still release
    assert move(opened, SEAT, now=100) == move(opened, SEAT, now=109) == CALL_WITNESS
    assert move(opened, ME, now=105) is None  # only the seat calls a witness
    assert move(opened, ME, now=110) == FAIL_DEMAND and move(opened, SEAT, now=110) is None  # never its own
    drawing = demand(DemandStage.DRAWING, deadline=200, armed=48)  # deadline: drawBy
    assert move(drawing, SEAT, block=49) is None  # it would land in block 50, its seed block (48 + DRAW_DELAY)
    assert move(drawing, SEAT, block=50) == DRAW_WITNESS and move(drawing, ME, block=50) is None
    assert move(replace(drawing, armed_block=1), SEAT, block=300) == DRAW_WITNESS  # stale seed: re-armed
    assert move(drawing, ME, now=200) == FAIL_DEMAND and move(drawing, SEAT, now=200) is None
    witnessing = demand(DemandStage.WITNESSING, deadline=150, witness=OTHER)  # deadline: attestBy
    assert move(witnessing, ME, now=149) is None
    assert move(witnessing, ME, now=150) == move(witnessing, SEAT, now=150) == TIMEOUT_WITNESS
    assert move(witnessing, OTHER.upper().replace("0X", "0x"), now=150) is None  # a witness does not time itself out
    refused = demand(DemandStage.REFUSED)
    assert move(refused, ME) == FAIL_DEMAND and move(refused, SEAT) is None
    for ended in (DemandStage.RELEASED, DemandStage.SERVED, DemandStage.FAILED, DemandStage.VOID):
        assert move(demand(ended), ME, now=10**9) is None


def test_a_data_request_names_the_seat_and_a_malformed_one_is_the_peers_fault():
    asked = DataRequest(b"\x01" * 32, 3, SEAT)
    assert DataRequest.from_wire(unpack(pack(asked.to_wire())), "peer") == asked
    assert DataRequest.from_wire({"job": b"\x01" * 32, "item": 3}, "peer").seat == ""  # the server's own seat
    for bad in ({"job": b"\x01" * 32, "item": 3, "seat": 7}, {"job": b"\x01" * 31, "item": 3}, [b"\x01" * 32, 3]):
        with pytest.raises(BadMessage, match="a job-data request is"):
            DataRequest.from_wire(bad, "peer")


def _revealed(job: Job) -> list[bytes]:
    jid, trace = job.job_id, trace_of("honest")
    for p in job.providers:
        p.settlement.accept(jid)
    salts = [os.urandom(32) for _ in job.providers]
    for p, salt in zip(job.providers, salts):
        p.settlement.commit(jid, commitment_of(jid, p.account, trace_root(trace), salt))
    for p, salt in zip(job.providers, salts):
        p.settlement.reveal(jid, trace, salt)
    return trace


@trio_test(timeout=60)
async def test_the_keeper_fails_a_seat_that_calls_no_witness_and_times_out_a_silent_one_sending_nothing_that_reverts():
    job = Job("demand keeper", witness_fee=WITNESS_FEE)
    s, jid, chain = job.client.settlement, job.job_id, job.chain
    _revealed(job)
    settings = Settings(settlement="2", contract=s.address)
    demander = open_binding_sync(settings, b"demand keeper demander")
    demander.ensure_registered_sync(b"\x21" * 32, Role.AUDITOR, NODE_STAKE)
    silent = open_binding_sync(settings, b"demand keeper silent witness")
    silent.ensure_funds_sync(ETHER)
    silent.settlement.register(b"\x22" * 32, Role.REFEREE, stake=ETHER)
    mute, calling = job.providers
    pump = EventPump(s)
    keepers = {b: DemandKeeper(b) for b in (demander, mute, calling, silent)}
    for keeper in keepers.values():
        keeper.subscribe(pump)

    async def keep(binding) -> list[str]:
        await pump.deliver()
        return [move for move, _ in await keepers[binding].keep_once()]

    bond = s.demand_bond_of(jid)
    first = demander.settlement.demand_data(jid, mute.account, 1).one(DataDemanded)  # the mute seat runs nothing
    second = demander.settlement.demand_data(jid, calling.account, 1).one(DataDemanded)
    assert [await keep(b) for b in (demander, calling, silent)] == [[], [], []]  # the demander may still release
    job.at(second.serve_by)
    assert await keep(demander) == []  # the seats' time to call a witness
    assert await keep(calling) == [CALL_WITNESS]
    assert await keep(calling) == []  # the draw's seed block is not mined yet
    for _ in range(DRAW_DELAY):
        chain.mine()
    assert await keep(calling) == [DRAW_WITNESS]
    (drawn,) = [e.event for e in s.events(0) if isinstance(e.event, WitnessDrawn)]
    assert drawn.demand_id == second.demand_id and drawn.witness == silent.account

    # The mute seat neither served nor called a witness: failed by anyone once serveBy + Δ passed.
    job.at(first.serve_by + s.chain_settings().margin)
    assert await keep(mute) == []  # a seat never fails its own demand
    assert await keep(demander) == [FAIL_DEMAND]
    assert s.seat(jid, mute.account).forfeit == ForfeitReason.UNAVAILABLE
    assert s.credit_of(demander.account) == job.terms.provider_stake * DEV_WINNER_SHARE_BPS // 10_000

    # The drawn witness stays silent: timed out, its bond burned; the draws that follow find nobody
    # else eligible, so the demand voids: D back, the calling seat stands.
    assert await keep(silent) == []  # a witness does not time itself out
    job.at(drawn.attest_by)
    assert await keep(demander) == [TIMEOUT_WITNESS]
    assert s.node(silent.account).stake == ETHER - bond
    while s.demand(second.demand_id).stage == DemandStage.DRAWING:
        for _ in range(DRAW_DELAY):
            chain.mine()
        assert await keep(calling) == [DRAW_WITNESS]
    assert s.demand(second.demand_id).stage == DemandStage.VOID
    assert s.seat(jid, calling.account).forfeit == ForfeitReason.NONE
    assert s.node(demander.account).free_stake == NODE_STAKE  # both bonds back
    assert [await keep(b) for b in keepers] == [[]] * len(keepers)
    assert not any(k.kept for k in keepers.values())  # every demand ended: dropped on the next pass
    assert all(k.refused == 0 for k in keepers.values())


async def start_witness_node(nursery: trio.Nursery, directory: Path, *, stake: int = ETHER, **settings) -> Node:
    """A node registered in the contract's referee registry (where witnesses are drawn from) before it
    starts; its own registration then finds the account registered with its key."""
    values = {"roles": ["client"], "metrics_listen": "", "advert_interval": 0.5, "settlement": "2", **settings}
    config = init_datadir(directory, values)
    seed = load_seed(config)
    binding = open_binding_sync(config, seed)
    await binding.run(binding.ensure_funds_sync, stake)
    await binding.run(lambda: binding.settlement.register(Identity(seed).node_id, Role.CLIENT | Role.REFEREE,
                                                          stake=stake))
    node = Node(config, seed)
    node.record_interval = 0.2
    await nursery.start(node.run)
    return node


def refuse(ctx, refused) -> None:
    """The seat stonewalls: a request for which ``refused(peer, item)`` holds is refused, every other
    one served as its data service does."""
    async def serve(peer, request: bytes) -> bytes:
        if refused(peer, unpack(request).get("item")):
            raise RequestRefused("not serving you")
        return await ctx.job_data.serve(peer, request)

    ctx.host.handle_requests(DATA_PROTOCOL, serve, DATA_LIMITS)


async def keepers_quick(*contexts) -> None:
    """The nodes' keepers pass often: a window of Δ (10 s here) is not missed on a busy machine."""
    with trio.fail_after(30):
        for ctx in contexts:
            while demand_keeper_of(ctx) is None or witness_of(ctx) is None or keeper_v2_of(ctx.node) is None:
                await trio.sleep(0.05)
            demand_keeper_of(ctx).poll = keeper_v2_of(ctx.node).poll = 0.1
            witness_of(ctx).retry = 0.2


async def wait_stage(ctx, demand_id: bytes, *stages: DemandStage) -> DemandInfo:
    chain = ctx.chain
    with trio.fail_after(60):
        while (info := await chain.run(chain.settlement.demand, demand_id)).stage not in stages:
            await trio.sleep(0.05)
    return info


@trio_test(timeout=120)
async def test_the_witness_relays_what_the_seat_serves_it_attests_what_it_does_not_and_d_pays_it_and_the_seat(tmp_path):
    contract = fresh_contract()  # its referee registry holds only this test's witness
    async with trio.open_nursery() as nursery:
        seat_node = await start_node(nursery, tmp_path / "seat", ["provider"], settlement="2", contract=contract)
        hub = seat_node.host.listen_addrs
        demander_node = await start_node(nursery, tmp_path / "demander", ["client"], settlement="2",
                                         contract=contract, bootstrap=hub)
        witness_node = await start_witness_node(nursery, tmp_path / "witness", contract=contract,
                                                bootstrap=hub + demander_node.host.listen_addrs)
        seat, demander, witness = [await ready(n) for n in (seat_node, demander_node, witness_node)]
        await keepers_quick(seat, demander, witness)
        client = open_binding_sync(Settings(settlement="2", contract=contract), b"witness flow client")
        client_key = os.urandom(32)
        await client.run(client.ensure_registered_sync, client_key, Role.CLIENT, 0)

        # A one-seat job revealed by hand, its checkpoints in the seat's job directory.
        trace, files = write_run(tmp_path / "files", "seat", 3)
        spec = signed_spec_of(tmp_path)
        terms = default_terms(client_key, client_referees=False, nonce=int.from_bytes(os.urandom(7), "big"),
                              initial_state=trace[0], steps=2, checkpoint_every=1, providers_wanted=1,
                              spec_hash=keccak(spec), witness_fee=WITNESS_FEE, gas_price_cap=GAMMA)
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
        # The seat refuses its demander everything, and the witness checkpoint 2 (item 3).
        refuse(seat, lambda peer, item: peer == demander_node.host.peer_id or item == 3)

        accounts = [demander.chain.account, seat.chain.account, witness.chain.account]
        books = await Books.open(s, accounts)
        d = demander.chain
        bond = await d.run(d.settlement.demand_bond_of, jid)
        await d.run(d.settlement.add_stake, 2 * bond)
        served_id, refused_id = [(await d.run(d.settlement.demand_data, jid, seat.chain.account, item)).one(
            DataDemanded) for item in (2, 3)]
        await on_chain(s.chain.mine, max(served_id.serve_by, refused_id.serve_by))  # the demander got nothing
        served_id, refused_id = served_id.demand_id, refused_id.demand_id
        for demand_id in (served_id, refused_id):
            await wait_stage(seat, demand_id, DemandStage.DRAWING)  # the seat called a witness
        for _ in range(DRAW_DELAY):
            await on_chain(s.chain.mine)
        info = await wait_stage(seat, served_id, DemandStage.SERVED)
        assert info.witness == witness.chain.account
        with trio.fail_after(30):
            while served_id not in demander.job_data.received:
                await trio.sleep(0.05)
        path = demander.job_data.received[served_id]
        assert load_checkpoint(path)[2] == trace[1]  # checkpoint 1, relayed by the witness and checked
        assert served_id not in demander.job_data.released  # nothing came from the seat
        witness_peer = await demander.job_data.peer_of_seat(witness.chain.account)
        with pytest.raises(RemoteError, match="item 3 of seat .* is not relayed here"):  # it relays what it attested
            await demander.job_data.fetch_item(jid, seat.chain.account, 3, peer=witness_peer)

        # Checkpoint 2 never reaches the witness: at attestBy − Δ it attests "not served"; the redraws
        # find nobody else in the registry and the demand voids (D and the refuser's bond back).
        info = await wait_stage(seat, refused_id, DemandStage.WITNESSING)
        margin = (await on_chain(s.chain_settings)).margin
        await on_chain(s.chain.mine, info.deadline - margin)
        await wait_stage(seat, refused_id, DemandStage.DRAWING)
        assert witness_of(witness).attested == {served_id: True, refused_id: False}
        assert await on_chain(s.refusers_of, refused_id) == (witness.chain.account,)
        ledger = LedgerV2()  # the testnet's books: a refusal is no end, another witness is drawn
        ledger.feed(await on_chain(s.events, 0, None), 0.0)
        assert ledger.demands[served_id].outcome == "served" and ledger.demands[refused_id].outcome == "open"
        while (await on_chain(s.demand, refused_id)).stage == DemandStage.DRAWING:
            for _ in range(DRAW_DELAY):
                await on_chain(s.chain.mine)
            await trio.sleep(0.2)
        assert (await on_chain(s.demand, refused_id)).stage == DemandStage.VOID
        ledger.feed(await on_chain(s.events, ledger.last_block + 1, None), 1.0)
        assert ledger.demands[refused_id].outcome == "void"
        assert [m for m, _ in demand_keeper_of(seat).sent][:4] == [CALL_WITNESS, CALL_WITNESS, DRAW_WITNESS,
                                                                   DRAW_WITNESS]
        assert all(demand_keeper_of(c).refused == 0 for c in (seat, demander, witness))

        nets = await books.nets()
        calls, attest = GAMMA * ESTIMATED_GAS.call_witness, GAMMA * ESTIMATED_GAS.attest
        assert bond == WITNESS_FEE + calls + attest
        assert nets[seat.chain.account] == calls  # its callWitness and drawWitness, at γ
        assert nets[witness.chain.account] == WITNESS_FEE + attest > 0  # its fee and its attestation's gas
        assert nets[demander.chain.account] == -bond  # §7's residual: D, unless the seat forfeits in the job
        assert (await on_chain(s.node, witness.chain.account)).free_stake == ETHER  # both its bonds unlocked
        nursery.cancel_scope.cancel()


class _StallingSeat:
    """A seat whose stream opens and then never answers: each fetch hangs until cancelled."""

    def __init__(self) -> None:
        self.attempts = 0
        self.relayed: list = []

    async def fetch_checked(self, job_id, seat, item):
        self.attempts += 1
        await trio.sleep_forever()

    async def relay(self, *args) -> None:
        self.relayed.append(args)


class _RefusingSeat(_StallingSeat):
    """A seat that refuses each fetch after ``after`` seconds."""

    def __init__(self, after: float) -> None:
        super().__init__()
        self.after = after

    async def fetch_checked(self, job_id, seat, item):
        self.attempts += 1
        await trio.sleep(self.after)
        raise PeerError("request refused: no seat of the job here")


class _ClockChain:
    """What `WitnessDuty._fetch` reads of the binding: the chain's time, here trio's (a MockClock),
    each read taking ``latency`` seconds (a loaded machine's queue of chain calls)."""

    def __init__(self, latency: float = 0.0) -> None:
        self.chain = self
        self.latency = latency

    def now(self) -> int:
        return int(trio.current_time())

    async def run(self, fn, *args):
        await trio.sleep(self.latency)
        return fn(*args)


def test_a_fetch_that_hangs_is_cut_off_at_the_witness_last_second_so_it_can_still_attest():
    # Seen in a loaded testnet: one stream to a stalling seat outlasted attestBy, the attestation
    # came too late and the honest witness's bond D was burned by timeoutWitness.
    seat, chain = _StallingSeat(), _ClockChain()
    duty = WitnessDuty(chain, seat, spawn=None, retry=2.0)
    last = 60
    info = demand(DemandStage.WITNESSING, deadline=last + MARGIN, witness=ME)

    async def main() -> tuple[bool, float]:
        with trio.fail_after(10 * last):  # virtual seconds: a fetch waited out never returns
            served = await duty._fetch(b"\x07" * 32, info, last=last)
        return served, trio.current_time()

    served, when = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert served is False and seat.relayed == []
    assert last <= when < last + duty.retry + 1  # given up at `last`, with Δ left for attestServed
    assert seat.attempts == 1  # the one attempt never returned: it was cancelled, not waited out


def test_a_seat_refusing_faster_than_the_clock_is_read_still_gets_its_attestation_at_the_last_second():
    # Seen in a loaded testnet: each refusal came before the attempt's racing read of the chain's
    # clock, cancelled it, and the witness never saw `last` pass; timeoutWitness burned its bond.
    seat, chain = _RefusingSeat(after=0.5), _ClockChain(latency=1.0)
    duty = WitnessDuty(chain, seat, spawn=None, retry=2.0)
    last = 60
    info = demand(DemandStage.WITNESSING, deadline=last + MARGIN, witness=ME)

    async def main() -> tuple[bool, float]:
        with trio.fail_after(10 * last):
            served = await duty._fetch(b"\x07" * 32, info, last=last)
        return served, trio.current_time()

    served, when = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert served is False and seat.relayed == []
    assert last <= when < last + duty.retry + seat.after + 2 * chain.latency
    assert seat.attempts > 1  # it asked again while the window was open
