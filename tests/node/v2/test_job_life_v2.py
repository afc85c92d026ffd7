"""A job's life on settlement version 2 in the node: the recorded step hashes of a provider's run,
and the whole job end to end (a client and two providers in one process, real libp2p hosts on
loopback, the embedded EVM running GavelSettlementV2)."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import trio

from contracts import ProviderPaid
from node.cheats import STRATEGIES
from node.roles.jobfiles import load_training
from node.roles.v2.step_hashes import RecordedRun, StepHashes, StepHashesMissing
from repops_cupy.checkpoint import load_checkpoint

from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.v2.offer import SignedOffer

from ..conftest import trio_test
from ..test_roles_support import advance_embedded_chain, in_a_thread, role, start_node, wait_for, write_job


def test_an_honest_run_records_every_steps_state_and_reads_them_by_interval(tmp_path):
    training = load_training(write_job(tmp_path))
    run = RecordedRun(training, None, tmp_path / "job" / "run", job_id=bytes(32))
    trace = in_a_thread(lambda: run.train_sync(threading.Event()))
    hashes = StepHashes.in_dir(tmp_path / "job", run.schedule)
    assert hashes.complete()
    checkpoints = [bytes.fromhex(c["state_hash"]) for c in trace.checkpoints]
    for c in range(run.schedule.intervals):
        interval = hashes.interval(c)
        assert len(interval) == len(run.schedule.interval_steps(c)) + 1
        assert interval[0] == checkpoints[c] and interval[-1] == checkpoints[c + 1]
    # a middle step's hash is the state that step produced (replayed from its checkpoint)
    state, _, _ = load_checkpoint(run.run_dir / trace.checkpoints[0]["file"])
    assert hashes.get(1) == training.state_hashes(state, 1)[0]


def test_a_cheats_run_records_its_own_deviating_steps(tmp_path):
    training = load_training(write_job(tmp_path))
    honest = RecordedRun(training, None, tmp_path / "honest" / "run", job_id=bytes(32))
    in_a_thread(lambda: honest.train_sync(threading.Event()))
    cheat = RecordedRun(training, None, tmp_path / "cheat" / "run", job_id=bytes(32), cheat="perturb-weight",
                        cheats=STRATEGIES)
    trace = in_a_thread(lambda: cheat.train_sync(threading.Event()))
    recorded = StepHashes.in_dir(tmp_path / "cheat", cheat.schedule)
    assert recorded.interval(cheat.schedule.intervals - 1)[-1] == bytes.fromhex(trace.checkpoints[-1]["state_hash"])
    ours = StepHashes.in_dir(tmp_path / "honest", honest.schedule)
    assert recorded.get(cheat.schedule.steps) != ours.get(honest.schedule.steps)


def test_a_step_never_recorded_is_missing_not_zero(tmp_path):
    from protocol import CheckpointSchedule

    hashes = StepHashes.in_dir(tmp_path, CheckpointSchedule(4, 2))
    hashes.record(0, b"\x01" * 32)
    try:
        hashes.interval(0)
    except StepHashesMissing as missing:
        assert "[1, 2]" in str(missing)
    else:
        raise AssertionError("an interval with unrecorded steps was read")


# -- the whole job, end to end -------------------------------------------------------------

@pytest.mark.slow
@trio_test(timeout=300)
async def test_a_job_on_settlement_2_goes_from_offer_to_payment(tmp_path):
    from contracts.settlement_v2 import JobStatus, SeatStatus, trace_root

    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
        hub = client.host.listen_addrs
        providers = [await start_node(nursery, tmp_path / f"p{i}", ["provider"], bootstrap=hub, settlement="2")
                     for i in range(2)]
        client_role = await role(client, "client")
        provider_roles = [await role(p, "provider") for p in providers]
        s = client_role.ctx.chain.settlement
        accounts = [r.ctx.chain.account for r in provider_roles]
        before = {a: s.node(a) for a in accounts}
        job_id = await client_role.submit(job_file, SubmitOptions(providers=2, accept_within=120))
        cj = client_role.jobs[job_id]
        assert sorted(s.seats(job_id)) == sorted(accounts)
        for p in providers:  # each provider revealed and filled its trained record
            await wait_for(lambda p=p: job_id in context_of(p).trained, timeout=120)
        await wait_for(lambda: cj.state == "verified", timeout=120)
        for seat in cj.record["seats"].values():  # each sampled interval's steps list came signed by its seat
            held = {slot: values for slot, values in client_role.statements.held.items()
                    if slot[:2] == (job_id, seat["account"])}
            assert sorted(slot[3] for slot in held) == sorted(int(c) for c in seat["samples"])
            assert all(len(values) == 1 for values in held.values())  # an honest seat tells one list a slot
        info = s.job(job_id)
        advance_embedded_chain(info.final_by - s.chain.now() + 10)  # every window closed: the keeper settles
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name and result["ended"] == "finalized"
        terms = SignedOffer.decode(cj.record["offer"]).terms
        pay = terms.price // terms.providers_wanted
        assert result["credited"] == terms.price - 2 * pay
        for account in accounts:
            seat = s.seat(job_id, account)
            assert seat.status == SeatStatus.PAID
            after = s.node(account)
            assert after.locked == before[account].locked and after.stake == before[account].stake
        paid = {e.event.provider: e.event.amount for e in s.events(0, None)
                if isinstance(e.event, ProviderPaid) and e.event.job_id == job_id}
        assert paid == {a: pay for a in accounts}
        # the result: the final checkpoint of a standing seat, trace.json written from the chain
        seat_key = result["result_from"]
        account = cj.record["seats"][seat_key]["account"]
        chain_trace = [bytes.fromhex(h) for h in cj.record["seats"][seat_key]["trace"]]
        assert trace_root(chain_trace) == s.seat(job_id, account).trace_root
        written = json.loads((Path(result["result_dir"]) / "trace.json").read_text())
        assert [bytes.fromhex(c["state_hash"]) for c in written["checkpoints"]] == chain_trace
        _, _, digest = load_checkpoint(Path(result["result_dir"]) / "weights.safetensors")
        assert digest == chain_trace[-1]
        samples = cj.record["seats"][seat_key]["samples"]  # the client replayed m intervals itself
        assert samples and all(v is True for v in samples.values())
        nursery.cancel_scope.cancel()


@trio_test(timeout=120)
async def test_one_client_opens_two_refereed_jobs_at_once(tmp_path):
    # Each open tops its referee bond up from the free stake it reads: with one bond's worth free,
    # two opens read together both found enough, and the second openJob reverted short of it.
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
        client_role = await role(client, "client")
        chain = context_of(client).chain
        opened: list[bytes] = []

        async def open_jobs(count: int) -> None:
            async with trio.open_nursery() as submits:
                for _ in range(count):
                    submits.start_soon(client_role.submit, job_file, SubmitOptions(providers=1, accept_within=60),
                                       lambda cj: opened.append(cj.job_id))
                await wait_for(lambda: len(opened) == want, timeout=60)
                submits.cancel_scope.cancel()

        want = 1
        await open_jobs(1)
        bond = (await chain.run(chain.settlement.node, chain.account)).locked
        await chain.run(chain.settlement.add_stake, bond)  # one more bond's worth free
        want = 3
        await open_jobs(2)
        assert len(set(opened)) == 3
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@trio_test(timeout=300)
async def test_a_client_whose_samples_never_arrived_takes_the_result_of_the_seat_the_job_paid(tmp_path, caplog):
    # A congested network (seen in a loaded in-process testnet): every fetch of the seat's data times out
    # through the job's windows and the demand comes after its deadline, which the contract refuses; the
    # honest seat is paid. The client then fetches the paid seat's final weights once the job is final.
    from contracts.settlement_v2 import JobStatus, SeatStatus

    from node.errors import PeerTimeout

    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
        provider = await start_node(nursery, tmp_path / "p0", ["provider"], bootstrap=client.host.listen_addrs,
                                    settlement="2")
        client_role = await role(client, "client")
        s = client_role.ctx.chain.settlement
        job_data = context_of(client).job_data
        real_fetch_item, real_demand = job_data.fetch_item, client_role._demand
        congested = True

        async def fetch_item(*args, **kwargs):
            if congested:
                raise PeerTimeout("opening /gavel/job-data/2.0.0 took over 12.4 s")
            return await real_fetch_item(*args, **kwargs)

        async def late_demand(cj, seat, item):  # the real demand, sent after the seat's challenge window
            late = s.seat(cj.job_id, seat["account"]).challenge_by + 1 - s.chain.now()
            if late > 0:
                advance_embedded_chain(late)
            await real_demand(cj, seat, item)

        job_data.fetch_item, client_role._demand = fetch_item, late_demand
        job_id = await client_role.submit(job_file, SubmitOptions(providers=1, accept_within=120))
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=120)
        assert "result_from" not in cj.record and "DemandDeadlinePassed" in caplog.text
        (seat,) = cj.record["seats"].values()
        assert "demand" not in seat and any(v is None for v in seat["samples"].values())
        congested = False
        advance_embedded_chain(s.job(job_id).final_by - s.chain.now() + 10)  # the keepers settle
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        assert s.seat(job_id, seat["account"]).status == SeatStatus.PAID
        assert result["result_from"] in cj.record["seats"]
        _, _, digest = load_checkpoint(Path(result["result_dir"]) / "weights.safetensors")
        assert digest.hex() == seat["trace"][-1]
        assert json.loads((Path(result["result_dir"]) / "trace.json").read_text())["checkpoints"]
        nursery.cancel_scope.cancel()
