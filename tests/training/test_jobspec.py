"""Job files: the shipped ones parse; every invalid field is named in its error."""
import copy
from pathlib import Path

import pytest

from repops_cupy.jobspec import JobSpecError, load_job, parse_job

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"

BASE = {
    "job": {"seed": 1, "steps": 10, "batch_size": 4, "checkpoint_interval": 5},
    "data": {"kind": "synthetic", "n_samples": 100, "n_features": 8, "n_classes": 3},
    "model": {"kind": "mlp", "hidden": [16]},
    "optimizer": {"kind": "adamw", "lr": 0.01},
}


def test_shipped_jobs_parse():
    gpt = load_job(JOBS / "tiny-gpt.toml")
    assert gpt.model.kind == "gpt" and gpt.data.path == "builtin:sonnets" and gpt.optimizer.kind == "adamw"
    mlp = load_job(JOBS / "mlp.toml")
    assert mlp.model.kind == "mlp" and mlp.optimizer.kind == "sgd" and mlp.optimizer.momentum == 0.9


@pytest.mark.parametrize("table, key, value, message", [
    ("optimizer", "lr", -1.0, "optimizer.lr: must be a positive number"),
    ("optimizer", "lr", "fast", "optimizer.lr: must be a positive number"),
    ("optimizer", "beta1", 1.0, "optimizer.beta1: must be below 1.0"),
    ("optimizer", "kind", "lion", "optimizer.kind: must be one of"),
    ("job", "steps", 0, "job.steps: must be a positive integer"),
    ("job", "batch_size", 2.5, "job.batch_size: must be an integer"),
    ("job", "seed", -3, "job.seed: must be between 0 and"),
    ("data", "n_classes", 1, "data.n_classes: must be at least 2"),
    ("model", "hidden", [], "model.hidden: must be a non-empty list"),
    ("model", "widht", 3, "model.widht: unknown field"),
])
def test_invalid_fields_are_named(table, key, value, message):
    raw = copy.deepcopy(BASE)
    raw[table][key] = value
    with pytest.raises(JobSpecError) as err:
        parse_job(raw)
    assert str(err.value).startswith(message)


def test_missing_table_and_mismatched_model():
    raw = copy.deepcopy(BASE)
    del raw["optimizer"]
    with pytest.raises(JobSpecError, match=r"^optimizer: table is required"):
        parse_job(raw)
    raw = copy.deepcopy(BASE)
    raw["model"] = {"kind": "gpt", "d_model": 8, "n_layers": 1, "n_heads": 3}
    with pytest.raises(JobSpecError, match=r"^model.n_heads: must divide"):
        parse_job(raw)
    raw["model"]["n_heads"] = 2
    with pytest.raises(JobSpecError, match=r"^model.kind: 'gpt' needs token data"):
        parse_job(raw)


def test_identity_ignores_steps_but_not_hyperparameters():
    a = parse_job(BASE)
    assert a.identity() == a.with_steps(99).identity()
    raw = copy.deepcopy(BASE)
    raw["optimizer"]["lr"] = 0.02
    assert parse_job(raw).identity() != a.identity()


def test_bad_toml_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[job\nseed = 1")
    with pytest.raises(JobSpecError, match="not valid TOML"):
        load_job(path)
