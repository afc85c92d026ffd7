"""Reductions: bit for bit against a literal loop over the specified tree.

Speed of the NumPy array code, measured here side by side (CPU time, 1 thread, float32,
1e7 elements): all elements 5x np.sum, rows of 1000 6.5x, axis 0 of (1e4, 1e3) 8x, rows
of 64 3x; not asserted. On NumPy arrays the compiled trees of `cpu_kernels` serve
instead (same bits; see test_cpu_kernels.py), unless REPOPS_CPU_KERNELS=0.
"""
import importlib
import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repops_cupy import scalar_reference as ref
from repops_cupy import reduce as R
from repops_cupy import registry
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError

from .bits import cpu_path  # noqa: F401 - autouse: every test on compiled kernels and array code


def _bits32(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    return np.where(np.isnan(a), np.uint32(0x7FC00000), a.view(np.uint32))


def _bits64(a) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.where(np.isnan(a), np.uint64(0x7FF8000000000000), a.view(np.uint64))


def _groups(x: np.ndarray, axis, keepdims=False):
    """For each output position (C order), the reduced elements in the specified order."""
    axes = R.normalize_axes("test", x.ndim, axis)
    kept = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, kept + list(axes))
    rows = math.prod(x.shape[i] for i in kept)
    shape = tuple(1 if (keepdims and i in axes) else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
    return moved.reshape(rows, -1), shape


def _ref_reduce(x, axis, keepdims, per_group, dtype=np.float32):
    groups, shape = _groups(x, axis, keepdims)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = np.array([per_group([float(v) for v in g]) for g in groups], dtype=np.float64)
        return out.astype(dtype).reshape(shape)


def _ref_var(values, correction):
    n = len(values)
    m = ref.tree_sum(values) / n
    d = [v - m for v in values]
    denom = float(max(n - correction, 0))
    s = ref.tree_sum([t * t for t in d])
    if denom == 0:
        return math.nan if (s == 0 or math.isnan(s)) else math.inf
    return s / denom


def _ref_max(values):
    if any(math.isnan(v) for v in values):
        return math.nan
    top = max(values)
    if top == 0:
        return 0.0 if any(v == 0 and math.copysign(1, v) > 0 for v in values) else -0.0
    return top


# --- the tree itself ---------------------------------------------------------------


def test_tree_shape_for_small_lengths_is_the_specified_one():
    # symbolic check: build the expression tree with strings instead of numbers
    def shape(n):
        level = [str(i) for i in range(n)]
        while len(level) > 1:
            nxt = [f"({level[2 * i]}+{level[2 * i + 1]})" for i in range(len(level) // 2)]
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0]

    assert shape(5) == "(((0+1)+(2+3))+4)"
    assert shape(6) == "(((0+1)+(2+3))+(4+5))"
    assert shape(7) == "(((0+1)+(2+3))+((4+5)+6))"
    # values chosen so that every different tree gives a different float64 result
    for n in range(1, 40):
        vals = [(1.0 + i * 2.0**-40) * (2.0 ** (31 * (i % 3))) * (-1) ** i for i in range(n)]
        got = R.tree_sum_f64(np.array(vals))
        assert _bits64(got) == _bits64(ref.tree_sum(vals)), n


def test_tree_sum_f64_keeps_negative_zero_and_sums_empty_to_positive_zero():
    assert np.signbit(R.tree_sum_f64(np.array([-0.0])))
    assert np.signbit(R.tree_sum_f64(np.array([-0.0, -0.0, -0.0])))
    empty = R.tree_sum_f64(np.zeros((3, 0)), 1)
    assert empty.shape == (3,) and not np.signbit(empty).any() and (empty == 0).all()


def test_tree_sum_f64_accepts_int_axis_and_rejects_float32():
    x = np.arange(12.0).reshape(3, 4)
    assert np.array_equal(R.tree_sum_f64(x, 0), R.tree_sum_f64(x, (0,)))
    assert R.tree_sum_f64(x, -1, keepdims=True).shape == (3, 1)
    with pytest.raises(OpError):
        R.tree_sum_f64(x.astype(np.float32))


@settings(max_examples=80, deadline=None)
@given(
    x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                 elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)),
    data=st.data(),
)
def test_tree_sum_f64_matches_literal_loop(x, data):
    axes = data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), unique_by=lambda a: a % x.ndim, max_size=x.ndim))
    got = R.tree_sum_f64(x, tuple(axes))
    expected = _ref_reduce(x, tuple(axes), False, ref.tree_sum, np.float64)
    assert np.array_equal(_bits64(got), _bits64(expected))


