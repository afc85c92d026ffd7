"""A seat's items over /gavel/job-data/2.0.0 between two settlement-2 nodes on loopback: refused
before the seat's reveal, served after it; the fetcher rejects a checkpoint whose hash is not
the revealed trace's; a demand the node made is fetched, checked and released on chain."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
import trio

from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2 import JobOpened, commitment_of, trace_root
from contracts.settlement_v2_demands import DataDemanded, DemandStage
from node.config import Settings
from node.errors import BlobCorrupt, RemoteError
from node.roles.chain import open_binding_sync
from node.roles.context import context_of
from node.roles.jobfiles import RUN_DIR, job_dir
from node.roles.v2.trained import TrainedJob
from node.roles.jobfiles import BundleError, encode_bundle, load_training
from node.roles.v2 import data as data_module
from node.roles.v2.data import install_checked
from node.training_oracle import job_terms
from protocol import DisputeRules, Identity
from repops_cupy.checkpoint import load_checkpoint, save_checkpoint

from ..conftest import trio_test
from ...contracts.settlement_world_v2 import default_terms
from ..test_roles_support import TINY_JOB, start_node, write_job

RULES = DisputeRules(move_timeout_ms=10_000, clock_ms=60_000)


def signed_spec_of(tmp_path, text: str = TINY_JOB) -> bytes:
    """A job's spec as `v2.offer` puts it on chain: the client's signed protocol terms."""
    training = load_training(write_job(tmp_path, text, name=f"job-{len(text)}-{hash(text) & 0xffff}.toml"))
    return job_terms(training, Identity(b"\x05" * 32), rules=RULES).encode()


async def ready(node):
    with trio.fail_after(60):
        while context_of(node) is None:
            await trio.sleep(0.05)
    ctx = context_of(node)
    await ctx.wait_chain()
    return ctx


def write_run(directory, label: str, count: int) -> tuple[list[bytes], list[str]]:
    """``count`` checkpoint files of a small state in ``directory/run``: (their state hashes, names)."""
    run = directory / RUN_DIR
    run.mkdir(parents=True, exist_ok=True)
    hashes, names = [], []
    for c in range(count):
        name = f"{label}-{c}.safetensors"
        state = {"w": np.full((3, 2), c + 0.5, dtype=np.float32), "step": np.array([c], dtype=np.int64)}
        hashes.append(save_checkpoint(run / name, state, step=c))
        names.append(name)
    return hashes, names


@trio_test(timeout=90)
async def test_items_are_refused_before_the_reveal_served_after_checked_against_the_trace_and_released(tmp_path, monkeypatch):
    async with trio.open_nursery() as nursery:
        seat_node = await start_node(nursery, tmp_path / "seat", ["provider"], settlement="2")
        # audits no job: its own run of this made-up trace would open a game, locking a bond the test counts
        auditor_node = await start_node(nursery, tmp_path / "auditor", ["auditor"], settlement="2",
                                        bootstrap=seat_node.host.listen_addrs, audit_jobs=0.0)
        seat, auditor = await ready(seat_node), await ready(auditor_node)
        client = open_binding_sync(Settings(settlement="2"), b"data v2 client")
        client_key = os.urandom(32)
        await client.run(client.ensure_registered_sync, client_key, Role.CLIENT, 0)

        trace, files = write_run(tmp_path / "files", "honest", 3)
        spec = signed_spec_of(tmp_path)
        terms = default_terms(client_key, client_referees=False, nonce=int.from_bytes(os.urandom(7), "big"),
                              initial_state=trace[0], steps=2, checkpoint_every=1, providers_wanted=1,
                              spec_hash=keccak(spec))
        s = seat.chain.settlement
        jid = (await client.run(client.settlement.open_job, terms, spec)).one(JobOpened).job_id
        directory = job_dir(seat_node.config.data_dir, jid)  # the run, moved to its job's directory
        directory.parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "files").rename(directory)
        salt = os.urandom(32)
        await seat.chain.run(s.accept, jid)
        await seat.chain.run(s.commit, jid, commitment_of(jid, seat.chain.account, trace_root(trace), salt))
        bundle_id = await seat_node.blobs.store.put(encode_bundle(TINY_JOB, {}))
        await seat.trained.add(TrainedJob(jid, directory, tuple(trace), salt, bundle_id, tuple(files)))
        fetch = auditor.job_data.fetch_item

        with pytest.raises(RemoteError, match="nothing is served before the reveal"):
            await fetch(jid, seat.chain.account, 2)

        installing, installs_at_once, release = [], [], threading.Event()

        def install_held(*args):  # holds each install until the test's fetches are all under way
            installing.append(args[0])
            installs_at_once.append(len(installing))
            release.wait(30)
            try:
                return install_checked(*args)
            finally:
                installing.pop()
        monkeypatch.setattr(data_module, "install_checked", install_held)
        await seat.chain.run(s.reveal, jid, trace, salt)
        await auditor.follower.wait_caught_up()
        path = await fetch(jid, seat.chain.account, 2)  # checkpoint 1
        assert load_checkpoint(path)[2] == trace[1]
        # The bundle, checked against the spec; fetched at once by several of the node's duties (its
        # auditor role fetches it too), each installing in the job's one `.checking` directory.
        installs = []

        async def fetch_bundle():
            installs.append(await fetch(jid, seat.chain.account, 0))
        async with trio.open_nursery() as fetches:
            for _ in range(3):
                fetches.start_soon(fetch_bundle)
            await trio.sleep(1.0)  # let every fetch reach its install (held until now)
            release.set()
        assert installs_at_once and max(installs_at_once) == 1  # one install at a time; the others found it done
        for installed in installs:
            assert installed == job_dir(auditor_node.config.data_dir, jid)
            assert (installed / "job.toml").read_text() == TINY_JOB

        # The seat's file of checkpoint 2 is not what it revealed: the fetcher refuses it.
        wrong, _ = write_run(directory, "other", 1)
        seat.trained[jid].checkpoint_files = (*files[:2], "other-0.safetensors")
        assert wrong[0] != trace[2]
        with pytest.raises(BlobCorrupt, match=r"checkpoint 2 of job .* does not hash to the revealed trace\[2\]"):
            await fetch(jid, seat.chain.account, 3)
        with pytest.raises(RemoteError, match="items 0..3, not 4"):
            await fetch(jid, seat.chain.account, 4)

        # A demand this node made: fetched from the seat, checked, its bond released.
        a = auditor.chain
        free = (await a.run(a.settlement.node, a.account)).free_stake
        demanded = await a.run(a.settlement.demand_data, jid, seat.chain.account, 1)
        demand_id = demanded.one(DataDemanded).demand_id
        with trio.fail_after(30):
            while demand_id not in auditor.job_data.released:
                await trio.sleep(0.05)
        assert (await a.run(a.settlement.demand, demand_id)).stage == DemandStage.RELEASED
        after = await a.run(a.settlement.node, a.account)
        assert after.free_stake == free and after.stake >= free  # the bond D came back whole
        nursery.cancel_scope.cancel()


def test_a_bundle_that_is_not_the_specs_job_is_refused_and_not_installed(tmp_path):
    spec = signed_spec_of(tmp_path)
    other_job = TINY_JOB.replace("seed = 3", "seed = 4")
    checking = tmp_path / "jobs" / "ab.checking"
    with pytest.raises(BundleError, match="does not match the job bundle"):
        install_checked(checking, other_job, {}, spec)
    assert not (tmp_path / "jobs" / "ab").exists()
    with pytest.raises(BundleError, match="does not decode as signed terms"):
        install_checked(checking, TINY_JOB, {}, b"\x93not terms")
    assert install_checked(checking, TINY_JOB, {}, spec) == tmp_path / "jobs" / "ab"
