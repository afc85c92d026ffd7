"""Fixed example inputs for every registered operator.

One table serves the selfcheck (same op, same inputs, many machine configurations)
and the test suite (gradient checks, CuPy-vs-NumPy comparisons). Inputs are made
from integer random bits only (NumPy's PCG64 `integers` is platform-independent)
turned into floats by exact arithmetic, so the inputs themselves are identical
bits in every configuration that is compared.

An operator registered without an entry here is reported by `missing_examples()`;
the selfcheck and the tests treat that as a failure, so every operator is covered.
"""
from __future__ import annotations

from typing import Any, Callable

import blake3
import numpy as np

Example = tuple[tuple[np.ndarray, ...], dict[str, Any]]


class ExampleRandom:
    """Deterministic float32 arrays from integer random bits."""

    def __init__(self, seed: int) -> None:
        self._gen = np.random.Generator(np.random.PCG64(seed))

    def normal(self, *shape: int, scale: float = 1.0) -> np.ndarray:
        # Irwin-Hall sum of four 20-bit uniforms: integer sums are exact, one scaling
        # by a power of two and one by `scale` follow, both IEEE.
        ints = self._gen.integers(0, 1 << 20, size=(4, *shape), dtype=np.int64)
        total = ints[0] + ints[1] + ints[2] + ints[3] - (1 << 21)  # exact: integer sum
        x = total.astype(np.float64) * (2.0**-19) * scale
        return x.astype(np.float32)

    def uniform(self, *shape: int, low: float = 0.0, high: float = 1.0) -> np.ndarray:
        u = self._gen.integers(0, 1 << 24, size=shape, dtype=np.int64).astype(np.float64) * 2.0**-24
        return (low + u * (high - low)).astype(np.float32)

    def spanning(self, *shape: int, decades: int = 8) -> np.ndarray:
        """Signed values whose magnitudes span 10^±decades."""
        mant = self.uniform(*shape, low=1.0, high=2.0).astype(np.float64)
        lim = int(decades * 3.3219)
        exps = self._gen.integers(-lim, lim + 1, size=shape)
        sign = np.where(self._gen.integers(0, 2, size=shape) == 1, 1.0, -1.0)
        return (sign * np.ldexp(mant, exps)).astype(np.float32)

    def ints(self, *shape: int, high: int) -> np.ndarray:
        return self._gen.integers(0, high, size=shape, dtype=np.int64)


def _unary(make: Callable[[ExampleRandom], np.ndarray], **attrs: Any) -> Callable[[ExampleRandom], Example]:
    return lambda r: ((make(r),), dict(attrs))


def _grad_of_unary(make: Callable[[ExampleRandom], np.ndarray], use_out: str | None = None, **attrs: Any):
    """(g, x) or (g, out) inputs for a `*_grad` op of an elementwise function."""

    def build(r: ExampleRandom) -> Example:
        x = make(r)
        second = x
        if use_out is not None:
            from . import registry  # the op under test gives its own output

            second = registry.run(use_out, (x,), attrs)
        return (r.normal(*x.shape), second), dict(attrs)

    return build


def _positive(r: ExampleRandom) -> np.ndarray:
    return r.uniform(6, 33, low=1e-3, high=50.0)


def _wide(r: ExampleRandom) -> np.ndarray:
    return r.normal(6, 33, scale=4.0)


def _matrix(r: ExampleRandom) -> np.ndarray:
    return r.normal(5, 7)


def _binary(r: ExampleRandom) -> Example:
    return (r.normal(4, 5, 6), r.normal(5, 1)), {}


def _layer_norm(r: ExampleRandom) -> Example:
    return (r.normal(3, 4, 16, scale=3.0), r.normal(16), r.normal(16)), {"eps": 1e-5}


def _scalar(r: ExampleRandom, low: float, high: float) -> np.ndarray:
    return r.uniform(1, low=low, high=high).reshape(())


def _reduction_grad(r: ExampleRandom, name: str, attrs: dict[str, Any]) -> Example:
    from . import registry

    # ties included: rounding to a coarse grid makes repeated maxima likely
    x = (np.rint(r.normal(7, 37, 5) * np.float32(2.0)) / np.float32(2.0)).astype(np.float32)
    out = registry.run(name, (x,), attrs)
    return (r.normal(*out.shape), x, out), dict(attrs)


def _softmax_grad(name: str) -> Callable[[ExampleRandom], Example]:
    def build(r: ExampleRandom) -> Example:
        from . import registry

        out = registry.run(name, (r.normal(4, 9, scale=3.0),), {"axis": -1})
        return (r.normal(4, 9), out), {"axis": -1}

    return build


