"""Matrix products through NumPy (OpenBLAS) instead of torch (MKL), forward and backward.

A second float64 product engine, to measure and test against: the same maths as
``F.linear``, ``torch.matmul``, ``F.conv2d`` (as unfold + product) and
``F.scaled_dot_product_attention`` (as product, softmax, product), with every
matrix product done by ``np.matmul``. Everything else (unfold/fold, softmax, the
reductions that fold broadcast gradients back) stays in torch. Used by
:mod:`.intercept` inside one rounding site, so the site structure of a step is the
same whichever engine computes the products.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _mT(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


class NumpyMatmul(torch.autograd.Function):
    """a @ b for a, b of rank >= 2 with broadcast batch dimensions."""

    @staticmethod
    def forward(ctx, a, b):
        if a.dim() < 2 or b.dim() < 2:
            raise ValueError("NumpyMatmul needs operands of rank >= 2")
        ctx.save_for_backward(a, b)
        return torch.from_numpy(np.matmul(_np(a), _np(b)))  # reprod-ok: a second float64 engine inside a rounding site

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        gn = _np(g)
        ga = gb = None
        if ctx.needs_input_grad[0]:
            ga = torch.from_numpy(np.matmul(gn, _mT(_np(b)))).sum_to_size(a.shape)  # reprod-ok: as forward
        if ctx.needs_input_grad[1]:
            gb = torch.from_numpy(np.matmul(_mT(_np(a)), gn)).sum_to_size(b.shape)  # reprod-ok: as forward
        return ga, gb


def matmul(a, b):
    if a.dim() == 1 or b.dim() == 1:
        # vector cases: lift to matrices so one code path serves
        out = NumpyMatmul.apply(a.unsqueeze(0) if a.dim() == 1 else a, b.unsqueeze(-1) if b.dim() == 1 else b)
        if a.dim() == 1:
            out = out.squeeze(-2)
        if b.dim() == 1:
            out = out.squeeze(-1)
        return out
    return NumpyMatmul.apply(a, b)


def linear(x, weight, bias=None):
    out = NumpyMatmul.apply(x, weight.t())
    return out + bias if bias is not None else out


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if groups != 1:
        raise ValueError("the NumPy conv2d route supports groups=1 only")
    if isinstance(padding, str):
        raise ValueError("the NumPy conv2d route needs numeric padding")
    n, _, h, w = x.shape
    cout, _, kh, kw = weight.shape
    st = (stride, stride) if isinstance(stride, int) else tuple(stride)
    pd = (padding, padding) if isinstance(padding, int) else tuple(padding)
    dl = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
    cols = F.unfold(x, (kh, kw), dilation=dl, padding=pd, stride=st)  # (n, c*kh*kw, L), exact copies
    out = NumpyMatmul.apply(weight.reshape(cout, -1), cols)  # (n, cout, L)
    ho = (h + 2 * pd[0] - dl[0] * (kh - 1) - 1) // st[0] + 1
    wo = (w + 2 * pd[1] - dl[1] * (kw - 1) - 1) // st[1] + 1
    out = out.reshape(n, cout, ho, wo)
    return out + bias.reshape(1, cout, 1, 1) if bias is not None else out


def scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if dropout_p != 0.0 or enable_gqa:
        raise ValueError("the NumPy attention route supports dropout_p=0 and no GQA")
    s = NumpyMatmul.apply(q, k.transpose(-2, -1)) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    lq, lk = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = torch.ones(lq, lk, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return NumpyMatmul.apply(torch.softmax(s, dim=-1), v)


ROUTES = {
    "linear": linear,
    "matmul": matmul,
    "mm": matmul,
    "bmm": matmul,
    "conv2d": conv2d,
    "scaled_dot_product_attention": scaled_dot_product_attention,
}


class NumpyProducts(TorchFunctionMode):
    """Plain (unrounded) training with the products routed through NumPy: the baseline
    that shows how much a change of BLAS alone moves ordinary float32/float64 training."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        key = {"__matmul__": "matmul", "__rmatmul__": "matmul"}.get(name, name)
        route = ROUTES.get(key)
        if route is None:
            return func(*args, **kwargs)
        if name == "__rmatmul__":
            args = (args[1], args[0]) + tuple(args[2:])
        return route(*args, **kwargs)
