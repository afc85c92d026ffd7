"""matmul: bit for bit against a plain-Python reading of its specification.

The reference below follows the docstring of `repops_cupy.matmul` with Python integers
and fractions; every engine and kernel set must give exactly its bits.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from repops_cupy import _matmul_engines, registry
from repops_cupy import matmul as mm
from repops_cupy.errors import OpError
from repops_cupy.matmul import PreparedB, matmul, prepare_b

ENGINES = ["int8", "float64", "torch"]
KERNELS = ["numba", "array"]


# --- the specification, literally ----------------------------------------------------


def round_to_float32(q: Fraction) -> np.float32:
    """Nearest float32 to q, ties to even, with IEEE subnormals and overflow; 0 -> +0.0."""
    if q == 0:
        return np.float32(0.0)
    sign = -1.0 if q < 0 else 1.0
    q = abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()
    while q < Fraction(2) ** e:
        e -= 1
    while q >= Fraction(2) ** (e + 1):
        e += 1
    quantum = max(e, -126) - 23
    n = round(q / Fraction(2) ** quantum)  # Fraction rounding: nearest, ties to even
    if n * Fraction(2) ** quantum >= Fraction(2) ** 128:
        return np.float32(sign * math.inf)
    return np.float32(sign * math.ldexp(n, quantum))


def spec_shift(values) -> int:
    finite = [abs(float(v)) for v in values if math.isfinite(float(v))]
    biggest = max(finite, default=0.0)
    return 38 - math.frexp(biggest)[1]


def spec_digits(x: int) -> list[int]:
    """Balanced base-256 digits of x, most significant first (5 digits)."""
    digits = []
    for _ in range(4):
        d = (x % 256 + 128) % 256 - 128
        digits.append(d)
        x = (x - d) // 256
    digits.append(x)
    return digits[::-1]


def reference_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), np.float32)
    sig = [spec_shift(a[i]) for i in range(m)]
    tau = [spec_shift(b[:, j]) for j in range(n)]

    def scaled(v, shift):
        v = float(v)
        return round(Fraction(v) * Fraction(2) ** shift) if math.isfinite(v) else 0

    alpha = [[spec_digits(scaled(a[i, c], sig[i])) for c in range(k)] for i in range(m)]
    beta = [[spec_digits(scaled(b[c, j], tau[j])) for j in range(n)] for c in range(k)]
    for i in range(m):
        for j in range(n):
            terms = [float(a[i, c]) * float(b[c, j]) for c in range(k)]
            if not all(map(math.isfinite, [float(a[i, c]) for c in range(k)] + [float(b[c, j]) for c in range(k)])):
                # IEEE: products of float32 values are exact in float64 and finite sums
                # cannot overflow there, so Python's float sum classifies inf/NaN exactly
                out[i, j] = np.float32(sum(terms))
                continue
            v = sum(
                2 ** (8 * (8 - s - t)) * sum(alpha[i][c][s] * beta[c][j][t] for c in range(k))
                for s in range(5) for t in range(5) if s + t <= 5
            )
            out[i, j] = round_to_float32(Fraction(v, 2 ** (sig[i] + tau[j])) if sig[i] + tau[j] >= 0
                                         else Fraction(v * 2 ** -(sig[i] + tau[j])))
    return out


def exact_float32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Correctly rounded float32 of the exact products' sums (fsum, then round to odd)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        products = a64[i][:, None] * b64  # exact: 24-bit by 24-bit mantissas
        for j in range(b.shape[1]):
            p = products[:, j].tolist()
            s = math.fsum(p)
            r = math.fsum(p + [-s])  # sign of (exact - s)
            if r != 0 and (np.float64(s).view(np.int64) & 1) == 0:
                s = float(np.nextafter(s, math.copysign(math.inf, r)))
            out[i, j] = np.float32(s)
    return out


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint32)


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(bits(x), bits(y))


def ulps(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distance in float32 steps (signed-magnitude bits mapped onto a line)."""
    def line(v):
        i = v.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(line(x) - line(ref))


def normal(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --- bit for bit against the reference ------------------------------------------------

special = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -130), 3.4e38, -3.4e38,
                           2.0 ** 100, 1e-30, 0.1, 1.5])
