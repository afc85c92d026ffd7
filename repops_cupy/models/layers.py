"""Layers that trace into step graphs: a small module tree mirroring torch.nn.

A `Layer` declares its parameters (`ParamSpec`: shape and initialisation) and its
children; `forward(ctx, prefix, x)` records operator nodes through the graph builder.
Parameter names are the dotted paths torch's ``state_dict`` would use for the same
tree (``blocks.0.attn.q_proj.weight``), so weights move between the two by name.

Conventions follow torch: a Linear weight is (out, in) and computes x @ W^T + b;
layer norm has ``weight`` and ``bias``; GELU names its approximation ("none" or
"tanh"). Dropout draws its mask from the counter-based RNG keyed by the job seed, a
stream per dropout site and the step counter (a state tensor), so the graph is the
same at every step while the masks differ.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping

from ..graph import GraphBuilder, Tensor

# how a parameter starts: ("normal", std) | ("uniform", bound) | ("const", value)
Init = tuple[str, float]


@dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    init: Init


@dataclass
class ForwardContext:
    """What a forward pass needs besides its input: the builder, the parameters, randomness."""

    b: GraphBuilder
    params: Mapping[str, Tensor]
    step: Tensor | None = None  # the int64 step counter leaf, for dropout masks
    seed: int = 0
    dropout_sites: int = 0
    training: bool = True

    def param(self, name: str) -> Tensor:
        try:
            return self.params[name]
        except KeyError:
            raise KeyError(f"no parameter {name!r} in this model") from None

    def dropout(self, x: Tensor, p: float) -> Tensor:
        """Dropout with a mask new at every step; the identity when p == 0 or not training."""
        if p == 0.0 or not self.training:
            return x
        if self.step is None:
            raise ValueError("dropout needs the step counter leaf")
        site = self.dropout_sites
        self.dropout_sites += 1
        return self.b.op("dropout_at_step", x, self.step, p=p, seed=self.seed, site=site)


class Layer:
    """Base: no parameters, no children; subclasses override what they have."""

    def params(self) -> dict[str, ParamSpec]:
        return {}

    def children(self) -> list[tuple[str, Layer]]:
        return []

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        raise NotImplementedError(type(self).__name__)

    def named_params(self, prefix: str = "") -> Iterator[tuple[str, ParamSpec]]:
        for name, spec in self.params().items():
            yield prefix + name, spec
        for name, child in self.children():
            yield from child.named_params(f"{prefix}{name}.")


@dataclass
class Linear(Layer):
    in_features: int
    out_features: int
    bias: bool = True
    init_std: float | None = None  # None: torch's default uniform(-1/sqrt(in), 1/sqrt(in))

    def params(self) -> dict[str, ParamSpec]:
        bound = 1.0 / math.sqrt(self.in_features)
        w_init: Init = ("uniform", bound) if self.init_std is None else ("normal", self.init_std)
        out = {"weight": ParamSpec((self.out_features, self.in_features), w_init)}
        if self.bias:
            out["bias"] = ParamSpec((self.out_features,), ("uniform", bound) if self.init_std is None else ("const", 0.0))
        return out

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        b = ctx.b
        lead = x.shape[:-1]
        flat = x if x.ndim == 2 else b.op("reshape", x, shape=(-1, self.in_features))
        y = b.op("matmul", flat, ctx.param(prefix + "weight"), transpose_b=True)
        if self.bias:
            y = b.op("add", y, ctx.param(prefix + "bias"))
        return y if x.ndim == 2 else b.op("reshape", y, shape=(*lead, self.out_features))


@dataclass
class Embedding(Layer):
    num_embeddings: int
    embedding_dim: int
    init_std: float = 1.0  # torch's default is N(0, 1)

    def params(self) -> dict[str, ParamSpec]:
        return {"weight": ParamSpec((self.num_embeddings, self.embedding_dim), ("normal", self.init_std))}

    def forward(self, ctx: ForwardContext, prefix: str, ids: Tensor) -> Tensor:
        return ctx.b.op("embedding", ctx.param(prefix + "weight"), ids)


@dataclass
class LayerNorm(Layer):
    dim: int
    eps: float = 1e-5

    def params(self) -> dict[str, ParamSpec]:
        return {"weight": ParamSpec((self.dim,), ("const", 1.0)), "bias": ParamSpec((self.dim,), ("const", 0.0))}

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.b.op("layer_norm", x, ctx.param(prefix + "weight"), ctx.param(prefix + "bias"), eps=self.eps)


@dataclass
class ReLU(Layer):
    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.b.op("relu", x)


@dataclass
class GELU(Layer):
    approximate: str = "none"

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.b.op("gelu", x, approximate=self.approximate)


@dataclass
class Dropout(Layer):
    p: float = 0.0

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.dropout(x, self.p)


@dataclass
class Conv2d(Layer):
    """torch's Conv2d (groups 1, dilation 1, zero padding): unfold2d, then one exact matrix product.

    The windows (N, C, OH, OW, KH*KW) are laid out as rows (N*OH*OW, C*KH*KW), the weight
    (O, C, KH, KW) as (O, C*KH*KW), and y = rows @ W^T + b goes back to (N, O, OH, OW).
    """

    in_channels: int
    out_channels: int
    kernel_size: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    bias: bool = True

    def params(self) -> dict[str, ParamSpec]:
        kh, kw = self.kernel_size
        bound = 1.0 / math.sqrt(self.in_channels * kh * kw)  # torch's default for weight and bias
        out = {"weight": ParamSpec((self.out_channels, self.in_channels, kh, kw), ("uniform", bound))}
        if self.bias:
            out["bias"] = ParamSpec((self.out_channels,), ("uniform", bound))
        return out

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        b = ctx.b
        n = x.shape[0]
        cols = b.op("unfold2d", x, kernel=self.kernel_size, stride=self.stride, padding=self.padding)
        _, c, oh, ow, kk = cols.shape
        rows = b.op("reshape", b.op("transpose", cols, perm=(0, 2, 3, 1, 4)), shape=(n * oh * ow, c * kk))
        w = b.op("reshape", ctx.param(prefix + "weight"), shape=(self.out_channels, c * kk))
        y = b.op("matmul", rows, w, transpose_b=True)
        if self.bias:
            y = b.op("add", y, ctx.param(prefix + "bias"))
        return b.op("transpose", b.op("reshape", y, shape=(n, oh, ow, self.out_channels)), perm=(0, 3, 1, 2))


@dataclass
class MaxPool2d(Layer):
    """torch's MaxPool2d without padding: the largest value of each window (unfold2d, then max).

    Ties share the gradient equally (`reduce.max_grad`); torch gives it to one of them.
    """

    kernel_size: tuple[int, int]
    stride: tuple[int, int]

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        windows = ctx.b.op("unfold2d", x, kernel=self.kernel_size, stride=self.stride)
        return ctx.b.op("max", windows, axis=(4,))


@dataclass
class GlobalAvgPool2d(Layer):
    """torch's AdaptiveAvgPool2d(1): the mean over each channel's H x W, kept as (N, C, 1, 1)."""

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.b.op("mean", x, axis=(2, 3), keepdims=True)


@dataclass
class Flatten(Layer):
    """torch's Flatten(): every axis after the first into one."""

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        return ctx.b.op("reshape", x, shape=(x.shape[0], -1))


