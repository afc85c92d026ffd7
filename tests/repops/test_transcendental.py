"""Transcendentals: bit-exact against the literal scalar programs, accurate against Decimal.

Speed of the NumPy array code, measured here side by side (CPU time, 1 thread, float32
input): exp is 20x (1e7 elements) to 35x (1e6) NumPy's AVX-512 float32 np.exp, which is
neither reproducible nor correctly rounded; log 28-41x, sigmoid 24-39x, tanh 83-143x,
erf 119-193x, rsqrt 6-10x. On NumPy arrays the compiled kernels of `cpu_kernels` now
compute the same bits several times faster (their table is in test_cpu_kernels.py).
Timings are not asserted; accuracy is reported by scripts/accuracy_repops.py. These
tests run whichever path REPOPS_CPU_KERNELS selects (compiled by default).
"""
import importlib
import math
from decimal import Decimal
import struct
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repops_cupy import scalar_reference as ref
from repops_cupy import registry
from repops_cupy import transcendental as T
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError

from .bits import cpu_path  # noqa: F401 - autouse: every test on compiled kernels and array code


PRIMITIVES = {
    "exp_f64": (T.exp_f64, ref.exp),
    "expm1_f64": (T.expm1_f64, ref.expm1),
    "log_f64": (T.log_f64, ref.log),
    "tanh_f64": (T.tanh_f64, ref.tanh),
    "erf_f64": (T.erf_f64, ref.erf),
    "erfc_f64": (T.erfc_f64, ref.erfc),
    "sigmoid_f64": (T.sigmoid_f64, ref.sigmoid),
}
PUBLIC = {
    "exp": ref.exp,
    "log": ref.log,
    "tanh": ref.tanh,
    "erf": ref.erf,
    "sigmoid": ref.sigmoid,
    "sqrt": lambda v: math.nan if v < 0 or math.isnan(v) else math.sqrt(v),
    "rsqrt": lambda v: math.nan if v < 0 or math.isnan(v) else 1.0 / math.sqrt(v) if v else math.copysign(math.inf, v),
}
EDGES64 = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-310, -1e-310, 2.0**-60, -(2.0**-56),
           1e-30, 0.5, -0.5, 0.34657359027997264, 1.0, -1.0, 1.25, 0.84375, 2.857142857, 6.0, -6.0, 22.0,
           -22.0, 38.81624211135693, -38.816242111356935, 88.72283935546875, 89.0, -103.97, -104.0,
           709.782712893383, 709.7827128933841, 710.0, -708.4, -745.1, -745.2, 1e300, -1e300,
           math.inf, -math.inf, math.nan]


def _bits64(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8000000000000), a.view(np.uint64))


def _bits32(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    return np.where(np.isnan(a), np.uint32(0x7FC00000), a.view(np.uint32))


def _reference64(scalar, values) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.array([scalar(float(v)) for v in values], dtype=np.float64)


def _all_float32_patterns(count: int, seed: int) -> np.ndarray:
    """float32 values from random bit patterns: every exponent, subnormals, inf, NaN."""
    bits = np.random.default_rng(seed).integers(0, 1 << 32, size=count, dtype=np.uint64).astype(np.uint32)
    return bits.view(np.float32)


# --- constants ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, bits",
    [
        (T.LN2_HI, 0x3FE62E42FEE00000), (T.LN2_LO, 0x3DEA39EF35793C76), (T.INVLN2, 0x3FF71547652B82FE),
        (T.EXP_P1, 0x3FC555555555553E), (T.EXP_P5, 0x3E66376972BEA4D0), (T.LOG_LG1, 0x3FE5555555555593),
        (T.LOG_LG7, 0x3FC2F112DF3E5244), (T.EXPM1_Q1, 0xBFA11111111110F4), (T.EXPM1_Q5, 0xBE8AFDB76E09C32D),
        (T.ERF_ERX, 0x3FEB0AC160000000), (T.ERF_PP[0], 0x3FC06EBA8214DB68), (T.ERF_QQ[4], 0xBED09C4342A26120),
        (T.ERF_PA[6], 0xBF61BF380A96073F), (T.ERF_RA[7], 0xC023A0EFC69AC25C), (T.ERF_SA[7], 0xBFAEEFF2EE749A62),
        (T.ERF_RB[6], 0xC07E384E9BDC383F), (T.ERF_SB[6], 0xC03670E242712D62), (T.SQRT_HALF, 0x3FE6A09E667F3BCD),
    ],
)
def test_constants_have_the_intended_bits(value, bits):
    assert struct.unpack("<Q", struct.pack("<d", value))[0] == bits