finite32 = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False), special)
any32 = st.one_of(finite32, st.sampled_from([math.inf, -math.inf, math.nan]))
dims = st.integers(1, 4)


@st.composite
def operands(draw, elements):
    m, k, n = draw(dims), draw(st.integers(1, 9)), draw(dims)
    a = draw(arrays(np.float32, (m, k), elements=elements))
    b = draw(arrays(np.float32, (k, n), elements=elements))
    return a, b


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands(finite32))
def test_finite_inputs_match_the_reference_bit_for_bit(ab):
    a, b = ab
    want = reference_matmul(a, b)
    for kernels in KERNELS:
        assert same_bits(matmul(a, b, kernels=kernels), want)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(operands(finite32))
def test_parallel_kernels_match_the_reference(monkeypatch, ab):
    monkeypatch.setattr(mm, "PARALLEL_MIN_ELEMENTS", 0)  # numba threads even on tiny operands
    a, b = ab
    assert same_bits(matmul(a, b, kernels="numba"), reference_matmul(a, b))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands(any32))
def test_inputs_with_inf_and_nan_match_the_reference(ab):
    a, b = ab
    want = reference_matmul(a, b)
    got = matmul(a, b)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(bits(got)[ok], bits(want)[ok])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operands(finite32), st.sampled_from(ENGINES))
def test_every_engine_matches_the_reference(ab, engine):
    a, b = ab
    assert same_bits(matmul(a, b, engine=engine), reference_matmul(a, b))


def test_wide_exponent_ranges_match_the_reference():
    rng = np.random.default_rng(7)
    a = normal(rng, 5, 24) * np.float32(2.0) ** rng.integers(-140, 100, (5, 24)).astype(np.float32)
    b = normal(rng, 24, 4) * np.float32(2.0) ** rng.integers(-140, 100, (24, 4)).astype(np.float32)
    a[1] = np.float32(2.0 ** -149) * rng.integers(-50, 50, 24).astype(np.float32)  # subnormal row
    a[2] = np.float32(3e38)  # products beyond float32: the result overflows to inf
    b[:, 0] = np.float32(3e38)
    b[:, 1] = np.float32(2.0 ** -148) * rng.integers(-3, 3, 24).astype(np.float32)
    want = reference_matmul(a, b)
    assert np.isinf(want[2, 0])
    for kernels in KERNELS:
        assert same_bits(matmul(a, b, kernels=kernels), want)


# --- one result whatever computes it ----------------------------------------------------


@pytest.mark.parametrize("a_shape, b_shape", [
    ((33, 70), (70, 17)),
    ((8, 40), (40, 300)),  # few rows: B's digit planes are read once each
    ((5, 16384 + 37), (16384 + 37, 6)),  # two K chunks
    ((3, 9, 30), (3, 30, 50)),  # a batch of few-row products
    ((2, 1, 20, 30), (4, 30, 11)),  # broadcast batch
    ((6, 40, 24), (6, 24, 40)),  # attention heads: many small products, one call per diagonal each
    ((2, 7, 16384 + 5), (2, 16384 + 5, 5)),  # a batch over two K chunks
])
def test_engines_and_kernels_give_identical_bits(a_shape, b_shape):
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a = normal(rng, *a_shape) * np.float32(2.0) ** rng.integers(-20, 20, a_shape[:-1] + (1,)).astype(np.float32)
    b = normal(rng, *b_shape)
    a.reshape(-1)[::97] = np.float32(0.0)
    want = matmul(a, b, engine="float64", kernels="array")
    for engine in ENGINES:
        for kernels in KERNELS:
            assert same_bits(matmul(a, b, engine=engine, kernels=kernels), want), (engine, kernels)


def test_k_chunks_compose_exactly_on_a_worst_case_magnitude():
    # every digit near its extreme: the int32 and int64 sums must still be exact
    k = 2 * 16384 + 5
    a = np.full((3, k), np.float32(-(2.0 - 2.0 ** -23)))
    b = np.full((k, 2), np.float32(2.0 - 2.0 ** -23))
    exact = Fraction(float(a[0, 0])) * Fraction(float(b[0, 0])) * k
    want = np.full((3, 2), round_to_float32(exact))
    for engine in ENGINES:
        assert same_bits(matmul(a, b, engine=engine), want), engine


