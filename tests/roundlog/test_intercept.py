"""The interception layer: what gets rounded, the NumPy product route, what is refused."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from repops_cupy.roundlog import RoundLogError, RoundLogTrainer, RunConfig
from repops_cupy.roundlog import npbackend
from repops_cupy.roundlog.engine import RoundingEngine
from repops_cupy.roundlog.intercept import RoundingMode, mark_batch
from repops_cupy.roundlog.thresholds import Thresholds

F64 = torch.float64


def _f32_valued(t):
    return torch.equal(t.to(torch.float32).to(F64), t)


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=F64, generator=g).to(torch.float32).to(F64)


class Functional(nn.Module):
    """Functional ops outside leaf modules: relu, residual add, explicit attention matmuls."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = F.relu(self.lin(x)) + x
        att = torch.softmax(h @ h.transpose(-2, -1) / 3.0, dim=-1)
        return att @ h


def test_every_forward_output_and_input_gradient_is_float32_valued():
    torch.manual_seed(0)
    model = Functional().double()
    x0 = mark_batch(_rand(2, 5, 8).requires_grad_())
    eng = RoundingEngine("train", Thresholds({}, 1024.0))
    eng.begin_step(1, 2)
    eng.begin_pass(0, 2)
    seen = []
    with RoundingMode(eng):
        x = x0 * 0.5  # read three times below: autograd sums its gradient
        h = model.lin(x)
        seen.append(h)
        out = model(x)
    seen.append(out)
    assert all(_f32_valued(t.detach()) for t in seen)
    out.backward(_rand(2, 5, 8, seed=1))
    eng.end_pass()
    assert _f32_valued(x0.grad)
    keys = set(eng.stats)
    assert eng.stats["fan_in:grad"].rounded == x.numel() * 2  # x and the model's residual h
    assert {"linear:out0", "relu:out0", "add:out0", "matmul:out0", "softmax:out0", "div:out0",
            "matmul:grad0", "matmul:grad1", "softmax:grad0", "linear:grad0"} <= keys
    assert not eng.stats["add:out0"].entries  # exact op: never logged


def test_state_after_a_step_is_float32_valued(setup_of, thresholds):
    tr = RoundLogTrainer(*setup_of("gpt"), RunConfig(threads=1, thresholds=thresholds))
    tr.step(1)
    for p in tr.params.values():
        assert _f32_valued(p.detach())
    for slots in tr.optimizer.state.values():
        assert all(_f32_valued(t) for t in slots.values())
    assert tr.last.stats["param_grad"].rounded == sum(p.numel() for p in tr.params.values())


@pytest.mark.parametrize("case", ["linear", "matmul", "conv2d", "sdpa"])
def test_numpy_route_matches_torch_in_forward_and_backward(case):
    torch.manual_seed(1)
    if case == "linear":
        args = (_rand(3, 4, 6), _rand(5, 6, seed=1), _rand(5, seed=2))
        ref, ours = F.linear, npbackend.linear
        kw = {}
    elif case == "matmul":
        args = (_rand(2, 3, 4, 6), _rand(3, 6, 5, seed=1))
        ref, ours, kw = torch.matmul, npbackend.matmul, {}
    elif case == "conv2d":
        args = (_rand(2, 3, 7, 7), _rand(4, 3, 3, 3, seed=1), _rand(4, seed=2))
        ref, ours, kw = F.conv2d, npbackend.conv2d, {"stride": 2, "padding": 1}
    else:
        args = (_rand(2, 2, 5, 4), _rand(2, 2, 5, 4, seed=1), _rand(2, 2, 5, 4, seed=2))
        ref, ours, kw = F.scaled_dot_product_attention, npbackend.scaled_dot_product_attention, {"is_causal": True}
    a = [t.clone().requires_grad_() for t in args]
    b = [t.clone().requires_grad_() for t in args]
    ya, yb = ref(*a, **kw), ours(*b, **kw)
    assert torch.allclose(ya, yb, rtol=1e-12, atol=1e-12)
    g = _rand(*ya.shape, seed=9)
    ya.backward(g)
    yb.backward(g)
    for ta, tb in zip(a, b):
        assert torch.allclose(ta.grad, tb.grad, rtol=1e-11, atol=1e-11)


