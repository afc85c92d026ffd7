"""Tiny jobs for the training tests: small enough to trace and step in well under a second."""
import numpy as np
import pytest

from repops_cupy.jobspec import parse_job


def tiny_gpt_raw(steps=4, interval=2, seed=11, dropout=0.0):
    return {
        "job": {"name": "tiny", "seed": seed, "steps": steps, "batch_size": 2, "checkpoint_interval": interval},
        "data": {"kind": "text", "path": "builtin:sonnets", "context": 16},
        "model": {"kind": "gpt", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "dropout": dropout},
        "optimizer": {"kind": "adamw", "lr": 0.01, "beta2": 0.99, "weight_decay": 0.01},
    }


def tiny_mlp_raw(steps=6, interval=2, seed=5, dropout=0.0, optimizer=None):
    return {
        "job": {"name": "tiny-mlp", "seed": seed, "steps": steps, "batch_size": 16, "checkpoint_interval": interval},
        "data": {"kind": "synthetic", "n_samples": 512, "n_features": 8, "n_classes": 3},
        "model": {"kind": "mlp", "hidden": [16], "dropout": dropout},
        "optimizer": optimizer or {"kind": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
    }


def to_toml(raw) -> str:
    lines = []
    for table, fields in raw.items():
        lines.append(f"[{table}]")
        for key, value in fields.items():
            if isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            elif isinstance(value, bool):
                lines.append(f"{key} = {'true' if value else 'false'}")
            else:
                lines.append(f"{key} = {value!r}".replace("(", "[").replace(")", "]"))
        lines.append("")
    return "\n".join(lines)


@pytest.fixture
def tiny_gpt_spec():
    return parse_job(tiny_gpt_raw())


@pytest.fixture
def tiny_mlp_spec():
    return parse_job(tiny_mlp_raw())


def assert_bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
