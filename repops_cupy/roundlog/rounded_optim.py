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

The op-by-op code is the specification. Where the engine allows it (its
``compiled_exact_sites``: the compiled kernels on, no site digests, no calibration), a
group's update runs instead as one loop compiled by numba without fastmath
(``_sgd_update``, ``_adamw_update``): per element the same IEEE operations on the same
operands in the same order, each result rounded to float32 where the specification
rounds it, so the same bits; the engine then counts the same exact sites. One pass over
the group instead of a dozen torch ops and as many rounding sites, each a pass of its own.
"""
from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np
import torch

from ..cpu_kernels.compiler import AVAILABLE

RoundSite = Callable[[str, torch.Tensor, bool], torch.Tensor]
ExactSites = Callable[[str, int, int], None]  # (key, values per site, sites): the engine's compiled_exact_sites()

if AVAILABLE:
    from ..cpu_kernels.compiler import function, scalar

    @scalar
    def _r(x):  # pragma: no cover - compiled
        return np.float64(np.float32(x))

    @function
    def _sgd_update(p, g, buf, decay, wd, mu, lr, p_out, buf_out):  # pragma: no cover - compiled
        """SGDMomentum.step's operations per element (4 rounding sites, 6 with weight decay)."""
        for i in range(p.size):
            x, gi = p[i], g[i]
            if decay:
                gi = _r(gi + _r(x * wd))
            b = _r(_r(buf[i] * mu) + gi)
            p_out[i], buf_out[i] = _r(x - _r(b * lr)), b

    @function
    def _adamw_update(p, g, m, v, decay, lrwd, b1, omb1, b2, omb2, bc1, bc2, eps, lr,
                      p_out, m_out, v_out):  # pragma: no cover - compiled
        """AdamW.step's operations per element (14 rounding sites, 16 with weight decay)."""
        for i in range(p.size):
            x, gi = p[i], g[i]
            if decay:
                x = _r(x - _r(x * lrwd))
            mi = _r(_r(m[i] * b1) + _r(gi * omb1))
            vi = _r(_r(v[i] * b2) + _r(_r(gi * gi) * omb2))
            denom = _r(_r(np.sqrt(_r(vi / bc2))) + eps)
            p_out[i], m_out[i], v_out[i] = _r(x - _r(_r(_r(mi / bc1) / denom) * lr)), mi, vi


def _flat(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().numpy())


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

    def step(self, rnd: RoundSite, compiled: ExactSites | None = None) -> None:
        lr, mu, wd = self.hyper["lr"], self.hyper.get("momentum", 0.9), self.hyper.get("weight_decay", 0.0)
        self.steps += 1
        with torch.no_grad():
            self.clip_gradients(rnd)
            for decays, names in self.groups():
                if compiled is not None:
                    p, g, buf = (_flat(self.gather(names, slot)) for slot in (None, "grad", "momentum"))
                    p_out, buf_out = np.empty_like(p), np.empty_like(p)
                    _sgd_update(p, g, buf, bool(wd and decays), wd, mu, lr, p_out, buf_out)
                    compiled("optim:sgd", p.size, 6 if wd and decays else 4)
                    self.scatter(names, torch.from_numpy(p_out), momentum=torch.from_numpy(buf_out))
                    continue
                p, g, buf = self.gather(names), self.gather(names, "grad"), self.gather(names, "momentum")
                if wd and decays:
                    g = rnd("optim:sgd", g + rnd("optim:sgd", p * wd, True), True)
                buf = rnd("optim:sgd", rnd("optim:sgd", buf * mu, True) + g, True)
                p = rnd("optim:sgd", p - rnd("optim:sgd", buf * lr, True), True)
                self.scatter(names, p, momentum=buf)


class AdamW(Optimizer):
    """Decoupled weight decay, then Adam with bias correction (Loshchilov & Hutter)."""

    slots = ("exp_avg", "exp_avg_sq")

    def step(self, rnd: RoundSite, compiled: ExactSites | None = None) -> None:
        h = self.hyper
        lr, (b1, b2), eps, wd = h["lr"], h.get("betas", (0.9, 0.999)), h.get("eps", 1e-8), h.get("weight_decay", 0.01)
        self.steps += 1
        bc1, bc2 = 1.0 - _power(b1, self.steps), 1.0 - _power(b2, self.steps)
        with torch.no_grad():
            self.clip_gradients(rnd)
            for decays, names in self.groups():
                if compiled is not None:
                    p, g, m, v = (_flat(self.gather(names, slot)) for slot in (None, "grad", "exp_avg", "exp_avg_sq"))
                    outs = [np.empty_like(p) for _ in range(3)]
                    _adamw_update(p, g, m, v, bool(wd and decays), lr * wd, b1, 1.0 - b1, b2, 1.0 - b2, bc1, bc2,
                                  eps, lr, *outs)
                    compiled("optim:adamw", p.size, 16 if wd and decays else 14)
                    p_out, m_out, v_out = (torch.from_numpy(o) for o in outs)
                    self.scatter(names, p_out, exp_avg=m_out, exp_avg_sq=v_out)
                    continue
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
