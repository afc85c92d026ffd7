"""How a node trains a job (issue 14): its kernels leave a core to the event loop.

A provider node ran the MLP job at 2.7 steps/s where it can run at 260: the compiled
kernels' gangs of threads (numba's prange, torch's int8 GEMM), one per core, waited at
every parallel region for a member that the node's other threads or other processes
kept off the cores. `JobRun.train_sync` now runs its steps with `kernel_threads()`
threads, set for its own thread only, and the bits stay the same.
"""
from __future__ import annotations

import threading

import numba
import pytest
import torch

from node.roles.jobfiles import load_training
from node.roles.runner import JobRun
from node import threads
from node.threads import kernel_threads, limit_kernel_threads
from repops_cupy.train import train

from .test_roles_support import in_a_thread, write_job



def test_kernel_threads_leave_one_core_to_the_event_loop(monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert kernel_threads() == 3
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    assert kernel_threads() == 1
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {5})
    assert kernel_threads() == 1


def test_a_run_trains_on_fewer_kernel_threads_than_cores_then_restores_them(tmp_path):
    training = load_training(write_job(tmp_path))
    seen = []
    run_step = training.run_step

    def recording_run_step(*args, **kwargs):
        seen.append((numba.get_num_threads(), torch.get_num_threads()))
        return run_step(*args, **kwargs)

    training.run_step = recording_run_step
    run = JobRun(training, None, tmp_path / "run", job_id=bytes(32))

    def train_in_worker():
        before = (numba.get_num_threads(), torch.get_num_threads())
        trace = run.train_sync(threading.Event())
        return before, trace, (numba.get_num_threads(), torch.get_num_threads())

    before, trace, after = in_a_thread(train_in_worker)
    limit = kernel_threads()
    assert len(seen) == training.spec.steps == run.trained_steps
    assert set(seen) == {(min(limit, before[0]), min(limit, before[1]))}
    assert after == before
    assert len(trace.checkpoints) == run.schedule.checkpoints


def test_fewer_kernel_threads_change_no_bits(tmp_path):
    """The node's run (fewer threads, a worker thread) gives `gavel train`'s trace root."""
    job_file = write_job(tmp_path)
    alone = train(load_training(job_file).spec, tmp_path / "alone")
    node_run = JobRun(load_training(job_file), None, tmp_path / "run", job_id=bytes(32))
    trace = in_a_thread(lambda: node_run.train_sync(threading.Event()))
    assert trace.root == alone.root


def test_a_lower_limit_already_in_force_is_kept():
    def nested():
        numba.set_num_threads(1)
        with limit_kernel_threads(8):
            inside = numba.get_num_threads()
        return inside, numba.get_num_threads()

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba runs one thread here")
    assert in_a_thread(nested) == (1, 1)