def test_layouts_and_transposes_give_identical_bits():
    rng = np.random.default_rng(3)
    a, b = normal(rng, 20, 50), normal(rng, 50, 30)
    want = matmul(a, b)
    assert same_bits(matmul(np.asfortranarray(a), np.asfortranarray(b)), want)
    big_a = normal(rng, 40, 100)
    big_a[::2, ::2] = a
    big_b = normal(rng, 100, 60)
    big_b[::2, ::2] = b
    assert same_bits(matmul(big_a[::2, ::2], big_b[::2, ::2]), want)
    assert same_bits(matmul(np.ascontiguousarray(a.T), b, transpose_a=True), want)
    assert same_bits(matmul(a, np.ascontiguousarray(b.T), transpose_b=True), want)
    assert same_bits(matmul(a.T, b.T, transpose_a=True, transpose_b=True), want)


def test_prepared_b_gives_the_same_bits():
    rng = np.random.default_rng(4)
    a, w = normal(rng, 2, 7, 64), normal(rng, 48, 64)
    prepared = prepare_b(w, transpose_b=True)
    assert isinstance(prepared, PreparedB)
    assert same_bits(matmul(a, prepared), matmul(a, w, transpose_b=True))
    with pytest.raises(OpError):
        matmul(a, prepared, transpose_b=True)


def test_rows_and_columns_are_independent():
    rng = np.random.default_rng(5)
    a, b = normal(rng, 12, 40), normal(rng, 40, 9)
    full = matmul(a, b)
    assert same_bits(matmul(a[3:7], b[:, 2:5]), full[3:7, 2:5])


# --- shapes, batches and errors ---------------------------------------------------------


def test_batched_broadcasting_equals_per_slice_products():
    rng = np.random.default_rng(6)
    a, b = normal(rng, 3, 1, 5, 8), normal(rng, 4, 8, 6)
    out = matmul(a, b)
    assert out.shape == (3, 4, 5, 6) and out.dtype == np.float32
    for i in range(3):
        for j in range(4):
            assert same_bits(out[i, j], matmul(a[i, 0], b[j]))
    w = normal(rng, 8, 6)
    stacked = matmul(a, w)  # one B for every batch element: rows stacked
    assert same_bits(stacked[2, 0], matmul(a[2, 0], w))
    left = matmul(a[0, 0], b)  # one A for every batch element
    assert same_bits(left[1], matmul(a[0, 0], b[1]))


def test_empty_dimensions():
    z = matmul(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32))
    assert z.shape == (3, 4) and same_bits(z, np.zeros((3, 4), np.float32))
    assert matmul(np.ones((0, 5), np.float32), np.ones((5, 4), np.float32)).shape == (0, 4)
    assert matmul(np.ones((3, 5), np.float32), np.ones((5, 0), np.float32)).shape == (3, 0)
    assert matmul(np.ones((0, 3, 5), np.float32), np.ones((5, 2), np.float32)).shape == (0, 3, 2)
    assert matmul(np.ones((0, 3, 5), np.float32), np.ones((0, 5, 2), np.float32)).shape == (0, 3, 2)
    assert matmul(np.ones((2, 3, 5), np.float32), np.ones((1, 5, 0), np.float32)).shape == (2, 3, 0)
    z = matmul(np.ones((2, 3, 0), np.float32), np.ones((2, 0, 4), np.float32), kernels="array")
    assert z.shape == (2, 3, 4) and not z.any()


@pytest.mark.parametrize("a, b", [
    (np.ones((2, 3), np.float64), np.ones((3, 2), np.float32)),
    (np.ones((2, 3), np.float32), np.ones((3, 2), np.float16)),
    (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)),
    (np.ones(3, np.float32), np.ones((3, 2), np.float32)),
    (np.ones((2, 2, 3), np.float32), np.ones((3, 3, 2), np.float32)),
    (np.ones((2, 3), np.int32), np.ones((3, 2), np.int32)),
])
def test_bad_operands_raise_operror(a, b):
    with pytest.raises(OpError):
        matmul(a, b)


