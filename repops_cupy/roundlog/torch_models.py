"""Example models of the rounding-log mode: a small CNN and a small GPT (the example
jobs), a residual MLP with layer norm and dropout, and a gate-by-gate GRU.

Plain ``nn.Module`` code; nothing here knows about rounding. Two choices make them
trainable under any micro-batching (see :mod:`.engine`):

- no op couples the examples of a batch except :class:`GhostBatchNorm2d`, whose
  statistics are taken over fixed groups of ``group`` examples (Hoffer et al.'s
  ghost batch norm), so a micro-batch that holds whole groups computes the same
  values as the full batch;
- its running statistics are not updated in the forward pass: each forward records
  its group statistics and :meth:`GhostBatchNorm2d.step_end` folds the step's
  groups into the running averages once per step, in group order.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class GhostBatchNorm2d(nn.Module):
    def __init__(self, channels: int, group: int = 4, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.channels, self.group, self.eps, self.momentum = channels, group, eps, momentum
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        if not self.training:
            scale = torch.rsqrt(self.running_var + self.eps)
            xhat = (x - self.running_mean.reshape(1, c, 1, 1)) * scale.reshape(1, c, 1, 1)
            return xhat * self.weight.reshape(1, c, 1, 1) + self.bias.reshape(1, c, 1, 1)
        if n % self.group:
            raise ValueError(f"batch of {n} is not a whole number of ghost groups of {self.group}")
        xg = x.reshape(n // self.group, self.group, c, h, w)
        mean = xg.mean(dim=(1, 3, 4), keepdim=True)
        xc = xg - mean
        var = (xc * xc).mean(dim=(1, 3, 4), keepdim=True)
        rstd = torch.rsqrt(var + self.eps)
        y = (xc * rstd).reshape(n, c, h, w)
        self._pending.append((mean.detach().reshape(-1, c), var.detach().reshape(-1, c), self.group * h * w))
        return y * self.weight.reshape(1, c, 1, 1) + self.bias.reshape(1, c, 1, 1)

    def step_end(self, round_site) -> None:
        """Fold this step's group statistics into the running averages (once per step).

        ``round_site(name, tensor, exact)`` rounds one step-level value (the trainer's
        rounding hook; the identity for plain training). The running variance is
        unbiased over the elements of a group and channel, as in ``nn.BatchNorm2d``.
        """
        if not self._pending:
            return
        means = torch.cat([p[0] for p in self._pending])
        vars_ = torch.cat([p[1] for p in self._pending])
        n_el = self._pending[0][2]
        self._pending = []
        m = self.momentum
        batch_mean = round_site("bn:mean_of_groups", means.mean(dim=0), False)
        batch_var = round_site("bn:mean_of_groups", vars_.mean(dim=0), False)
        unbiased = round_site("bn:update", batch_var * (n_el / (n_el - 1)), True)
        for buf, new in ((self.running_mean, batch_mean), (self.running_var, unbiased)):
            keep = round_site("bn:update", buf * (1.0 - m), True)
            blend = round_site("bn:update", new * m, True)
            buf.copy_(round_site("bn:update", keep + blend, True))


class SmallCNN(nn.Module):
    """Three conv(3x3, no bias) - ghost BN - ReLU - 2x2 max-pool stages, global average pool, linear."""

    def __init__(self, in_channels: int = 3, widths=(8, 16, 32), num_classes: int = 10, bn_group: int = 4):
        super().__init__()
        layers = []
        c = in_channels
        for w in widths:
            layers += [nn.Conv2d(c, w, 3, padding=1, bias=False), GhostBatchNorm2d(w, bn_group), nn.ReLU()]
            c = w
        self.stages = nn.ModuleList(layers)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(0, len(self.stages), 3):
            conv, bn, act = self.stages[i : i + 3]
            x = F.max_pool2d(act(bn(conv(x))), 2)
        return self.head(x.mean(dim=(2, 3)))


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        shape = (b, t, self.heads, d // self.heads)
        q, k, v = (z.reshape(shape).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """GPT-2 shaped: token + position embeddings, pre-LN blocks, final LN, linear head."""

    def __init__(self, vocab: int = 64, d: int = 64, heads: int = 4, layers: int = 2, block: int = 32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(block, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        nn.init.normal_(self.pos, std=0.02)
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:t]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


class ResidualMLP(nn.Module):
    """Flattened input, then pre-LN residual blocks (LayerNorm - linear - GELU - dropout -
    linear), a final LayerNorm and a linear head: layer norm, residual fan-in and dropout."""

    def __init__(self, in_features: int = 192, d: int = 64, blocks: int = 2, num_classes: int = 10,
                 dropout: float = 0.1):
        super().__init__()
        self.embed = nn.Linear(in_features, d)
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(blocks))
        self.ups = nn.ModuleList(nn.Linear(d, 2 * d) for _ in range(blocks))
        self.downs = nn.ModuleList(nn.Linear(2 * d, d) for _ in range(blocks))
        self.drop = nn.Dropout(dropout)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.flatten(1))
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            x = x + down(self.drop(F.gelu(up(norm(x)))))
        return self.head(self.ln_f(x))


class TinyGRU(nn.Module):
    """Token embedding, a GRU written out gate by gate (sigmoid, tanh, products, one step
    per position), functional dropout on its outputs, linear head. Written out rather than
    nn.GRU so that every gate is its own rounding site and its state is per example."""

    def __init__(self, vocab: int = 64, d: int = 32, dropout: float = 0.1):
        super().__init__()
        self.d, self.p = d, dropout
        self.tok = nn.Embedding(vocab, d)
        self.x_gates = nn.Linear(d, 3 * d)
        self.h_gates = nn.Linear(d, 3 * d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        xs = self.x_gates(self.tok(idx))  # (b, t, 3d): the input's share of every gate at once
        h = torch.zeros_like(xs[:, 0, : self.d])  # from a batch tensor: one state per example
        outs = []
        for s in range(t):
            xr, xz, xn = xs[:, s].split(self.d, dim=1)
            hr, hz, hn = self.h_gates(h).split(self.d, dim=1)
            r = torch.sigmoid(xr + hr)
            z = torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = n + z * (h - n)  # (1 - z) * n + z * h
            outs.append(h)
        y = F.dropout(torch.stack(outs, dim=1), self.p, self.training)
        return self.head(y)
