"""Training and auditing torch modules in rounding-log mode.

:class:`RoundLogTrainer` runs steps and returns ``(state_hash, log_bytes)``;
:class:`Auditor` replays a step from the same state with the trainer's log, on its
own configuration (thread count, product engine, micro-batching), and returns its
state hash, which equals the trainer's when replay is exact. Both are the same
:class:`_Run` with the engine in another mode.

One step ``i`` (1-based; state 0 is the initial one) on batch ``data.batch(i)``:

1. for each micro-batch: forward under :class:`.intercept.RoundingMode` (dropout
   masks keyed by the job seed and ``i``, see :mod:`.dropout`), per-row
   cross-entropy (``reduction="none"``, itself a site), backward with each row
   weighted by 1/(rows in the whole batch);
2. step sites: each parameter's gradient (float64 sums over all micro-batches) is
   rounded, then modules' ``step_end`` hooks (ghost batch-norm running stats), then
   the optimizer (gradient clipping first, if asked), every elementary result rounded;
3. the step's log is encoded, its digest joins the state hash.

Models with ``inplace=True`` layers are refused when the run is built.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .codec import StepLog
from .engine import RoundingEngine, RoundLogError, StepResult
from .intercept import RoundingMode, mark_batch
from .rounded_optim import Optimizer, build_optimizer
from .state import load_checkpoint, log_digest, save_checkpoint, state_hash, to_canonical
from .thresholds import Thresholds


@dataclass
class RunConfig:
    """How one party computes: none of this may change the result bits of a replayed step."""

    threads: int | None = None  # torch intra-op threads during the step (None: leave as is)
    site_digests: bool = False  # also hash every site's rounded values (locates an escaped flip)
    backend: str = "torch"  # matrix products: "torch" (MKL) or "numpy" (OpenBLAS)
    micro_batch: int | None = None  # examples per forward/backward pass (None: the whole batch)
    thresholds: Thresholds = field(default_factory=Thresholds.measured)


@contextlib.contextmanager
def _threads(n: int | None):
    """torch's intra-op threads and numba's (the project's operators, :mod:`.own_ops`; numba's
    setting is per thread) at ``n`` during a step."""
    if n is None:
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    numba = sys.modules.get("numba")  # imported by the compiled kernels where it is installed
    old_numba = numba.get_num_threads() if numba is not None else None
    if numba is not None:
        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        torch.set_num_threads(old)
        if numba is not None:
            numba.set_num_threads(old_numba)


def row_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per row (an image, or a token of a sequence), not reduced."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")


def refuse_inplace_modules(model: nn.Module) -> None:
    """Refuse, before any step, layers built with ``inplace=True`` (nn.ReLU, nn.Dropout...):
    an op that overwrites its input leaves nothing for the mode to round and log."""
    for path, m in model.named_modules():
        if getattr(m, "inplace", False) is True:
            raise RoundLogError(
                f"{path or '<model>'} ({type(m).__name__}) was built with inplace=True, which the rounding-log "
                f"mode cannot log: construct it with inplace=False (e.g. nn.{type(m).__name__}() without inplace=True)")


class _Run:
    """``seed`` is the job's: it keys the dropout masks; by default the data source's
    (built from the job seed)."""

    def __init__(self, mode: str, model_factory: Callable[[], nn.Module], optimizer_spec: Mapping,
                 data: Any, config: RunConfig | None = None, calib_source: "_Run | None" = None,
                 seed: int | None = None):
        self.config = config or RunConfig()
        self.data = data
        self.seed = int(seed if seed is not None else getattr(data, "seed", 0))
        self.model = model_factory().double()
        self.model.train()
        refuse_inplace_modules(self.model)
        self.module_paths = {id(m): path for path, m in self.model.named_modules()}
        with torch.no_grad():
            for p in self.model.parameters():
                p.copy_(p.to(torch.float32).to(torch.float64))  # start from float32 values
            for b in self.model.buffers():
                if b.is_floating_point():
                    b.copy_(b.to(torch.float32).to(b.dtype))
        self.params = dict(self.model.named_parameters())
        self.optimizer: Optimizer = build_optimizer(optimizer_spec, self.params)
        self.engine = RoundingEngine(mode, self.config.thresholds,
                                     calib_source.engine if calib_source is not None else None,
                                     site_digests=self.config.site_digests, seed=self.seed)
        self.step_done = 0
        self.last: StepResult | None = None
        self.last_log_hash: bytes | None = None
        self.last_loss = float("nan")

    # ---------------------------------------------------------------- state

    def named_state(self) -> dict[str, np.ndarray]:
        out = {f"param.{n}": to_canonical(p) for n, p in self.model.named_parameters()}
        out.update({f"buffer.{n}": to_canonical(b) for n, b in self.model.named_buffers()})
        out.update({k: to_canonical(v) for k, v in self.optimizer.named_state().items()})
        out["data.step"] = np.array(self.step_done, dtype=np.int64)
        return out

    def state_hash(self) -> bytes:
        return state_hash(self.named_state(), self.last_log_hash)

    def save_checkpoint(self, path: str | Path) -> bytes:
        digest = self.state_hash()
        save_checkpoint(Path(path), self.named_state(), self.step_done, digest, self.last_log_hash)
        return digest

    def load_checkpoint(self, path: str | Path) -> bytes:
        """Restore a saved state; returns its state hash (recomputed and checked)."""
        tensors, meta = load_checkpoint(Path(path))
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.copy_(torch.from_numpy(tensors[f"param.{n}"]).to(p.dtype))
            for n, b in self.model.named_buffers():
                b.copy_(torch.from_numpy(tensors[f"buffer.{n}"]).to(b.dtype))
        self.optimizer.load_named_state({k: torch.from_numpy(v) for k, v in tensors.items() if k.startswith("optim.")})
        self.step_done = int(tensors["data.step"])
        self.last_log_hash = bytes.fromhex(meta["log_digest"]) if meta.get("log_digest") else None
        digest = self.state_hash()
        if meta.get("state_hash") and digest.hex() != meta["state_hash"]:
            raise ValueError(f"checkpoint {path}: tensors hash to {digest.hex()}, metadata says {meta['state_hash']}")
        return digest

    # ---------------------------------------------------------------- one step

    def _run_step(self, i: int, log: StepLog | None) -> StepResult:
        if i != self.step_done + 1:
            raise ValueError(f"step {i} does not follow the current state (after step {self.step_done})")
        cfg, eng = self.config, self.engine
        x, y = self.data.batch(i)
        batch = x.shape[0]
        mb = cfg.micro_batch or batch
        if batch % mb:
            raise RoundLogError(f"micro-batch {mb} does not divide the batch {batch}")
        with _threads(cfg.threads):
            eng.begin_step(i, batch, log)
            for p in self.params.values():
                p.grad = None
            loss_sum = 0.0
            for o in range(0, batch, mb):
                eng.begin_pass(o, mb)
                xb, yb = mark_batch(x[o : o + mb]), mark_batch(y[o : o + mb])
                with RoundingMode(eng, cfg.backend, self.module_paths):
                    losses = row_losses(self.model(xb), yb)
                rows_total = losses.shape[0] * batch // mb
                losses.backward(torch.full_like(losses, 1.0 / rows_total))
                loss_sum += float(losses.detach().sum())
                eng.end_pass()
            self.last_loss = loss_sum / rows_total
            with torch.no_grad():
                for name, p in self.params.items():
                    g = p.grad if p.grad is not None else torch.zeros_like(p)
                    p.grad = eng.site("param_grad", g)
                rnd = lambda key, t, exact=False: eng.site(key, t, exact=exact)  # noqa: E731
                for m in self.model.modules():
                    if hasattr(m, "step_end"):
                        m.step_end(rnd)
                self.optimizer.step(rnd, eng.compiled_exact_sites())
            for p in self.params.values():
                p.grad = None
            result = eng.end_step()
        self.step_done = i
        self.last = result
        return result


class RoundLogTrainer(_Run):
    """Trains and logs: ``step(i) -> (state_hash, log_bytes)``."""

    def __init__(self, model_factory, optimizer_spec, data, config: RunConfig | None = None, seed: int | None = None):
        super().__init__("train", model_factory, optimizer_spec, data, config, seed=seed)

    def step(self, i: int) -> tuple[bytes, bytes]:
        result = self._run_step(i, None)
        log_bytes = result.log.encode()
        self.last_log_hash = log_digest(log_bytes)
        return self.state_hash(), log_bytes

    def site_digests(self) -> bytes:
        """The last step's per-site digests, 16 bytes each in stream order (``site_digests`` config)."""
        if self.last is None or self.last.site_digests is None:
            raise ValueError("no site digests: run with RunConfig(site_digests=True)")
        return b"".join(d for _, d in self.last.site_digests)


