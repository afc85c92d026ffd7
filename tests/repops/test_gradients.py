"""Every backward rule in the registry against central finite differences.

For each registered operator that is differentiable (not itself a gradient operator,
whose name ends in "_grad" or holds "_grad_", and not listed in NON_DIFFERENTIABLE) the rule is run with
the eager emit on example inputs and a random output gradient g; each gradient must
have exactly its input's shape and dtype (None for integer inputs), and for sampled
elements x_i of each float input it must match

    (L(x_i + h) - L(x_i - h)) / (actual step),   L = sum(g * op(x)) in float64,

within a loose tolerance: the op is float32, so the difference quotient carries the
float32 rounding of the outputs divided by the step.

Example inputs come from `repops_cupy.op_examples` (the table the selfcheck uses);
FD_EXAMPLES below adds or overrides entries. A differentiable operator with neither,
or without a backward rule, fails `test_every_differentiable_op_is_covered`.
"""
import math

import numpy as np
import pytest

from repops_cupy import ops  # noqa: F401 - fills the registry
from repops_cupy import registry
from repops_cupy.op_examples import EXAMPLES, ExampleRandom, example

from ..conftest import LIBRARY_OPS

# Operators with no backward rule by design: optimizer updates and counters end a step.
NON_DIFFERENTIABLE = frozenset({
    "sgd_momentum", "sgd_update", "adam_moment1", "adam_moment2", "beta_power_step",
    "adamw_update", "step_increment", "full",
})

# Entries added here, or replacing op_examples' where a finite difference needs other
# inputs (same format: a builder taking an ExampleRandom).
FD_EXAMPLES = {
    # op_examples has no entry for this one yet; it lives in optim.EXAMPLES
    "dropout_at_step": lambda r: ((r.normal(6, 17), np.array(5, np.int64)), {"p": 0.25, "seed": 7, "site": 3}),
    # keep relu's inputs away from its kink at 0 by more than the step
    "relu": lambda r: ((_away_from_zero(r.normal(6, 33, scale=4.0)),), {}),
}

SAMPLES_PER_INPUT = 24  # elements of each input checked by finite differences
RTOL = 5e-4
ATOL_FRACTION = 5e-4  # of the largest gradient entry of that input (plus this much absolute)


def _away_from_zero(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) < 0.05, np.float32(0.5), x).astype(np.float32)


def is_gradient_op(name: str) -> bool:
    """Gradient operators: "<op>_grad", or "<op>_grad_<input>" where an op has one per input."""
    return name.endswith("_grad") or "_grad_" in name


def _differentiable() -> list[str]:
    # the library's operators (other test packages may register synthetic ones while collecting)
    return [n for n in sorted(LIBRARY_OPS) if not is_gradient_op(n) and n not in NON_DIFFERENTIABLE]


def _inputs_for(name: str):
    build = FD_EXAMPLES.get(name)
    if build is not None:
        return build(ExampleRandom(7))
    return example(name)


def _loss(name, inputs, attrs, g64) -> float:
    out = np.asarray(registry.run(name, inputs, attrs), np.float64)
    # entries that are not finite (a causal mask's -inf) do not depend on the inputs
    return math.fsum(np.where(np.isfinite(out), out * g64, 0.0).ravel().tolist())


def _finite_difference(name, inputs, attrs, g64, which: int, flat_index: int) -> float:
    x = inputs[which]
    value = float(x.reshape(-1)[flat_index])
    # large enough that float32 rounding of the outputs stays small against it, small
    # against |x| so that log and rsqrt stay inside their domain and h^2 terms stay tiny
    h = 2.0**-8 * max(abs(value), 0.25)
    if value != 0.0:
        h = min(h, abs(value) / 64)
    with np.errstate(over="ignore"):
        up, down = np.float32(value + h), np.float32(value - h)
    losses = []
    for v in (up, down):
        moved = np.array(x, copy=True)
        moved.reshape(-1)[flat_index] = v
        losses.append(_loss(name, inputs[:which] + (moved,) + inputs[which + 1:], attrs, g64))
    return (losses[0] - losses[1]) / (float(up) - float(down))


