"""Operators that training programs add: optimizer updates, the step counter, constants.

Specification
-------------
Every operator here is elementwise float32 (the step counter: int64) and uses only
IEEE-754 +, -, x, / and sqrt, each a separate NumPy/CuPy ufunc call in the order
written below, so no multiply-add is ever fused and the bits are the same on every
CPU and GPU. A scalar attribute is rounded to float32 (round to nearest) before use;
a coefficient derived from attributes (``1 - beta``, ``1 - lr*wd``) is computed in
Python float64 (IEEE double) from the attribute values and then rounded once to
float32.

- sgd_momentum(buf, grad, param; momentum, weight_decay)
      d = grad                          if weight_decay == 0
      d = grad + param * wd             otherwise
      -> buf * momentum + d
- sgd_update(param, buf; lr)            -> param - buf * lr
- adam_moment1(m, grad; beta)           -> m * beta + grad * c,          c = f32(1 - beta)
- adam_moment2(v, grad; beta)           -> v * beta + (grad * grad) * c, c = f32(1 - beta)
- beta_power_step(p; beta)              -> p * beta    (p: the running beta^t, shape ())
- adamw_update(param, m, v, beta1_power, beta2_power; lr, eps, weight_decay)
      bc1 = 1 - beta1_power ;  bc2 = 1 - beta2_power           (shape () each)
      denom = sqrt(v) / sqrt(bc2) + eps
      step = lr / bc1
      -> param * f32(1 - lr*weight_decay) - (m / denom) * step
  which is torch.optim.AdamW's formula written out in one fixed order.
- step_increment(step)                  -> step + 1   (int64, shape (); exact)
- full(; shape, value, dtype)           -> an array of `shape` filled with `value`
  rounded to `dtype` (float32, int32 or int64); the seed of a backward pass.
- dropout_at_step(x, step; p, seed, site) -> the registered "dropout" of x with
  stream = DROPOUT_STREAM_BASE + site and counter = step * 2^32 (step: the int64
  counter, shape ()). A mask takes at most 2^32 Philox blocks (2^34 elements), so
  steps and sites never share random words. Backward: the same op on the gradient.

The bias corrections come from the running powers beta^t kept as state tensors
(each step multiplies them by beta), so no operator needs the step number as an
attribute and a step's graph is the same at every step.

Only dropout_at_step has a backward rule: the others are the end of a step.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import gpu_kernels as _gpu
from . import registry
from ._backend import array_module
from .errors import OpError
from .registry import Attr

FULL_DTYPES = ("float32", "int32", "int64")
DROPOUT_STREAM_BASE = 1 << 32  # Philox streams below this are for data order and initialisation
STEP_COUNTER_SHIFT = 32


def _f32(value: float) -> np.float32:
    with np.errstate(over="ignore"):
        return np.float32(value)


def _require_f32(op: str, name: str, x: Any, shape: tuple[int, ...] | None = None) -> None:
    if getattr(x, "dtype", None) != np.float32:
        raise OpError(f"{op}: {name} must be a float32 array, got {getattr(x, 'dtype', type(x).__name__)}")
    if shape is not None and tuple(x.shape) != tuple(shape):
        raise OpError(f"{op}: {name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def _same_shape(op: str, first: Any, **others: Any) -> Any:
    _require_f32(op, "first input", first)
    for name, x in others.items():
        _require_f32(op, name, x, first.shape)
    return array_module(first, *others.values())


def sgd_momentum(buf: Any, grad: Any, param: Any, *, momentum: float, weight_decay: float) -> Any:
    """New momentum buffer: buf * momentum + (grad [+ param * weight_decay])."""
    xp = _same_shape("sgd_momentum", buf, grad=grad, param=param)
    if _gpu.enabled(xp):
        return _gpu.elementwise(xp, "sgd_momentum", (buf, grad, param),
                                (_f32(momentum), _f32(weight_decay), np.int32(weight_decay != 0.0)))
    d = grad
    if weight_decay != 0.0:
        d = xp.add(grad, xp.multiply(param, _f32(weight_decay)))
    return xp.add(xp.multiply(buf, _f32(momentum)), d)


def sgd_update(param: Any, buf: Any, *, lr: float) -> Any:
    """New parameter: param - buf * lr."""
    xp = _same_shape("sgd_update", param, buf=buf)
    if _gpu.enabled(xp):
        return _gpu.elementwise(xp, "sgd_update", (param, buf), (_f32(lr),))
    return xp.subtract(param, xp.multiply(buf, _f32(lr)))


def adam_moment1(m: Any, grad: Any, *, beta: float) -> Any:
    """New first moment: m * beta + grad * f32(1 - beta)."""
    xp = _same_shape("adam_moment1", m, grad=grad)
    if _gpu.enabled(xp):
        return _gpu.elementwise(xp, "adam_moment", (m, grad), (_f32(beta), _f32(1.0 - beta), np.int32(0)))
    return xp.add(xp.multiply(m, _f32(beta)), xp.multiply(grad, _f32(1.0 - beta)))


def adam_moment2(v: Any, grad: Any, *, beta: float) -> Any:
    """New second moment: v * beta + (grad * grad) * f32(1 - beta)."""
    xp = _same_shape("adam_moment2", v, grad=grad)
    if _gpu.enabled(xp):
        return _gpu.elementwise(xp, "adam_moment", (v, grad), (_f32(beta), _f32(1.0 - beta), np.int32(1)))
    return xp.add(xp.multiply(v, _f32(beta)), xp.multiply(xp.multiply(grad, grad), _f32(1.0 - beta)))


def beta_power_step(power: Any, *, beta: float) -> Any:
    """beta^(t+1) from beta^t: one float32 multiply."""
    _require_f32("beta_power_step", "power", power, ())
    xp = array_module(power)
    return xp.asarray(xp.multiply(power, _f32(beta)))


def adamw_update(
    param: Any, m: Any, v: Any, beta1_power: Any, beta2_power: Any, *, lr: float, eps: float, weight_decay: float
) -> Any:
    """New parameter of AdamW (decoupled weight decay, bias-corrected moments)."""
    op = "adamw_update"
    xp = _same_shape(op, param, m=m, v=v)
    _require_f32(op, "beta1_power", beta1_power, ())
    _require_f32(op, "beta2_power", beta2_power, ())
    if _gpu.enabled(xp):
        return _gpu.elementwise(xp, "adamw_update", (param, m, v, beta1_power, beta2_power),
                                (_f32(lr), _f32(eps), _f32(1.0 - lr * weight_decay)))
    one = _f32(1.0)
    bc1 = xp.subtract(one, beta1_power)
    bc2 = xp.subtract(one, beta2_power)
    denom = xp.add(xp.divide(xp.sqrt(v), xp.sqrt(bc2)), _f32(eps))
    step = xp.divide(_f32(lr), bc1)
    decayed = xp.multiply(param, _f32(1.0 - lr * weight_decay))
    return xp.subtract(decayed, xp.multiply(xp.divide(m, denom), step))


def step_increment(step: Any) -> Any:
    """step + 1 for an int64 scalar counter."""
    _require_step("step_increment", step)
    xp = array_module(step)
    return xp.asarray(xp.add(step, np.int64(1)))


def full(*, shape: tuple[int, ...], value: float, dtype: str) -> Any:
    """A constant array (always made on the host: it has no inputs to take a device from)."""
    if dtype not in FULL_DTYPES:
        raise OpError(f"full: dtype must be one of {FULL_DTYPES}, got {dtype!r}")
    if any(d < 0 for d in shape):
        raise OpError(f"full: negative dimension in shape {shape}")
    if dtype == "float32":
        fill = _f32(value)
    else:
        if value != int(value):
            raise OpError(f"full: value {value} is not an integer for dtype {dtype}")
        fill = np.dtype(dtype).type(int(value))
    return np.full(shape, fill, dtype=np.dtype(dtype))


def _require_step(op: str, step: Any) -> int:
    if getattr(step, "dtype", None) != np.int64 or tuple(step.shape) != ():
        raise OpError(f"{op}: step must be an int64 array of shape (), got {getattr(step, 'dtype', step)!r}")
    value = int(step)
    if not 0 <= value < 1 << (64 - STEP_COUNTER_SHIFT):
        raise OpError(f"{op}: step {value} is outside [0, 2^{64 - STEP_COUNTER_SHIFT})")
    return value


def dropout_at_step(x: Any, step: Any, *, p: float, seed: int, site: int) -> Any:
    """Dropout whose mask depends on the step counter: "dropout" keyed by (seed, site, step)."""
    counter = _require_step("dropout_at_step", step) << STEP_COUNTER_SHIFT
    if not 0 <= site < 1 << 31:
        raise OpError(f"dropout_at_step: site must lie in [0, 2^31), got {site}")
    attrs = {"p": p, "seed": seed, "stream": DROPOUT_STREAM_BASE + site, "counter": counter}
    return registry.run("dropout", (x,), attrs)


def _dropout_at_step_vjp(emit, g, inputs, out, attrs):
    return (emit("dropout_at_step", g, inputs[1], **attrs), None)


registry.register("sgd_momentum", sgd_momentum, arity=3,
                  attrs={"momentum": Attr(float), "weight_decay": Attr(float, 0.0)})
registry.register("sgd_update", sgd_update, arity=2, attrs={"lr": Attr(float)})
registry.register("adam_moment1", adam_moment1, arity=2, attrs={"beta": Attr(float)})
registry.register("adam_moment2", adam_moment2, arity=2, attrs={"beta": Attr(float)})
registry.register("beta_power_step", beta_power_step, arity=1, attrs={"beta": Attr(float)})
registry.register("adamw_update", adamw_update, arity=5,
                  attrs={"lr": Attr(float), "eps": Attr(float, 1e-8), "weight_decay": Attr(float, 0.0)})
registry.register("step_increment", step_increment, arity=1)
registry.register("full", full, arity=0,
                  attrs={"shape": Attr(tuple), "value": Attr(float), "dtype": Attr(str, "float32")})
registry.register("dropout_at_step", dropout_at_step, arity=2,
                  attrs={"p": Attr(float), "seed": Attr(int), "site": Attr(int)}, vjp=_dropout_at_step_vjp)


def _ex_scalar(r: Any, low: float, high: float) -> np.ndarray:
    return np.asarray(r.uniform(1, low=low, high=high)[0], dtype=np.float32).reshape(())


# Example inputs in the format of `op_examples.EXAMPLES` (a builder taking an
# `ExampleRandom`), for the selfcheck and the CuPy-vs-NumPy tests.
EXAMPLES = {
    "sgd_momentum": lambda r: ((r.normal(5, 7), r.normal(5, 7), r.normal(5, 7)), {"momentum": 0.9, "weight_decay": 1e-2}),
    "sgd_update": lambda r: ((r.normal(5, 7), r.normal(5, 7)), {"lr": 0.05}),
    "adam_moment1": lambda r: ((r.normal(5, 7), r.normal(5, 7)), {"beta": 0.9}),
    "adam_moment2": lambda r: ((r.uniform(5, 7, low=0.0, high=2.0), r.normal(5, 7)), {"beta": 0.999}),
    "beta_power_step": lambda r: ((_ex_scalar(r, 0.5, 1.0),), {"beta": 0.999}),
    "adamw_update": lambda r: (
        (r.normal(5, 7), r.normal(5, 7), r.uniform(5, 7, low=0.0, high=2.0),
         _ex_scalar(r, 0.3, 0.9), _ex_scalar(r, 0.9, 0.999)),
        {"lr": 1e-3, "eps": 1e-8, "weight_decay": 0.1},
    ),
    "step_increment": lambda r: ((r.ints(1, high=1 << 30).reshape(()),), {}),
    "dropout_at_step": lambda r: ((r.normal(6, 17), r.ints(1, high=1000).reshape(())), {"p": 0.25, "seed": 7, "site": 3}),
    "full": lambda r: ((), {"shape": (3, 4), "value": 1.5, "dtype": "float32"}),
}


# --- optimizers as graph nodes ---------------------------------------------------------
#
# State names: parameters are "params/<name>"; AdamW keeps "optim/exp_avg/<name>",
# "optim/exp_avg_sq/<name>" and the running powers "optim/beta1_power",
# "optim/beta2_power" (1.0 at the start); SGD with momentum keeps
# "optim/momentum_buffer/<name>". `builder` is a graph builder (`graph.GraphBuilder`):
# anything with `op(name, *inputs, **attrs)`.

PARAM_PREFIX = "params/"


def initial_optimizer_state(spec, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Optimizer state for parameters named as in `params` (without the "params/" prefix)."""
    state: dict[str, np.ndarray] = {}
    if spec.kind == "adamw":
        for name, p in params.items():
            state[f"optim/exp_avg/{name}"] = np.zeros_like(p)
            state[f"optim/exp_avg_sq/{name}"] = np.zeros_like(p)
        state["optim/beta1_power"] = np.ones((), np.float32)
        state["optim/beta2_power"] = np.ones((), np.float32)
    elif spec.kind == "sgd":
        if spec.momentum > 0.0:
            for name, p in params.items():
                state[f"optim/momentum_buffer/{name}"] = np.zeros_like(p)
    else:
        raise ValueError(f"unknown optimizer {spec.kind!r}")
    return state


