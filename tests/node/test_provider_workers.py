"""A provider that trains with several workers (issue 19): the bits of one, and a memory limit."""
from __future__ import annotations

import threading

import pytest
import trio

from contracts import JobStatus
from node.framing import unpack
from node.roles.client import SubmitOptions
from node.roles.jobfiles import load_training
from node.roles.provider import step_peak_bytes
from node.roles.runner import JobRun
from node.streams import RequestRefused
from repops_cupy.memory import peak_bytes
from repops_cupy.train import replay, train

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, in_a_thread, role, start_node, wait_for, write_job

pytest.importorskip("torch.distributed")



def test_a_run_on_two_workers_gives_the_one_worker_root_and_one_worker_replays_it(tmp_path):
    job_file = write_job(tmp_path)
    alone = train(load_training(job_file).spec, tmp_path / "alone")
    run = JobRun(load_training(job_file), None, tmp_path / "run", job_id=bytes(32), workers=2)
    assert run.workers == 2
    trace = in_a_thread(lambda: run.train_sync(threading.Event()))
    assert trace.root == alone.root
    # an auditor's replay of one interval, on one worker, agrees with the two-worker run
    result = replay(load_training(job_file).spec, tmp_path / "run", 1)
    assert result.matches


def test_the_peak_estimate_a_provider_checks_is_the_step_graphs():
    class NoStepGraph:  # a rounding-log job's program trains a torch module: nothing to estimate
        pass

    assert step_peak_bytes(NoStepGraph()) is None


@trio_test(timeout=120)
async def test_a_provider_refuses_a_job_whose_step_needs_more_memory_than_it_has(tmp_path):
    training = load_training(write_job(tmp_path))
    need = peak_bytes(training.graph)
    async with trio.open_nursery() as nursery:
        small = await start_node(nursery, tmp_path / "small", ["provider"], memory_capacity_mb=need / 2 / 2**20)
        provider = await role(small, "provider")
        assert step_peak_bytes(training) == need
        with pytest.raises(RequestRefused, match=r"the job needs about .* per step \(peak estimate from its step graph\)"):
            await provider._check_memory(training)
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        large = await start_node(nursery, tmp_path / "large", ["provider"], memory_capacity_mb=2 * need / 2**20)
        await (await role(large, "provider"))._check_memory(training)  # enough: no refusal
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@trio_test(timeout=400)
async def test_a_provider_training_on_two_workers_and_an_auditor_on_one_agree(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client = await start_node(nursery, tmp_path / "client", ["client"])
        hub = client.host.listen_addrs
        provider = await start_node(nursery, tmp_path / "provider", ["provider"], bootstrap=hub, train_workers=2)
        auditor = await start_node(nursery, tmp_path / "auditor", ["auditor"], bootstrap=hub)
        client_role = await role(client, "client")
        provider_role = await role(provider, "provider")
        await role(auditor, "auditor")
        options = SubmitOptions(providers=1, accept_within=90, commit_within=120, challenge_within=60,
                                move_timeout=30, clock=120)
        job_id = await client_role.submit(job_file, options)
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=240)

        def audited() -> bool:
            row = auditor.storage.get_job(job_id)
            return row is not None and row.state == "audited"

        await wait_for(audited, timeout=120)
        entries = unpack(auditor.storage.get_job(job_id).spec)["audits"]
        assert entries and "failed" not in {e["state"] for e in entries.values()}
        assert provider_role.runs[job_id].workers == 2
        advance_embedded_chain(600)
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        (seat,) = result["providers"].values()
        assert seat["outcome"] == "paid" and result["verdicts"] == []
        nursery.cancel_scope.cancel()
