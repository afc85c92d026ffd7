"""Elementwise operators against literal pure-Python references, bit for bit.

Python floats are IEEE doubles. For float32 operands, + - x / done in double and then
rounded to float32 give the correctly rounded float32 result (53 >= 2*24 + 2), so a
loop over Python floats is an exact reference for the float32 arithmetic; the GELU
references follow the float64 step sequence of the specification one scalar at a time.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repops_cupy import elementwise as E
from repops_cupy import registry
from repops_cupy import shape  # noqa: F401 - registers sum_to, which backward rules emit
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError
from repops_cupy.transcendental import erfc_f64, exp_f64, tanh_f64

from .bits import assert_same_bits, f32

FLOATS32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
FINITE32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
SETTINGS = settings(max_examples=60, deadline=None)


def _ref_div(a: float, b: float) -> float:
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


BINARY = {
    "add": (E.add, lambda a, b: a + b),
    "sub": (E.sub, lambda a, b: a - b),
    "mul": (E.mul, lambda a, b: a * b),
    "div": (E.div, _ref_div),
}


def _reference_binary(ref, a, b):
    shape = np.broadcast_shapes(a.shape, b.shape)
    ab, bb = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    out = np.empty(shape, np.float32)
    for idx in np.ndindex(shape):
        out[idx] = f32(ref(float(ab[idx]), float(bb[idx])))
    return out


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(data=st.data())
def test_binary_ops_match_python_reference(name, data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    a = data.draw(hnp.arrays(np.float32, shapes.input_shapes[0], elements=FLOATS32))
    b = data.draw(hnp.arrays(np.float32, shapes.input_shapes[1], elements=FLOATS32))
    op, ref = BINARY[name]
    out = op(a, b)
    assert isinstance(out, np.ndarray)
    assert_same_bits(out, _reference_binary(ref, a, b))
    assert_same_bits(registry.run(name, (a, b)), out)


def test_subnormal_results_are_not_flushed():
    tiny = np.array([1e-38, 3e-39], np.float32)
    out = E.mul(tiny, np.array([0.5, 0.25], np.float32))
    assert_same_bits(out, np.array([f32(1e-38 * 0.5), f32(float(np.float32(3e-39)) * 0.25)], np.float32))
    assert (out != 0).all()


@SETTINGS
@given(x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=5), elements=FLOATS32),
       value=st.floats(allow_nan=False, allow_infinity=True, width=64))
def test_scalar_ops_round_the_attribute_to_float32_first(x, value):
    v32 = float(f32(value))
    ref_mul = np.array([f32(float(e) * v32) for e in x.reshape(-1)], np.float32).reshape(x.shape)
    ref_add = np.array([f32(float(e) + v32) for e in x.reshape(-1)], np.float32).reshape(x.shape)
    assert_same_bits(E.mul_scalar(x, value), ref_mul)
    assert_same_bits(E.add_scalar(x, value), ref_add)
    assert_same_bits(registry.run("mul_scalar", (x,), {"value": value}), ref_mul)
    assert_same_bits(E.neg(x), np.array([-e for e in x.reshape(-1)], np.float32).reshape(x.shape))


def test_scalar_attribute_in_float32_differs_from_float64_scaling():
    x = np.arange(1, 200, dtype=np.float32) * np.float32(1.37)
    spec = E.mul_scalar(x, 0.1)
    wide = (x.astype(np.float64) * 0.1).astype(np.float32)
    assert (spec != wide).any()  # the specification is the float32 attribute, not the double
    assert_same_bits(spec, x * np.float32(0.1))


def test_zero_dim_inputs_give_arrays():
    a = np.array(1.5, np.float32)
    for op in (E.add, E.sub, E.mul, E.div):
        out = op(a, a)
        assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.float32
    assert isinstance(E.relu(a), np.ndarray) and isinstance(E.gelu(a), np.ndarray)


def test_relu_and_relu_grad_edge_values():
    x = np.array([-np.inf, -1.0, -0.0, 0.0, 1e-45, 2.0, np.inf, np.nan], np.float32)
    g = np.array([5, 5, 5, 5, 5, 5, np.nan, 5], np.float32)
    assert_same_bits(E.relu(x), np.array([0, 0, 0, 0, 1e-45, 2, np.inf, np.nan], np.float32))
    assert not np.signbit(E.relu(x)[:4]).any()  # -0 and negatives become +0
    assert_same_bits(E.relu_grad(g, x), np.array([0, 0, 0, 0, 5, 5, np.nan, np.nan], np.float32))
    assert_same_bits(E.relu_grad(np.full(3, np.inf, np.float32), np.array([-1, 0, 1], np.float32)),
                     np.array([0, 0, np.inf], np.float32))


# --- GELU -----------------------------------------------------------------------------


def _scalar(fn, v: float) -> float:
    """One value through a float64 array primitive (the project's own transcendental)."""
    return float(fn(np.array([v], np.float64))[0])


def _ref_gelu(x: float, approximate: str) -> np.float32:
    if x == -math.inf:
        return np.float32(-0.0)
    half = x * 0.5
    if approximate == "none":
        return f32(half * _scalar(erfc_f64, x * -E.INV_SQRT2))
    inner = x + ((x * x) * x) * E.GELU_TANH_K
    return f32(half * (_scalar(tanh_f64, inner * E.SQRT_2_OVER_PI) + 1.0))


def _ref_gelu_slope(x: float, approximate: str) -> float:
    if math.isinf(x):
        return 1.0 if x > 0 else 0.0
    if approximate == "none":
        cdf = _scalar(erfc_f64, x * -E.INV_SQRT2) * 0.5
        pdf = _scalar(exp_f64, (x * x) * -0.5) * E.INV_SQRT_2PI
        return cdf + x * pdf
    square = x * x
    t = _scalar(tanh_f64, (x + (square * x) * E.GELU_TANH_K) * E.SQRT_2_OVER_PI)
    return (t + 1.0) * 0.5 + (x * 0.5) * ((1.0 - t * t) * ((square * E.GELU_TANH_3K + 1.0) * E.SQRT_2_OVER_PI))


GELU_INPUTS = st.one_of(FLOATS32, st.floats(-12, 12, width=32))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@settings(max_examples=40, deadline=None)
@given(x=hnp.arrays(np.float32, st.integers(0, 12), elements=GELU_INPUTS),
       g=st.floats(-100, 100, width=32))
def test_gelu_and_grad_follow_the_specified_float64_sequence(approximate, x, g):
    expected = np.array([_ref_gelu(float(v), approximate) for v in x], np.float32)
    assert_same_bits(E.gelu(x, approximate), expected)
    gs = np.full(x.shape, g, np.float32)
    expected_grad = np.array([f32(float(g) * _ref_gelu_slope(float(v), approximate)) for v in x], np.float32)
    assert_same_bits(E.gelu_grad(gs, x, approximate), expected_grad)
    assert_same_bits(registry.run("gelu_grad", (gs, x), {"approximate": approximate}), expected_grad)


def test_gelu_limits_and_signs():
    x = np.array([-np.inf, -50.0, -0.0, 0.0, np.inf, np.nan], np.float32)
    for approximate in ("none", "tanh"):
        y = E.gelu(x, approximate)
        assert_same_bits(y, np.array([-0.0, -0.0, -0.0, 0.0, np.inf, np.nan], np.float32))
        slope = E.gelu_grad(np.ones_like(x), x, approximate)
        assert_same_bits(slope, np.array([0.0, 0.0, 0.5, 0.5, 1.0, np.nan], np.float32))


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_gelu_is_accurate_against_libm_double():
    # the erf form stays within 1 ulp deep into the negative tail (erfc, no cancellation)
    x = np.linspace(-12, 8, 4001, dtype=np.float32)
    true_erf = np.array([f32(0.5 * v * math.erfc(-v / math.sqrt(2))) for v in x.astype(float)], np.float32)
    assert _ulps(E.gelu(x, "none"), true_erf).max() <= 1
    x = np.linspace(-5, 8, 4001, dtype=np.float32)
    true_tanh = np.array([f32(0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))))
                          for v in x.astype(float)], np.float32)
    assert _ulps(E.gelu(x, "tanh"), true_tanh).max() <= 1
    # the slope against a central difference of the double-precision formula
    h = 1e-6
    xd = x.astype(float)
    fd = np.array([(0.5 * (v + h) * (1 + math.erf((v + h) / math.sqrt(2)))
                    - 0.5 * (v - h) * (1 + math.erf((v - h) / math.sqrt(2)))) / (2 * h) for v in xd])
    slope = E.gelu_grad(np.ones_like(x), x, "none").astype(float)
    np.testing.assert_allclose(slope, fd, rtol=1e-5, atol=1e-6)


