"""Optimizer operators: bit for bit their written-out float32 programs; the same updates as torch."""
import numpy as np
import pytest
import torch

from repops_cupy import ops  # noqa: F401 - fills the registry
from repops_cupy.registry import run

from .conftest import assert_bits_equal

f32 = np.float32


def _vals(n, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, n).astype(np.float32)


def test_adamw_update_is_its_scalar_program():
    p, m, v = _vals(40, 1), _vals(40, 2), _vals(40, 3, 0.0, 3.0)
    b1p, b2p = np.array(0.729, f32), np.array(0.997003, f32)
    lr, eps, wd = 3e-3, 1e-8, 0.01
    out = run("adamw_update", [p, m, v, b1p, b2p], {"lr": lr, "eps": eps, "weight_decay": wd})
    want = []
    for pi, mi, vi in zip(p, m, v):
        bc1 = f32(1) - b1p[()]
        bc2 = f32(1) - b2p[()]
        denom = np.sqrt(vi) / np.sqrt(bc2) + f32(eps)
        step = f32(lr) / bc1
        want.append(pi * f32(1.0 - lr * wd) - (mi / denom) * step)
    assert_bits_equal(out, np.array(want, f32))


def test_moments_and_sgd_are_their_scalar_programs():
    m, g, p = _vals(30, 4), _vals(30, 5), _vals(30, 6)
    assert_bits_equal(run("adam_moment1", [m, g], {"beta": 0.9}),
                      np.array([mi * f32(0.9) + gi * f32(1.0 - 0.9) for mi, gi in zip(m, g)], f32))
    assert_bits_equal(run("adam_moment2", [m, g], {"beta": 0.99}),
                      np.array([mi * f32(0.99) + (gi * gi) * f32(1.0 - 0.99) for mi, gi in zip(m, g)], f32))
    assert_bits_equal(run("sgd_momentum", [m, g, p], {"momentum": 0.9, "weight_decay": 0.1}),
                      np.array([mi * f32(0.9) + (gi + pi * f32(0.1)) for mi, gi, pi in zip(m, g, p)], f32))
    assert_bits_equal(run("sgd_update", [p, m], {"lr": 0.05}),
                      np.array([pi - mi * f32(0.05) for pi, mi in zip(p, m)], f32))


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_three_steps_agree_with_torch(kind):
    from types import SimpleNamespace

    from repops_cupy.graph import GraphBuilder, execute
    from repops_cupy.optim import initial_optimizer_state, optimizer_nodes

    spec = SimpleNamespace(kind=kind, lr=0.01, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.05, momentum=0.8)
    param = _vals(24, 7)
    grads = [_vals(24, 10 + i) for i in range(3)]
    state = {"params/w": param, **initial_optimizer_state(spec, {"w": param})}
    b = GraphBuilder()
    leaves = {k: b.leaf(k, v) for k, v in sorted(state.items())}
    g_leaf = b.leaf("grad", grads[0], "batch")
    graph = b.finish(optimizer_nodes(b, spec, leaves, {"w": g_leaf}))
    for g in grads:
        state = execute(graph, {**state, "grad": g}).outputs

    w = torch.nn.Parameter(torch.from_numpy(param.copy()))
    opt = (torch.optim.AdamW([w], lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05) if kind == "adamw"
           else torch.optim.SGD([w], lr=0.01, momentum=0.8, weight_decay=0.05))
    for g in grads:
        w.grad = torch.from_numpy(g.copy())
        opt.step()
    np.testing.assert_allclose(state["params/w"], w.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_step_counter_and_dropout_at_step():
    step = np.array(41, np.int64)
    assert int(run("step_increment", [step])) == 42
    x = np.ones((8, 64), np.float32)
    a = run("dropout_at_step", [x, step], {"p": 0.5, "seed": 1, "site": 0})
    assert_bits_equal(a, run("dropout_at_step", [x, step], {"p": 0.5, "seed": 1, "site": 0}))
    other_step = run("dropout_at_step", [x, np.array(42, np.int64)], {"p": 0.5, "seed": 1, "site": 0})
    other_site = run("dropout_at_step", [x, step], {"p": 0.5, "seed": 1, "site": 1})
    assert not np.array_equal(a, other_step) and not np.array_equal(a, other_site)
    assert set(np.unique(a)) == {0.0, 2.0} and 0.3 < float((a == 0).mean()) < 0.7  # exact: a count