def test_in_place_ops_and_stateful_batch_norm_are_refused():
    eng = RoundingEngine("train", Thresholds({}, 1024.0))
    eng.begin_step(1, 2)
    eng.begin_pass(0, 2)
    x = mark_batch(_rand(2, 3, 4, 4))
    bn = nn.BatchNorm2d(3).double()
    with RoundingMode(eng):
        with pytest.raises(RoundLogError, match="in-place"):
            x.add_(1.0)
        with pytest.raises(RoundLogError, match="in-place|batch_norm"):  # num_batches_tracked += 1 comes first
            bn(x)


class CrossBatch(nn.Module):
    """Couples the examples of a batch: centring by the batch mean."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x - x.mean(dim=0))  # the mean's shape (3,) does not scale with the batch


def test_ops_that_couple_examples_are_refused_under_micro_batching():
    data = type("D", (), {"batch": staticmethod(lambda i: (_rand(4, 3, seed=i), torch.tensor([0, 1, 2, 0])))})()
    torch.manual_seed(0)
    tr = RoundLogTrainer(CrossBatch, {"name": "sgd", "lr": 0.1}, data,
                         RunConfig(micro_batch=2, thresholds=Thresholds({}, 1024.0)))
    with pytest.raises(RoundLogError, match="does not split by examples"):
        tr.step(1)


def test_an_op_output_is_freed_with_its_graph():
    """An op's output is freed by reference counting once nothing reads it: a reference from the
    op's backward node back to its outputs makes a cycle through autograd that only a full
    garbage collection frees, and those come seldom: every step's activations stayed in memory
    (22 MB a step on the GPT job), and each fresh page cost a page fault."""
    import gc
    import weakref

    model = nn.Linear(8, 8).double()
    eng = RoundingEngine("train", Thresholds({}, 1024.0))
    eng.begin_step(1, 2)
    eng.begin_pass(0, 2)
    x = mark_batch(_rand(2, 8))
    gc.disable()
    try:
        with RoundingMode(eng):
            out = model(x)
        out.backward(_rand(2, 8, seed=1))
        eng.end_pass()
        alive = weakref.ref(out)
        del out
        assert alive() is None
    finally:
        gc.enable()


def test_gelu_of_a_batch_is_the_projects_operator_and_exact():
    """F.gelu of a batch-dependent tensor runs repops_cupy's GELU and its gradient (the same bits on
    every machine: exact sites, never logged); of a tensor of the parameters alone, torch's."""
    import numpy as np

    from repops_cupy import elementwise

    w = _rand(6, seed=2).requires_grad_()
    x = mark_batch(_rand(4, 6) * 3.0)
    g = _rand(4, 6, seed=1)
    eng = RoundingEngine("train", Thresholds({}, 1024.0))
    eng.begin_step(1, 4)
    eng.begin_pass(0, 4)
    x.requires_grad_()
    x32 = x.detach().numpy().astype(np.float32)
    for approximate in ("none", "tanh"):
        with RoundingMode(eng):
            y = F.gelu(x, approximate=approximate)
        y.backward(g)
        assert np.array_equal(y.detach().numpy(), elementwise.gelu(x32, approximate).astype(np.float64))
        assert np.array_equal(x.grad.numpy(), elementwise.gelu_grad(g.numpy().astype(np.float32), x32,
                                                                    approximate).astype(np.float64))
        x.grad = None
    with RoundingMode(eng):
        y = F.gelu(w)
    y.backward(_rand(6, seed=3))
    eng.end_pass()
    assert {"own_gelu:out0", "own_gelu:grad0", "gelu:out0"} <= set(eng.stats)
    assert eng.stats["own_gelu:out0"].exact and eng.stats["own_gelu:grad0"].exact
    assert not eng.stats["gelu:out0"].exact
