"""nn operators against literal pure-Python references that follow the specification.

Python floats are IEEE doubles, so a loop doing the specified float64 steps in the
specified order must give identical bits. The references call the project's float64
exp/log once per scalar (those functions are checked in their own tests) and add with
a literal transcription of the specified pairwise tree.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from repops_cupy import nn, registry, shape  # noqa: F401 - shape registers sum_to (layer_norm's backward)
from repops_cupy._backend import cupy_module
from repops_cupy.errors import OpError
from repops_cupy.rng import uniform_f32
from repops_cupy.transcendental import exp_f64, log_f64

from .bits import assert_same_bits, f32

SPECIALS = st.sampled_from([-np.inf, np.inf, np.nan, -0.0, 0.0, 88.0, -104.0])
VALUES = st.one_of(st.floats(-30, 30, width=32), st.floats(width=32, allow_nan=False), SPECIALS)
SETTINGS = settings(max_examples=50, deadline=None)


def tree(values: list[float]) -> float:
    """The specified tree: adjacent pairs level by level, an odd last element carried up."""
    if not values:
        return 0.0
    while len(values) > 1:
        paired = [values[i] + values[i + 1] for i in range(0, len(values) - 1, 2)]
        if len(values) % 2:
            paired.append(values[-1])
        values = paired
    return values[0]


def exp1(v: float) -> float:
    return float(exp_f64(np.array([v]))[0])


def log1(v: float) -> float:
    return float(log_f64(np.array([v]))[0])


def fdiv(a: float, b: float) -> float:
    """IEEE division (Python raises on a zero divisor)."""
    try:
        return a / b
    except ZeroDivisionError:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)


def shifted_row(row) -> list[float]:
    vals = [float(v) for v in row]
    top = math.nan if any(math.isnan(v) for v in vals) else max(vals) + 0.0
    return [v - top for v in vals]


def rows_of(x: np.ndarray, axis: int):
    """x with `axis` moved last, as (rows, n), and the way back."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(-1, moved.shape[-1]), lambda r: np.moveaxis(r.reshape(moved.shape), -1, axis)


def ref_softmax(x, axis):
    rows, back = rows_of(x, axis)
    out = []
    for row in rows:
        e = [exp1(z) for z in shifted_row(row)]
        s = tree(e)
        out.append([f32(fdiv(v, s)) for v in e])
    return back(np.array(out, np.float32))


def ref_log_softmax(x, axis):
    rows, back = rows_of(x, axis)
    out = []
    for row in rows:
        z = shifted_row(row)
        log_total = log1(tree([exp1(v) for v in z]))
        out.append([f32(v - log_total) for v in z])
    return back(np.array(out, np.float32))


def ref_softmax_grad(g, out, axis):
    grows, back = rows_of(g, axis)
    orows, _ = rows_of(out, axis)
    res = []
    for gr, orow in zip(grows, orows):
        dot = tree([float(a) * float(b) for a, b in zip(gr, orow)])
        res.append([f32(float(o) * (float(a) - dot)) for a, o in zip(gr, orow)])
    return back(np.array(res, np.float32))


def ref_log_softmax_grad(g, out, axis):
    grows, back = rows_of(g, axis)
    orows, _ = rows_of(out, axis)
    res = []
    for gr, orow in zip(grows, orows):
        total = tree([float(a) for a in gr])
        res.append([f32(float(a) - exp1(float(o)) * total) for a, o in zip(gr, orow)])
    return back(np.array(res, np.float32))


@st.composite
def arrays_and_axis(draw, max_dims=3):
    shp = draw(hnp.array_shapes(min_dims=1, max_dims=max_dims, min_side=1, max_side=6))
    x = draw(hnp.arrays(np.float32, shp, elements=VALUES))
    return x, draw(st.integers(-len(shp), len(shp) - 1))