# --- float64 primitives: bit for bit against the literal programs ---------------------


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_primitive_edges_match_reference(name):
    fast, slow = PRIMITIVES[name]
    x = np.array(EDGES64 + [-v for v in EDGES64], dtype=np.float64)
    assert np.array_equal(_bits64(fast(x)), _bits64(_reference64(slow, x)))


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), min_size=1, max_size=40))
def test_primitive_matches_reference_on_any_float64(name, values):
    fast, slow = PRIMITIVES[name]
    x = np.array(values, dtype=np.float64)
    assert np.array_equal(_bits64(fast(x)), _bits64(_reference64(slow, x)))


@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_primitive_matches_reference_on_moderate_range(name):
    fast, slow = PRIMITIVES[name]
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(size=1500) * 4, rng.uniform(-40, 40, 500), rng.uniform(-750, 750, 300)])
    assert np.array_equal(_bits64(fast(x)), _bits64(_reference64(slow, x)))


def test_primitives_are_independent_of_layout():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 48)) * 5
    for name, (fast, _) in PRIMITIVES.items():
        whole = fast(x)
        assert np.array_equal(_bits64(fast(np.asfortranarray(x))), _bits64(whole)), name
        assert np.array_equal(_bits64(fast(x[:, ::3])), _bits64(whole[:, ::3])), name
        assert np.array_equal(_bits64(fast(x[5])), _bits64(whole[5])), name


def test_erfc_f64_is_accurate_where_one_minus_erf_cancels():
    x = np.concatenate([np.linspace(-6.5, 27.5, 400), [0.1, 0.3, 0.9, 1.1, 2.0, 5.0, 10.0, 20.0]])
    with np.errstate(all="ignore"):
        got = T.erfc_f64(x)
    worst = 0.0
    for xi, yi in zip(x, got):
        with ref._context(80):
            true = 1 - ref.true_erf(float(xi))
        if true == 0:
            continue
        rel = abs((Decimal(float(yi)) - true) / true)
        worst = max(worst, float(rel))
    assert worst < 2**-50  # a few float64 ulps, also where erfc(x) is 1e-300


def test_primitives_reject_other_dtypes():
    with pytest.raises(OpError):
        T.exp_f64(np.ones(3, dtype=np.float32))


# --- float32 operators ----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_op_is_reference_rounded_once(name):
    x = np.concatenate([
        _all_float32_patterns(2000, seed=11),
        np.random.default_rng(5).normal(size=1000).astype(np.float32) * 3,
        np.array([0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 88.72283, 88.72284, -103.972, -103.973, 89.0,
                  np.inf, -np.inf, np.nan], dtype=np.float32),
    ])
    got = registry.run(name, (x,))
    with np.errstate(all="ignore"):
        expected = _reference64(PUBLIC[name], x.astype(np.float64)).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == x.shape
    assert np.array_equal(_bits32(got), _bits32(expected))