# --- float32 ops ---------------------------------------------------------------------

F32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
REFS = {
    "sum": lambda v, c: ref.tree_sum(v),
    "mean": lambda v, c: ref.tree_sum(v) / len(v),
    "max": lambda v, c: _ref_max(v),
    "var": _ref_var,
}


@pytest.mark.parametrize("op", sorted(REFS))
@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=8), elements=F32),
    data=st.data(),
)
def test_op_matches_literal_reference(op, x, data):
    axes = tuple(data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), unique_by=lambda a: a % x.ndim,
                                    max_size=x.ndim)))
    keepdims = data.draw(st.booleans())
    attrs = {"axis": axes, "keepdims": keepdims}
    correction = 0
    if op == "var":
        correction = data.draw(st.integers(0, 2))
        attrs["correction"] = correction
    got = registry.run(op, (x,), attrs)
    expected = _ref_reduce(x, axes, keepdims, lambda v: REFS[op](v, correction))
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(_bits32(got), _bits32(expected))


@pytest.mark.parametrize("op", sorted(REFS))
def test_layout_and_chunking_do_not_change_bits(op):
    rng = np.random.default_rng(41)
    x = (rng.normal(size=(6, 50, 40)) * np.exp(rng.normal(size=(6, 50, 40)) * 3)).astype(np.float32)
    for axis in [(), (0,), (1,), (2,), (0, 2), (-1, 0)]:
        base = registry.run(op, (x,), {"axis": axis})
        fortran = registry.run(op, (np.asfortranarray(x),), {"axis": axis})
        assert np.array_equal(_bits32(base), _bits32(fortran)), (op, axis)
        # a strided view reduces like a contiguous copy of it
        view = x[:, ::2, 1::3]
        assert np.array_equal(_bits32(registry.run(op, (view,), {"axis": axis})),
                              _bits32(registry.run(op, (view.copy(),), {"axis": axis}))), (op, axis)
    # rows computed alone equal rows computed in a batch (batch position is irrelevant)
    whole = registry.run(op, (x,), {"axis": (2,)})
    part = registry.run(op, (x[2:3],), {"axis": (2,)})
    assert np.array_equal(_bits32(whole[2:3]), _bits32(part))


def test_both_internal_layouts_give_the_same_bits():
    rng = np.random.default_rng(43)
    x = rng.normal(size=(40, 77)) * 1e3
    few_rows = R._tree_last(np, np.ascontiguousarray(x))
    many_rows = R._tree_first(np, np.ascontiguousarray(x.T))
    assert np.array_equal(_bits64(few_rows), _bits64(many_rows))


@pytest.mark.parametrize("shape, axis", [((2 * R._PIECE + 777,), ()), ((5000, 100), (0,)), ((20, 5000), (1,)),
                                         ((3, R._PIECE + 5), (1,))])
def test_large_inputs_summed_in_pieces_follow_the_same_tree(shape, axis):
    rng = np.random.default_rng(67)
    x = rng.normal(size=shape) * np.exp2(rng.integers(-30, 30, size=shape))  # any other order shows
    got = R.tree_sum_f64(x, axis)
    expected = _ref_reduce(x, axis, False, ref.tree_sum, np.float64)
    assert np.array_equal(_bits64(got), _bits64(expected))
    assert np.array_equal(_bits32(registry.run("sum", (x.astype(np.float32),), {"axis": axis})),
                          _bits32(_ref_reduce(x.astype(np.float32), axis, False, ref.tree_sum)))