@SETTINGS
@given(case=arrays_and_axis(), data=st.data())
def test_softmax_family_matches_reference(case, data):
    x, axis = case
    sm, lsm = nn.softmax(x, axis), nn.log_softmax(x, axis)
    assert_same_bits(sm, ref_softmax(x, axis))
    assert_same_bits(lsm, ref_log_softmax(x, axis))
    assert_same_bits(registry.run("softmax", (x,), {"axis": axis}), sm)
    g = data.draw(hnp.arrays(np.float32, x.shape, elements=st.floats(-4, 4, width=32)))
    finite = np.nan_to_num(sm, nan=0.5)
    assert_same_bits(nn.softmax_grad(g, finite, axis), ref_softmax_grad(g, finite, axis))
    finite_log = np.nan_to_num(lsm, nan=-1.0, neginf=-1e30)
    assert_same_bits(nn.log_softmax_grad(g, finite_log, axis), ref_log_softmax_grad(g, finite_log, axis))


def test_softmax_rows_with_non_finite_values():
    x = np.array(
        [
            [0.0, -np.inf, 1.0, -np.inf],  # masked entries: exact zeros
            [-np.inf, -np.inf, -np.inf, -np.inf],  # nothing left: NaN as IEEE gives (-inf) - (-inf)
            [1.0, np.nan, 2.0, 3.0],  # NaN poisons its row's denominator
            [1.0, np.inf, 2.0, 3.0],  # inf - inf
            [1e30, -1e30, 3e38, 0.0],  # huge but finite: no overflow
        ],
        np.float32,
    )
    out = nn.softmax(x)
    assert out[0, 1] == 0 and out[0, 3] == 0 and not np.signbit(out[0, 1])
    np.testing.assert_allclose(out[0, [0, 2]], [1 / (1 + math.e), math.e / (1 + math.e)], rtol=1e-7)
    assert np.isnan(out[1:4]).all()
    assert_same_bits(out[4], np.array([0, 0, 1, 0], np.float32))
    lsm = nn.log_softmax(x)
    assert lsm[0, 1] == -np.inf and np.isnan(lsm[1:4]).all() and lsm[4, 2] == 0
    # every other row is untouched by the bad rows
    assert_same_bits(nn.softmax(x[[0, 4]]), out[[0, 4]])


def test_softmax_is_independent_of_batch_position_and_layout():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((17, 33)) * 5).astype(np.float32)
    full = nn.softmax(x)
    for i in (0, 7, 16):
        assert_same_bits(nn.softmax(x[i : i + 1]), full[i : i + 1])
    assert_same_bits(nn.softmax(np.asfortranarray(x)), full)
    assert_same_bits(nn.softmax(x.T, axis=0), full.T)
    assert_same_bits(nn.log_softmax(x[:, ::-1])[:, ::-1], nn.log_softmax(np.ascontiguousarray(x[:, ::-1]))[:, ::-1])


def test_softmax_accuracy_against_float64():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 100)) * 6).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    np.testing.assert_allclose(nn.softmax(x), e / e.sum(axis=1, keepdims=True), rtol=2e-7, atol=1e-30)
    np.testing.assert_allclose(nn.log_softmax(x), np.log(e / e.sum(axis=1, keepdims=True)), rtol=2e-7, atol=1e-6)


# --- layer norm -----------------------------------------------------------------------


def ref_layer_norm_row(row, eps):
    x = [float(v) for v in row]
    width = len(x)
    mean = tree(x) / width
    centered = [v - mean for v in x]
    var = tree([c * c for c in centered]) / width
    rstd = fdiv(1.0, math.sqrt(var + eps)) if not math.isnan(var + eps) else math.nan
    return [c * rstd for c in centered], rstd


def ref_layer_norm(x, gamma, beta, eps):
    rows = x.reshape(-1, x.shape[-1])
    out = []
    for row in rows:
        xhat, _ = ref_layer_norm_row(row, eps)
        out.append([f32(h * float(gm) + float(bt)) for h, gm, bt in zip(xhat, gamma, beta)])
    return np.array(out, np.float32).reshape(x.shape)


