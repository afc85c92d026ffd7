"""Issue 21: a job's life survives faults (in one process, on the embedded chain)."""
from __future__ import annotations

import logging
import threading

import trio

from contracts import JobStatus, Settlement
from node.datadir import load_seed, open_datadir
from node.framing import unpack
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.roles.provider import JobGone
from node.roles.runner import RunStopped
from node.runtime import Node

from .conftest import trio_test


class Lines(logging.Handler):
    """The messages of one logger, whatever the logging set-up of the tests run before."""

    def __init__(self, name: str, monkeypatch) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)  # put back after the test
        logger.setLevel(logging.INFO)  # (setLevel also clears the loggers' cached levels)
        monkeypatch.setattr(logger, "handlers", logger.handlers + [self])  # the old list back after the test

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
from .test_roles_support import advance_embedded_chain, role, start_node, wait_for, write_job


@trio_test(timeout=240)
async def test_a_provider_restarted_after_its_job_was_refunded_does_not_work_on_it(tmp_path, monkeypatch):
    commits = []
    commit = Settlement.commit

    def recorded_commit(self, job_id, root):
        commits.append(job_id)
        return commit(self, job_id, root)

    monkeypatch.setattr(Settlement, "commit", recorded_commit)
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        # Before: the provider takes its seat and goes down before training.
        with trio.CancelScope() as first_life:
            async with trio.open_nursery() as inner:
                provider = await start_node(inner, tmp_path / "provider", ["provider"])
                client = await start_node(inner, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
                client_role = await role(client, "client")
                provider_role = await role(provider, "provider")

                async def never_works(job_id: bytes) -> None:
                    await trio.sleep_forever()

                provider_role.work = never_works
                options = SubmitOptions(providers=1, accept_within=60, commit_within=30, challenge_within=30,
                                        move_timeout=20, clock=60)
                job_id = await client_role.submit(job_file, options)
                await wait_for(lambda: (row := provider.storage.get_job(job_id)) is not None and row.state == "accepted",
                               timeout=60)
                first_life.cancel()
        # Meanwhile the commit deadline passes and the job is refunded.
        chain = context_of(client).chain
        advance_embedded_chain(400)
        await chain.run(chain.settlement.settle, job_id)
        assert (await chain.run(chain.settlement.job, job_id)).status == JobStatus.REFUNDED

        # After: the restarted provider reads the job's status before working on it.
        lines = Lines("node.roles.provider", monkeypatch)
        restarted = Node(open_datadir(tmp_path / "provider"), load_seed(open_datadir(tmp_path / "provider")))
        await nursery.start(restarted.run)
        await role(restarted, "provider")
        await wait_for(lambda: restarted.storage.get_job(job_id).state in ("abandoned", "failed"), timeout=120)
        row = restarted.storage.get_job(job_id)
        assert row.state == "abandoned", row.state
        assert unpack(row.spec)["abandoned"] == "the job is REFUNDED on chain"
        assert commits == []  # no transaction that must revert
        assert not list((tmp_path / "provider" / "jobs" / job_id.hex() / "run").glob("step-*"))  # no training
        await wait_for(lambda: any("stopped working" in m for m in lines.lines), timeout=10)  # logged after the row
        stopped = [m for m in lines.lines if "stopped working" in m]
        assert stopped == [f"job {job_id.hex()[:12]}: stopped working on it: the job is REFUNDED on chain "
                           "(found on restart, before resuming its run)"]
        nursery.cancel_scope.cancel()


@trio_test(timeout=60)
async def test_a_training_run_stops_when_its_job_dies_on_chain(tmp_path):
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        provider_role = await role(provider, "provider")
        provider_role.watch_poll = 0.05
        started = threading.Event()
        answers = []

        class EndlessRun:
            def train_sync(self, stop: threading.Event):
                started.set()
                while not stop.wait(0.01):
                    pass
                raise RunStopped("stopped")

        async def job_gone(job_id: bytes):
            answers.append(started.is_set())
            await trio.lowlevel.checkpoint()
            return "the job is REFUNDED on chain" if started.is_set() and len(answers) > 2 else None

        provider_role._job_gone = job_gone
        try:
            await provider_role._train_watched(b"\1" * 32, EndlessRun())
        except JobGone as gone:
            assert str(gone) == "the job is REFUNDED on chain"
        else:
            raise AssertionError("the run was not stopped")
        assert answers[-1] is True  # asked while the run was training
        nursery.cancel_scope.cancel()
