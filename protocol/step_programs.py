"""Element programs of the registry operators the on-chain step covers (issue 18).

Each generator is the operator's NumPy specification (repops_cupy: elementwise.py,
transcendental.py, nn.py, reduce.py) written again one element at a time through a
`Tracer`: the same IEEE operations in the same order, a `where` as a `select`, so the
last value equals the operator's output bits (tests/protocol/test_step_programs.py runs
the registry operators on random inputs and compares). No generator branches on a value,
so one program serves every element of an output.

Covered: add, sub, mul, div (with broadcasting), neg, add_scalar, mul_scalar, relu, exp,
log, tanh, sigmoid, softmax and layer_norm over the last axis, matmul (`step_matmul`), the
optimizer's adam_moment1, adam_moment2, adamw_update, beta_power_step, sum_to, and the data
movement of reshape, transpose and broadcast_to; and from `step_grads`: relu_grad, gelu and
gelu_grad (tanh form), softmax_grad, layer_norm_grad_x, layer_norm_grad_gamma, causal_mask,
step_increment, full, embedding, cross_entropy and cross_entropy_grad; from `step_rows`:
log_softmax, log_softmax_grad, var, var_grad, max, max_grad; from `step_erf`: erf, erf_grad and
GELU's erf form (the `approximate` attribute picks the program); from `step_windows`: unfold2d and
unfold2d_grad; from `step_scatter`: embedding_grad; from `step_philox`: dropout and
dropout_at_step (Philox4x32-10 in integer steps).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from repops_cupy.hashing import canonical_array

from .errors import LocalProtocolError
from .step_math import exp_f64, f32_bits, log_f64, out32, sigmoid_f64, tanh_f64, tree_sum
from .step_erf import ERF_FAMILIES
from .step_grads import GRAD_FAMILIES
from .step_matmul import matmul_program, matmul_views
from .step_philox import PHILOX_FAMILIES
from .step_rows import ROW_FAMILIES, row_top
from .step_scatter import SCATTER_FAMILIES
from .step_trace import (
    ElementSpec, ElementTrace, Tracer, Val, View, broadcast_view, contiguous_strides, elementwise_layout,
)
from .step_windows import WINDOW_FAMILIES

__all__ = ["COVERED", "element_spec", "trace_element"]

Shapes = Sequence[tuple[int, ...]]
Layout = tuple[tuple[int, ...], tuple[View, ...]]  # the output shape and the input views
Program = Callable[[Tracer, Mapping[str, Any], Shapes], Val]


# --- programs per operator: (views, program) ---------------------------------------------------


def _binary(step: str) -> Program:
    return lambda t, attrs, shapes: t.f32_canon(t.step(step, t.input(0), t.input(1)))


def _scalar(step: str) -> Program:
    return lambda t, attrs, shapes: t.f32_canon(t.step(step, t.input(0), t.const(f32_bits(attrs["value"]))))


def _unary64(fn: Callable[[Tracer, Val], Val]) -> Program:
    return lambda t, attrs, shapes: out32(t, fn(t, t.f32_to_f64(t.input(0))))


def _neg(t: Tracer, attrs, shapes) -> Val:
    return out32(t, t.f64_neg(t.f32_to_f64(t.input(0))))


def _relu(t: Tracer, attrs, shapes) -> Val:
    x = t.input(0)
    return t.f32_canon(t.select(t.f64_le(t.f32_to_f64(x), t.c64(0.0)), t.const(0), x))


def _softmax(t: Tracer, attrs, shapes) -> Val:
    """e_j / tree_sum(e), e = exp(x - (max(x) + 0)) over the row (view 0: the row, view 1: the element)."""
    n = shapes[0][-1]
    row = [t.f32_to_f64(t.input(0, k)) for k in range(n)]
    top = row_top(t, row)
    total = tree_sum(t, [exp_f64(t, t.f64_sub(v, top)) for v in row])
    mine = exp_f64(t, t.f64_sub(t.f32_to_f64(t.input(1)), top))
    return out32(t, t.f64_div(mine, total))


def _layer_norm(t: Tracer, attrs, shapes) -> Val:
    """((x - mean) * rstd) * gamma + beta, rstd = 1 / sqrt(var + eps) (views: row, element, gamma, beta)."""
    n = shapes[0][-1]
    width = t.c64(float(n))
    row = [t.f32_to_f64(t.input(0, k)) for k in range(n)]
    mean = t.f64_div(tree_sum(t, row), width)
    var = t.f64_div(tree_sum(t, [t.f64_mul(c, c) for c in (t.f64_sub(v, mean) for v in row)]), width)
    rstd = t.f64_div(t.c64(1.0), t.f64_sqrt(t.f64_add(var, t.c64(float(attrs["eps"])))))
    xhat = t.f64_mul(t.f64_sub(t.f32_to_f64(t.input(1)), mean), rstd)
    y = t.f64_add(t.f64_mul(xhat, t.f32_to_f64(t.input(2))), t.f32_to_f64(t.input(3)))
    return out32(t, y)


def _copy(t: Tracer, attrs, shapes) -> Val:
    """Data movement: the output element is one input element (any width: a select copies bits)."""
    return t.select(t.const(1), t.input(0), t.const(0))


def _adam_moment1(t: Tracer, attrs, shapes) -> Val:
    """m * beta + grad * f32(1 - beta), float32."""
    beta = attrs["beta"]
    return t.f32_canon(t.f32_add(t.f32_mul(t.input(0), t.const(f32_bits(beta))),
                                 t.f32_mul(t.input(1), t.const(f32_bits(1.0 - beta)))))


def _adam_moment2(t: Tracer, attrs, shapes) -> Val:
    """v * beta + (grad * grad) * f32(1 - beta), float32."""
    beta, g = attrs["beta"], t.input(1)
    return t.f32_canon(t.f32_add(t.f32_mul(t.input(0), t.const(f32_bits(beta))),
                                 t.f32_mul(t.f32_mul(g, g), t.const(f32_bits(1.0 - beta)))))


def _beta_power_step(t: Tracer, attrs, shapes) -> Val:
    return t.f32_canon(t.f32_mul(t.input(0), t.const(f32_bits(attrs["beta"]))))


def _adamw_update(t: Tracer, attrs, shapes) -> Val:
    """decayed - (m / (sqrt(v) / sqrt(1 - b2^t) + eps)) * (lr / (1 - b1^t)), float32 (optim.adamw_update)."""
    one = t.const(f32_bits(1.0))
    lr, eps, wd = attrs["lr"], attrs["eps"], attrs["weight_decay"]
    param, m, v, b1, b2 = (t.input(k) for k in range(5))
    bc1, bc2 = t.f32_sub(one, b1), t.f32_sub(one, b2)
    denom = t.f32_add(t.f32_div(t.f32_sqrt(v), t.f32_sqrt(bc2)), t.const(f32_bits(eps)))
    step = t.f32_div(t.const(f32_bits(lr)), bc1)
    decayed = t.f32_mul(param, t.const(f32_bits(1.0 - lr * wd)))
    return t.f32_canon(t.f32_sub(decayed, t.f32_mul(t.f32_div(m, denom), step)))


def _sum_to(t: Tracer, attrs, shapes) -> Val:
    """float32 of the float64 tree over the summed axes, in C order (view 0 at the kept coordinates)."""
    x, out = tuple(shapes[0]), tuple(attrs["shape"])
    lead = len(x) - len(out)
    own = contiguous_strides(x)
    summed = [a for a in range(len(x)) if a < lead or (out[a - lead] == 1 and x[a] != 1)]
    offsets = [0]
    for a in summed:
        offsets = [o + c * own[a] for o in offsets for c in range(x[a])]
    return out32(t, tree_sum(t, [t.f32_to_f64(t.input(0, o)) for o in offsets]))


def _sum_to_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    x, out = tuple(shapes[0]), tuple(attrs["shape"])
    lead = len(x) - len(out)
    own = contiguous_strides(x)
    return out, (View(0, tuple(0 if (n == 1 and x[lead + d] != 1) else own[lead + d] for d, n in enumerate(out))),)


def _reshape_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    size = int(np.prod(shapes[0]))
    shape = list(attrs["shape"])
    if -1 in shape:
        known = int(np.prod([n for n in shape if n != -1]))
        shape[shape.index(-1)] = size // known if known else 0
    out = tuple(shape)
    return out, (View(0, contiguous_strides(out)),)


def _transpose_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    x, perm = tuple(shapes[0]), tuple(attrs["perm"])
    own = contiguous_strides(x)
    return tuple(x[p] for p in perm), (View(0, tuple(own[p] for p in perm)),)


def _broadcast_to_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out = tuple(attrs["shape"])
    return out, (broadcast_view(0, shapes[0], out),)


def _elementwise_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    return elementwise_layout(shapes)


def _row_views(attrs: Mapping[str, Any], shapes: Shapes) -> Layout:
    out = tuple(shapes[0])
    own = contiguous_strides(out)
    views = [View(0, own[:-1] + (0,)), View(0, own)]
    for k in range(1, len(shapes)):  # per-column parameters (gamma, beta): the element's column
        views.append(View(k, (0,) * (len(out) - 1) + (1,)))
    return out, tuple(views)


def _by_approximation(op: str) -> Program:
    """gelu, gelu_grad: the tanh form's program (step_grads) or the erf form's (step_erf), by the attribute."""
    forms = {"tanh": GRAD_FAMILIES[op][1], "none": ERF_FAMILIES[op]}

    def program(t: Tracer, attrs: Mapping[str, Any], shapes: Shapes) -> Val:
        form = attrs.get("approximate", "none")
        if form not in forms:
            raise LocalProtocolError(f"{op}: approximate must be one of {sorted(forms)}, got {form!r}")
        return forms[form](t, attrs, shapes)
    return program


def _check_last_axis(op: str, attrs: Mapping[str, Any], ndim: int) -> None:
    axis = attrs.get("axis", -1)
    if axis not in (-1, ndim - 1):
        raise LocalProtocolError(f"{op}: the on-chain step covers the last axis only, got axis {axis}")


_FAMILIES: dict[str, tuple[Callable, Program]] = {
    "add": (_elementwise_views, _binary("f32_add")), "sub": (_elementwise_views, _binary("f32_sub")),
    "mul": (_elementwise_views, _binary("f32_mul")), "div": (_elementwise_views, _binary("f32_div")),
    "neg": (_elementwise_views, _neg), "relu": (_elementwise_views, _relu),
    "add_scalar": (_elementwise_views, _scalar("f32_add")), "mul_scalar": (_elementwise_views, _scalar("f32_mul")),
    "exp": (_elementwise_views, _unary64(exp_f64)), "log": (_elementwise_views, _unary64(log_f64)),
    "tanh": (_elementwise_views, _unary64(tanh_f64)), "sigmoid": (_elementwise_views, _unary64(sigmoid_f64)),
    "softmax": (_row_views, _softmax), "layer_norm": (_row_views, _layer_norm),
    "adam_moment1": (_elementwise_views, _adam_moment1), "adam_moment2": (_elementwise_views, _adam_moment2),
    "adamw_update": (_elementwise_views, _adamw_update), "beta_power_step": (_elementwise_views, _beta_power_step),
    "reshape": (_reshape_views, _copy), "transpose": (_transpose_views, _copy),
    "broadcast_to": (_broadcast_to_views, _copy), "sum_to": (_sum_to_views, _sum_to),
    "matmul": (matmul_views, matmul_program),
    **GRAD_FAMILIES, **ROW_FAMILIES, **WINDOW_FAMILIES, **SCATTER_FAMILIES, **PHILOX_FAMILIES,
    "erf": (_elementwise_views, ERF_FAMILIES["erf"]), "erf_grad": (_elementwise_views, ERF_FAMILIES["erf_grad"]),
    "gelu": (_elementwise_views, _by_approximation("gelu")),
    "gelu_grad": (_elementwise_views, _by_approximation("gelu_grad")),
}
COVERED = frozenset(_FAMILIES)


def trace_element(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray], element: int) -> ElementTrace:
    """The trace of output `element` of operator `op` on `inputs` (its program is `element_spec`'s)."""
    if op not in _FAMILIES:
        raise LocalProtocolError(f"no on-chain step program for operator {op!r}")
    arrays = [canonical_array(x) for x in inputs]
    shapes = [tuple(a.shape) for a in arrays]
    if op in ("softmax", "layer_norm"):
        _check_last_axis(op, attrs, len(shapes[0]))
    views_of, program = _FAMILIES[op]
    out_shape, views = views_of(attrs, shapes)
    t = Tracer(op, arrays, out_shape, views, element)
    program(t, attrs, shapes)
    return t.result()[1]


def element_spec(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> ElementSpec:
    """The element program of `op` on inputs of these shapes (traced on element 0)."""
    return trace_element(op, attrs, inputs, 0).spec

