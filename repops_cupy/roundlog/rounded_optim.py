"""SGD with momentum and AdamW in float64, every elementary result rounded to float32.

Written out op by op (no torch.optim, whose internal order may change between
versions): each line is one correctly rounded float64 operation on float32-valued
operands, then a rounding site. Such a composition gives the same bits on every
machine, so the sites are marked exact and never logged; they still round, so the
optimizer state stays float32-valued. Powers of the betas are built by repeated
multiplication, not ``**`` (libm ``pow`` is not correctly rounded everywhere).

The parameters that take the same ops (those with weight decay, those without) are
updated together, as one flat float64 tensor each: every element goes through the same
operations on the same operands, so the values are those of a per-parameter loop, with
a rounding site per operation and group instead of per operation and parameter. The
sites are exact and come last in the step's stream, so only their total length counts.

``clip_grad_norm`` (both optimizers) scales the gradients as
``torch.nn.utils.clip_grad_norm_`` does, with a norm whose bits cannot vary: see
:meth:`Optimizer.clip_gradients`.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np
import torch

RoundSite = Callable[[str, torch.Tensor, bool], torch.Tensor]


def _f32(x: float) -> float:
    """The float32 value nearest a float64 one (ties to even)."""
    return float(np.float32(x))


def exact_grad_norm(grads: list[torch.Tensor]) -> float:
    """sqrt of the sum of squares of float32-valued gradients, correctly rounded to float64.

    A float32 value squared is exact in float64 (two 24-bit significands make 48 bits);
    ``math.fsum`` returns the correctly rounded sum, whatever the order or the machine;
    ``math.sqrt`` is correctly rounded (IEEE). No BLAS, no reduction tree: the same bits
    everywhere.
    """
    total = math.fsum(math.fsum((g.detach().numpy().reshape(-1) ** 2).tolist()) for g in grads)
    return math.sqrt(total)


def _power(base: float, n: int) -> float:
    out = 1.0
    for _ in range(n):
        out = out * base
    return out


class Optimizer:
    """Named float64 state tensors per parameter plus an integer step count."""

    slots: tuple[str, ...] = ()

    def __init__(self, params: Mapping[str, torch.nn.Parameter], **hyper):
        self.params = dict(sorted(params.items()))
        self.hyper = hyper
        self.steps = 0
        self.state = {name: {s: torch.zeros_like(p, dtype=torch.float64) for s in self.slots}
                      for name, p in self.params.items()}

    def clip_gradients(self, rnd: RoundSite) -> None:
        """torch.nn.utils.clip_grad_norm_'s rule: coef = max_norm / (norm + 1e-6), applied when
        below 1. The norm is exact (:func:`exact_grad_norm`) and each scalar step is one
        correctly rounded operation rounded to float32, so the coefficient is the same bits
        on every machine; each gradient times it is an exact site."""
        max_norm = self.hyper.get("clip_grad_norm")
        self.last_grad_norm = None
        if not max_norm:
            return
        norm = _f32(exact_grad_norm([p.grad for p in self.params.values()]))
        self.last_grad_norm = norm
        coef = _f32(max_norm / _f32(norm + 1e-6))
        if coef < 1.0:
            for p in self.params.values():
                p.grad = rnd("optim:clip", p.grad * coef, True)

    def decays(self, name: str, p: torch.Tensor) -> bool:
        return self.hyper.get("decay_all", False) or p.dim() >= 2

    def groups(self) -> list[tuple[bool, list[str]]]:
        """(decays, parameter names in name order): the parameters that take the same ops."""
        split = {True: [], False: []}
        for name, p in self.params.items():
            split[self.decays(name, p)].append(name)
        return [(flag, names) for flag, names in split.items() if names]

    def gather(self, names: list[str], slot: str | None = None) -> torch.Tensor:
        """The parameters (slot None), their gradients ("grad") or a state slot of `names`, as one flat tensor."""
        parts = [(self.params[n] if slot is None else self.params[n].grad if slot == "grad" else self.state[n][slot])
                 for n in names]
        return torch.cat([t.reshape(-1) for t in parts]) if len(parts) > 1 else parts[0].reshape(-1)

    def scatter(self, names: list[str], params: torch.Tensor | None = None, **slots: torch.Tensor) -> None:
        """Write flat results back: new parameter values (copied in), state slots (views of the flat tensor)."""
        at = 0
        for n in names:
            p = self.params[n]
            span = slice(at, at + p.numel())
            at = span.stop
            if params is not None:
                p.copy_(params[span].view_as(p))
            for slot, flat in slots.items():
                self.state[n][slot] = flat[span].view(p.shape)

    def named_state(self) -> dict[str, torch.Tensor]:
        out = {f"optim.{n}.{s}": t for n, st in self.state.items() for s, t in st.items()}
        out["optim.steps"] = torch.tensor(self.steps, dtype=torch.int64)
        return out

    def load_named_state(self, tensors: Mapping[str, torch.Tensor]) -> None:
        for n, st in self.state.items():
            for s in st:
                st[s] = tensors[f"optim.{n}.{s}"].to(torch.float64).clone()
        self.steps = int(tensors["optim.steps"])


class SGDMomentum(Optimizer):
    """buf = momentum*buf + g (buf starts at zero, so step 1 gives buf = g); p -= lr*buf."""

    slots = ("momentum",)

    def step(self, rnd: RoundSite) -> None:
        lr, mu, wd = self.hyper["lr"], self.hyper.get("momentum", 0.9), self.hyper.get("weight_decay", 0.0)
        self.steps += 1
        with torch.no_grad():
            self.clip_gradients(rnd)
            for decays, names in self.groups():
                p, g, buf = self.gather(names), self.gather(names, "grad"), self.gather(names, "momentum")
                if wd and decays:
                    g = rnd("optim:sgd", g + rnd("optim:sgd", p * wd, True), True)
                buf = rnd("optim:sgd", rnd("optim:sgd", buf * mu, True) + g, True)
                p = rnd("optim:sgd", p - rnd("optim:sgd", buf * lr, True), True)
                self.scatter(names, p, momentum=buf)


class AdamW(Optimizer):
    """Decoupled weight decay, then Adam with bias correction (Loshchilov & Hutter)."""

    slots = ("exp_avg", "exp_avg_sq")

    def step(self, rnd: RoundSite) -> None:
        h = self.hyper
        lr, (b1, b2), eps, wd = h["lr"], h.get("betas", (0.9, 0.999)), h.get("eps", 1e-8), h.get("weight_decay", 0.01)
        self.steps += 1
        bc1, bc2 = 1.0 - _power(b1, self.steps), 1.0 - _power(b2, self.steps)
        with torch.no_grad():
            self.clip_gradients(rnd)
            for decays, names in self.groups():
                p, g = self.gather(names), self.gather(names, "grad")
                if wd and decays:
                    p = rnd("optim:adamw", p - rnd("optim:adamw", p * (lr * wd), True), True)
                m = rnd("optim:adamw", rnd("optim:adamw", self.gather(names, "exp_avg") * b1, True)
                        + rnd("optim:adamw", g * (1.0 - b1), True), True)
                g2 = rnd("optim:adamw", g * g, True)
                v = rnd("optim:adamw", rnd("optim:adamw", self.gather(names, "exp_avg_sq") * b2, True)
                        + rnd("optim:adamw", g2 * (1.0 - b2), True), True)
                m_hat = rnd("optim:adamw", m / bc1, True)
                v_hat = rnd("optim:adamw", v / bc2, True)
                denom = rnd("optim:adamw", rnd("optim:adamw", v_hat.sqrt(), True) + eps, True)
                upd = rnd("optim:adamw", m_hat / denom, True)
                p = rnd("optim:adamw", p - rnd("optim:adamw", upd * lr, True), True)
                self.scatter(names, p, exp_avg=m, exp_avg_sq=v)


OPTIMIZERS = {"sgd": SGDMomentum, "adamw": AdamW}


def build_optimizer(spec: Mapping, params: Mapping[str, torch.nn.Parameter]) -> Optimizer:
    spec = dict(spec)
    kind = spec.pop("name", spec.pop("kind", None))
    if kind not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {kind!r}; supported: {sorted(OPTIMIZERS)}")
    if "betas" in spec:
        spec["betas"] = tuple(spec["betas"])
    return OPTIMIZERS[kind](params, **spec)
