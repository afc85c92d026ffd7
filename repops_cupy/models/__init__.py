"""Models that trace into step graphs, their initialisation, and their losses.

- `GPT`: a small decoder-only transformer language model (`models.gpt`).
- `mlp_classifier`: an MLP classifier (`models.mlp`).
- `cnn_classifier`: a small convolutional image classifier (`models.cnn`); its
  convolutions and pools are built from `unfold2d` and the exact matrix product.

`init_params` draws every parameter from the counter-based RNG: key = job seed,
stream = `data.STREAM_INIT`, counter = (index of the parameter in `named_params`
order) * 2^40. Normal: `rng.normal_f32` times float32(std); uniform(bound):
(u * 2 - 1) * float32(bound) from `rng.uniform_f32` (the first two steps exact);
constants exactly.
"""
from __future__ import annotations

import numpy as np

from .. import rng
from ..data import STREAM_INIT
from ..graph import Tensor
from .cnn import cnn_classifier
from .gpt import GPT
from .layers import (
    GELU,
    CausalSelfAttention,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    ForwardContext,
    GlobalAvgPool2d,
    Layer,
    LayerNorm,
    Linear,
    MaxPool2d,
    ParamSpec,
    ReLU,
    Sequential,
    TransformerBlock,
    count_params,
)
from .mlp import mlp_classifier

INIT_COUNTER_SHIFT = 40


def init_param(spec: ParamSpec, seed: int, index: int) -> np.ndarray:
    kind, value = spec.init
    counter = index << INIT_COUNTER_SHIFT
    if kind == "normal":
        return rng.normal_f32(seed, STREAM_INIT, spec.shape, counter) * np.float32(value)
    if kind == "uniform":
        u = rng.uniform_f32(seed, STREAM_INIT, spec.shape, counter)
        return (u * np.float32(2.0) - np.float32(1.0)) * np.float32(value)
    if kind == "const":
        return np.full(spec.shape, np.float32(value), dtype=np.float32)
    raise ValueError(f"unknown initialisation {kind!r}")


def init_params(net: Layer, seed: int) -> dict[str, np.ndarray]:
    """Every parameter of `net` by its torch-style name, from the job seed."""
    return {name: np.asarray(init_param(spec, seed, i), dtype=np.float32)
            for i, (name, spec) in enumerate(net.named_params())}


def language_loss(ctx: ForwardContext, net: Layer, x: Tensor, y: Tensor) -> Tensor:
    """Mean next-token cross entropy over all (B, T) positions."""
    b = ctx.b
    logits = net.forward(ctx, "", x)  # (B, T, V)
    vocab = logits.shape[-1]
    flat = b.op("reshape", logits, shape=(-1, vocab))
    return b.op("cross_entropy", flat, b.op("reshape", y, shape=(-1,)))


def classification_loss(ctx: ForwardContext, net: Layer, x: Tensor, y: Tensor) -> Tensor:
    return ctx.b.op("cross_entropy", net.forward(ctx, "", x), y)


def build_network(model_spec, *, vocab_size: int = 0, context: int = 0, n_features: int = 0,
                  n_classes: int = 0) -> Layer:
    """The network a job's [model] table describes (see `jobspec.ModelSpec`)."""
    if model_spec.kind == "gpt":
        return GPT(vocab_size, context, model_spec.d_model, model_spec.n_layers, model_spec.n_heads,
                   model_spec.d_ff, model_spec.dropout, model_spec.gelu, model_spec.tie_head, model_spec.n_positions)
    if model_spec.kind == "mlp":
        return mlp_classifier(n_features, model_spec.hidden, n_classes, model_spec.activation, model_spec.dropout)
    if model_spec.kind == "cnn":  # n_features: the images' channels
        return cnn_classifier(n_features, model_spec.channels, n_classes, model_spec.kernel, model_spec.downsample,
                              model_spec.dropout)
    raise ValueError(f"unknown model kind {model_spec.kind!r}")


__all__ = [
    "GPT", "mlp_classifier", "cnn_classifier", "Conv2d", "MaxPool2d", "GlobalAvgPool2d", "Flatten", "Layer", "ParamSpec", "ForwardContext", "Linear", "Embedding", "LayerNorm", "ReLU",
    "GELU", "Dropout", "Sequential", "CausalSelfAttention", "TransformerBlock", "count_params", "init_params",
    "language_loss", "classification_loss", "build_network",
]