def ref_layer_norm_grad_x(g, x, gamma, eps):
    width = x.shape[-1]
    out = []
    for grow, row in zip(g.reshape(-1, width), x.reshape(-1, width)):
        xhat, rstd = ref_layer_norm_row(row, eps)
        gg = [float(a) * float(b) for a, b in zip(grow, gamma)]
        mean_gg = tree(gg) / width
        mean_gg_xhat = tree([a * h for a, h in zip(gg, xhat)]) / width
        out.append([f32(rstd * ((a - mean_gg) - h * mean_gg_xhat)) for a, h in zip(gg, xhat)])
    return np.array(out, np.float32).reshape(x.shape)


def ref_layer_norm_grad_gamma(g, x, eps):
    width = x.shape[-1]
    products = []
    for grow, row in zip(g.reshape(-1, width), x.reshape(-1, width)):
        xhat, _ = ref_layer_norm_row(row, eps)
        products.append([float(a) * h for a, h in zip(grow, xhat)])
    return np.array([f32(tree([p[d] for p in products])) for d in range(width)], np.float32)


LN_VALUES = st.one_of(st.floats(-50, 50, width=32), st.floats(-float(np.float32(1e30)), float(np.float32(1e30)), width=32), SPECIALS)


@SETTINGS
@given(data=st.data())
def test_layer_norm_and_gradients_match_reference(data):
    shp = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6))
    width = shp[-1]
    x = data.draw(hnp.arrays(np.float32, shp, elements=LN_VALUES))
    gamma = data.draw(hnp.arrays(np.float32, (width,), elements=st.floats(-3, 3, width=32)))
    beta = data.draw(hnp.arrays(np.float32, (width,), elements=st.floats(-3, 3, width=32)))
    g = data.draw(hnp.arrays(np.float32, shp, elements=st.floats(-3, 3, width=32)))
    eps = data.draw(st.sampled_from([1e-5, 0.0, 1e-12, 0.1]))
    assert_same_bits(nn.layer_norm(x, gamma, beta, eps), ref_layer_norm(x, gamma, beta, eps))
    assert_same_bits(nn.layer_norm_grad_x(g, x, gamma, eps), ref_layer_norm_grad_x(g, x, gamma, eps))
    assert_same_bits(nn.layer_norm_grad_gamma(g, x, eps), ref_layer_norm_grad_gamma(g, x, eps))


def test_layer_norm_against_torch_and_layouts():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((6, 5, 48)) * 3 + 7).astype(np.float32)
    gamma = rng.standard_normal(48).astype(np.float32)
    beta = rng.standard_normal(48).astype(np.float32)
    y = nn.layer_norm(x, gamma, beta)
    t = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (48,), torch.from_numpy(gamma).double(),
                                       torch.from_numpy(beta).double(), eps=1e-5)
    np.testing.assert_allclose(y, t.numpy(), rtol=1e-6, atol=1e-6)
    assert_same_bits(nn.layer_norm(np.asfortranarray(x), gamma, beta), y)
    assert_same_bits(nn.layer_norm(x[2:3], gamma, beta), y[2:3])
    constant = np.full((2, 8), 3.25, np.float32)
    assert_same_bits(nn.layer_norm(constant, gamma[:8], beta[:8]), np.broadcast_to(beta[:8], (2, 8)))


def test_layer_norm_backward_rule_emits_three_ops():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 8)).astype(np.float32)
    gamma, beta = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    emitted = []

    def recording(name, *inputs, **attrs):
        emitted.append(name)
        return registry.run(name, inputs, attrs)

    g = rng.standard_normal(x.shape).astype(np.float32)
    out = nn.layer_norm(x, gamma, beta, 1e-3)
    gx, gg, gb = registry.vjp("layer_norm", g, (x, gamma, beta), out, {"eps": 1e-3}, emit=recording)
    assert emitted == ["layer_norm_grad_x", "layer_norm_grad_gamma", "sum_to"]
    assert gx.shape == x.shape and gg.shape == (8,) and gb.shape == (8,)
    assert_same_bits(gg, nn.layer_norm_grad_gamma(g, x, 1e-3))


