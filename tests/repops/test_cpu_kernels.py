"""Compiled CPU kernels (`repops_cupy.cpu_kernels`): the same bits as the array code.

Every kernel is compared bit for bit with the NumPy array code it replaces (forced with
REPOPS_CPU_KERNELS=0), which the other test files check against literal scalar
programs; NaNs are compared as NaNs (the tensor hash treats every NaN alike).

The compiled code must perform the specified IEEE operations one by one. Two checks
show that it does not fuse a multiply and an add: the machine code of every kernel
holds no FMA instruction, and the same kernels compiled with contraction allowed
(fastmath "contract") do give different bits on the test inputs, so the comparisons
here would notice.

Speed, measured here side by side (`python scripts/bench_cpu_kernels.py`, one run,
interleaved, median of 9, CPU time of one thread, float32 in and out; "plain" is the
unreproducible float32 library call). The machine is shared by several busy processes:
single timings move by up to 2x between runs, the ratios much less.

| case | array path | compiled | plain float32 | array/plain | compiled/plain | array/compiled |
|---|---|---|---|---|---|---|
| exp 1e+06 | 13.6 ms | 1.19 ms | 0.42 ms (np.exp) | 32.1x | 2.81x | 11.4x |
| log 1e+06 | 14.4 ms | 1.02 ms | 0.33 ms (np.log) | 43.9x | 3.12x | 14.1x |
| tanh 1e+06 | 54.4 ms | 4.88 ms | 0.27 ms (np.tanh) | 204.9x | 18.40x | 11.1x |
| erf 1e+06 | 73.8 ms | 5.65 ms | 1.52 ms (torch.special.erf, NumPy has none) | 48.6x | 3.72x | 13.1x |
| sigmoid 1e+06 | 12.8 ms | 1.19 ms | 0.75 ms (NumPy 1/(1+exp(-x))) | 17.0x | 1.57x | 10.8x |
| exp 1e+07 | 121.6 ms | 13.25 ms | 6.74 ms (np.exp) | 18.0x | 1.97x | 9.2x |
| log 1e+07 | 137.3 ms | 12.14 ms | 5.73 ms (np.log) | 24.0x | 2.12x | 11.3x |
| tanh 1e+07 | 525.0 ms | 43.48 ms | 5.45 ms (np.tanh) | 96.4x | 7.98x | 12.1x |
| erf 1e+07 | 742.1 ms | 58.59 ms | 39.13 ms (torch.special.erf, NumPy has none) | 19.0x | 1.50x | 12.7x |
| sigmoid 1e+07 | 138.3 ms | 14.69 ms | 21.91 ms (NumPy 1/(1+exp(-x))) | 6.3x | 0.67x | 9.4x |
| sum all 1e7 | 11.1 ms | 1.94 ms | 2.20 ms (np.sum) | 5.1x | 0.89x | 5.7x |
| sum rows (1e4, 1e3) axis 1 | 10.9 ms | 3.36 ms | 2.46 ms (np.sum) | 4.4x | 1.37x | 3.3x |
| sum cols (1e4, 1e3) axis 0 | 13.2 ms | 6.83 ms | 2.29 ms (np.sum) | 5.8x | 2.98x | 1.9x |
| gelu tanh (2048, 3072) | 617.9 ms | 46.25 ms | 22.80 ms (torch f32) | 27.1x | 2.03x | 13.4x |
| gelu_grad tanh (2048, 3072) | 1008.2 ms | 31.15 ms | 9.96 ms (torch f32) | 101.2x | 3.13x | 32.4x |
| gelu none (2048, 3072) | 592.5 ms | 22.12 ms | 3.92 ms (torch f32) | 151.3x | 5.65x | 26.8x |
| gelu_grad none (2048, 3072) | 929.6 ms | 33.29 ms | 6.49 ms (torch f32) | 143.2x | 5.13x | 27.9x |
| softmax (8192, 768) | 104.9 ms | 15.59 ms | 15.49 ms (NumPy f32) | 6.8x | 1.01x | 6.7x |
| layer_norm (8192, 768) | 44.3 ms | 7.67 ms | 20.05 ms (NumPy f32) | 2.2x | 0.38x | 5.8x |

All of these are NumPy arrays; CuPy arrays keep the array code. numba compiles the
kernels on first use and caches them on disk (keyed also by `repops_cupy.constants`
and the sources of the kernel package): about 70 s of CPU time once for all of them,
then about 1 s per process to load.
"""
import contextlib
import math
import os
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repops_cupy import constants as C
from repops_cupy import cpu_kernels as K
from repops_cupy import elementwise, nn, registry, shape  # noqa: F401 - registers the ops
from repops_cupy import reduce as R
from repops_cupy import scalar_reference as ref
from repops_cupy import transcendental as T

