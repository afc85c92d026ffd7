"""The shipped example jobs under the three configuration pairs of the mode's contract:
ordinary training leaves the reference run at once; rounding-log training replayed
with its log gives the same trace root on every configuration."""
from pathlib import Path

import pytest

from repops_cupy.roundlog import Auditor, RoundLogTrainer
from repops_cupy.roundlog.roundlog_job import Job
from repops_cupy.roundlog.plain import plain_divergence
from repops_cupy.roundlog.state import trace_root

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"
PAIRS = {
    "threads": dict(threads=2),
    "numpy": dict(threads=1, backend="numpy"),
    "micro": dict(threads=1, micro_batch=4),
}
STEPS = 2


@pytest.mark.parametrize("name", ["cnn", "gpt"])
def test_ordinary_training_diverges_and_the_log_keeps_every_pair_identical(name):
    job = Job(JOBS / f"{name}-roundlog.toml")
    first = plain_divergence(job, STEPS, PAIRS)
    # plain float32: another thread count, BLAS or batch split changes the weights in step 1
    assert [first[f"float32/{pair}"] for pair in PAIRS] == [1, 1, 1], first

    factory = job.model_factory()
    trainer = RoundLogTrainer(factory, job.optimizer, job.data, job.config(threads=1))
    hashes, logs = [trainer.state_hash()], []
    for i in range(1, STEPS + 1):
        digest, log = trainer.step(i)
        hashes.append(digest)
        logs.append(log)
    assert hashes[0] != hashes[-1]
    for pair, config in PAIRS.items():
        auditor = Auditor(factory, job.optimizer, job.data, job.config(**config))
        replayed = [auditor.state_hash()] + [auditor.replay_step(i, log) for i, log in enumerate(logs, 1)]
        assert trace_root(replayed) == trace_root(hashes), pair
