"""A decoder-only transformer language model (GPT-2 style, pre-norm).

Options that make it GPT-2 itself (`scripts/jobs/gpt2-small.toml`): ``tie_head`` (the
output head is the token embedding, no head bias) and ``n_positions`` (a position table
longer than the training context; the first ``context`` rows are used). Weights in
GPT-2's own layout load through `repops_cupy.weights`.
"""
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
    tie_head: bool = False
    n_positions: int = 0  # 0: the context

    def __post_init__(self) -> None:
        self.positions = self.n_positions or self.context
        if self.positions < self.context:
            raise ValueError(f"n_positions ({self.positions}) must be at least the context ({self.context})")
        self._parts = {
            "wte": Embedding(self.vocab_size, self.d_model, init_std=INIT_STD),
            "wpe": Embedding(self.positions, self.d_model, init_std=INIT_STD),
            "drop": Dropout(self.dropout),
            "blocks": Sequential([
                TransformerBlock(self.d_model, self.n_heads, self.d_ff, self.dropout, self.gelu, INIT_STD)
                for _ in range(self.n_layers)
            ]),
            "ln_f": LayerNorm(self.d_model),
        }
        if not self.tie_head:
            self._parts["head"] = Linear(self.d_model, self.vocab_size, init_std=INIT_STD)

    def children(self) -> list[tuple[str, Layer]]:
        return list(self._parts.items())

    def forward(self, ctx: ForwardContext, prefix: str, ids: Tensor) -> Tensor:
        if ids.ndim != 2 or ids.shape[1] != self.context:
            raise ValueError(f"GPT input must be token ids of shape (B, {self.context}), got {ids.shape}")
        b, p = ctx.b, self._parts
        x = p["wte"].forward(ctx, prefix + "wte.", ids)
        # every batch row spans the whole context, so the position table (its first rows) is added whole
        x = b.op("add", x, self._positions(ctx, ctx.param(prefix + "wpe.weight")))
        x = p["drop"].forward(ctx, prefix + "drop.", x)
        x = p["blocks"].forward(ctx, prefix + "blocks.", x)
        x = p["ln_f"].forward(ctx, prefix + "ln_f.", x)
        if not self.tie_head:
            return p["head"].forward(ctx, prefix + "head.", x)
        batch, t, d = x.shape
        flat = b.op("reshape", x, shape=(-1, d))
        logits = b.op("matmul", flat, ctx.param(prefix + "wte.weight"), transpose_b=True)
        return b.op("reshape", logits, shape=(batch, t, self.vocab_size))

    def _positions(self, ctx: ForwardContext, wpe: Tensor) -> Tensor:
        """Rows [0, context) of the position table.

        There is no slicing operator; the rows are picked by a 0/1 selection matrix S
        (context, n_positions), S[i, j] = [i == j], made from constants by two causal
        masks. S @ wpe is exact: each output is one product by 1 plus zeros, and the
        matmul rounds once; its backward (S^T @ g) is exact as well.
        """
        if self.positions == self.context:
            return wpe
        b, t, n = ctx.b, self.context, self.positions
        ones = b.op("full", shape=(t, n), value=1.0, dtype="float32")
        lower = b.op("causal_mask", ones, fill=0.0)  # [j <= i]
        ones_t = b.op("full", shape=(n, t), value=1.0, dtype="float32")
        upper = b.op("transpose", b.op("causal_mask", ones_t, fill=0.0), perm=(1, 0))  # [i <= j]
        select = b.op("mul", lower, upper)
        return b.op("matmul", select, wpe)