# --- cross entropy -------------------------------------------------------------------


def ref_cross_entropy(logits, targets):
    picked = []
    for row, t in zip(logits, targets):
        z = shifted_row(row)
        picked.append(z[int(t)] - log1(tree([exp1(v) for v in z])))
    return np.array(f32(-tree(picked) / len(picked)), np.float32)


def ref_cross_entropy_grad(g, logits, targets):
    scale = float(g) / logits.shape[0]
    out = []
    for row, t in zip(logits, targets):
        e = [exp1(v) for v in shifted_row(row)]
        s = tree(e)
        p = [fdiv(v, s) for v in e]
        p[int(t)] -= 1.0
        out.append([f32(v * scale) for v in p])
    return np.array(out, np.float32)


@SETTINGS
@given(data=st.data())
def test_cross_entropy_matches_reference(data):
    rows, classes = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 7))
    logits = data.draw(hnp.arrays(np.float32, (rows, classes), elements=VALUES))
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    targets = data.draw(hnp.arrays(dtype, (rows,), elements=st.integers(0, classes - 1)))
    g = np.array(data.draw(st.floats(-4, 4, width=32)), np.float32)
    assert_same_bits(nn.cross_entropy(logits, targets), ref_cross_entropy(logits, targets))
    assert_same_bits(nn.cross_entropy_grad(g, logits, targets), ref_cross_entropy_grad(g, logits, targets))


def test_cross_entropy_against_torch():
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal((50, 20)) * 4).astype(np.float32)
    targets = rng.integers(0, 20, 50)
    t = torch.from_numpy(logits).double().requires_grad_()
    loss = torch.nn.functional.cross_entropy(t, torch.from_numpy(targets))
    loss.backward()
    ours = nn.cross_entropy(logits, targets)
    assert ours.shape == () and ours.dtype == np.float32
    np.testing.assert_allclose(ours, loss.item(), rtol=1e-7)
    np.testing.assert_allclose(nn.cross_entropy_grad(np.ones((), np.float32), logits, targets), t.grad.numpy(),
                               rtol=1e-6, atol=1e-9)
    assert_same_bits(nn.cross_entropy(np.asfortranarray(logits), targets), ours)


# --- embedding -------------------------------------------------------------------------


def ref_embedding_grad(g, ids, num_embeddings):
    width = g.shape[-1]
    flat_ids, rows = ids.reshape(-1), g.reshape(-1, width)
    out = np.zeros((num_embeddings, width), np.float32)
    for v in range(num_embeddings):
        positions = [p for p in range(flat_ids.size) if flat_ids[p] == v]  # ascending position
        for d in range(width):
            out[v, d] = f32(tree([float(rows[p, d]) for p in positions]))
    return out


@SETTINGS
@given(data=st.data())
def test_embedding_and_grad_match_reference(data):
    vocab = data.draw(st.integers(1, 9))
    width = data.draw(st.integers(1, 4))
    id_shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    dtype = data.draw(st.sampled_from([np.int32, np.int64]))
    ids = data.draw(hnp.arrays(dtype, id_shape, elements=st.integers(0, vocab - 1)))
    table = data.draw(hnp.arrays(np.float32, (vocab, width), elements=VALUES))
    out = nn.embedding(table, ids)
    assert out.shape == ids.shape + (width,)
    assert_same_bits(out, table[ids])
    g = data.draw(hnp.arrays(np.float32, ids.shape + (width,), elements=VALUES))
    assert_same_bits(nn.embedding_grad(g, ids, vocab), ref_embedding_grad(g, ids, vocab))