class Auditor(_Run):
    """Replays logged steps: ``replay_step(i, log_bytes) -> state_hash``.

    ``last`` holds the step's
    per-site tallies: corrections applied, implausible entries, margin breaches.
    """

    def __init__(self, model_factory, optimizer_spec, data, config: RunConfig | None = None, seed: int | None = None):
        super().__init__("replay", model_factory, optimizer_spec, data, config, seed=seed)

    def replay_step(self, i: int, log_bytes: bytes | None, apply_log: bool = True,
                    site_digests: bytes | None = None) -> bytes:
        """``apply_log=False`` rounds plainly but still commits to the log's digest, to show
        what replay without the decisions gives (the state hashes then compare tensors).

        ``site_digests`` (the trainer's :meth:`RoundLogTrainer.site_digests` for this step)
        makes the report name the first site whose rounded values differ: where a flip
        escaped the log. Needs ``config.site_digests``.
        """
        log = StepLog.decode(log_bytes) if log_bytes is not None and apply_log else None
        self._run_step(i, log)
        self.first_differing_site = None
        if site_digests is not None:
            mine = self.last.site_digests
            if mine is None:
                raise ValueError("comparing site digests needs RunConfig(site_digests=True)")
            theirs = [site_digests[j : j + 16] for j in range(0, len(site_digests), 16)]
            if len(theirs) != len(mine):
                self.first_differing_site = (min(len(theirs), len(mine)), "<site count differs>")
            else:
                self.first_differing_site = next(
                    ((j, key) for j, ((key, d), t) in enumerate(zip(mine, theirs)) if d != t), None)
        self.last_log_hash = log_digest(log_bytes) if log_bytes is not None else None
        return self.state_hash()

    def report(self) -> dict:
        r = self.last
        out = {k: r.total(k) for k in ("corrections", "implausible", "breaches", "entries", "rounded")}
        if getattr(self, "first_differing_site", None) is not None:
            out["first_differing_site"] = self.first_differing_site
        return out


