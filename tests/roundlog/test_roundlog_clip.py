"""Gradient clipping in rounding-log mode: torch's rule with a norm whose bits cannot vary."""
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from repops_cupy.roundlog import Auditor, RoundLogTrainer, RunConfig
from repops_cupy.roundlog.rounded_optim import exact_grad_norm
from repops_cupy.roundlog.roundlog_job import Job, RoundLogJobError, load_spec

JOBS = Path(__file__).resolve().parents[2] / "scripts" / "jobs"


def test_exact_norm_is_order_free_and_correctly_rounded():
    rng = np.random.default_rng(0)
    # values of very different magnitudes: a naive float64 sum loses the small ones
    g = torch.from_numpy(np.concatenate([rng.standard_normal(1000) * 1e4, rng.standard_normal(1000) * 1e-4])
                         .astype(np.float32).astype(np.float64))
    parts = [g[:700], g[700:1500], g[1500:]]
    n = exact_grad_norm(parts)
    assert n == exact_grad_norm(parts[::-1]) == exact_grad_norm([g.flip(0)])
    exact = sum(Fraction(float(v)) ** 2 for v in g)
    assert n == math.sqrt(float(exact))  # fsum is the correctly rounded sum


@pytest.mark.parametrize("model", ["gpt", "mlp"])
def test_clipping_scales_gradients_and_replays(setup_of, model):
    factory, opt, data = setup_of(model)
    plain = RoundLogTrainer(factory, opt, data, RunConfig(threads=1))
    clipped_opt = dict(opt, clip_grad_norm=1e-3)  # far below the norms of these models: always clips
    clipped = RoundLogTrainer(factory, clipped_opt, setup_of(model)[2], RunConfig(threads=1))
    h_plain, _ = plain.step(1)
    h, log = clipped.step(1)
    assert h != h_plain
    norm = clipped.optimizer.last_grad_norm
    assert norm > 1e-3
    auditor = Auditor(factory, clipped_opt, setup_of(model)[2], RunConfig(threads=2, micro_batch=2, backend="numpy"))
    assert auditor.replay_step(1, log) == h
    assert auditor.optimizer.last_grad_norm == norm


def test_a_large_bound_changes_nothing(setup_of):
    factory, opt, data = setup_of("cnn")
    h, _ = RoundLogTrainer(factory, opt, data, RunConfig(threads=1)).step(1)
    h_big, _ = RoundLogTrainer(factory, dict(opt, clip_grad_norm=1e9), setup_of("cnn")[2], RunConfig(threads=1)).step(1)
    assert h_big == h


def test_job_spec_reads_and_checks_clip_grad_norm():
    raw = load_spec(JOBS / "cnn-roundlog.toml")
    raw["optimizer"]["clip_grad_norm"] = 1.0
    assert Job(raw).optimizer["clip_grad_norm"] == 1.0
    for bad in (0, -1.0, "1", True, float("inf")):
        raw = load_spec(JOBS / "cnn-roundlog.toml")
        raw["optimizer"]["clip_grad_norm"] = bad
        with pytest.raises(RoundLogJobError, match="optimizer.clip_grad_norm"):
            Job(raw)
