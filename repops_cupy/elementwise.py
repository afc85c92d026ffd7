"""Elementwise operators: arithmetic with NumPy broadcasting, scalars, ReLU, GELU.

Specification
-------------
- add/sub/mul/div: float32 IEEE-754 +, -, x, / with round-to-nearest, one rounding per
  element, NumPy broadcasting. The backward of a broadcast input reduces with "sum_to".
- neg: sign flip (exact). add_scalar/mul_scalar: the attribute is rounded to float32
  first (round to nearest), then one float32 IEEE + or x.
- relu(x) = +0 where x <= 0, else x (NaN stays NaN, -0 becomes +0).
  relu_grad(g, x) = g where x > 0, +0 where x <= 0, NaN where x is NaN.
- gelu: computed in float64 from the float32 input, rounded once to float32; the
  float64 steps are listed in `_gelu_f64` and `_gelu_slope_f64` (each a separate IEEE
  operation, erfc/tanh/exp being the project's float64 functions). The erf form uses
  1 + erf(t) = erfc(-t), accurate also far into the negative tail. gelu(-inf) = -0,
  gelu(+inf) = +inf (the limits, where the formula would give inf*0).
- gelu_grad(g, x) = float32(g * gelu'(x)), product in float64; gelu'(+inf) = 1,
  gelu'(-inf) = 0.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import cpu_kernels as _kernels
from . import registry
from ._backend import array_module
from ._nn_checks import as_array, broadcast_shape, float32_attr, ieee_quiet, require_float32
from .constants import GELU_TANH_3K, GELU_TANH_K, INV_SQRT2, INV_SQRT_2PI, SQRT_2_OVER_PI
from .errors import OpError
from .registry import Attr
from .transcendental import erfc_f64, exp_f64, tanh_f64

GELU_APPROXIMATIONS = ("none", "tanh")


def _binary_inputs(op: str, a: Any, b: Any) -> tuple[Any, tuple[int, ...]]:
    require_float32(op, "a", a)
    require_float32(op, "b", b)
    xp = array_module(a, b)
    return xp, broadcast_shape(op, a.shape, b.shape)


def add(a: Any, b: Any) -> Any:
    """a + b in float32 (IEEE, broadcasting)."""
    xp, _ = _binary_inputs("add", a, b)
    with ieee_quiet(xp):
        return as_array(xp, xp.add(a, b))


def sub(a: Any, b: Any) -> Any:
    """a - b in float32 (IEEE, broadcasting)."""
    xp, _ = _binary_inputs("sub", a, b)
    with ieee_quiet(xp):
        return as_array(xp, xp.subtract(a, b))


def mul(a: Any, b: Any) -> Any:
    """a * b in float32 (IEEE, broadcasting)."""
    xp, _ = _binary_inputs("mul", a, b)
    with ieee_quiet(xp):
        return as_array(xp, xp.multiply(a, b))


def div(a: Any, b: Any) -> Any:
    """a / b in float32 (IEEE, broadcasting)."""
    xp, _ = _binary_inputs("div", a, b)
    with ieee_quiet(xp):
        return as_array(xp, xp.divide(a, b))


def neg(x: Any) -> Any:
    """-x (exact sign flip)."""
    require_float32("neg", "x", x)
    xp = array_module(x)
    return as_array(xp, xp.negative(x))


def mul_scalar(x: Any, value: float) -> Any:
    """x * float32(value), one float32 IEEE multiply."""
    require_float32("mul_scalar", "x", x)
    xp = array_module(x)
    with ieee_quiet(xp):
        return as_array(xp, xp.multiply(x, float32_attr(value)))


def add_scalar(x: Any, value: float) -> Any:
    """x + float32(value), one float32 IEEE add."""
    require_float32("add_scalar", "x", x)
    xp = array_module(x)
    with ieee_quiet(xp):
        return as_array(xp, xp.add(x, float32_attr(value)))


def relu(x: Any) -> Any:
    """+0 where x <= 0, else x; NaN stays NaN."""
    require_float32("relu", "x", x)
    xp = array_module(x)
    return as_array(xp, xp.where(x <= 0, np.float32(0.0), x))


def relu_grad(g: Any, x: Any) -> Any:
    """g where x > 0, +0 where x <= 0, NaN where x is NaN."""
    require_float32("relu_grad", "g", g)
    require_float32("relu_grad", "x", x)
    if g.shape != x.shape:
        raise OpError(f"relu_grad: g shape {g.shape} differs from x shape {x.shape}")
    xp = array_module(g, x)
    masked = xp.where(x > 0, g, np.float32(0.0))
    return as_array(xp, xp.where(xp.isnan(x), x, masked))


def _check_approximate(op: str, approximate: str) -> None:
    if approximate not in GELU_APPROXIMATIONS:
        raise OpError(f"{op}: approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")


def _gelu_f64(xp: Any, x64: Any, approximate: str) -> Any:
    """gelu of a float64 array, before the limits at +-inf are patched."""
    half_x = x64 * 0.5
    if approximate == "none":
        # 0.5x * (1 + erf(x/sqrt 2)) written as 0.5x * erfc(x * -(1/sqrt 2)): no cancellation for x << 0
        return half_x * erfc_f64(x64 * -INV_SQRT2)
    # 0.5x * (1 + tanh(sqrt(2/pi) * (x + k * ((x*x)*x))))
    cube = (x64 * x64) * x64
    inner = x64 + cube * GELU_TANH_K
    return half_x * (tanh_f64(inner * SQRT_2_OVER_PI) + 1.0)


def _gelu_slope_f64(xp: Any, x64: Any, approximate: str) -> Any:
    """d gelu / dx in float64, before the limits at +-inf are patched."""
    if approximate == "none":
        # erfc(x * -(1/sqrt 2)) * 0.5 + x * (exp((x*x) * -0.5) * (1/sqrt(2 pi)))
        cdf = erfc_f64(x64 * -INV_SQRT2) * 0.5
        pdf = exp_f64((x64 * x64) * -0.5) * INV_SQRT_2PI
        return cdf + x64 * pdf
    # t = tanh(a), a = sqrt(2/pi) * (x + k x^3)
    # 0.5 * (1 + t) + (0.5x) * ((1 - t*t) * (sqrt(2/pi) * (1 + 3k * (x*x))))
    square = x64 * x64
    inner = x64 + (square * x64) * GELU_TANH_K
    t = tanh_f64(inner * SQRT_2_OVER_PI)
    left = (t + 1.0) * 0.5
    sech2 = 1.0 - t * t
    inner_slope = (square * GELU_TANH_3K + 1.0) * SQRT_2_OVER_PI
    return left + (x64 * 0.5) * (sech2 * inner_slope)


def gelu(x: Any, approximate: str = "none") -> Any:
    """GELU, erf form ("none") or tanh form ("tanh"); float64 inside, rounded once."""
    require_float32("gelu", "x", x)
    _check_approximate("gelu", approximate)
    xp = array_module(x)
    if _kernels.enabled(xp):  # the same float64 sequence, one element at a time
        return _kernels.gelu(x, approximate)
    with ieee_quiet(xp):
        y = _gelu_f64(xp, x.astype(np.float64), approximate)
    y = xp.where(x == -np.inf, -0.0, y)  # the limit; the formula gives -inf * 0
    return as_array(xp, y.astype(np.float32))


def gelu_grad(g: Any, x: Any, approximate: str = "none") -> Any:
    """float32(g * gelu'(x)), the product in float64."""
    require_float32("gelu_grad", "g", g)
    require_float32("gelu_grad", "x", x)
    _check_approximate("gelu_grad", approximate)
    if g.shape != x.shape:
        raise OpError(f"gelu_grad: g shape {g.shape} differs from x shape {x.shape}")
    xp = array_module(g, x)
    if _kernels.enabled(xp):
        return _kernels.gelu_grad(g, x, approximate)
    with ieee_quiet(xp):
        slope = _gelu_slope_f64(xp, x.astype(np.float64), approximate)
        # limits at +-inf, where the formula gives inf * 0
        slope = xp.where(x == np.inf, 1.0, xp.where(x == -np.inf, 0.0, slope))
        return as_array(xp, (g.astype(np.float64) * slope).astype(np.float32))


# --- backward rules ---------------------------------------------------------------


def _reduce_to(emit, grad: Any, grad_shape: tuple[int, ...], shape: tuple[int, ...]) -> Any:
    """The gradient of a broadcast input: summed back to its own shape."""
    if tuple(grad_shape) == tuple(shape):
        return grad
    return emit("sum_to", grad, shape=tuple(shape))


def _add_vjp(emit, g, inputs, out, attrs):
    a, b = inputs
    return (_reduce_to(emit, g, out.shape, a.shape), _reduce_to(emit, g, out.shape, b.shape))


def _sub_vjp(emit, g, inputs, out, attrs):
    a, b = inputs
    return (_reduce_to(emit, g, out.shape, a.shape), _reduce_to(emit, emit("neg", g), out.shape, b.shape))


def _mul_vjp(emit, g, inputs, out, attrs):
    a, b = inputs
    return (
        _reduce_to(emit, emit("mul", g, b), out.shape, a.shape),
        _reduce_to(emit, emit("mul", g, a), out.shape, b.shape),
    )


def _div_vjp(emit, g, inputs, out, attrs):
    # d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b = -(g/b) * out
    a, b = inputs
    g_over_b = emit("div", g, b)
    return (
        _reduce_to(emit, g_over_b, out.shape, a.shape),
        _reduce_to(emit, emit("neg", emit("mul", g_over_b, out)), out.shape, b.shape),
    )


def _neg_vjp(emit, g, inputs, out, attrs):
    return (emit("neg", g),)


def _mul_scalar_vjp(emit, g, inputs, out, attrs):
    return (emit("mul_scalar", g, value=attrs["value"]),)


def _add_scalar_vjp(emit, g, inputs, out, attrs):
    return (g,)


def _relu_vjp(emit, g, inputs, out, attrs):
    return (emit("relu_grad", g, inputs[0]),)


def _gelu_vjp(emit, g, inputs, out, attrs):
    return (emit("gelu_grad", g, inputs[0], approximate=attrs["approximate"]),)


def _register() -> None:
    scalar = {"value": Attr(float)}
    approximate = {"approximate": Attr(str, "none")}
    registry.register("add", add, arity=2, vjp=_add_vjp)
    registry.register("sub", sub, arity=2, vjp=_sub_vjp)
    registry.register("mul", mul, arity=2, vjp=_mul_vjp)
    registry.register("div", div, arity=2, vjp=_div_vjp)
    registry.register("neg", neg, arity=1, vjp=_neg_vjp)
    registry.register("mul_scalar", mul_scalar, arity=1, attrs=scalar, vjp=_mul_scalar_vjp)
    registry.register("add_scalar", add_scalar, arity=1, attrs=scalar, vjp=_add_scalar_vjp)
    registry.register("relu", relu, arity=1, vjp=_relu_vjp)
    registry.register("relu_grad", relu_grad, arity=2)
    registry.register("gelu", gelu, arity=1, attrs=approximate, vjp=_gelu_vjp)
    registry.register("gelu_grad", gelu_grad, arity=2, attrs=approximate)


_register()
