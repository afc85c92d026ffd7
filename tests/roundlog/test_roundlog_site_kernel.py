"""The compiled site pass gives the specification's bits, positions and tallies (rounding.py)."""
import numpy as np
import pytest
import torch

from repops_cupy.roundlog import Auditor, RoundLogTrainer, RunConfig, rounding, site_kernel
from repops_cupy.roundlog.engine import RoundingEngine
from repops_cupy.roundlog.rounding import F32, F64, UNIT_ROUNDOFF_F64, Decisions

pytestmark = pytest.mark.skipif(not site_kernel.AVAILABLE, reason="numba is not installed")


def _values(seed: int, n: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    base = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32).astype(np.float64)
    spacing = np.abs(np.spacing(base.astype(np.float32)).astype(np.float64))
    # a third of the values within a few float64 ulps of a float32 midpoint: the ambiguous ones
    near = base + spacing * (0.5 + rng.integers(-40, 40, n) * 2.0**-40)
    v = np.where(rng.random(n) < 0.33, near, base + spacing * rng.random(n))
    special = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-42, -3e-45, 3.5e38, 1e300, np.float64(np.float32(1.5)) + 2.0**-25]
    v[rng.choice(n, len(special), replace=False)] = special
    return torch.from_numpy(v)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.numpy(), b.numpy(), equal_nan=True) \
        and np.array_equal(np.signbit(a.numpy()), np.signbit(b.numpy()))


def _same_decisions(a: Decisions, b: Decisions) -> bool:
    return all(_same(x, y) for x, y in ((a.bit_pos, b.bit_pos), (a.bit_up, b.bit_up),
                                        (a.value_pos, b.value_pos), (a.value, b.value)))


@pytest.mark.parametrize("seed,n,chunk", [(0, 4000, 1000), (1, 4000, 50), (2, 4000, 1), (3, 4000, 4000),
                                           (4, 3999, 3), (5, 4001, 4001)])  # sizes not whole flag words
@pytest.mark.parametrize("beta", [8.0, 256.0, 65536.0])
def test_decide_and_apply_match_the_specification(seed, n, chunk, beta):
    v = _values(seed, n)
    v2, d2 = RoundingEngine._bound(v, chunk, beta)
    r_spec, dec_spec = rounding.decide(v2, d2)
    r_fast, dec_fast = site_kernel.decide(v, chunk, beta * UNIT_ROUNDOFF_F64)
    assert _same(r_fast, r_spec.to(F64))
    assert _same_decisions(dec_fast, dec_spec)
    assert dec_spec.bit_pos.numel() + dec_spec.value_pos.numel() > 0, "nothing ambiguous: the test tests nothing"
    # the auditor's side, with its own values a little off and one forged entry
    w = v + torch.where(torch.isfinite(v), v * 2.0**-50, torch.zeros((), dtype=F64))
    forged = Decisions(dec_spec.bit_pos, ~dec_spec.bit_up, dec_spec.value_pos, dec_spec.value)
    # entries where no trainer would log: at the non-finite values, zeros and anywhere, some in both lists
    rng = np.random.default_rng(seed)
    anywhere = torch.from_numpy(np.union1d(np.flatnonzero(~np.isfinite(v.numpy()) | (v.numpy() == 0)),
                                           rng.choice(n, n // 10, replace=False)))
    values = torch.from_numpy(rng.standard_normal(n // 20).astype(np.float32))
    stray = Decisions(anywhere, torch.from_numpy(rng.random(anywhere.numel()) < 0.5),
                      anywhere[torch.from_numpy(np.sort(rng.choice(anywhere.numel(), values.numel(), replace=False)))],
                      values)
    for dec in (dec_spec, forged, stray):
        w2, e2 = RoundingEngine._bound(w, chunk, beta)
        r_spec, rep_spec = rounding.apply(w2, e2, dec)
        r_fast, rep_fast = site_kernel.apply(w, chunk, beta * UNIT_ROUNDOFF_F64, dec)
        assert _same(r_fast, r_spec.to(F64))
        assert rep_fast == rep_spec


def test_empty_site():
    r, dec = site_kernel.decide(torch.zeros(0, dtype=F64), 1, 1e-10)
    assert r.numel() == 0 and dec.bit_pos.numel() == 0


def _train(setup, compiled: bool, steps=2):
    tr = RoundLogTrainer(*setup, RunConfig(threads=1))
    tr.engine.compiled = compiled
    return tr, [tr.step(i) for i in range(1, steps + 1)]


@pytest.mark.parametrize("model,optimizer", [("gpt", {}), ("cnn", {}), ("mlp", {"clip_grad_norm": 0.01}),
                                             ("gru", {"clip_grad_norm": 0.01, "weight_decay": 0.0})])
def test_a_run_is_the_same_with_and_without_the_kernel(setup_of, model, optimizer):
    """The compiled site passes and the compiled optimizer updates (AdamW and SGD, with and
    without weight decay and clipping) give the specification's states and logs."""
    def setup():
        factory, opt, data = setup_of(model)
        return factory, {**opt, **optimizer}, data

    _, fast = _train(setup(), True)
    _, spec = _train(setup(), False)
    assert fast == spec
    auditor = Auditor(*setup(), RunConfig(threads=1, micro_batch=2))
    auditor.engine.compiled = False
    assert [auditor.replay_step(i, log) for i, (_, log) in enumerate(fast, 1)] == [h for h, _ in fast]


def test_plain_rounding_matches_torch():
    v = _values(4, 3000)
    assert _same(site_kernel.round_plain(v), v.to(F32).to(F64))