def test_special_values_follow_ieee():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype=np.float32)
    run = lambda op: registry.run(op, (x,))  # noqa: E731
    assert np.array_equal(_bits32(run("exp")), _bits32([np.nan, np.inf, 0.0, 1.0, 1.0]))
    assert np.array_equal(_bits32(run("log")), _bits32([np.nan, np.inf, np.nan, -np.inf, -np.inf]))
    assert np.array_equal(_bits32(run("tanh")), _bits32([np.nan, 1.0, -1.0, 0.0, -0.0]))
    assert np.array_equal(_bits32(run("erf")), _bits32([np.nan, 1.0, -1.0, 0.0, -0.0]))
    assert np.array_equal(_bits32(run("sigmoid")), _bits32([np.nan, 1.0, 0.0, 0.5, 0.5]))
    assert np.array_equal(_bits32(run("sqrt")), _bits32([np.nan, np.inf, np.nan, 0.0, -0.0]))
    assert np.array_equal(_bits32(run("rsqrt")), _bits32([np.nan, 0.0, np.nan, np.inf, -np.inf]))
    # signs of zero survive where the function is odd
    assert np.signbit(run("tanh")[4]) and np.signbit(run("erf")[4]) and np.signbit(run("sqrt")[4])
    # log of a negative number, exp overflow and underflow thresholds in float32
    assert np.isnan(registry.run("log", (np.float32([-1e-45]),))[0])
    assert registry.run("exp", (np.float32([88.72284]),))[0] == np.inf
    assert registry.run("exp", (np.float32([88.72283]),))[0] < np.inf
    assert registry.run("exp", (np.float32([-103.98]),))[0] == 0.0
    assert registry.run("exp", (np.float32([-103.96]),))[0] > 0.0  # the smallest subnormal


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_ops_reject_wrong_dtype(name):
    with pytest.raises(OpError):
        registry.run(name, (np.ones(3, dtype=np.float64),))


def test_public_ops_keep_shape_for_0d_and_empty():
    for name in PUBLIC:
        assert registry.run(name, (np.float32(2.0).reshape(()),)).shape == ()
        assert registry.run(name, (np.zeros((0, 3), np.float32),)).shape == (0, 3)


TRUE = {"exp": ref.true_exp, "log": ref.true_log, "tanh": ref.true_tanh, "erf": ref.true_erf,
        "sigmoid": ref.true_sigmoid, "rsqrt": ref.true_rsqrt, "sqrt": ref.true_sqrt}


@pytest.mark.parametrize("name", sorted(TRUE))
def test_public_op_is_within_one_ulp_of_the_true_value(name):
    rng = np.random.default_rng(17)
    x = np.concatenate([rng.normal(size=150) * 4, np.ldexp(rng.uniform(1, 2, 150), rng.integers(-40, 8, 150))])
    x = x.astype(np.float32)
    if name in ("log", "rsqrt", "sqrt"):
        x = np.abs(x)
    if name == "exp":
        x = np.clip(x, -87, 88)
    y = registry.run(name, (x,))
    errors = [ref.ulp_error_f32(yi, TRUE[name](float(xi))) for xi, yi in zip(x, y)]
    assert max(errors) <= 0.5 + 1e-6, name  # correctly rounded on these samples


# --- gradient operators ---------------------------------------------------------------


GRADS = {
    # op: (grad op, uses out?, derivative in float64 of x)
    "tanh": ("tanh_grad", True, lambda x: 1 - math.tanh(x) ** 2),
    "sigmoid": ("sigmoid_grad", True, lambda x: math.exp(-x) / (1 + math.exp(-x)) ** 2),
    "erf": ("erf_grad", False, lambda x: 2 / math.sqrt(math.pi) * math.exp(-x * x)),
    "sqrt": ("sqrt_grad", True, lambda x: 0.5 / math.sqrt(x)),
    "rsqrt": ("rsqrt_grad", True, lambda x: -0.5 * x**-1.5),
}


def _grad_formula(grad_op, g, second):
    g, s = float(g), float(second)
    if grad_op == "tanh_grad":
        return g * (1.0 - s * s)
    if grad_op == "sigmoid_grad":
        return g * (s * (1.0 - s))
    if grad_op == "erf_grad":
        return g * (T.TWO_OVER_SQRTPI * ref.exp(-(s * s)))
    if grad_op == "sqrt_grad":
        return g / (s + s)
    return g * (-0.5 * ((s * s) * s))


