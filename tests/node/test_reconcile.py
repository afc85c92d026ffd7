"""Issue 21: a restarted client reconciles its database with the chain before doing work."""
from __future__ import annotations

import logging

import pytest
import trio

from contracts import JobStatus
from node.datadir import load_seed, open_datadir
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.keeper import keeper_of
from node.runtime import Node

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job


class Lines(logging.Handler):
    """The messages of one logger, whatever the logging set-up of the tests run before."""

    def __init__(self, name: str, monkeypatch) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)  # put back after the test
        logger.setLevel(logging.INFO)
        monkeypatch.setattr(logger, "handlers", logger.handlers + [self])

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.slow
@trio_test(timeout=240)
async def test_a_client_restarted_after_its_handed_job_was_refunded_closes_it_without_working_on_it(
        tmp_path, monkeypatch):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        provider_role = await role(provider, "provider")

        async def never_works(job_id: bytes) -> None:  # takes its seat, never commits
            await trio.sleep_forever()

        provider_role.work = never_works
        with trio.CancelScope() as client_life:
            async with trio.open_nursery() as inner:
                client = await start_node(inner, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
                client_role = await role(client, "client")
                job_id = await client_role.submit(job_file, SubmitOptions(
                    providers=1, accept_within=30, commit_within=30, challenge_within=30, move_timeout=20, clock=60))
                assert client_role.jobs[job_id].state == "handed"
                client_account = context_of(client).chain.account
                client_life.cancel()
        # While the client is away the commit deadline passes; the provider's node's keeper settles.
        advance_embedded_chain(400)
        await wait_for(lambda: (k := keeper_of(provider)) is not None and job_id in k.settled, timeout=60)
        chain = context_of(provider).chain
        assert (await chain.run(chain.settlement.job, job_id)).status == JobStatus.REFUNDED
        assert await chain.run(chain.settlement.credit_of, client_account) > 0

        lines = Lines("node.roles.client", monkeypatch)
        config = open_datadir(tmp_path / "client")
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        client_role = await role(restarted, "client")
        await wait_for(client_role.ready.is_set, timeout=60)
        # Reconciled before run() handed the job to any work: done as soon as the role is ready.
        cj = client_role.jobs[job_id]
        assert cj.done.is_set() and cj.state == "refunded"
        assert cj.record["result"]["ended"] == "refunded" and "result_dir" not in cj.record["result"]
        assert restarted.storage.get_job(job_id).state == "refunded"
        assert f"job {job_id.hex()[:12]}: REFUNDED on chain while this client was away" in lines.lines
        assert not [m for m in lines.lines if "trace report" in m or "fetching the result" in m]  # no work done
        assert await chain.run(chain.settlement.credit_of, client_account) == 0  # withdrawn
        nursery.cancel_scope.cancel()


@pytest.mark.slow
@trio_test(timeout=300)
async def test_a_client_killed_after_a_provider_took_its_seat_reads_the_seat_from_the_chain_and_gets_the_result(
        tmp_path, monkeypatch):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        with trio.CancelScope() as client_life:
            async with trio.open_nursery() as inner:
                client = await start_node(inner, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
                client_role = await role(client, "client")
                offer_to = client_role._offer_to
                jobs: list[bytes] = []

                async def killed_before_recording_the_seat(cj, *args) -> None:
                    await offer_to(cj, *args)  # the provider took the seat on chain
                    assert cj.record["seats"]
                    cj.record["seats"].clear()
                    await client_role._save(cj)  # what the database holds when the client dies now
                    jobs.append(cj.job_id)
                    client_life.cancel()

                monkeypatch.setattr(client_role, "_offer_to", killed_before_recording_the_seat)
                await client_role.submit(job_file, SubmitOptions(
                    providers=1, accept_within=20, commit_within=120, challenge_within=20, move_timeout=20, clock=60))
        (job_id,) = jobs
        chain = context_of(provider).chain
        assert (await chain.run(chain.settlement.job, job_id)).providers_accepted == 1
        advance_embedded_chain(25)  # acceptance closed while the client was away: it offers to no one

        config = open_datadir(tmp_path / "client")
        restarted = Node(config, load_seed(config))
        await nursery.start(restarted.run)
        client_role = await role(restarted, "client")
        await wait_for(client_role.ready.is_set, timeout=60)
        result = await client_role.wait(job_id, until="verified")
        cj = client_role.jobs[job_id]
        assert not cj.record.get("unfilled")
        ((key, seat),) = cj.record["seats"].items()
        assert seat["peer"] == str(provider.host.peer_id) and seat["report"] is not None
        assert result["state"] == "verified" and result["result_from"] == key, result
        nursery.cancel_scope.cancel()