def test_embedding_grad_order_is_by_position_and_layout_free():
    # 1e8 + 1 - 1e8 depends on order: the spec's order (ascending position, fixed tree) decides
    g = np.array([[1e8], [1.0], [-1e8], [1.0], [5.0]], np.float32)
    ids = np.array([2, 2, 2, 2, 0])
    out = nn.embedding_grad(g, ids, 4)
    assert_same_bits(out, np.array([[5.0], [0.0], [f32((1e8 + 1.0) + (-1e8 + 1.0))], [0.0]], np.float32))
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 50, (8, 40))
    g = rng.standard_normal((8, 40, 6)).astype(np.float32)
    dense = nn.embedding_grad(g, ids, 50)
    assert_same_bits(dense, ref_embedding_grad(g, ids, 50))
    assert_same_bits(nn.embedding_grad(np.asfortranarray(g), np.asfortranarray(ids), 50), dense)
    assert_same_bits(nn.embedding_grad(g, ids.astype(np.int32), 50), dense)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t, i: nn.embedding(t, i + 13), "out of range"),
        (lambda t, i: nn.embedding(t, i - 1), "out of range"),
        (lambda t, i: nn.embedding(t, i.astype(np.float32)), "int32 or int64"),
        (lambda t, i: nn.embedding(t[0], i), r"\(V, D\)"),
        (lambda t, i: nn.embedding_grad(np.zeros((3, 8), np.float32), i, 13), "ids.shape"),
        (lambda t, i: nn.embedding_grad(np.zeros((3, 5, 8), np.float32), i, 4), "out of range"),
        (lambda t, i: nn.cross_entropy(t, i[0, :13]), "targets"),
        (lambda t, i: nn.cross_entropy(t, np.full(13, 8)), "out of range"),
        (lambda t, i: nn.cross_entropy(t[:0], i[0, :0]), "no rows"),
        (lambda t, i: nn.cross_entropy_grad(np.ones(1, np.float32), t, i[0, :0].repeat(0)), "targets"),
        (lambda t, i: nn.layer_norm(t, t[0], t[0, :3]), "beta"),
        (lambda t, i: nn.layer_norm(t, t[0], t[0], -1.0), "eps"),
        (lambda t, i: nn.softmax(t, 2), "axis"),
        (lambda t, i: nn.softmax(t.astype(np.float64)), "float32"),
        (lambda t, i: nn.softmax_grad(t, t[:3]), "shape"),
        (lambda t, i: nn.dropout(t, 1.5, 0, 0, 0), "p must"),
        (lambda t, i: nn.dropout(t, 0.5, -1, 0, 0), "seed"),
    ],
)
def test_bad_calls_are_op_errors(call, message):
    table = np.zeros((13, 8), np.float32)
    ids = np.arange(15).reshape(3, 5) % 13
    with pytest.raises(OpError, match=message):
        call(table, ids)


# --- dropout -------------------------------------------------------------------------


def test_dropout_mask_scale_and_reference():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((40, 50)).astype(np.float32)
    x[0, :3] = [np.nan, np.inf, -0.0]
    p = 0.3
    out = nn.dropout(x, p, 7, 3, 11)
    u = uniform_f32(7, 3, x.shape, 11)
    scale = np.float32(1.0 / (1.0 - p))
    expected = np.array([f32(float(v) * float(scale)) if float(k) >= p else np.float32(0.0)
                         for v, k in zip(x.reshape(-1), u.reshape(-1))], np.float32).reshape(x.shape)
    assert_same_bits(out, expected)
    kept = (out != 0).mean()
    assert 0.65 < kept < 0.75
    assert_same_bits(registry.run("dropout", (x,), {"p": p, "seed": 7, "stream": 3, "counter": 11}), out)
    assert not np.array_equal(nn.dropout(x, p, 7, 3, 12) != 0, out != 0)
    assert not np.array_equal(nn.dropout(x, p, 7, 4, 11) != 0, out != 0)
    assert_same_bits(nn.dropout(np.asfortranarray(x), p, 7, 3, 11), out)
    assert_same_bits(nn.dropout(x, 0.0, 7, 3, 11), x)
    assert_same_bits(nn.dropout(x, 1.0, 7, 3, 11), np.zeros_like(x))