@dataclass
class Sequential(Layer):
    layers: list[Layer] = field(default_factory=list)

    def children(self) -> list[tuple[str, Layer]]:
        return [(str(i), layer) for i, layer in enumerate(self.layers)]

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        for name, layer in self.children():
            x = layer.forward(ctx, f"{prefix}{name}.", x)
        return x


@dataclass
class CausalSelfAttention(Layer):
    """Multi-head self-attention with a causal mask; q, k, v and output projections."""

    d_model: int
    n_heads: int
    dropout: float = 0.0
    init_std: float | None = None

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model})")
        self._parts = {
            name: Linear(self.d_model, self.d_model, init_std=self.init_std)
            for name in ("q_proj", "k_proj", "v_proj", "out_proj")
        }

    def children(self) -> list[tuple[str, Layer]]:
        return list(self._parts.items())

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        b = ctx.b
        batch, t, d = x.shape
        h = self.n_heads
        hd = d // h
        proj = self._parts

        def heads(name: str) -> Tensor:
            y = proj[name].forward(ctx, f"{prefix}{name}.", x)  # (B, T, D)
            y = b.op("reshape", y, shape=(batch, t, h, hd))
            y = b.op("transpose", y, perm=(0, 2, 1, 3))  # (B, H, T, hd)
            return b.op("reshape", y, shape=(batch * h, t, hd))

        q, k, v = heads("q_proj"), heads("k_proj"), heads("v_proj")
        att = b.op("matmul", q, k, transpose_b=True)  # (B*H, T, T)
        att = b.op("mul_scalar", att, value=1.0 / math.sqrt(hd))
        att = b.op("causal_mask", att)
        att = b.op("softmax", att, axis=-1)
        att = ctx.dropout(att, self.dropout)
        y = b.op("matmul", att, v)  # (B*H, T, hd)
        y = b.op("reshape", y, shape=(batch, h, t, hd))
        y = b.op("transpose", y, perm=(0, 2, 1, 3))
        y = b.op("reshape", y, shape=(batch, t, d))
        y = proj["out_proj"].forward(ctx, f"{prefix}out_proj.", y)
        return ctx.dropout(y, self.dropout)


@dataclass
class TransformerBlock(Layer):
    """Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)); the MLP is Linear-GELU-Linear."""

    d_model: int
    n_heads: int
    d_ff: int
    dropout: float = 0.0
    gelu: str = "tanh"
    init_std: float | None = None

    def __post_init__(self) -> None:
        mlp = Sequential([
            Linear(self.d_model, self.d_ff, init_std=self.init_std),
            GELU(self.gelu),
            Linear(self.d_ff, self.d_model, init_std=self.init_std),
            Dropout(self.dropout),
        ])
        self._parts = {
            "ln1": LayerNorm(self.d_model),
            "attn": CausalSelfAttention(self.d_model, self.n_heads, self.dropout, self.init_std),
            "ln2": LayerNorm(self.d_model),
            "mlp": mlp,
        }

    def children(self) -> list[tuple[str, Layer]]:
        return list(self._parts.items())

    def forward(self, ctx: ForwardContext, prefix: str, x: Tensor) -> Tensor:
        b = ctx.b
        parts = self._parts
        h = parts["ln1"].forward(ctx, prefix + "ln1.", x)
        x = b.op("add", x, parts["attn"].forward(ctx, prefix + "attn.", h))
        h = parts["ln2"].forward(ctx, prefix + "ln2.", x)
        return b.op("add", x, parts["mlp"].forward(ctx, prefix + "mlp.", h))


def count_params(layer: Layer) -> int:
    return sum(math.prod(spec.shape) for _, spec in layer.named_params())


def layer_summary(layer: Layer) -> str:
    return f"{type(layer).__name__} with {count_params(layer):,} parameters"


__all__ = [
    "ForwardContext", "Layer", "ParamSpec", "Linear", "Embedding", "LayerNorm", "ReLU", "GELU", "Dropout",
    "Sequential", "Conv2d", "MaxPool2d", "GlobalAvgPool2d", "Flatten", "CausalSelfAttention", "TransformerBlock", "count_params", "layer_summary",
]