@pytest.mark.parametrize("op", sorted(GRADS))
def test_gradient_ops_follow_their_formula_and_the_derivative(op):
    grad_op, uses_out, derivative = GRADS[op]
    rng = np.random.default_rng(23)
    x = rng.normal(size=300).astype(np.float32) * 2
    if op in ("sqrt", "rsqrt"):
        x = np.abs(x) + np.float32(0.05)
    g = rng.normal(size=300).astype(np.float32)
    out = registry.run(op, (x,))
    second = out if uses_out else x
    got = registry.run(grad_op, (g, second))
    formula = np.array([_grad_formula(grad_op, a, b) for a, b in zip(g, second)]).astype(np.float32)
    assert np.array_equal(_bits32(got), _bits32(formula))
    true = np.array([float(a) * derivative(float(b)) for a, b in zip(g, x)])
    assert np.allclose(got, true, rtol=1e-5, atol=1e-6)
    # and the registered backward rule emits that operator
    (via_rule,) = registry.vjp(op, g, (x,), out)
    assert np.array_equal(_bits32(via_rule), _bits32(got))


def _have(*ops):
    """Whether the operators exist, importing the modules of other engineers' ops if present."""
    for module in ("elementwise", "shape"):
        try:
            importlib.import_module(f"repops_cupy.{module}")
        except ImportError:
            pass
    return all(op in registry.names() for op in ops)


@pytest.mark.parametrize("op, emitted", [("exp", "mul"), ("log", "div")])
def test_rules_emitting_elementwise_ops_match_finite_differences(op, emitted):
    if not _have(emitted):
        pytest.skip(f"operator {emitted!r} (elementwise module) not registered yet")
    rng = np.random.default_rng(29)
    x = (np.abs(rng.normal(size=50)) + 0.5).astype(np.float32)
    g = rng.normal(size=50).astype(np.float32)
    out = registry.run(op, (x,))
    (grad,) = registry.vjp(op, g, (x,), out)
    h = 1e-6
    f = ref.exp if op == "exp" else ref.log
    fd = np.array([float(gi) * (f(float(xi) + h) - f(float(xi) - h)) / (2 * h) for gi, xi in zip(g, x)])
    assert np.allclose(grad, fd, rtol=1e-4, atol=1e-5)


def test_grad_ops_check_shapes():
    with pytest.raises(OpError):
        registry.run("tanh_grad", (np.ones(3, np.float32), np.ones(4, np.float32)))


# --- CuPy -------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_cupy_matches_numpy_bit_for_bit(name):
    cp = cupy_module()
    x = _all_float32_patterns(20000, seed=31)
    cpu = registry.run(name, (x,))
    gpu = cp.asnumpy(registry.run(name, (cp.asarray(x),)))
    assert np.array_equal(_bits32(cpu), _bits32(gpu))


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PRIMITIVES))
def test_cupy_primitives_match_numpy(name):
    cp = cupy_module()
    fast, _ = PRIMITIVES[name]
    x = np.random.default_rng(37).normal(size=20000) * 30
    assert np.array_equal(_bits64(fast(x)), _bits64(cp.asnumpy(fast(cp.asarray(x)))))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_large_inputs_processed_in_pieces_give_the_same_bits(name):
    size = 7 * (T._CHUNK // 2 + 3)
    normal = np.random.default_rng(2).normal(size=size - size // 2).astype(np.float32)
    x = np.concatenate([_all_float32_patterns(size // 2, seed=43), normal])
    x = np.asfortranarray(x.reshape(7, -1))  # also not C-contiguous
    whole = registry.run(name, (x,))
    rows = np.stack([registry.run(name, (np.ascontiguousarray(x[i]),)) for i in range(x.shape[0])])
    assert whole.shape == x.shape and np.array_equal(_bits32(whole), _bits32(rows))
