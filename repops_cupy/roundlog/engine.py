"""Rounding sites, their canonical stream layout, and the per-step log bookkeeping.

Every value a rounding-log run produces passes through :meth:`RoundingEngine.site`
(op outputs and input gradients via :mod:`.intercept`, parameter gradients and
optimizer arithmetic via the trainer). A site is one tensor at one place of the
step's program. The step's sites form one *canonical stream*:

- *pass sites* come from the forward and backward pass over a batch. Whole-batch
  layout: when a party splits the batch into micro-batches it runs the pass once
  per micro-batch, and the site of micro-batch at example offset ``o`` covers the
  elements ``o * numel/b ... (o+b) * numel/b`` of the whole-batch site (``b`` the
  micro-batch size, dim 0 scaling with the batch: ``r`` rows per example or one row
  per ``g`` examples). Sites whose tensor does not depend on the batch (*shared*)
  appear once and are recomputed identically by every micro-batch.
- *step sites* come after all passes: parameter gradients, optimizer arithmetic,
  running statistics.

So a log's positions mean the same values whatever micro-batching the trainer or
the auditor used. The engine runs in one of four modes: ``train`` (decide and
record entries), ``replay`` (apply a log), ``calib_record`` and ``calib_force``
(measure float64 disagreement between two configurations, see :mod:`.thresholds`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import blake3
import numpy as np
import torch

from . import dropout, rounding, site_kernel
from .codec import LogFormatError, StepLog
from .rounding import F32, F64, UNIT_ROUNDOFF_F64, Decisions
from .thresholds import Thresholds


class RoundLogError(RuntimeError):
    """The program cannot run in rounding-log mode as written (unsupported op, layout)."""


EXAMPLE, SHARED, STEP = "example", "shared", "step"
_EMPTY_POS = torch.zeros(0, dtype=torch.int64)
_NO_ENTRIES = Decisions(_EMPTY_POS, torch.zeros(0, dtype=torch.bool), _EMPTY_POS, torch.zeros(0, dtype=F32))
_NO_ENTRIES_NP = (np.zeros(0, np.int64), np.zeros(0, np.bool_), np.zeros(0, np.int64), np.zeros(0, np.float32))


@dataclass
class SiteInfo:
    key: str
    kind: str
    base: int  # first canonical stream position
    canonical_numel: int
    chunk_numel: int  # elements per disagreement-scale chunk (one example, one example group, or all)


@dataclass
class SiteStats:
    """Per-key tallies over a step (or a calibration run)."""

    rounded: int = 0
    entries: int = 0
    value_entries: int = 0
    corrections: int = 0
    implausible: int = 0
    breaches: int = 0
    max_ratio: float = 0.0  # calibration: max |v_A - v_B| / (u * chunk max|v|)
    flips: int = 0  # calibration: elements whose plain float32 rounding differs between configs
    exact: bool = False  # the site was declared exact (never logged)


@dataclass
class StepResult:
    log: StepLog | None
    stats: dict[str, SiteStats] = field(default_factory=dict)
    # per site in stream order: (key, 16-byte BLAKE3 of its float32 values in canonical
    # layout), when the engine was asked to record them
    site_digests: list[tuple[str, bytes]] | None = None

    def total(self, attr: str) -> int:
        return sum(getattr(s, attr) for s in self.stats.values())


class RoundingEngine:
    def __init__(self, mode: str, thresholds: Thresholds, calib_source: "RoundingEngine | None" = None,
                 site_digests: bool = False, seed: int = 0):
        if mode not in ("train", "replay", "calib_record", "calib_force"):
            raise ValueError(f"unknown engine mode {mode!r}")
        if (mode == "calib_force") != (calib_source is not None):
            raise ValueError("calib_force needs the calib_record engine it compares with, and only it does")
        self.mode = mode
        self.thresholds = thresholds
        self.calib_source = calib_source
        self.record_site_digests = site_digests
        self.seed = seed  # the job's: keys the dropout masks
        self.compiled = True  # round through site_kernel where numba is there (same bits; tests compare)
        self._calib_store: dict = {}

    # ------------------------------------------------------------ step / pass structure

    def begin_step(self, step: int, batch_size: int, log: StepLog | None = None) -> None:
        self.step = step
        self.batch_size = batch_size
        self.pass_sites: list[SiteInfo] = []
        self.pass_total = 0
        self.pass_index = -1
        self.step_sites: list[SiteInfo] = []
        self._pass_cursor = 0  # canonical size of the pass sites seen so far (first micro-batch)
        self._step_cursor = 0  # canonical size of the step sites so far
        self.stats: dict[str, SiteStats] = {}
        self._betas: dict[str, float] = {}  # beta per key, looked up once a step
        self._kernel = self.compiled and site_kernel.active()  # read once a step, not per site
        self._bits: list[tuple[np.ndarray, np.ndarray]] = []
        self._values: list[tuple[np.ndarray, np.ndarray]] = []
        self._in_pass = False
        self._digest_bufs: dict[int, torch.Tensor] = {}
        if self.mode == "replay":
            if log is None:
                log = StepLog(step=step, stream_length=0)
                self._check_length = False
            else:
                self._check_length = True
                if log.step != step:
                    raise LogFormatError(f"log is for step {log.step}, replaying step {step}")
            self.log = log
        if self.mode == "calib_record":
            self._calib_store = {}

    def begin_pass(self, offset: int, size: int) -> None:
        if size <= 0 or offset < 0 or offset + size > self.batch_size:
            raise RoundLogError(f"micro-batch [{offset}, {offset + size}) outside batch {self.batch_size}")
        self.pass_index += 1
        self._offset, self._mb = offset, size
        self._site_counter = 0
        self._dropout_calls = 0
        self._in_pass = True

    def end_pass(self) -> None:
        if self.pass_index > 0 and self._site_counter != len(self.pass_sites):
            raise RoundLogError(
                f"micro-batch {self.pass_index} visited {self._site_counter} sites, the first visited {len(self.pass_sites)}")
        if self.pass_index == 0:
            self.pass_total = self._pass_cursor
        self._in_pass = False

    def end_step(self) -> StepResult:
        length = self._stream_length()
        if self.mode == "train":
            log = StepLog(step=self.step, stream_length=length)
            if self._bits:
                pos = np.concatenate([p for p, _ in self._bits])
                up = np.concatenate([u for _, u in self._bits])
                order = np.argsort(pos, kind="stable")
                log.bit_pos, log.bit_up = pos[order].astype(np.uint64), up[order]
            if self._values:
                pos = np.concatenate([p for p, _ in self._values])
                val = np.concatenate([v for _, v in self._values])
                order = np.argsort(pos, kind="stable")
                log.value_pos, log.value = pos[order].astype(np.uint64), val[order]
            if np.unique(np.concatenate([log.bit_pos, log.value_pos])).size != log.entries:
                raise RoundLogError("two entries at one stream position (a site was logged twice)")
            return StepResult(log, self.stats, self._site_digests())
        if self.mode == "replay" and self._check_length and length != self.log.stream_length:
            raise LogFormatError(
                f"step {self.step}: the log covers {self.log.stream_length} rounded values, this replay produced {length}")
        return StepResult(None, self.stats, self._site_digests())

    def _site_digests(self) -> list[tuple[str, bytes]] | None:
        if not self.record_site_digests:
            return None
        return [(info.key, blake3.blake3(self._digest_bufs[info.base].numpy().tobytes()).digest(16))
                for info in self.pass_sites + self.step_sites]

    def _stream_length(self) -> int:
        return self.pass_total + self._step_cursor

    def dropout_factor(self, t: torch.Tensor, p: float, batch_dependent: bool) -> torch.Tensor:
        """The factors (0 or 1/(1-p)) of this pass's next dropout call, shaped as ``t``:
        this micro-batch's part of the whole-batch mask (see :mod:`.dropout`)."""
        if not self._in_pass:
            raise RoundLogError("dropout outside a forward pass of a rounding-log step")
        call = self._dropout_calls
        self._dropout_calls += 1
        n, b = t.numel(), self._mb
        start = 0
        if batch_dependent:
            if t.dim() == 0 or t.shape[0] % b:
                raise RoundLogError(f"dropout on a tensor of shape {tuple(t.shape)}: dim 0 does not hold the "
                                    f"micro-batch's {b} examples, so its mask cannot follow the whole batch")
            start = self._offset * (n // b)
        return dropout.mask_factor(self.seed, self.step, call, p, start, n).reshape(t.shape)

    # ------------------------------------------------------------ layout

    def _layout(self, key: str, t: torch.Tensor, batch_dependent: bool) -> tuple[SiteInfo, int]:
        """The site's info and the canonical position of this tensor's first element."""
        n = t.numel()
        if not self._in_pass:
            info = self._step_layout(key, n)
            return info, info.base
        i = self._site_counter
        self._site_counter += 1
        b, o, batch = self._mb, self._offset, self.batch_size
        if batch_dependent:
            kind = EXAMPLE
            d0 = t.shape[0] if t.dim() else 0
            if d0 and d0 % b == 0:
                chunk = n // b
                start = o * chunk
            elif d0 and b % d0 == 0 and o % (b // d0) == 0:
                g = b // d0  # one row per g examples (e.g. ghost batch-norm statistics)
                chunk = n // d0
                start = (o // g) * chunk
            else:
                raise RoundLogError(
                    f"site {i} ({key}): batch-dependent tensor of shape {tuple(t.shape)} does not split by "
                    f"examples along dim 0 for micro-batch {b} at offset {o}")
            canonical = chunk * batch if d0 % b == 0 else chunk * (batch // (b // d0))
        else:
            kind, chunk, start, canonical = SHARED, max(n, 1), 0, n
        if self.pass_index == 0:
            base = self._pass_cursor
            self._pass_cursor += canonical
            info = SiteInfo(key, kind, base, canonical, chunk)
            self.pass_sites.append(info)
        else:
            if i >= len(self.pass_sites):
                raise RoundLogError(f"micro-batch {self.pass_index} has more rounding sites than the first")
            info = self.pass_sites[i]
            if (info.key, info.kind, info.canonical_numel, info.chunk_numel) != (key, kind, canonical, chunk):
                raise RoundLogError(f"site {i} differs between micro-batches: {info} vs {key} {kind} {canonical}")
        return info, info.base + start

    def _step_layout(self, key: str, n: int) -> SiteInfo:
        info = SiteInfo(key, STEP, self.pass_total + self._step_cursor, n, max(n, 1))
        self._step_cursor += n
        self.step_sites.append(info)
        return info

    def compiled_exact_sites(self):
        """Where a compiled kernel may round a run of exact step sites itself (the rounded
        optimizers' update): a function ``(key, numel, count)`` that lays out and counts ``count``
        such sites of ``numel`` values each, as ``count`` calls of :meth:`site` with ``exact``
        would. None where every site's values must pass through :meth:`site`: without the
        compiled kernels, with site digests, in calibration."""
        if not self._kernel or self.record_site_digests or self.mode not in ("train", "replay"):
            return None
        return self._exact_sites

    def _exact_sites(self, key: str, numel: int, count: int) -> None:
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = SiteStats()
        for _ in range(count):
            self._step_layout(key, numel)
        st.rounded += numel * count
        st.exact = True

    # ------------------------------------------------------------ the site

    def site(self, key: str, v: torch.Tensor, batch_dependent: bool = False, exact: bool = False) -> torch.Tensor:
        """Round ``v`` (float64) to float32 values (returned as float64) and log or apply."""
        if v.dtype != F64:
            return v
        info, start = self._layout(key, v, batch_dependent)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = SiteStats()
        st.rounded += v.numel()
        st.exact = exact
        if self.mode in ("calib_record", "calib_force"):
            r = self._calibrate(info, start, v.detach().reshape(-1), st)
            return r.to(F64).reshape(v.shape)
        beta = 0.0 if exact else self._beta(key)
        repeat_of_shared = info.kind == SHARED and self.pass_index > 0 and self._in_pass
        if self._kernel:  # NumPy in and out: torch's reshapes and views cost more than the small sites' rounding
            a = np.ascontiguousarray(v.detach().numpy()).reshape(-1)
            r64 = site_kernel.round_plain_np(a) if beta == 0.0 else \
                self._compiled_site(info, start, a, st, beta * UNIT_ROUNDOFF_F64, repeat_of_shared)
            if self.record_site_digests:
                self._keep_for_digest(info, start, torch.from_numpy(r64))
            return torch.from_numpy(r64.reshape(v.shape))
        flat = v.detach().reshape(-1)
        if beta == 0.0:
            r = flat.to(F32)
            self._keep_for_digest(info, start, r)
            return r.to(F64).reshape(v.shape)
        v2, d2 = self._bound(flat, info.chunk_numel, beta)
        if self.mode == "train":
            r, dec = rounding.decide(v2, d2)
        else:
            dec = self._entries_for(start, flat.numel())
            r, rep = rounding.apply(v2, d2, dec)
        if self.mode == "train":
            if not repeat_of_shared:
                nb, nv = dec.bit_pos.numel(), dec.value_pos.numel()
                if nb:
                    self._bits.append(((dec.bit_pos + start).numpy(), dec.bit_up.numpy()))
                if nv:
                    self._values.append(((dec.value_pos + start).numpy(), dec.value.numpy()))
                st.entries += nb + nv
                st.value_entries += nv
        else:
            st.corrections += rep.corrections
            st.implausible += rep.implausible
            st.breaches += rep.breaches
            st.entries += dec.bit_pos.numel() + dec.value_pos.numel()
        self._keep_for_digest(info, start, r)
        return (r if r.dtype == F64 else r.to(F64)).reshape(v.shape)

    def _compiled_site(self, info: SiteInfo, start: int, v: np.ndarray, st: SiteStats, beta_u: float,
                       repeat_of_shared: bool) -> np.ndarray:
        """The site through :mod:`.site_kernel` (NumPy throughout): train decides and records the
        entries, replay applies the log's; the rounded values as a flat float64 array."""
        if self.mode == "train":
            r64, bit_pos, bit_up, value_pos, value = site_kernel.decide_np(v, info.chunk_numel, beta_u)
            if not repeat_of_shared:
                if bit_pos.size:
                    self._bits.append((bit_pos + start, bit_up))
                if value_pos.size:
                    self._values.append((value_pos + start, value))
                st.entries += bit_pos.size + value_pos.size
                st.value_entries += value_pos.size
            return r64
        entries = self._entries_np(start, v.size)
        r64, rep = site_kernel.apply_np(v, info.chunk_numel, beta_u, *entries)
        st.corrections += rep.corrections
        st.implausible += rep.implausible
        st.breaches += rep.breaches
        st.entries += entries[0].size + entries[2].size
        return r64

    def _beta(self, key: str) -> float:
        beta = self._betas.get(key)
        if beta is None:
            beta = self._betas[key] = self.thresholds.beta(key)
        return beta

    def _keep_for_digest(self, info: SiteInfo, start: int, r: torch.Tensor) -> None:
        """Assemble the site's float32 values in canonical layout (only when digests are kept)."""
        if not self.record_site_digests:
            return
        buf = self._digest_bufs.get(info.base)
        if buf is None:
            buf = self._digest_bufs[info.base] = torch.zeros(info.canonical_numel, dtype=F32)
        at = start - info.base if info.kind != SHARED else 0
        buf[at : at + r.numel()] = r  # float32 values: exact whether r is float32 or float64

    @staticmethod
    def _bound(flat: torch.Tensor, chunk: int, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(v as (chunks, chunk), D per chunk as (chunks, 1)) with D = beta * u * (max |v| in the chunk),
        non-finite values left out of the max."""
        v2 = flat.view(-1, chunk) if flat.numel() else flat.view(0, 1)
        scale = v2.abs().amax(dim=1, keepdim=True) if flat.numel() else v2[:, :1]
        if not torch.isfinite(scale).all():
            finite = torch.where(torch.isfinite(v2), v2.abs(), torch.zeros((), dtype=F64))
            scale = finite.amax(dim=1, keepdim=True)
        return v2, scale * (beta * UNIT_ROUNDOFF_F64)

    def _entries_for(self, start: int, n: int) -> Decisions:
        entries = self._entries_np(start, n)
        if entries is _NO_ENTRIES_NP:
            return _NO_ENTRIES  # most sites: the entries are rare
        return Decisions(*(torch.from_numpy(a) for a in entries))

    def _entries_np(self, start: int, n: int) -> tuple[np.ndarray, ...]:
        """The log's (bit positions, directions, value positions, values) inside [start, start + n),
        positions local to the site."""
        log = self.log
        bounds = np.array((start, start + n), dtype=np.uint64)  # the positions' own type: no float compare
        b_lo, b_hi = np.searchsorted(log.bit_pos, bounds, side="left").tolist()
        v_lo, v_hi = np.searchsorted(log.value_pos, bounds, side="left").tolist()
        if b_lo == b_hi and v_lo == v_hi:
            return _NO_ENTRIES_NP
        return (log.bit_pos[b_lo:b_hi].astype(np.int64) - start, np.ascontiguousarray(log.bit_up[b_lo:b_hi]),
                log.value_pos[v_lo:v_hi].astype(np.int64) - start, np.ascontiguousarray(log.value[v_lo:v_hi]))

    # ------------------------------------------------------------ calibration

    def _calibrate(self, info: SiteInfo, start: int, flat: torch.Tensor, st: SiteStats) -> torch.Tensor:
        """Record this configuration's values, or compare with the recorded ones and force them."""
        r = flat.to(F32)
        n = flat.numel()
        at = start - info.base if info.kind != SHARED else 0
        if self.mode == "calib_record":
            if info.base not in self._calib_store:
                self._calib_store[info.base] = (torch.full((info.canonical_numel,), float("nan"), dtype=F64),
                                                torch.zeros(info.canonical_numel, dtype=F32))
            v_all, r_all = self._calib_store[info.base]
            v_all[at : at + n], r_all[at : at + n] = flat, r
            return r
        stored = self.calib_source._calib_store.get(info.base)
        if stored is None or stored[0].numel() != info.canonical_numel:
            raise RoundLogError(f"calibration: no recorded values for site {info.key} at stream position {start}")
        stored = (stored[0][at : at + n], stored[1][at : at + n])
        va, ra = stored
        _, unit = self._bound(va, info.chunk_numel, 1.0)  # u * chunk max |v|
        scale = unit.expand(-1, info.chunk_numel).reshape(-1)
        diff = (flat - va).abs()
        ok = torch.isfinite(va) & torch.isfinite(flat) & (scale > 0)
        if ok.any():
            st.max_ratio = max(st.max_ratio, float((diff[ok] / scale[ok]).max()))
        st.flips += int((r != ra).sum())
        return ra