from .bits import assert_same_bits

if K.AVAILABLE:
    from repops_cupy.cpu_kernels import compiler, maps, reductions, transcendentals

pytestmark = pytest.mark.skipif(not K.AVAILABLE, reason="numba is not installed")

PRIMITIVES = ("exp", "expm1", "log", "tanh", "erf", "erfc", "sigmoid")
PUBLIC = ("exp", "log", "tanh", "erf", "sigmoid")


@contextlib.contextmanager
def array_path():
    """Force the NumPy array code (the specification) inside the block."""
    before = os.environ.get(K.ENV)
    os.environ[K.ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[K.ENV]
        else:
            os.environ[K.ENV] = before


def compiled_and_array(fn, *args, **kwargs):
    assert K.enabled(np)
    compiled = fn(*args, **kwargs)
    with array_path():
        assert not K.enabled(np)
        with np.errstate(all="ignore"):
            expected = fn(*args, **kwargs)
    return compiled, expected


def _neighbours(values, steps=3) -> np.ndarray:
    """Each value, its negation, and the `steps` doubles on either side of both."""
    out = []
    for v in np.concatenate([values, -np.asarray(values)]):
        up = down = np.float64(v)
        out.append(up)
        for _ in range(steps):
            with np.errstate(over="ignore"):  # past the largest double: +-inf
                up, down = np.nextafter(up, np.inf), np.nextafter(down, -np.inf)
            out += [up, down]
    return np.array(out, np.float64)


def branch_edges() -> np.ndarray:
    """Every threshold of the piecewise functions, the points where exp's k changes, and their neighbours."""
    thresholds = [
        C.O_THRESHOLD, C.U_THRESHOLD, C.EXPM1_SATURATE, C.HALF_LN2, C.TWO_M54, C.TWO_M55, C.TANH_SATURATE,
        1.0, 0.5, 0.25, C.ERF_TINY, C.ERF_SUBNORMAL, C.ERF_SMALL, C.ERF_MID, C.ERF_BIG, C.ERF_SPLIT,
        C.ERFC_SPLIT, C.ERFC_QUARTER, C.ERFC_TINY, C.ERFC_BIG, C.SQRT_HALF, 2 * C.SQRT_HALF,
        0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 709.0, -708.4, -745.0,
        88.72283935546875, -103.97207708,
    ]
    k_steps = (np.arange(-1080, 1030) + 0.5) * math.log(2.0)  # trunc(x/ln2 +- 0.5) changes near these
    specials = np.array([np.inf, -np.inf, np.nan], np.float64)
    return np.concatenate([_neighbours(thresholds, 4), _neighbours(k_steps, 1), specials])


def float64_inputs(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    patterns = rng.integers(0, 1 << 64, size=300_000, dtype=np.uint64).view(np.float64)
    return np.concatenate([
        branch_edges(),
        patterns,  # every exponent, subnormals, inf and NaN with any payload
        rng.standard_normal(200_000) * rng.choice([0.3, 1.0, 5.0, 30.0], 200_000),
        rng.uniform(-745.2, -708.0, 100_000),  # exp's subnormal results: ldexp rounds
        rng.uniform(-60, 60, 100_000),
        rng.uniform(0.7, 1.42, 400_000),  # log's reduced argument, where its rounding is most delicate
        np.ldexp(rng.uniform(0.5, 1.0, 100_000), rng.integers(-1074, 1024, 100_000)),
    ])


def float32_inputs() -> np.ndarray:
    """A stride through all 2^32 float32 patterns, plus normal values."""
    patterns = np.arange(0, 1 << 32, 4093, dtype=np.uint64).astype(np.uint32).view(np.float32)
    normal = np.random.default_rng(1).standard_normal(200_000).astype(np.float32) * 4
    with np.errstate(over="ignore"):  # edges beyond the float32 range become +-inf
        edges = branch_edges().astype(np.float32)
    return np.concatenate([patterns, normal, edges])


# --- the primitives ---------------------------------------------------------------------


@pytest.mark.parametrize("name", PRIMITIVES)
def test_float64_primitive_matches_array_code(name):
    fn = getattr(T, f"{name}_f64")
    x = float64_inputs()
    assert_same_bits(*compiled_and_array(fn, x))


@pytest.mark.parametrize("name", PRIMITIVES)
@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True), min_size=1, max_size=60))
def test_float64_primitive_matches_array_code_on_any_float64(name, values):
    fn = getattr(T, f"{name}_f64")
    assert_same_bits(*compiled_and_array(fn, np.array(values, np.float64)))


