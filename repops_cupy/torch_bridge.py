"""Between torch.nn modules and traceable layer trees: build the graph from a torch model,
and put trained weights back into it.

Supported torch layers: Linear, Embedding, LayerNorm (1-D, with affine parameters),
GELU, ReLU, Dropout, Sequential, Conv2d (zero padding, groups and dilation 1), MaxPool2d
(no padding, dilation 1, floor mode), AdaptiveAvgPool2d(1), Flatten (of all but the first
axis), and the three modules defined here --
`CausalSelfAttention`, `TransformerBlock` and `TinyGPT` -- which users can build
their own models from. Anything else raises `UnsupportedLayer` naming the layer's
path and type. Parameter names are the module's ``state_dict`` keys on both sides.

    net = to_layer(module)                  # the layer tree the step graph is traced from
    params = params_from_module(module)     # its weights as float32 NumPy arrays
    load_into_module(module, state)         # trained weights back into the module
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import torch
from torch import nn

from .models import layers as L
from .models.gpt import GPT
from .optim import PARAM_PREFIX


class UnsupportedLayer(TypeError):
    """A torch module the bridge cannot trace."""


# what `to_layer` converts, in the order it tries them (named in every refusal)
SUPPORTED_LAYERS = ("Linear", "Embedding", "LayerNorm", "GELU", "ReLU", "Dropout", "Sequential", "Conv2d",
                    "MaxPool2d", "AdaptiveAvgPool2d", "Flatten", "CausalSelfAttention", "TransformerBlock", "TinyGPT")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with separate q, k, v and output projections."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide d_model ({d_model})")
        self.d_model, self.n_heads, self.dropout_p = d_model, n_heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h, hd = self.n_heads, d // self.n_heads

        def heads(proj: nn.Linear) -> torch.Tensor:
            return proj(x).reshape(b, t, h, hd).transpose(1, 2)

        q, k, v = heads(self.q_proj), heads(self.k_proj), heads(self.v_proj)
        # reprod-ok: the torch module's own forward, for using trained weights in torch; graphs come from to_layer
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = self.drop(torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).reshape(b, t, d)  # reprod-ok: as above, never traced or hashed
        return self.drop(self.out_proj(y))


class TransformerBlock(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, gelu: str = "tanh") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(approximate=gelu), nn.Linear(d_ff, d_model),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Decoder-only transformer LM: token + position embeddings, blocks, final norm, untied head."""

    def __init__(self, vocab_size: int, context: int, d_model: int, n_layers: int, n_heads: int, d_ff: int,
                 dropout: float = 0.0, gelu: str = "tanh") -> None:
        super().__init__()
        self.vocab_size, self.context = vocab_size, context
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(context, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[TransformerBlock(d_model, n_heads, d_ff, dropout, gelu) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.wte(ids) + self.wpe.weight[: ids.shape[1]])
        return self.head(self.ln_f(self.blocks(x)))


def _dropout_p(module: nn.Module) -> float:
    return float(module.drop.p)


def _pair(value) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _image_layer(module: nn.Module, where: str) -> L.Layer | None:
    """Conv2d, MaxPool2d, AdaptiveAvgPool2d(1) and Flatten, or None for another module."""
    name = type(module).__name__
    if isinstance(module, nn.Conv2d):
        if module.groups != 1 or _pair(module.dilation) != (1, 1) or module.padding_mode != "zeros" \
                or isinstance(module.padding, str):
            raise UnsupportedLayer(f"layer {where!r} (Conv2d): only groups 1, dilation 1 and numeric zero padding")
        return L.Conv2d(module.in_channels, module.out_channels, _pair(module.kernel_size), _pair(module.stride),
                        _pair(module.padding), bias=module.bias is not None)
    if isinstance(module, nn.MaxPool2d):
        stride = module.stride if module.stride is not None else module.kernel_size
        if _pair(module.padding) != (0, 0) or _pair(module.dilation) != (1, 1) or module.ceil_mode \
                or module.return_indices:
            raise UnsupportedLayer(f"layer {where!r} ({name}): only padding 0, dilation 1, floor mode, no indices")
        return L.MaxPool2d(_pair(module.kernel_size), _pair(stride))
    if isinstance(module, nn.AdaptiveAvgPool2d):
        if _pair(module.output_size) != (1, 1):
            raise UnsupportedLayer(f"layer {where!r} ({name}): only output size 1 (the mean over the image)")
        return L.GlobalAvgPool2d()
    if isinstance(module, nn.Flatten):
        if module.start_dim != 1 or module.end_dim != -1:
            raise UnsupportedLayer(f"layer {where!r} ({name}): only Flatten() of every axis after the first")
        return L.Flatten()
    return None


def to_layer(module: nn.Module, path: str = "") -> L.Layer:
    """The traceable layer tree of a torch module (raises UnsupportedLayer naming the layer)."""
    where = path or "<root>"
    if isinstance(module, nn.Linear):
        return L.Linear(module.in_features, module.out_features, bias=module.bias is not None)
    if isinstance(module, nn.Embedding):
        if module.padding_idx is not None or module.max_norm is not None:
            raise UnsupportedLayer(f"layer {where!r} (Embedding): padding_idx and max_norm are not supported")
        return L.Embedding(module.num_embeddings, module.embedding_dim)
    if isinstance(module, nn.LayerNorm):
        if len(module.normalized_shape) != 1 or not module.elementwise_affine or module.bias is None:
            raise UnsupportedLayer(f"layer {where!r} (LayerNorm): only 1-D layer norm with weight and bias")
        return L.LayerNorm(module.normalized_shape[0], module.eps)
    if isinstance(module, nn.GELU):
        return L.GELU(module.approximate)
    if isinstance(module, nn.ReLU):
        return L.ReLU()
    if isinstance(module, nn.Dropout):
        return L.Dropout(float(module.p))
    image = _image_layer(module, where)
    if image is not None:
        return image
    if isinstance(module, nn.Sequential):
        return L.Sequential([to_layer(child, f"{path}.{name}" if path else name) for name, child in module.named_children()])
    if isinstance(module, CausalSelfAttention):
        return L.CausalSelfAttention(module.d_model, module.n_heads, _dropout_p(module))
    if isinstance(module, TransformerBlock):
        return L.TransformerBlock(module.attn.d_model, module.attn.n_heads, module.mlp[0].out_features,
                                  float(module.mlp[3].p), module.mlp[1].approximate)
    if isinstance(module, TinyGPT):
        first = module.blocks[0] if len(module.blocks) else None
        if first is None:
            raise UnsupportedLayer(f"layer {where!r} (TinyGPT): needs at least one block")
        return GPT(module.vocab_size, module.context, module.wte.embedding_dim, len(module.blocks),
                   first.attn.n_heads, first.mlp[0].out_features, _dropout_p(module), first.mlp[1].approximate)
    raise UnsupportedLayer(f"layer {where!r} ({type(module).__name__}) is not supported by the graph builder; "
                           f"supported layers: {', '.join(SUPPORTED_LAYERS)}")


def to_torch(layer: L.Layer) -> nn.Module:
    """A torch module with the same structure and parameter names as `layer` (weights unset)."""
    if isinstance(layer, L.Linear):
        return nn.Linear(layer.in_features, layer.out_features, bias=layer.bias)
    if isinstance(layer, L.Embedding):
        return nn.Embedding(layer.num_embeddings, layer.embedding_dim)
    if isinstance(layer, L.LayerNorm):
        return nn.LayerNorm(layer.dim, eps=layer.eps)
    if isinstance(layer, L.GELU):
        return nn.GELU(approximate=layer.approximate)
    if isinstance(layer, L.ReLU):
        return nn.ReLU()
    if isinstance(layer, L.Dropout):
        return nn.Dropout(layer.p)
    if isinstance(layer, L.Sequential):
        return nn.Sequential(*[to_torch(child) for child in layer.layers])
    if isinstance(layer, L.Conv2d):
        return nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride, layer.padding,
                         bias=layer.bias)
    if isinstance(layer, L.MaxPool2d):
        return nn.MaxPool2d(layer.kernel_size, layer.stride)
    if isinstance(layer, L.GlobalAvgPool2d):
        return nn.AdaptiveAvgPool2d(1)
    if isinstance(layer, L.Flatten):
        return nn.Flatten()
    if isinstance(layer, L.CausalSelfAttention):
        return CausalSelfAttention(layer.d_model, layer.n_heads, layer.dropout)
    if isinstance(layer, L.TransformerBlock):
        return TransformerBlock(layer.d_model, layer.n_heads, layer.d_ff, layer.dropout, layer.gelu)
    if isinstance(layer, GPT):
        if layer.tie_head or layer.positions != layer.context:
            raise UnsupportedLayer("no torch module for a GPT with a tied head or more positions than its context "
                                   "(export its weights with repops_cupy.weights.save_weights(..., layout='gpt2'))")
        return TinyGPT(layer.vocab_size, layer.context, layer.d_model, layer.n_layers, layer.n_heads, layer.d_ff,
                       layer.dropout, layer.gelu)
    raise UnsupportedLayer(f"no torch module for {type(layer).__name__}")


def params_from_module(module: nn.Module) -> dict[str, np.ndarray]:
    """The module's parameters as float32 NumPy arrays, by state_dict name."""
    return {name: p.detach().to(torch.float32).cpu().numpy().copy() for name, p in module.state_dict().items()}


def load_into_module(module: nn.Module, params: Mapping[str, np.ndarray]) -> nn.Module:
    """Put weights into `module`; `params` may be a training state ("params/..." keys are taken)."""
    if any(k.startswith(PARAM_PREFIX) for k in params):
        params = {k[len(PARAM_PREFIX):]: v for k, v in params.items() if k.startswith(PARAM_PREFIX)}
    tensors = {name: torch.from_numpy(np.array(v, dtype=np.float32)) for name, v in params.items()}
    module.load_state_dict(tensors, strict=True)
    return module


def program_from_torch(module: nn.Module, spec):
    """A training program whose network and initial weights are those of `module`.

    `spec` (a JobSpec) gives the data, optimizer, seed and batch size; its [model]
    table is ignored.
    """
    from .train import TrainingProgram  # noqa: PLC0415 - train imports every operator module

    return TrainingProgram(spec, net=to_layer(module), initial_params=params_from_module(module))