def test_unknown_engine_and_missing_int8_raise(monkeypatch):
    a = np.ones((2, 2), np.float32)
    with pytest.raises(OpError):
        matmul(a, a, engine="bogus")
    monkeypatch.setattr(mm, "int8_available", lambda: False)
    with pytest.raises(OpError):
        matmul(a, a, engine="int8")
    assert same_bits(matmul(a, a), np.full((2, 2), 2, np.float32))  # auto falls back to float64


def test_engines_that_need_torch_say_so_without_it(monkeypatch):
    a = np.ones((2, 2), np.float32)
    monkeypatch.setattr(mm, "torch_available", lambda: False)
    for engine in ("int8", "torch"):
        with pytest.raises(OpError, match="needs the torch package"):
            matmul(a, a, engine=engine)
    assert same_bits(matmul(a, a, engine="float64"), np.full((2, 2), 2, np.float32))


def test_int8_engine_passes_its_saturation_probe_here():
    # torch's _int_mm is exact on the machines this runs on (one with AVX512-VNNI, one AVX2-only EPYC);
    # oneDNN's kernels that saturate int16 intermediates would make the probe say False
    assert _matmul_engines.int8_available()


# --- IEEE specials, per element ---------------------------------------------------------


def test_nonfinite_entries_only_touch_their_row_and_column():
    rng = np.random.default_rng(8)
    a, b = normal(rng, 6, 10), normal(rng, 10, 5)
    clean = matmul(a, b)
    a2, b2 = a.copy(), b.copy()
    a2[1, 3] = np.inf
    a2[4, 0] = np.nan
    b2[7, 2] = -np.inf
    got = matmul(a2, b2)
    untouched = np.ones((6, 5), bool)
    untouched[[1, 4], :] = False
    untouched[:, 2] = False
    assert np.array_equal(bits(got)[untouched], bits(clean)[untouched])
    assert np.all(np.isnan(got[4]))
    others = [0, 1, 3, 4]
    assert np.array_equal(got[1, others], np.sign(b[3, others]) * np.float32(np.inf))
    rows = [0, 2, 3, 5]
    assert np.array_equal(got[rows, 2], -np.sign(a[rows, 7]) * np.float32(np.inf))
    from_a, from_b = np.sign(b[3, 2]), -np.sign(a[1, 7])  # the two infinite products at (1, 2)
    if from_a == from_b:
        assert got[1, 2] == from_a * np.inf
    else:
        assert np.isnan(got[1, 2])


def test_nonfinite_entries_in_a_batch_stay_in_their_product():
    rng = np.random.default_rng(13)
    a, b = normal(rng, 4, 6, 10), normal(rng, 4, 10, 7)
    a[1, 2, 3] = np.nan
    b[3, 4, 5] = np.inf
    for kernels in KERNELS:
        got = matmul(a, b, kernels=kernels)
        for i in range(4):
            want = reference_matmul(a[i], b[i])
            assert np.array_equal(np.isnan(got[i]), np.isnan(want))
            assert np.array_equal(bits(got[i])[~np.isnan(want)], bits(want)[~np.isnan(want)])
        assert np.isnan(got[1, 2]).all() and np.isfinite(got[0]).all() and np.isfinite(got[2]).all()


def test_ieee_rules_for_inf_and_zero():
    inf, nan = np.inf, np.nan
    a = np.array([[inf, 0.0], [inf, 1.0], [2.0, 3.0], [-inf, 1.0]], np.float32)
    b = np.array([[0.0, 1.0, -1.0], [5.0, inf, inf]], np.float32)
    want = np.array([
        [nan, nan, nan],    # inf*0; inf + 0*inf; -inf + 0*inf
        [nan, inf, nan],    # inf*0; inf + inf; -inf + inf
        [15.0, inf, inf],   # finite; 2 + inf; -2 + inf
        [nan, nan, inf],    # -inf*0; -inf + inf; inf + inf
    ], np.float32)
    got = matmul(a, b)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(got[~np.isnan(want)], want[~np.isnan(want)])