def test_layout_does_not_change_bits():
    rng = np.random.default_rng(3)
    base = (rng.standard_normal((24, 30)) * 3).astype(np.float32)
    views = [base[::2, 1::3], np.asfortranarray(base)[3:, ::-1], base.T]
    for view in views:
        dense = np.ascontiguousarray(view)
        other = np.asfortranarray(view[::-1, :])[::-1, :]
        for fn in (E.relu, E.neg, lambda v: E.gelu(v, "none"), lambda v: E.gelu(v, "tanh"),
                   lambda v: E.mul_scalar(v, 0.3), lambda v: E.div(v, v[:1, :])):
            assert_same_bits(fn(view), fn(dense))
            assert_same_bits(fn(other), fn(dense))
        assert_same_bits(E.gelu_grad(view, view.T.T), E.gelu_grad(dense, dense))


def test_errors_are_op_errors():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(OpError, match="float32"):
        E.add(x, np.ones((2, 3), np.float64))
    with pytest.raises(OpError, match="float32"):
        E.relu(np.ones(3, np.int32))
    with pytest.raises(OpError, match="do not broadcast"):
        E.mul(x, np.ones((4,), np.float32))
    with pytest.raises(OpError, match="approximate"):
        E.gelu(x, "erf")
    with pytest.raises(OpError, match="shape"):
        E.relu_grad(x, np.ones((3, 2), np.float32))
    with pytest.raises(OpError, match="value"):
        registry.run("mul_scalar", (x,), {"value": "2"})
    with pytest.raises(OpError):
        E.add(x, [1.0, 2.0, 3.0])


