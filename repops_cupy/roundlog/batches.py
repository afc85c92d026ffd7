"""Data for rounding-log jobs: the same batch for a step on every machine.

Synthetic batch ``i`` is drawn from NumPy's PCG64 seeded by ``SeedSequence([seed, i])``:
a pure function of (seed, step), independent of micro-batching and of what came
before, so replaying any single step needs nothing but its index. Images are
rounded to float32 values (then carried in float64, as the rounding-log mode does).
A job's own data (`DatasetBatches`) is sampled by the project's counter RNG from
(seed, step) with the graph-mode jobs' samplers.
"""
from __future__ import annotations

import numpy as np
import torch


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *stream])))


class SyntheticImages:
    """Class prototype (smooth random pattern) plus noise; label = prototype index."""

    def __init__(self, batch_size: int, channels: int = 3, size: int = 16, num_classes: int = 10,
                 noise: float = 0.8, seed: int = 0):
        self.batch_size, self.noise, self.seed, self.num_classes = batch_size, noise, seed, num_classes
        rng = _rng(seed, 0xC1A55)
        coarse = rng.standard_normal((num_classes, channels, size // 4, size // 4))
        self.prototypes = coarse.repeat(4, axis=2).repeat(4, axis=3).astype(np.float32)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = _rng(self.seed, 1, step)
        y = rng.integers(0, self.num_classes, self.batch_size)
        x = self.prototypes[y] + self.noise * rng.standard_normal(self.prototypes[y].shape).astype(np.float32)
        return torch.from_numpy(x.astype(np.float32)).double(), torch.from_numpy(y.astype(np.int64))


class SyntheticTokens:
    """Sequences from a fixed random Markov chain in which every token has a few likely successors."""

    def __init__(self, batch_size: int, vocab: int = 64, block: int = 32, successors: int = 3, seed: int = 0):
        self.batch_size, self.vocab, self.block, self.seed = batch_size, vocab, block, seed
        rng = _rng(seed, 0x70CE)
        probs = np.full((vocab, vocab), 0.02 / vocab)
        for t in range(vocab):
            probs[t, rng.choice(vocab, successors, replace=False)] += 0.98 / successors
        # reprod-ok: the rounding-log mode computes in float64 by design; this table is built once per seed
        self.cumulative = np.cumsum(probs / probs.sum(1, keepdims=True), axis=1)

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = _rng(self.seed, 1, step)
        seq = np.empty((self.batch_size, self.block + 1), dtype=np.int64)
        seq[:, 0] = rng.integers(0, self.vocab, self.batch_size)
        u = rng.random((self.batch_size, self.block))
        for t in range(self.block):
            rows = self.cumulative[seq[:, t]]
            seq[:, t + 1] = np.minimum((rows < u[:, t : t + 1]).sum(1), self.vocab - 1)
        return torch.from_numpy(seq[:, :-1].copy()), torch.from_numpy(seq[:, 1:].copy())


class DatasetBatches:
    """Batches of a project data set (`repops_cupy.data.Dataset`: a text, token array or images
    with labels, read by `data.load_dataset` as a graph-mode job reads it), drawn by the graph-mode
    samplers: step ``i``'s examples are `language_batch` / `classification_batch` of (seed, i),
    the index the rounding-log text jobs always drew (a graph-mode job's step ``i`` draws
    ``i - 1``). Image and feature values are float32 in the data set, carried in float64 here."""

    def __init__(self, dataset, batch_size: int, seed: int = 0, context: int = 0):
        from .. import data as project_data  # noqa: PLC0415

        self._data = project_data
        self.dataset, self.batch_size, self.seed, self.context = dataset, batch_size, seed, context
        self.vocab = dataset.vocab_size if dataset.is_language else None
        self.num_classes = None if dataset.is_language else dataset.n_classes
        self.batch(1)  # data too small for a batch is refused when the job loads, not in the middle of a run

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.dataset.is_language:
            b = self._data.language_batch(self.dataset, self.seed, step, self.batch_size, self.context)
            return torch.from_numpy(b["x"]), torch.from_numpy(b["y"])
        b = self._data.classification_batch(self.dataset, self.seed, step, self.batch_size)
        return torch.from_numpy(b["x"]).double(), torch.from_numpy(b["y"])
