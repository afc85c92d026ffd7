"""Roles in one trio process: real libp2p hosts on loopback, one embedded EVM, real training."""
from __future__ import annotations

import trio

from contracts import JobStatus
from node.roles.client import SubmitOptions

from .conftest import trio_test
from .test_roles_support import embedded_chain, role, start_node, wait_for, write_job


@trio_test(timeout=240)
async def test_a_job_goes_from_submission_to_payment(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        client = await start_node(nursery, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
        client_role = await role(client, "client")
        provider_role = await role(provider, "provider")
        options = SubmitOptions(providers=1, accept_within=60, commit_within=60, challenge_within=30,
                                move_timeout=20, clock=60)
        job_id = await client_role.submit(job_file, options)
        cj = client_role.jobs[job_id]
        await wait_for(lambda: cj.state == "verified", timeout=120)
        shared = embedded_chain()
        with shared.lock:
            shared.chain.advance_time(300)
        result = await client_role.wait(job_id)
        assert result["status"] == JobStatus.FINALIZED.name
        (key, seat), = result["providers"].items()
        assert seat["outcome"] == "paid" and key == provider_role.ctx.identity.node_id.hex()
        weights = (tmp_path / "client" / "results" / job_id.hex() / "weights.safetensors").read_bytes()
        run_dir = tmp_path / "provider" / "jobs" / job_id.hex() / "run"
        assert weights == max(run_dir.glob("step-*.safetensors")).read_bytes()
        assert result["verdicts"] == []
        await wait_for(lambda: provider.storage.get_job(job_id).state == "settled", timeout=30)
        nursery.cancel_scope.cancel()