def test_backward_rules_reduce_broadcast_gradients():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(7)
    b = np.arange(1, 5, dtype=np.float32).reshape(1, 4)
    out = E.div(a, b)
    g = np.ones_like(out)
    ga, gb = registry.vjp("div", g, (a, b), out)
    assert ga.shape == a.shape and gb.shape == b.shape
    assert_same_bits(ga, E.div(g, b) * np.ones_like(a))
    emitted = []

    def recording(name, *inputs, **attrs):
        emitted.append(name)
        return registry.run(name, inputs, attrs)

    registry.vjp("add", g, (a, b), E.add(a, b), emit=recording)
    assert emitted == ["sum_to"]  # a's gradient is g itself, b's is summed
    emitted.clear()
    assert registry.vjp("add_scalar", g, (a,), out, {"value": 1.0}, emit=recording)[0] is g
    registry.vjp("gelu", g, (a,), out, {"approximate": "tanh"}, emit=recording)
    assert emitted == ["gelu_grad"]


@pytest.mark.gpu
def test_cupy_gives_the_same_bits():
    cp = cupy_module()
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((64, 33)) * 4).astype(np.float32)
    x[0, :6] = [np.inf, -np.inf, np.nan, -0.0, 1e-40, -1e-40]
    y = rng.standard_normal((1, 33)).astype(np.float32)
    xc, yc = cp.asarray(x), cp.asarray(y)
    for name in ("add", "sub", "mul", "div"):
        assert_same_bits(cp.asnumpy(registry.run(name, (xc, yc))), registry.run(name, (x, y)))
    for approximate in ("none", "tanh"):
        assert_same_bits(cp.asnumpy(E.gelu(xc, approximate)), E.gelu(x, approximate))
        assert_same_bits(cp.asnumpy(E.gelu_grad(xc, xc, approximate)), E.gelu_grad(x, x, approximate))
    assert_same_bits(cp.asnumpy(E.relu_grad(xc, xc)), E.relu_grad(x, x))
