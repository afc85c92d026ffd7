"""Dropout masks of a rounding-log step, drawn from the project's counter-based RNG.

A dropout call's mask is a pure function of (job seed, step, the call's index within
the forward pass, the element's position in the whole batch), so the trainer, an
auditor replaying one interval from a checkpoint and the referee draw the same masks,
whatever micro-batching each uses. The keying is that of the reproducible-operator
mode (:func:`repops_cupy.optim.dropout_at_step`): key = job seed, stream =
``DROPOUT_STREAM_BASE + call index``, counter = ``step * 2^32`` blocks; element j of
the whole-batch tensor (C order) is kept where ``uniform_f32`` word j >= p.

Kept values are multiplied by float32(1 / (1 - p)): a float32 value times a float32
value is exact in float64, so the op is an exact rounding site (nothing logged).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..nn import dropout_scale
from ..optim import DROPOUT_STREAM_BASE, STEP_COUNTER_SHIFT
from ..rng import uniform_f32


def keep_threshold(p: float) -> np.float32:
    """u (a multiple of 2^-24) is >= p exactly when u >= ceil(p * 2^24) * 2^-24."""
    return np.float32(math.ceil(p * 2.0**24) * 2.0**-24)


def mask_factor(seed: int, step: int, call: int, p: float, start: int, numel: int) -> torch.Tensor:
    """float64 factors (0 or float32(1/(1-p))) for elements ``start .. start+numel-1`` of
    the whole-batch tensor of dropout call ``call`` at ``step``."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1], got {p!r}")
    # four words per Philox block: start at the block holding element `start`
    first_block, skip = divmod(start, 4)
    u = uniform_f32(seed, DROPOUT_STREAM_BASE + call, (skip + numel,),
                    counter=(step << STEP_COUNTER_SHIFT) + first_block)[skip:]
    factor = np.where(u >= keep_threshold(p), np.float64(dropout_scale(p)), 0.0)
    return torch.from_numpy(factor)