@pytest.mark.parametrize("name", PRIMITIVES)
def test_float64_primitive_matches_literal_program_at_branch_edges(name):
    x = branch_edges()
    with np.errstate(all="ignore"):
        expected = np.array([getattr(ref, name)(float(v)) for v in x], np.float64)
    assert_same_bits(getattr(T, f"{name}_f64")(x), expected)


@pytest.mark.parametrize("name", PUBLIC)
def test_float32_op_matches_array_code(name):
    x = float32_inputs()
    compiled, expected = compiled_and_array(registry.run, name, (x,))
    assert_same_bits(compiled, expected)


def test_gradient_ops_built_on_primitives_match_array_code():
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(50_000).astype(np.float32) * 6, float32_inputs()[:50_000]])
    g = rng.standard_normal(x.size).astype(np.float32)
    assert_same_bits(*compiled_and_array(registry.run, "erf_grad", (g, x)))
    for approximate in ("none", "tanh"):
        attrs = {"approximate": approximate}
        assert_same_bits(*compiled_and_array(registry.run, "gelu", (x,), attrs))
        assert_same_bits(*compiled_and_array(registry.run, "gelu_grad", (g, x), attrs))


def test_erf_family_blocks_with_few_and_many_tail_lanes():
    """erf, erfc and the erf-form GELU redo their tail lanes (|arg| >= 1.25) per block:
    blocks with none, exactly a quarter, just over a quarter and only tail lanes."""
    rng = np.random.default_rng(6)
    blocks = []
    lanes = transcendentals.LANES
    for tail_count in (0, 1, lanes // 4, lanes // 4 + 1, lanes - 1, lanes):
        block = rng.uniform(-1.2, 1.2, lanes)
        where = rng.choice(lanes, tail_count, replace=False)
        block[where] = rng.uniform(1.3, 5.0, tail_count) * rng.choice([-1, 1], tail_count)
        blocks.append(block)
    x = np.concatenate(blocks + [rng.uniform(-3, 3, 777)])  # and a short last block
    for name in ("erf", "erfc"):
        assert_same_bits(*compiled_and_array(getattr(T, f"{name}_f64"), x))
    x32 = (x * math.sqrt(2.0)).astype(np.float32)  # GELU's erfc argument is x / -sqrt(2)
    g = rng.standard_normal(x32.size).astype(np.float32)
    assert_same_bits(*compiled_and_array(registry.run, "erf", (x.astype(np.float32),)))
    assert_same_bits(*compiled_and_array(registry.run, "gelu", (x32,), {"approximate": "none"}))
    assert_same_bits(*compiled_and_array(registry.run, "gelu_grad", (g, x32), {"approximate": "none"}))


def test_layouts_and_zero_dim_inputs():
    x = np.random.default_rng(5).standard_normal((40, 30)) * 10
    for name in PRIMITIVES:
        fn = getattr(T, f"{name}_f64")
        whole = fn(x)
        assert whole.shape == x.shape
        assert_same_bits(fn(np.asfortranarray(x)), whole)
        assert_same_bits(fn(x[:, ::3]), whole[:, ::3])
        assert_same_bits(fn(x[3, 4].reshape(())), whole[3, 4].reshape(()))
    for name in PUBLIC:
        assert registry.run(name, (np.float32(0.5).reshape(()),)).shape == ()
        assert registry.run(name, (np.zeros((0, 4), np.float32),)).shape == (0, 4)


# --- the fixed tree -----------------------------------------------------------------------


def sensitive(n: int, seed: int = 0) -> np.ndarray:
    """Values whose float64 sum changes with the tree: magnitudes 2^-40 .. 2^40, both signs."""
    rng = np.random.default_rng(seed + n)
    return (1.0 + rng.integers(0, 1 << 20, n) * 2.0**-40) * np.exp2(rng.integers(-40, 40, n)) * rng.choice([-1, 1], n)


PIECE = reductions.PIECE if K.AVAILABLE else 1 << 16
LENGTHS = sorted({*range(0, 70), 127, 128, 129, 255, 256, 257, 511, 512, 513, 767, 768, 769, 1000, 4099,
                  PIECE - 1, PIECE, PIECE + 1, 2 * PIECE + 257, 3 * PIECE})


@pytest.mark.parametrize("n", LENGTHS)
def test_tree_over_a_row_is_the_literal_tree(n):
    values = sensitive(n)
    expected = ref.tree_sum(values)
    assert_same_bits(K.tree_last(values.reshape(1, n)), np.array([expected]))
    assert_same_bits(R.tree_sum_f64(values), np.float64(expected))
    # float32 addends are widened exactly in the first level
    values32 = values.astype(np.float32)
    assert_same_bits(K.tree_last(values32.reshape(1, n)), np.array([ref.tree_sum(values32.tolist())]))
    # signed zeros: short rows are padded with -0.0, which must add nothing, not even a sign
    zeros = np.random.default_rng(n).choice([-0.0, 0.0], n, p=[0.9, 0.1])
    assert_same_bits(K.tree_last(zeros.reshape(1, n)), np.array([ref.tree_sum(zeros)]))
    assert_same_bits(K.tree_last(np.full((1, n), -0.0)), np.array([ref.tree_sum([-0.0] * n)]))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 31, 32, 33, 64, 100, 127, 128, 129, 1000, 1025])