def test_zero_rows_and_signed_zeros():
    a = np.array([[0.0, -0.0], [-0.0, -0.0], [1.0, -1.0]], np.float32)
    b = np.array([[1.0, -0.0], [1.0, 0.0]], np.float32)
    got = matmul(a, b)
    assert same_bits(got, np.zeros((3, 2), np.float32))  # an exact zero is +0.0


# --- accuracy -----------------------------------------------------------------------------


def test_normal_data_is_correctly_rounded():
    rng = np.random.default_rng(9)
    a, b = normal(rng, 40, 1024), normal(rng, 1024, 40)
    got, want = matmul(a, b), exact_float32(a, b)
    d = ulps(got, want)
    assert (d == 0).mean() >= 0.999
    assert d.max() <= 1
    native = ulps(a @ b, want)  # exact: comparison only, not a result
    assert native.max() > d.max()


# --- registry and backward rule -------------------------------------------------------------


def test_registered_with_transpose_attributes():
    rng = np.random.default_rng(10)
    a, b = normal(rng, 4, 6), normal(rng, 5, 6)
    out = registry.run("matmul", (a, b), {"transpose_b": True})
    assert same_bits(out, matmul(a, b.T))
    op = registry.get("matmul")
    assert op.arity == 2 and set(op.attrs) == {"transpose_a", "transpose_b"}


def _has_sum_to() -> bool:
    try:
        from repops_cupy import shape  # noqa: F401
        registry.get("sum_to")
    except Exception:
        return False
    return True


def _loss(a, b, g, ta, tb):
    return float(np.vdot(g.astype(np.float64), matmul(a, b, ta, tb).astype(np.float64)))  # exact: test-side loss


@pytest.mark.skipif(not _has_sum_to(), reason="op 'sum_to' (repops_cupy/shape.py) not available")
@pytest.mark.parametrize("a_shape, b_shape, ta, tb", [
    ((4, 6), (6, 5), False, False),
    ((6, 4), (6, 5), True, False),
    ((4, 6), (5, 6), False, True),
    ((6, 4), (5, 6), True, True),
    ((2, 3, 4, 6), (6, 5), False, False),
    ((4, 6), (3, 1, 6, 5), False, False),
    ((3, 1, 6, 4), (2, 5, 6), True, True),
])
def test_backward_rule_shapes_and_finite_differences(a_shape, b_shape, ta, tb):
    rng = np.random.default_rng(11)
    a, b = normal(rng, *a_shape), normal(rng, *b_shape)
    out = matmul(a, b, ta, tb)
    g = normal(rng, *out.shape)
    da, db = registry.vjp("matmul", g, (a, b), out, {"transpose_a": ta, "transpose_b": tb})
    assert da.shape == a.shape and db.shape == b.shape
    assert da.dtype == np.float32 and db.dtype == np.float32
    for x, dx, which in ((a, da, 0), (b, db, 1)):
        direction = normal(rng, *x.shape)
        eps = np.float32(1e-2)
        plus, minus = [x + s * eps * direction for s in (1, -1)]
        args = [(p, b) if which == 0 else (a, p) for p in (plus, minus)]
        fd = (_loss(*args[0], g, ta, tb) - _loss(*args[1], g, ta, tb)) / (2 * float(eps))
        analytic = float(np.vdot(dx.astype(np.float64), direction.astype(np.float64)))  # exact: test-side check
        assert abs(fd - analytic) <= 1e-3 * max(1.0, abs(analytic))


# --- CuPy ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cupy_path_gives_the_numpy_bits():
    import cupy

    rng = np.random.default_rng(12)
    a, b = normal(rng, 2, 33, 300), normal(rng, 300, 40)
    a[0, 3, 5] = np.inf
    b[7, 9] = np.nan
    want = matmul(a, b)
    got = cupy.asnumpy(matmul(cupy.asarray(a), cupy.asarray(b)))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(bits(got)[~np.isnan(want)], bits(want)[~np.isnan(want)])
    assert same_bits(cupy.asnumpy(matmul(cupy.asarray(b.T), cupy.asarray(a[1].T), transpose_a=True, transpose_b=True)),
                     matmul(b.T, a[1].T, transpose_a=True, transpose_b=True))
