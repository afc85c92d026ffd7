"""The auditor's own run of a job is one per job, however many providers' audits ask for it."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import trio
import trio.testing

from node.roles import auditor as auditor_module
from node.roles.auditor import AuditorRole

from .conftest import trio_test


class _BlockingRun:
    """A JobRun whose training waits for the test, counting how often it is started."""

    started = 0
    entered = threading.Event()
    release = threading.Event()

    def __init__(self, training, program, run_dir, *, job_id, device) -> None:
        self.run_dir = run_dir

    def train_sync(self, stop: threading.Event):
        type(self).started += 1
        type(self).entered.set()
        type(self).release.wait()
        return SimpleNamespace(root=b"\x01" * 32, checkpoints=[])


@trio_test()
async def test_two_audits_of_one_job_share_a_single_own_run(tmp_path, monkeypatch):
    monkeypatch.setattr(auditor_module, "JobRun", _BlockingRun)
    ctx = SimpleNamespace(config=SimpleNamespace(data_dir=tmp_path, device="cpu"), roles={})
    auditor = AuditorRole(ctx)
    job_id = b"\x07" * 32
    results = []

    async def audit() -> None:
        results.append(await auditor._own_run(job_id, training=None, program=None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(audit)
        await trio.to_thread.run_sync(_BlockingRun.entered.wait)
        nursery.start_soon(audit)
        # the second audit reaches wherever it waits (the job's lock, or a second training
        # started in the same directory) before the first training ends
        await trio.testing.wait_all_tasks_blocked()
        _BlockingRun.release.set()
    assert _BlockingRun.started == 1
    assert results[0] == results[1]  # the same run and trace