@dataclass
class Calibration:
    """Per site key: the largest float64 disagreement ratio seen and the plain-rounding flips."""

    ratios: dict[str, float]
    flips: dict[str, int]
    rounded: dict[str, int]
    steps: int
    exact: set[str] = field(default_factory=set)

    def exactness_violations(self) -> list[str]:
        """Keys declared exact whose float64 values nevertheless differed."""
        return sorted(k for k in self.exact if self.ratios.get(k, 0.0) > 0.0)

    def merge(self, other: "Calibration") -> "Calibration":
        keys = set(self.ratios) | set(other.ratios)
        return Calibration(
            {k: max(self.ratios.get(k, 0.0), other.ratios.get(k, 0.0)) for k in keys},
            {k: self.flips.get(k, 0) + other.flips.get(k, 0) for k in keys},
            {k: self.rounded.get(k, 0) + other.rounded.get(k, 0) for k in keys},
            self.steps + other.steps, self.exact | other.exact)


def calibrate(model_factory, optimizer_spec, data, config_a: RunConfig, config_b: RunConfig,
              steps: int) -> Calibration:
    """Measure float64 disagreement between two configurations, op by op.

    Configuration A runs each step and records every site's float64 value; B runs
    the same step, compares its own float64 value at each site with A's (as a
    multiple of u times the chunk's largest |value|, the unit of :mod:`.thresholds`),
    then continues from A's rounded value, so every op of B sees exactly A's inputs
    and the measurement is of that op alone. ``flips`` counts elements whose plain
    float32 rounding differed, the decisions a log must carry.
    """
    a = _Run("calib_record", model_factory, optimizer_spec, data, config_a)
    b = _Run("calib_force", model_factory, optimizer_spec, data, config_b, calib_source=a)
    if a.state_hash() != b.state_hash():
        raise RoundLogError("calibration: the two configurations start from different states")
    ratios: dict[str, float] = {}
    flips: dict[str, int] = {}
    rounded: dict[str, int] = {}
    exact: set[str] = set()
    for i in range(1, steps + 1):
        a._run_step(i, None)
        b._run_step(i, None)
        for key, st in b.last.stats.items():
            ratios[key] = max(ratios.get(key, 0.0), st.max_ratio)
            flips[key] = flips.get(key, 0) + st.flips
            rounded[key] = rounded.get(key, 0) + st.rounded
            if st.exact:
                exact.add(key)
        if a.state_hash() != b.state_hash():
            raise RoundLogError(f"calibration: states differ after step {i} although B took A's values")
    return Calibration(ratios, flips, rounded, steps, exact)
