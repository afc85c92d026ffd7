"""A small decoder-only transformer language model (GPT-style, pre-norm, untied head)."""
from __future__ import annotations

from dataclasses import dataclass

from ..graph import Tensor
from .layers import Dropout, Embedding, ForwardContext, Layer, LayerNorm, Linear, Sequential, TransformerBlock

INIT_STD = 0.02  # GPT-2's initialisation of weights and embeddings


@dataclass
class GPT(Layer):
    """Token and position embeddings, `n_layers` transformer blocks, final norm, linear head.

    Input: token ids (B, T) with T == context; output: logits (B, T, vocab_size).
    """

    vocab_size: int
    context: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    dropout: float = 0.0
    gelu: str = "tanh"

    def __post_init__(self) -> None:
        self._parts = {
            "wte": Embedding(self.vocab_size, self.d_model, init_std=INIT_STD),
            "wpe": Embedding(self.context, self.d_model, init_std=INIT_STD),
            "drop": Dropout(self.dropout),
            "blocks": Sequential([
                TransformerBlock(self.d_model, self.n_heads, self.d_ff, self.dropout, self.gelu, INIT_STD)
                for _ in range(self.n_layers)
            ]),
            "ln_f": LayerNorm(self.d_model),
            "head": Linear(self.d_model, self.vocab_size, init_std=INIT_STD),
        }

    def children(self) -> list[tuple[str, Layer]]:
        return list(self._parts.items())

    def forward(self, ctx: ForwardContext, prefix: str, ids: Tensor) -> Tensor:
        if ids.ndim != 2 or ids.shape[1] != self.context:
            raise ValueError(f"GPT input must be token ids of shape (B, {self.context}), got {ids.shape}")
        b, p = ctx.b, self._parts
        x = p["wte"].forward(ctx, prefix + "wte.", ids)
        # every batch row spans the whole context, so the position table is added whole
        x = b.op("add", x, ctx.param(prefix + "wpe.weight"))
        x = p["drop"].forward(ctx, prefix + "drop.", x)
        x = p["blocks"].forward(ctx, prefix + "blocks.", x)
        x = p["ln_f"].forward(ctx, prefix + "ln_f.", x)
        return p["head"].forward(ctx, prefix + "head.", x)
