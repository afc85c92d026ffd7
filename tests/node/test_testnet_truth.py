"""The testnet's recomputation of honest results and of a run's corrupted intervals."""
from __future__ import annotations

import random
import sys

import pytest

from node.cheats import STRATEGIES, CheatContext
from node.testnet.plan import DEFAULT_JOB, job_variant
from node.testnet.threads import one_thread_per_node
from node.testnet.truth import _training, honest_run, replay_run
from node.training_oracle import StageTimer, TrainingOracle
from repops_cupy.checkpoint import save_checkpoint
from repops_cupy.train import Trace, checkpoint_file, train

STEPS, EVERY = 6, 2  # three intervals


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The testnet's setting (the tests share two cores with others), undone afterwards."""
    _training(str(DEFAULT_JOB)).graph  # imports the kernels
    numba = sys.modules.get("numba")
    before = numba.get_num_threads() if numba else None
    one_thread_per_node()
    yield
    if numba:
        numba.set_num_threads(before)


@pytest.fixture(scope="module")
def job_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("job") / "job.toml"
    path.write_text(job_variant(DEFAULT_JOB, steps=STEPS, checkpoint_every=EVERY, seed=11, name="truth"))
    return path


def _write_cheat_run(job_file, strategy: str, seed: int, run_dir):
    """A cheating provider's run on disk: the deviating run's checkpoints and trace.json."""
    training = _training(str(job_file))
    honest = TrainingOracle(training)
    honest.train()
    cheat = STRATEGIES[strategy](CheatContext(training, honest, random.Random(seed), StageTimer()))
    cheat.oracle.train()
    trace = Trace("truth", training.identity().hex(), STEPS, EVERY)
    run_dir.mkdir()
    for c, digest in enumerate(cheat.oracle.checkpoint_states()):
        step = honest.schedule.checkpoint_step(c)
        save_checkpoint(run_dir / checkpoint_file(step), cheat.oracle.checkpoint_state(c), step=step)
        trace.checkpoints.append({"index": c, "step": step, "state_hash": digest.hex(), "file": checkpoint_file(step)})
    trace.save(run_dir)
    return cheat


def test_an_honest_run_on_disk_matches_the_recomputed_one_and_replays_clean(job_file, tmp_path):
    expected = honest_run(job_file)
    assert expected.intervals == 3
    trace = train(_training(str(job_file)).spec, tmp_path / "run", program=_training(str(job_file)))
    replayed = replay_run(job_file, tmp_path / "run")
    assert replayed.root == trace.root == expected.root
    assert replayed.corrupted == ()


@pytest.mark.parametrize("strategy", ["perturb-weight", "skip-step", "wrong-lr"])
def test_a_cheat_run_has_the_corrupted_intervals_its_deviation_implies(job_file, tmp_path, strategy):
    cheat = _write_cheat_run(job_file, strategy, seed=3, run_dir=tmp_path / "run")
    replayed = replay_run(job_file, tmp_path / "run")
    first = (cheat.truth.step - 1) // EVERY  # the interval of the first wrong step
    assert replayed.root != honest_run(job_file).root
    if strategy == "wrong-lr":  # every step from there on uses the wrong learning rate
        assert replayed.corrupted == tuple(range(first, 3))
    else:  # one step deviates; the run computes honestly from its own wrong state afterwards
        assert replayed.corrupted == (first,)