def check_gradients(name: str, inputs: tuple, attrs: dict, seed: int = 0) -> None:
    out = registry.run(name, inputs, attrs)
    r = ExampleRandom(seed)
    g = r.normal(*out.shape) if out.shape else r.normal(1).reshape(())
    grads = registry.vjp(name, g, inputs, out, attrs)
    assert len(grads) == len(inputs), f"{name}: {len(grads)} gradients for {len(inputs)} inputs"
    g64 = g.astype(np.float64)
    pick = np.random.default_rng(seed)
    for which, (x, grad) in enumerate(zip(inputs, grads)):
        if x.dtype != np.float32:
            assert grad is None, f"{name}: input {which} is {x.dtype}, its gradient must be None"
            continue
        assert grad is not None, f"{name}: float input {which} got no gradient"
        assert tuple(grad.shape) == tuple(x.shape), f"{name}: gradient {which} has shape {grad.shape}, input {x.shape}"
        assert grad.dtype == np.float32, f"{name}: gradient {which} is {grad.dtype}"
        flat = np.asarray(grad, np.float64).reshape(-1)
        assert np.isfinite(flat).all(), f"{name}: gradient {which} is not finite on finite example inputs"
        count = min(SAMPLES_PER_INPUT, x.size)
        positions = pick.choice(x.size, size=count, replace=False) if count else []
        atol = ATOL_FRACTION * (1.0 + np.abs(flat).max(initial=0.0))
        for i in positions:
            fd = _finite_difference(name, inputs, attrs, g64, which, int(i))
            assert abs(fd - flat[i]) <= atol + RTOL * abs(flat[i]), (
                f"{name}: d/d input {which}[{np.unravel_index(i, x.shape)}]: rule {flat[i]!r}, finite difference {fd!r}"
            )


def test_every_differentiable_op_is_covered():
    problems = []
    for name in _differentiable():
        if registry.get(name).vjp is None:
            problems.append(f"{name}: no backward rule (list it in NON_DIFFERENTIABLE if that is by design)")
        if name not in EXAMPLES and FD_EXAMPLES.get(name) is None:
            problems.append(f"{name}: no example inputs (add them to op_examples.EXAMPLES or FD_EXAMPLES)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", _differentiable())
def test_backward_rule_matches_finite_differences(name):
    if registry.get(name).vjp is None or (name not in EXAMPLES and FD_EXAMPLES.get(name) is None):
        pytest.fail(f"{name}: not covered, see test_every_differentiable_op_is_covered")
    inputs, attrs = _inputs_for(name)
    check_gradients(name, tuple(inputs), dict(attrs))


@pytest.mark.parametrize(
    "name, inputs, attrs",
    [
        ("gelu", (np.linspace(-4, 4, 37, dtype=np.float32) + np.float32(0.01),), {"approximate": "tanh"}),
        ("softmax", (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(5),), {"axis": 1}),
        ("log_softmax", (np.arange(24, dtype=np.float32).reshape(2, 3, 4) / np.float32(3),), {"axis": 0}),
        ("mul", (np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4), np.float32([[1.5]])), {}),
        ("sub", (np.float32([0.5, -1.25, 2.0]), np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)), {}),
        ("div", (np.float32(3.0).reshape(()), np.linspace(1, 2, 4, dtype=np.float32)), {}),
        ("causal_mask", (np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 4),), {"fill": -1e9}),
        ("sum_to", (np.linspace(-1, 1, 60, dtype=np.float32).reshape(3, 4, 5),), {"shape": (4, 1)}),
    ],
)
def test_backward_rules_on_further_attribute_choices(name, inputs, attrs):
    check_gradients(name, inputs, attrs)
