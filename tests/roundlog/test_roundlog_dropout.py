"""Dropout in rounding-log mode: masks from the job's seed and step, the same for the trainer,
an auditor on another configuration replaying from a checkpoint, and a second run."""
import numpy as np
import pytest
import torch

from repops_cupy.roundlog import Auditor, RoundLogTrainer, RunConfig
from repops_cupy.roundlog.dropout import mask_factor
from repops_cupy.roundlog.torch_models import ResidualMLP


def _run(setup, steps, seed=None, config=None):
    tr = RoundLogTrainer(*setup, config or RunConfig(threads=1), seed=seed)
    out = [tr.step(i) for i in range(1, steps + 1)]
    return tr, [h for h, _ in out], [log for _, log in out]


@pytest.mark.parametrize("model", ["mlp", "gru"])
def test_two_runs_and_a_replay_from_a_checkpoint_agree(setup_of, model, tmp_path):
    _, hashes, logs = _run(setup_of(model), 2)
    tr, again, _ = _run(setup_of(model), 2)
    assert again == hashes
    tr.save_checkpoint(tmp_path / "c2.safetensors")
    h3, log3 = tr.step(3)
    auditor = Auditor(*setup_of(model), RunConfig(threads=1, micro_batch=2, backend="numpy"))
    assert auditor.load_checkpoint(tmp_path / "c2.safetensors") == hashes[1]
    assert auditor.replay_step(3, log3) == h3
    assert auditor.report()["breaches"] == 0


def test_the_seed_changes_the_masks_and_the_trace(setup_of):
    setup = setup_of("mlp")
    _, base, _ = _run(setup, 2, seed=3)
    _, other, _ = _run(setup_of("mlp"), 2, seed=4)
    assert base[-1] != other[-1]


def test_dropout_is_applied_and_follows_the_step(setup_of):
    factory, opt, data = setup_of("mlp")
    no_drop = lambda: (torch.manual_seed(0), ResidualMLP(in_features=192, d=16, blocks=2, num_classes=5,  # noqa: E731
                                                          dropout=0.0))[1]
    _, with_dropout, _ = _run((factory, opt, data), 1)
    _, without, _ = _run((no_drop, opt, setup_of("mlp")[2]), 1)
    assert with_dropout != without
    a, b = mask_factor(3, 1, 0, 0.25, 0, 4096), mask_factor(3, 2, 0, 0.25, 0, 4096)
    assert not torch.equal(a, b)
    kept = float((a > 0).double().mean())
    assert 0.7 < kept < 0.8
    assert set(np.unique(a.numpy())) == {0.0, np.float64(np.float32(1 / 0.75))}


def test_a_micro_batch_draws_its_part_of_the_whole_batch_mask():
    whole = mask_factor(5, 7, 1, 0.5, 0, 8 * 6)
    for start in (6, 18, 30):
        assert torch.equal(mask_factor(5, 7, 1, 0.5, start, 6), whole[start : start + 6])


def _small_mlp_job(seed):
    from pathlib import Path

    from repops_cupy.roundlog.roundlog_job import load_spec

    raw = load_spec(Path(__file__).resolve().parents[2] / "scripts" / "jobs" / "mlp-roundlog.toml")
    raw["job"].update(seed=seed, steps=3, batch_size=8, checkpoint_interval=2)
    raw["model"]["args"].update(in_features=3 * 8 * 8, d=16, dropout=0.3)
    raw["data"].update(size=8)
    return raw


def test_job_files_carry_the_seed_to_trainer_and_replay(tmp_path):
    from repops_cupy.roundlog.roundlog_job import replay_job, train_job

    trace = train_job(_small_mlp_job(5), tmp_path / "a")
    assert train_job(_small_mlp_job(5), tmp_path / "b")["trace_root"] == trace["trace_root"]
    replay = replay_job(_small_mlp_job(5), tmp_path / "a", start=2, micro_batch=2, backend="numpy")
    assert replay["first_mismatch"] is None and replay["checkpoints"][3] == trace["checkpoints"][-1]["state_hash"]
    assert train_job(_small_mlp_job(6), tmp_path / "c")["trace_root"] != trace["trace_root"]