def optimizer_nodes(builder, spec, state: dict, grads: dict) -> dict:
    """Record one update; returns the new value of every parameter and optimizer state tensor.

    state: state name -> graph tensor (parameters and optimizer state);
    grads: parameter name (without prefix) -> gradient tensor.
    """
    b = builder
    new: dict = {}
    if spec.kind == "adamw":
        p1 = b.op("beta_power_step", state["optim/beta1_power"], beta=spec.beta1)
        p2 = b.op("beta_power_step", state["optim/beta2_power"], beta=spec.beta2)
        new["optim/beta1_power"], new["optim/beta2_power"] = p1, p2
        for name, g in grads.items():
            m = b.op("adam_moment1", state[f"optim/exp_avg/{name}"], g, beta=spec.beta1)
            v = b.op("adam_moment2", state[f"optim/exp_avg_sq/{name}"], g, beta=spec.beta2)
            new[f"optim/exp_avg/{name}"], new[f"optim/exp_avg_sq/{name}"] = m, v
            new[PARAM_PREFIX + name] = b.op("adamw_update", state[PARAM_PREFIX + name], m, v, p1, p2,
                                            lr=spec.lr, eps=spec.eps, weight_decay=spec.weight_decay)
    elif spec.kind == "sgd":
        for name, g in grads.items():
            param = state[PARAM_PREFIX + name]
            if spec.momentum > 0.0:
                buf = b.op("sgd_momentum", state[f"optim/momentum_buffer/{name}"], g, param,
                           momentum=spec.momentum, weight_decay=spec.weight_decay)
                new[f"optim/momentum_buffer/{name}"] = buf
            elif spec.weight_decay != 0.0:
                # momentum 0: buf' = 0 * momentum + d would read a buffer that is not kept
                buf = b.op("sgd_momentum", b.op("full", shape=param.shape, value=0.0), g, param,
                           momentum=0.0, weight_decay=spec.weight_decay)
            else:
                buf = g
            new[PARAM_PREFIX + name] = b.op("sgd_update", param, buf, lr=spec.lr)
    else:
        raise ValueError(f"unknown optimizer {spec.kind!r}")
    return new
