"""Ordinary torch training of a rounding-log job: the baseline that shows what the mode is for.

The same model, data and optimizer as the job, trained with torch.optim in plain float32
or float64 (no rounding, no log) under a configuration (threads, NumPy/OpenBLAS products,
micro-batches with gradient accumulation). Two configurations that a rounding-log replay
reconciles bit for bit give different weights here.
"""
from __future__ import annotations

import contextlib
import time
from typing import Mapping

import torch
import torch.nn.functional as F

from ..hashing import hash_tensor
from .roundlog_job import Job
from .npbackend import NumpyProducts


class PlainRun:
    """Ordinary torch training of the same model and data (torch.optim, mean loss, gradient
    accumulation over micro-batches); ``step(i)`` returns its time (drawing the batch included,
    as in a rounding-log step) and a hash of the parameters cast to float32."""

    def __init__(self, job: Job, dtype: torch.dtype, threads: int | None = 1, backend: str = "torch",
                 micro_batch: int | None = None):
        self.job, self.dtype, self.threads, self.backend, self.micro_batch = job, dtype, threads, backend, micro_batch
        self.model = job.model_factory()().to(dtype)
        self.model.train()
        o = job.optimizer
        if o["name"] == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=o["lr"], momentum=o["momentum"],
                                       weight_decay=o["weight_decay"])
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"],
                                         weight_decay=o["weight_decay"])

    def step(self, i: int) -> tuple[float, bytes]:
        old_threads = torch.get_num_threads()
        torch.set_num_threads(self.threads or old_threads)
        try:
            t = time.perf_counter()  # from the batch on, as a rounding-log step is timed
            x, y = self.job.data.batch(i)
            x = x.to(self.dtype) if x.is_floating_point() else x
            mb = self.micro_batch or x.shape[0]
            self.opt.zero_grad()
            for s in range(0, x.shape[0], mb):
                with NumpyProducts() if self.backend == "numpy" else contextlib.nullcontext():
                    logits = self.model(x[s:s + mb])
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[s:s + mb].reshape(-1))
                (loss * (mb / x.shape[0])).backward()
            if max_norm := self.job.optimizer.get("clip_grad_norm"):
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self.opt.step()
            for m in self.model.modules():  # ghost batch-norm folds its statistics once per step
                if hasattr(m, "step_end"):
                    m.step_end(lambda key, t, exact=False: t)
            elapsed = time.perf_counter() - t
        finally:
            torch.set_num_threads(old_threads)
        flat = torch.cat([p.detach().reshape(-1).float() for p in self.model.parameters()])
        return elapsed, hash_tensor(flat.numpy())


def plain_divergence(job: Job, steps: int, pairs: Mapping[str, Mapping]) -> dict[str, int | None]:
    """``{"float32/<pair>": step, "float64/<pair>": step}``: the first step where plain
    float32 / float64 training under each pair's configuration (``PlainRun`` keywords)
    leaves the one-thread reference run (parameters compared as float32), None if never."""
    out: dict[str, int | None] = {}
    for dtype, label in ((torch.float32, "float32"), (torch.float64, "float64")):
        ref = PlainRun(job, dtype)
        others = {pair: PlainRun(job, dtype, **config) for pair, config in pairs.items()}
        for i in range(1, steps + 1):
            h = ref.step(i)[1]
            for pair, run in others.items():
                if run.step(i)[1] != h and f"{label}/{pair}" not in out:
                    out[f"{label}/{pair}"] = i
        for pair in pairs:
            out.setdefault(f"{label}/{pair}", None)
    return out