def test_sum_is_accurate_on_cancellation():
    rng = np.random.default_rng(47)
    big = rng.normal(size=5000).astype(np.float32) * np.float32(1e6)
    small = rng.normal(size=5000).astype(np.float32)
    x = np.concatenate([big, -big, small])
    got = registry.run("sum", (x,))
    exact = sum(Fraction(float(v)) for v in x)
    assert ref.ulp_error_f32(got, exact) <= 1.0


def test_max_nan_and_signed_zero():
    x = np.array([[1.0, np.nan, 3.0], [-0.0, 0.0, -0.0], [-0.0, -0.0, -1.0], [-np.inf, -np.inf, -np.inf]], np.float32)
    got = registry.run("max", (x,), {"axis": (1,)})
    assert np.isnan(got[0]) and got[1] == 0 and not np.signbit(got[1])
    assert got[2] == 0 and np.signbit(got[2]) and got[3] == -np.inf


def test_special_values_propagate_per_element_not_per_row():
    x = np.array([[1.0, np.inf, 2.0], [1.0, 2.0, 3.0], [np.inf, -np.inf, 0.0]], np.float32)
    s = registry.run("sum", (x,), {"axis": (1,)})
    assert s[0] == np.inf and s[1] == 6.0 and np.isnan(s[2])
    v = registry.run("var", (x,), {"axis": (1,)})
    assert np.isnan(v[0]) and v[1] == np.float32(2.0 / 3.0)


@pytest.mark.parametrize(
    "op, x, attrs",
    [
        ("sum", np.ones(3, np.float64), {}),
        ("mean", np.ones(3, np.int32), {}),
        ("max", np.zeros((2, 0), np.float32), {"axis": (1,)}),
        ("mean", np.zeros((0,), np.float32), {}),
        ("var", np.zeros((0, 3), np.float32), {"axis": (0,)}),
        ("sum", np.ones((2, 3), np.float32), {"axis": (2,)}),
        ("sum", np.ones((2, 3), np.float32), {"axis": (1, -1)}),
        ("var", np.ones((2, 3), np.float32), {"correction": -1}),
        ("sum", np.ones((2, 3), np.float32), {"axis": 1}),  # attribute must be a tuple
    ],
)
def test_errors(op, x, attrs):
    with pytest.raises(OpError):
        registry.run(op, (x,), attrs)


def test_empty_sum_and_max_over_nonempty_axes_of_empty_arrays():
    x = np.zeros((0, 4), np.float32)
    s = registry.run("sum", (x,), {"axis": (0,)})
    assert s.shape == (4,) and (s == 0).all() and not np.signbit(s).any()
    assert registry.run("max", (x,), {"axis": (1,)}).shape == (0,)
    assert registry.run("sum", (np.float32(2.5).reshape(()),)).shape == ()


def test_var_correction_and_zero_denominator():
    x = np.array([[1.0, 2.0, 4.0]], np.float32)
    assert registry.run("var", (x,), {"axis": (1,), "correction": 1})[0] == np.float32(7.0 / 3.0)
    assert registry.run("var", (x,), {"axis": (1,), "correction": 3})[0] == np.inf
    assert np.isnan(registry.run("var", (np.float32([[5.0]]),), {"axis": (1,), "correction": 1})[0])


# --- gradients ------------------------------------------------------------------------


def test_max_grad_splits_among_ties():
    x = np.array([[1.0, 3.0, 3.0, 2.0], [0.0, -0.0, -1.0, -2.0], [np.nan, 1.0, np.nan, 0.0]], np.float32)
    out = registry.run("max", (x,), {"axis": (1,)})
    g = np.array([1.0, 3.0, 5.0], np.float32)
    grad = registry.run("max_grad", (g, x, out), {"axis": (1,)})
    np.testing.assert_array_equal(grad, [[0, 0.5, 0.5, 0], [1.5, 1.5, 0, 0], [2.5, 0, 2.5, 0]])
    (via_rule,) = registry.vjp("max", g, (x,), out, {"axis": (1,)})
    assert np.array_equal(_bits32(via_rule), _bits32(grad))