@pytest.mark.parametrize("cols", [1, 3, 127, 128, 129, 300])
def test_tree_over_columns_is_the_literal_tree(n, cols):
    values = sensitive(n * cols).reshape(n, cols)
    expected = np.array([ref.tree_sum(values[:, c]) for c in range(cols)])
    assert_same_bits(K.tree_first(values), expected)
    assert_same_bits(K.tree_first(values.astype(np.float32)),
                     np.array([ref.tree_sum(values.astype(np.float32)[:, c].tolist()) for c in range(cols)]))


def test_tree_of_many_short_rows_and_special_values():
    rng = np.random.default_rng(9)
    for rows, n in [(1000, 7), (300, 64), (70, 300), (5, 70_000)]:
        x = sensitive(rows * n).reshape(rows, n)
        x[rng.random(x.shape) < 0.01] = np.nan
        x[rng.random(x.shape) < 0.01] = np.inf
        x[rng.random(x.shape) < 0.01] = -np.inf
        x[rng.random(x.shape) < 0.05] = -0.0
        assert_same_bits(*compiled_and_array(R.tree_sum_f64, x, 1))
        assert_same_bits(*compiled_and_array(R.tree_sum_f64, x, 0))
    assert np.signbit(R.tree_sum_f64(np.full((4, 3), -0.0), 1)).all()


@settings(max_examples=60, deadline=None)
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=9),
                 elements=st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)),
    data=st.data(),
)
def test_reductions_match_array_code_for_any_axes(x, data):
    axes = tuple(data.draw(st.lists(st.integers(-x.ndim, x.ndim - 1), unique_by=lambda a: a % x.ndim,
                                    max_size=x.ndim)))
    layout = data.draw(st.sampled_from(["C", "F", "strided"]))
    if layout == "F":
        x = np.asfortranarray(x)
    elif layout == "strided":
        x = np.repeat(x, 2, axis=-1)[..., ::2]
    keepdims = data.draw(st.booleans())
    for op in ("sum", "mean", "var"):
        assert_same_bits(*compiled_and_array(registry.run, op, (x,), {"axis": axes, "keepdims": keepdims}))
    assert_same_bits(*compiled_and_array(R.tree_sum_f64, x.astype(np.float64), axes, keepdims))


