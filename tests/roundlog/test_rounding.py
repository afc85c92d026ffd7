"""Rounding decisions: what the trainer logs, and that an auditor within the bound lands on its bits."""
import torch
from hypothesis import given, settings, strategies as st

from repops_cupy.roundlog.rounding import F32, F64, UNIT_ROUNDOFF_F64, apply, bracket, decide


def _values(seed, n, scale_spread=True):
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(n, dtype=F64, generator=g)
    if scale_spread:
        v = v * torch.exp2(torch.randint(-30, 30, (n,), generator=g).to(F64))
    return v


def test_bracket_gives_adjacent_float32_neighbours():
    v = _values(0, 10000)
    lo, hi = bracket(v)
    assert (lo <= v).all() and (v <= hi).all()
    assert torch.equal(lo.to(F32).to(F64), lo) and torch.equal(hi.to(F32).to(F64), hi)
    assert torch.equal(torch.nextafter(lo.to(F32), torch.tensor(float("inf"))), hi.to(F32))
    exact = torch.tensor([1.0, -2.5, 0.0], dtype=F64)
    lo, hi = bracket(exact)
    assert torch.equal(lo, exact) and torch.equal(hi, exact)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), beta=st.sampled_from([8.0, 1e3, 1e6, 1e9]), frac=st.floats(-1.0, 1.0))
def test_auditor_within_the_bound_reproduces_the_trainer(seed, beta, frac):
    v_t = _values(seed, 4000)
    # put some values right at float32 midpoints, where any disagreement flips the rounding
    lo, hi = bracket(v_t[:500])
    v_t[:500] = (lo + hi) / 2 + (hi - lo) * 1e-12
    d = torch.full_like(v_t, beta * UNIT_ROUNDOFF_F64) * v_t.abs().max()
    g = torch.Generator().manual_seed(seed + 1)
    noise = (torch.rand(v_t.shape, dtype=F64, generator=g) * 2 - 1) * d * abs(frac)
    v_a = v_t + noise  # another machine: within the disagreement bound D
    r_t, dec = decide(v_t, d)
    r_a, rep = apply(v_a, d, dec)
    assert torch.equal(r_a.view(torch.int32), r_t.view(torch.int32))
    assert rep.implausible == 0
    # every flip the plain rounding would make is a logged position
    flips = (v_a.to(F32) != r_t).nonzero().flatten()
    logged = torch.cat([dec.bit_pos, dec.value_pos])
    assert torch.isin(flips, logged).all()
    assert rep.corrections == flips.numel()


def test_logged_share_is_small_and_entries_are_mostly_bits():
    v = _values(3, 200000, scale_spread=False)
    d = torch.full_like(v, 256 * UNIT_ROUNDOFF_F64) * v.abs().max()
    _, dec = decide(v, d)
    n = dec.bit_pos.numel() + dec.value_pos.numel()
    assert 0 < n < 200000 * 1e-3
    assert dec.value_pos.numel() < dec.bit_pos.numel()


def test_zero_bound_logs_nothing_and_ties_round_to_even():
    # exact midpoints between float32 values (the spacing above 1 is 2**-23)
    a = torch.tensor([1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24], dtype=F64)
    r, dec = decide(a, torch.zeros_like(a))
    assert dec.bit_pos.numel() == 0 and dec.value_pos.numel() == 0
    assert r.tolist() == [1.0, 1.0 + 2.0 ** -22]  # ties to the even neighbour


def test_exact_zeros_are_not_logged():
    v = torch.zeros(100, dtype=F64)
    _, dec = decide(v, torch.full_like(v, 1e-10))
    assert dec.bit_pos.numel() == 0 and dec.value_pos.numel() == 0


def test_values_near_zero_get_value_entries():
    v = torch.tensor([1.0, 1e-12, -3e-13], dtype=F64)
    d = torch.full_like(v, 1e-9)  # spans many float32 values around the small ones
    r, dec = decide(v, d)
    assert dec.value_pos.tolist() == [1, 2]
    assert torch.equal(dec.value, r[1:])


def test_breaches_are_counted_when_the_auditor_strays_beyond_the_bound():
    lo, hi = bracket(_values(5, 1000, scale_spread=False))
    mid = (lo + hi) / 2
    d = (hi - lo) * 1e-6
    v_t = mid + 3 * d  # beyond the bound: the trainer logs nothing
    r_t, dec = decide(v_t, d)
    assert dec.bit_pos.numel() == 0
    v_a = mid - 0.25 * d  # an auditor far outside the bound, on the other side
    r_a, rep = apply(v_a, d, dec)
    assert rep.breaches == 1000
    assert (r_a != r_t).all()  # the flips the breaches announce


def test_implausible_entries_are_reported():
    v = _values(6, 1000, scale_spread=False)
    lo, hi = bracket(v)
    v_t = (lo + hi) / 2
    d = (hi - lo) * 1e-6
    _, dec = decide(v_t, d)
    assert dec.bit_pos.numel() == 1000
    _, rep = apply(lo + (hi - lo) * 0.1, d, dec)  # the auditor's value is nowhere near the midpoint
    assert rep.implausible == 1000


def test_large_products_flip_without_the_log_and_agree_with_it():
    """torch (MKL) vs NumPy (OpenBLAS) float64 products of float32 values: a few plain
    roundings to float32 differ; the trainer's entries make every one agree."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(256, 4096, dtype=F64, generator=g).to(F32).to(F64)
    b = torch.randn(4096, 256, dtype=F64, generator=g).to(F32).to(F64)
    v_mkl = a @ b
    v_np = torch.from_numpy(a.numpy() @ b.numpy())
    ratio = float(((v_mkl - v_np).abs() / (UNIT_ROUNDOFF_F64 * v_mkl.abs().max())).max())
    assert ratio > 0, "the two engines agreed bit for bit: nothing to measure"
    d = torch.full((v_mkl.numel(),), 4 * ratio * UNIT_ROUNDOFF_F64, dtype=F64) * v_mkl.abs().max()
    r_t, dec = decide(v_mkl.flatten(), d)
    plain = v_np.flatten().to(F32)
    r_a, rep = apply(v_np.flatten(), d, dec)
    assert torch.equal(r_a, r_t)
    assert rep.breaches == 0 and rep.implausible == 0
    assert rep.corrections == int((plain != r_t).sum())