def test_max_grad_third_of_a_gradient_is_rounded_once():
    x = np.array([[2.0, 2.0, 2.0]], np.float32)
    grad = registry.run("max_grad", (np.float32([1.0]), x, np.float32([2.0])), {"axis": (1,)})
    assert (grad == np.float32(1.0 / 3.0)).all()


def _fd_grad(f, x, g, h=1e-3):
    """Central finite differences of sum(g * f(x)) in float64."""
    grad = np.zeros_like(x, dtype=np.float64)
    for idx in itertools.product(*map(range, x.shape)):
        up, down = x.astype(np.float64), x.astype(np.float64)
        up[idx] += h
        down[idx] -= h
        grad[idx] = (np.vdot(g, f(up)) - np.vdot(g, f(down))) / (2 * h)
    return grad


@pytest.mark.parametrize("axis, keepdims, correction", [((1,), False, 0), ((0, 2), True, 1), ((), False, 1)])
def test_var_grad_matches_finite_differences(axis, keepdims, correction):
    rng = np.random.default_rng(53)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    out = registry.run("var", (x,), {"axis": axis, "keepdims": keepdims, "correction": correction})
    g = rng.normal(size=out.shape).astype(np.float32)
    (grad,) = registry.vjp("var", g, (x,), out, {"axis": axis, "keepdims": keepdims, "correction": correction})
    ax = R.normalize_axes("t", 3, axis)
    f = lambda a: np.var(a, axis=ax, keepdims=keepdims, ddof=correction)  # noqa: E731 - test reference only
    np.testing.assert_allclose(grad, _fd_grad(f, x, g), rtol=1e-3, atol=1e-4)


def _other_ops_present(*ops):
    for module in ("elementwise", "shape"):
        try:
            importlib.import_module(f"repops_cupy.{module}")
        except ImportError:
            pass
    return all(op in registry.names() for op in ops)


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("axis, keepdims", [((1,), False), ((0, 2), True), ((), False)])
def test_sum_and_mean_rules_match_finite_differences(op, axis, keepdims):
    if not _other_ops_present("reshape", "broadcast_to", "mul_scalar"):
        pytest.skip("reshape / broadcast_to / mul_scalar (shape and elementwise modules) not registered yet")
    rng = np.random.default_rng(59)
    x = rng.normal(size=(3, 4, 5)).astype(np.float32)
    out = registry.run(op, (x,), {"axis": axis, "keepdims": keepdims})
    g = rng.normal(size=out.shape).astype(np.float32)
    (grad,) = registry.vjp(op, g, (x,), out, {"axis": axis, "keepdims": keepdims})
    ax = R.normalize_axes("t", 3, axis)
    f = (lambda a: np.sum(a, axis=ax, keepdims=keepdims)) if op == "sum" else (  # exact: test reference
        lambda a: np.mean(a, axis=ax, keepdims=keepdims))  # exact: test reference
    assert grad.shape == x.shape and grad.dtype == np.float32
    np.testing.assert_allclose(grad, _fd_grad(f, x, g), rtol=1e-4, atol=1e-5)


# --- CuPy -------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(REFS))
def test_cupy_matches_numpy_bit_for_bit(op):
    cp = cupy_module()
    rng = np.random.default_rng(61)
    x = (rng.normal(size=(5, 300, 7)) * np.exp(rng.normal(size=(5, 300, 7)) * 4)).astype(np.float32)
    for axis in [(), (1,), (0, 2), (2,)]:
        cpu = registry.run(op, (x,), {"axis": axis})
        gpu = cp.asnumpy(registry.run(op, (cp.asarray(x),), {"axis": axis}))
        assert np.array_equal(_bits32(cpu), _bits32(gpu)), (op, axis)