def test_large_reductions_match_array_code():
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((3, 300, 700)) * np.exp2(rng.integers(-20, 20, (3, 300, 700)))).astype(np.float32)
    for axes in [(), (0,), (1,), (2,), (0, 1), (1, 2), (0, 2)]:
        assert_same_bits(*compiled_and_array(registry.run, "sum", (x,), {"axis": axes}))
    g = rng.standard_normal((512, 768)).astype(np.float32)
    assert_same_bits(*compiled_and_array(registry.run, "sum_to", (g,), {"shape": (768,)}))


# --- nn rows ------------------------------------------------------------------------------

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 88.0, -104.0, 1e-45, 3e38, -3e38], np.float32)


def nn_inputs(shape, seed, special_share):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * rng.choice([0.1, 1.0, 10.0, 100.0], shape)).astype(np.float32)
    mask = rng.random(shape) < special_share
    x[mask] = rng.choice(SPECIALS, int(mask.sum()))
    g = rng.standard_normal(shape).astype(np.float32)
    return x, g


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 255), (4, 257), (9, 768), (2, 3, 1000), (2, 4099)])
@pytest.mark.parametrize("special_share", [0.0, 0.05])
def test_softmax_family_matches_array_code(shape, special_share):
    x, g = nn_inputs(shape, 11, special_share)
    for axis in range(-len(shape), 0):
        attrs = {"axis": axis}
        assert_same_bits(*compiled_and_array(registry.run, "softmax", (x,), attrs))
        assert_same_bits(*compiled_and_array(registry.run, "log_softmax", (x,), attrs))
        with array_path():
            probs = registry.run("softmax", (x,), attrs)
            logp = registry.run("log_softmax", (x,), attrs)
        assert_same_bits(*compiled_and_array(registry.run, "softmax_grad", (g, probs), attrs))
        assert_same_bits(*compiled_and_array(registry.run, "log_softmax_grad", (g, logp), attrs))


def test_softmax_rows_of_special_values():
    rows = np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1.0, 2.0], [np.nan, 1.0, 2.0], [-0.0, 0.0, -0.0],
                     [-0.0, -0.0, -0.0], [3e38, -3e38, 0.0], [-np.inf, 0.0, -np.inf]], np.float32)
    for op in ("softmax", "log_softmax"):
        assert_same_bits(*compiled_and_array(registry.run, op, (rows,), {"axis": -1}))


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (7, 255), (4, 257), (9, 768), (2, 3, 1000)])
@pytest.mark.parametrize("special_share", [0.0, 0.05])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_layer_norm_and_gradients_match_array_code(shape, special_share, eps):
    x, g = nn_inputs(shape, 12, special_share)
    rng = np.random.default_rng(13)
    gamma, beta = rng.standard_normal((2, shape[-1])).astype(np.float32)
    attrs = {"eps": eps}
    assert_same_bits(*compiled_and_array(registry.run, "layer_norm", (x, gamma, beta), attrs))
    assert_same_bits(*compiled_and_array(registry.run, "layer_norm_grad_x", (g, x, gamma), attrs))
    assert_same_bits(*compiled_and_array(registry.run, "layer_norm_grad_gamma", (g, x), attrs))
    constant = np.full(shape, 3.0, np.float32)  # zero variance: with eps = 0, rstd = 1/0 = inf
    assert_same_bits(*compiled_and_array(registry.run, "layer_norm", (constant, gamma, beta), attrs))


@pytest.mark.parametrize("shape", [(1, 1), (5, 3), (16, 257), (33, 1000)])
@pytest.mark.parametrize("special_share", [0.0, 0.05])
def test_cross_entropy_matches_array_code(shape, special_share):
    x, _ = nn_inputs(shape, 14, special_share)
    targets = np.random.default_rng(15).integers(0, shape[1], shape[0])
    for t in (targets, targets.astype(np.int32)):
        assert_same_bits(*compiled_and_array(registry.run, "cross_entropy", (x, t)))
        g = np.array(0.7, np.float32)
        assert_same_bits(*compiled_and_array(registry.run, "cross_entropy_grad", (g, x, t)))


