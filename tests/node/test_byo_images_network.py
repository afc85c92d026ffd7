"""Bring your own images through the network: the client's (N, C, H, W) uint8 images and labels travel to
the providers and the auditor as blobs of the bundle, a small CNN (graph mode) trains on them, an honest
provider's run is audited and agreed with, and a provider that trains on other data loses the dispute.
Real libp2p hosts, the embedded EVM."""
from __future__ import annotations

import numpy as np
import pytest
import trio

from contracts import JobStatus
from node.roles.context import context_of
from node.roles.jobfiles import install_job, load_training, prepare_bundle
from repops_cupy.checkpoint import state_hash
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram

from .conftest import trio_test
from .test_byo_network import audited_and_settled
from .test_roles_support import submitted_with_a_cheater, wait_for, write_job

IMAGE_JOB = """\
[job]
name = "byo-images"
seed = 9
steps = 6
batch_size = 4
checkpoint_interval = 2

[data]
kind = "images"
path = "my-images.npy"
labels = "my-labels.npy"
mean = [0.5, 0.5]
std = [0.25, 0.25]

[model]
kind = "cnn"
channels = [4, 6]
kernel = 3
downsample = "maxpool"

[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9
"""


def write_image_job(directory):
    rng = np.random.default_rng(17)
    np.save(directory / "my-images.npy", rng.integers(0, 256, (24, 2, 8, 8), dtype=np.uint8))
    np.save(directory / "my-labels.npy", (np.arange(24) % 3).astype(np.int64))
    return write_job(directory, IMAGE_JOB, "images.toml")


def test_image_files_travel_in_the_bundle(tmp_path):
    (tmp_path / "client").mkdir()
    spec = load_job(write_image_job(tmp_path / "client"))
    toml_text, files = prepare_bundle(spec)
    assert sorted(files) == ["data.npy", "labels.npy"]
    assert 'kind = "images"' in toml_text and "mean = [0.5, 0.5]" in toml_text and 'kind = "cnn"' in toml_text
    installed = load_training(install_job(tmp_path / "provider", toml_text, files))
    mine = TrainingProgram(spec)
    assert installed.identity() == mine.identity()
    assert installed.dataset.root() == mine.dataset.root()
    assert state_hash(installed.initial_state()) == state_hash(mine.initial_state())
    # other normalisation is another job
    other = load_job(write_job(tmp_path / "client", IMAGE_JOB.replace("std = [0.25, 0.25]", "std = [0.25, 0.5]"),
                               "other.toml"))
    assert TrainingProgram(other).identity() != mine.identity()


@pytest.mark.slow
@trio_test(timeout=480)
async def test_own_images_audited_and_a_provider_on_other_data_loses(tmp_path):
    job_file = write_image_job(tmp_path)
    async with trio.open_nursery() as nursery:
        net = await submitted_with_a_cheater(nursery, tmp_path, job_file, "other-data")
        await wait_for(lambda: net[5].state == "verified", timeout=240)
        _, honest, cheater, _, job_id, _ = net
        for name in ("honest", "cheater"):  # the user's files reached every party as blobs
            job_dir = tmp_path / name / "jobs" / job_id.hex()
            assert (job_dir / "data.npy").read_bytes() == (tmp_path / "my-images.npy").read_bytes()
            assert (job_dir / "labels.npy").read_bytes() == (tmp_path / "my-labels.npy").read_bytes()
        training, _ = context_of(honest).trainings[job_id]
        assert training.spec.model.kind == "cnn" and "unfold2d" in training.graph.op_counts()

        result, honest_key, cheater_key = await audited_and_settled(net)

        assert result["status"] == JobStatus.FINALIZED.name
        assert result["providers"][honest_key]["outcome"] == "paid"
        assert result["providers"][cheater_key]["outcome"] == "slashed"
        assert result["verdicts"] and all(v["faults"][0]["party"] == cheater_key for v in result["verdicts"])
        assert result["result_from"] == honest_key
        assert {d.status for d in cheater.storage.disputes(job_id=job_id)} == {"lost"}
        nursery.cancel_scope.cancel()