EXAMPLES: dict[str, Callable[[ExampleRandom], Example]] = {
    # elementwise arithmetic
    "add": _binary,
    "sub": _binary,
    "mul": _binary,
    "div": lambda r: ((r.normal(4, 5, 6), r.uniform(5, 1, low=0.5, high=3.0)), {}),
    "neg": _unary(_matrix),
    "mul_scalar": _unary(_matrix, value=0.3),
    "add_scalar": _unary(_matrix, value=-1.7),
    "relu": _unary(_wide),
    "relu_grad": _grad_of_unary(_wide),
    "gelu": _unary(_wide, approximate="none"),
    "gelu_grad": _grad_of_unary(_wide, approximate="none"),
    # transcendental
    "exp": _unary(_wide),
    "log": _unary(_positive),
    "tanh": _unary(_wide),
    "erf": _unary(_wide),
    "sigmoid": _unary(_wide),
    "sqrt": _unary(_positive),
    "rsqrt": _unary(_positive),
    "tanh_grad": _grad_of_unary(_wide, use_out="tanh"),
    "sigmoid_grad": _grad_of_unary(_wide, use_out="sigmoid"),
    "erf_grad": _grad_of_unary(_wide),
    "sqrt_grad": _grad_of_unary(_positive, use_out="sqrt"),
    "rsqrt_grad": _grad_of_unary(_positive, use_out="rsqrt"),
    # reductions
    "sum": lambda r: ((r.normal(7, 37, 5),), {"axis": (1,), "keepdims": False}),
    "mean": lambda r: ((r.normal(7, 37, 5),), {"axis": (0, 2), "keepdims": True}),
    "max": lambda r: ((r.normal(7, 37, 5),), {"axis": (1,), "keepdims": False}),
    "var": lambda r: ((r.normal(7, 37, 5, scale=2.0),), {"axis": (1,), "keepdims": False}),
    "max_grad": lambda r: _reduction_grad(r, "max", {"axis": (1,), "keepdims": False}),
    "var_grad": lambda r: ((r.normal(7, 5), r.normal(7, 37, 5, scale=2.0)), {"axis": (1,), "keepdims": False, "correction": 1}),
    # shape
    "reshape": lambda r: ((r.normal(4, 6),), {"shape": (2, 12)}),
    "transpose": lambda r: ((r.normal(2, 3, 4),), {"perm": (2, 0, 1)}),
    "broadcast_to": lambda r: ((r.normal(3, 1),), {"shape": (2, 3, 4)}),
    "sum_to": lambda r: ((r.normal(2, 3, 4),), {"shape": (3, 1)}),
    "causal_mask": lambda r: ((r.normal(2, 5, 5),), {}),
    # nn
    "softmax": lambda r: ((r.normal(4, 9, scale=3.0),), {"axis": -1}),
    "log_softmax": lambda r: ((r.normal(4, 9, scale=3.0),), {"axis": -1}),
    "softmax_grad": _softmax_grad("softmax"),
    "log_softmax_grad": _softmax_grad("log_softmax"),
    "layer_norm": _layer_norm,
    "layer_norm_grad_x": lambda r: ((r.normal(3, 4, 16), r.normal(3, 4, 16, scale=3.0), r.normal(16)), {"eps": 1e-5}),
    "layer_norm_grad_gamma": lambda r: ((r.normal(3, 4, 16), r.normal(3, 4, 16, scale=3.0)), {"eps": 1e-5}),
    "cross_entropy": lambda r: ((r.normal(6, 11, scale=2.0), r.ints(6, high=11)), {}),
    "cross_entropy_grad": lambda r: ((np.float32(0.5) * np.ones((), np.float32), r.normal(6, 11, scale=2.0), r.ints(6, high=11)), {}),
    "embedding": lambda r: ((r.normal(13, 8), r.ints(3, 5, high=13)), {}),
    "embedding_grad": lambda r: ((r.normal(3, 5, 8), r.ints(3, 5, high=13)), {"num_embeddings": 13}),
    "dropout": lambda r: ((r.normal(6, 17),), {"p": 0.25, "seed": 7, "stream": 3, "counter": 11}),
    # image windows (repops_cupy.conv)
    "unfold2d": lambda r: ((r.normal(2, 3, 7, 6),), {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 0)}),
    "unfold2d_grad": lambda r: ((r.normal(2, 3, 4, 5, 6),),
                                {"kernel": (3, 2), "stride": (2, 1), "padding": (1, 0), "input_hw": (7, 6)}),
    # products
    "matmul": lambda r: ((r.normal(2, 9, 33), r.normal(33, 6)), {}),
    # training-program operators: optimizer updates, step counters, constants
    "sgd_momentum": lambda r: ((r.normal(5, 7), r.normal(5, 7), r.normal(5, 7)), {"momentum": 0.9, "weight_decay": 1e-2}),
    "sgd_update": lambda r: ((r.normal(5, 7), r.normal(5, 7)), {"lr": 0.05}),
    "adam_moment1": lambda r: ((r.normal(5, 7), r.normal(5, 7)), {"beta": 0.9}),
    "adam_moment2": lambda r: ((r.uniform(5, 7, low=0.0, high=2.0), r.normal(5, 7)), {"beta": 0.999}),
    "beta_power_step": lambda r: ((_scalar(r, 0.5, 1.0),), {"beta": 0.999}),
    "adamw_update": lambda r: (
        (r.normal(5, 7), r.normal(5, 7), r.uniform(5, 7, low=0.0, high=2.0), _scalar(r, 0.3, 0.9), _scalar(r, 0.9, 0.999)),
        {"lr": 1e-3, "eps": 1e-8, "weight_decay": 0.1},
    ),
    "step_increment": lambda r: ((r.ints(1, high=1 << 30).reshape(()),), {}),
    "dropout_at_step": lambda r: ((r.normal(6, 17), r.ints(1, high=1000).reshape(())), {"p": 0.25, "seed": 7, "site": 3}),
    "full": lambda r: ((), {"shape": (3, 4), "value": 1.5, "dtype": "float32"}),
}


def example(name: str, seed: int = 0) -> Example:
    """Inputs and attributes for operator `name`, the same bits on every call."""
    try:
        build = EXAMPLES[name]
    except KeyError:
        raise KeyError(f"no example inputs for operator {name!r}; add one to repops_cupy/op_examples.py") from None
    # one stream per op, so adding an op never changes another op's inputs
    return build(ExampleRandom(seed * 1_000_003 + _stable_id(name)))


def _stable_id(name: str) -> int:
    return int.from_bytes(blake3.blake3(name.encode()).digest()[:4], "little")


def missing_examples(names: list[str]) -> list[str]:
    return [n for n in names if n not in EXAMPLES]