def test_nn_layouts_give_the_same_bits():
    x, g = nn_inputs((6, 40, 24), 16, 0.02)
    gamma, beta = np.random.default_rng(17).standard_normal((2, 24)).astype(np.float32)
    for relayout in (np.asfortranarray, lambda a: np.repeat(a, 2, axis=-1)[..., ::2]):
        for op, inputs, attrs in [("softmax", (x,), {"axis": 1}), ("log_softmax", (x,), {"axis": -1}),
                                  ("layer_norm", (x, gamma, beta), {}), ("layer_norm_grad_x", (g, x, gamma), {})]:
            dense = registry.run(op, inputs, attrs)
            moved = registry.run(op, tuple(relayout(a) if a.ndim > 1 else a for a in inputs), attrs)
            assert_same_bits(moved, dense)
            assert moved.flags.c_contiguous


# --- how the kernels are compiled and run ----------------------------------------------------

FMA = re.compile(r"\bv?f(n)?m(add|sub)\w*", re.IGNORECASE)


def _run_every_kernel(k):
    """Call every kernel of the kernel package `k` once, float32 and float64 where both occur."""
    x32 = np.random.default_rng(18).standard_normal((4, 300)).astype(np.float32)
    g = x32[::-1].copy()
    for name in PRIMITIVES:
        for x in (x32, x32.astype(np.float64)):
            k.map_unary(name, x, x.dtype)
    for op in range(len(k.maps.UNARY)):  # the parallel driver and, through it, every span
        for x in (x32, x32.astype(np.float64)):
            k.maps.unary_map(op, x.reshape(-1), np.empty(x.size, x.dtype), 2)
    for op in range(len(k.maps.BINARY)):
        k.maps.binary_map(op, g.reshape(-1), x32.reshape(-1), np.empty(x32.size, np.float32), 2)
    for x in (x32, x32.astype(np.float64)):
        k.tree_last(x), k.tree_first(x), k.tree_last(np.ones((1, k.reductions.PIECE + 1), x.dtype))
    targets = np.arange(4)
    k.softmax(x32, -1), k.log_softmax(x32, -1), k.softmax_grad(g, x32, -1), k.log_softmax_grad(g, x32, -1)
    k.layer_norm(x32, x32[0], x32[1], 1e-5), k.layer_norm_grad_x(g, x32, x32[0], 1e-5)
    k.layer_norm_xhat_g(g, x32, 1e-5), k.cross_entropy_picked(x32, targets), k.cross_entropy_grad(x32, targets, 0.5)
    for form in ("tanh", "none"):
        k.gelu(x32, form), k.gelu_grad(g, x32, form)


def _uncached_serial_copy(monkeypatch):
    """The kernel package loaded again with every function compiled serially and uncached.

    Cached machine code cannot be inspected, and numba loads from the cache whatever
    it can; a second copy of the package (under another name, so its modules import
    each other afresh) compiled anew has its assembly at hand. Returns the package
    and its family modules.
    """
    import importlib.util
    import sys

    import numba

    real_njit = numba.njit

    def serial_uncached(*args, **options):
        options.pop("parallel", None)
        options["cache"] = False
        return real_njit(*args, **options)

    name = "repops_cupy._cpu_kernels_uncached"
    monkeypatch.setattr(numba, "njit", serial_uncached)
    spec = importlib.util.spec_from_file_location(name, K.__file__,
                                                  submodule_search_locations=[os.path.dirname(K.__file__)])
    package = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, package)
    spec.loader.exec_module(package)
    monkeypatch.setattr(numba, "njit", real_njit)
    modules = {key: module for key, module in sys.modules.items() if key.startswith(name + ".")}
    for key, module in modules.items():  # numba looks them up by name while compiling: gone after the test
        del sys.modules[key]
        monkeypatch.setitem(sys.modules, key, module)
    assert {"compiler", "transcendentals", "gelu", "reductions", "row_ops", "maps"} <= {
        key.rpartition(".")[2] for key in modules}
    return package, list(modules.values())