def test_dropout_backward_applies_the_same_mask():
    x = np.arange(1, 61, dtype=np.float32).reshape(6, 10)
    attrs = {"p": 0.5, "seed": 1, "stream": 2, "counter": 3}
    out = registry.run("dropout", (x,), attrs)
    g = np.full_like(x, 2.0)
    (gx,) = registry.vjp("dropout", g, (x,), out, attrs)
    assert_same_bits(gx != 0, out != 0)
    assert_same_bits(gx[gx != 0], np.full(int((gx != 0).sum()), 4.0, np.float32))


@pytest.mark.gpu
def test_cupy_gives_the_same_bits():
    cp = cupy_module()
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((32, 70)) * 5).astype(np.float32)
    x[0, :4] = [-np.inf, np.nan, np.inf, -0.0]
    x[1, :] = -np.inf
    gamma, beta = rng.standard_normal(70).astype(np.float32), rng.standard_normal(70).astype(np.float32)
    targets = rng.integers(0, 70, 32)
    ids = rng.integers(0, 70, (4, 9))
    g = rng.standard_normal((4, 9, 70)).astype(np.float32)
    c = cp.asarray
    cases = [
        (nn.softmax, (x,)), (nn.log_softmax, (x,)), (nn.softmax_grad, (x, nn.softmax(x))),
        (nn.log_softmax_grad, (x, nn.log_softmax(x))), (nn.layer_norm, (x, gamma, beta)),
        (nn.layer_norm_grad_x, (x, x, gamma)), (nn.layer_norm_grad_gamma, (x, x)),
        (nn.cross_entropy, (x[2:], targets[2:])), (nn.cross_entropy_grad, (np.ones((), np.float32), x, targets)),
        (nn.embedding, (x, ids)), (nn.embedding_grad, (g, ids, 70)), (nn.dropout, (x, 0.2, 5, 6, 7)),
    ]
    for fn, args in cases:
        gpu_args = tuple(c(a) if isinstance(a, np.ndarray) else a for a in args)
        assert_same_bits(cp.asnumpy(fn(*gpu_args)), fn(*args))


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values in a non-contiguous buffer (every other element of a wider array)."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def test_every_nn_op_gives_the_same_bits_for_any_memory_layout():
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((5, 12)) * 4).astype(np.float32)
    g = rng.standard_normal((5, 12)).astype(np.float32)
    gamma, beta = rng.standard_normal(12).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    targets = rng.integers(0, 12, 5)
    ids = rng.integers(0, 9, (5, 3))
    g_ids = rng.standard_normal((5, 3, 12)).astype(np.float32)
    table = rng.standard_normal((9, 12)).astype(np.float32)
    cases = [
        ("softmax", (x,), {"axis": -1}), ("softmax", (x,), {"axis": 0}), ("log_softmax", (x,), {}),
        ("softmax_grad", (g, nn.softmax(x)), {}), ("log_softmax_grad", (g, nn.log_softmax(x)), {"axis": 0}),
        ("layer_norm", (x, gamma, beta), {}), ("layer_norm_grad_x", (g, x, gamma), {}),
        ("layer_norm_grad_gamma", (g, x), {}), ("cross_entropy", (x, targets), {}),
        ("cross_entropy_grad", (np.array(0.7, np.float32), x, targets), {}),
        ("embedding", (table, ids), {}), ("embedding_grad", (g_ids, ids), {"num_embeddings": 9}),
        ("dropout", (x,), {"p": 0.4, "seed": 1, "stream": 2, "counter": 3}),
    ]
    for name, inputs, attrs in cases:
        dense = registry.run(name, inputs, attrs)
        for relayout in (np.asfortranarray, _strided):
            moved = tuple(relayout(a) if a.ndim else a for a in inputs)  # 0-d arrays have one layout
            assert_same_bits(registry.run(name, moved, attrs), dense)