@pytest.mark.slow  # compiles every kernel afresh (about a minute)
def test_machine_code_has_no_fused_multiply_add(monkeypatch):
    from numba.core.registry import CPUDispatcher

    fresh, modules = _uncached_serial_copy(monkeypatch)
    _run_every_kernel(fresh)
    functions = [v for m in modules for v in vars(m).values() if isinstance(v, CPUDispatcher)]
    functions = list({id(f): f for f in functions}.values())  # a module also holds what it imported
    compiled = [f for f in functions if f.targetoptions.get("inline", "never") != "always"]
    assert len(compiled) >= 30
    for fn in compiled:  # the inlined helpers are part of these
        assert fn.signatures, f"{fn.__name__} was not exercised"
        for sig in fn.signatures:
            asm = fn.inspect_asm(sig)
            assert not FMA.search(asm), f"{fn.__name__}{sig}: {FMA.search(asm).group(0)}"


@pytest.mark.parametrize("name", PRIMITIVES)
def test_contraction_would_be_caught_by_these_inputs(name):
    """Allowing FMA changes the bits on the test inputs (so the equality tests are sensitive)."""
    from numba import njit

    contracted = njit(error_model="numpy", fastmath={"contract"})(maps.UNARY_SPANS[name].py_func)
    x = float64_inputs(seed=2)
    got = np.empty_like(x)
    contracted(x, got, 0, x.size)
    with np.errstate(all="ignore"):
        spec = getattr(T, f"{name}_f64")(x)
    nan = np.isnan(spec)
    assert (got[~nan].view(np.uint64) != spec[~nan].view(np.uint64)).any()
    assert_same_bits(K.map_unary(name, x, np.float64), spec)


def test_separate_multiply_and_add_are_kept_separate():
    # a*b is inexact; with c = -(a*b rounded), a fused a*b + c would give the rounding error instead of 0
    probe = compiler.compile_with()(lambda a, b, c: a * b + c)
    a = b = 1.0 + 2.0**-30
    c = -(a * b)
    assert Fraction(a) * Fraction(b) + Fraction(c) == Fraction(2) ** -60  # what one rounding would give
    assert probe(a, b, c) == 0.0


def test_results_do_not_depend_on_the_thread_count():
    import numba

    x = float32_inputs()
    rows = np.random.default_rng(19).standard_normal((257, 1000)).astype(np.float32)
    runs = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            runs.append([registry.run("tanh", (x,)), registry.run("erf", (x,)), registry.run("sum", (rows,)),
                         registry.run("sum", (rows,), {"axis": (0,)}), registry.run("softmax", (rows,)),
                         registry.run("layer_norm", (rows, rows[0], rows[1]))])
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for one, many in zip(*runs):
        assert_same_bits(one, many)


def test_environment_variable_selects_the_array_code(monkeypatch):
    x = np.linspace(-3, 3, 50, dtype=np.float32)

    def refuse(*args, **kwargs):
        raise AssertionError("compiled kernel called")

    monkeypatch.setattr(K, "map_unary", refuse)
    monkeypatch.setattr(K, "tree_last", refuse)
    with pytest.raises(AssertionError, match="compiled kernel"):
        registry.run("exp", (x,))
    with array_path():
        registry.run("exp", (x,))
        registry.run("sum", (x,))


def test_kernels_compile_without_a_writable_cache(monkeypatch):
    calls = []
    real_njit = compiler.njit

    def njit_without_cache_dir(*args, cache=False, **kwargs):
        calls.append(cache)
        if cache:
            raise RuntimeError("cannot cache function: no locator available")
        return real_njit(*args, cache=cache, **kwargs)

    monkeypatch.setattr(compiler, "njit", njit_without_cache_dir)
    double = compiler.compile_with()(lambda v: v * 2.0)
    assert double(1.5) == 3.0 and calls == [True, False]


def test_cached_kernels_are_keyed_by_the_constants_and_every_kernel_source(monkeypatch, tmp_path):
    """The kernels inline each other across modules and compile in `constants`: a change to
    any of these must not find machine code cached before it (numba keys by one file only)."""
    import shutil

    key = compiler.fingerprint()
    assert compiler._FingerprintedCache.key == key
    monkeypatch.setattr(C, "ERF_BIG", 6.5)
    assert compiler.fingerprint() != key
    monkeypatch.undo()
    copy = tmp_path / "cpu_kernels"
    shutil.copytree(os.path.dirname(K.__file__), copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(compiler, "__file__", str(copy / "compiler.py"))
    assert compiler.fingerprint() == key
    with open(copy / "transcendentals.py", "a") as f:
        f.write("# changed\n")
    assert compiler.fingerprint() != key
