"""Rounding-log mode: verifiable training of ordinary torch modules in float64.

After Srivastava, Arora, Boneh (NeurIPS 2024), made robust: every op output,
input gradient, parameter gradient and optimizer result is rounded to float32, and
the trainer logs the rounding decisions that another machine could take
differently, so an auditor on another configuration reproduces the trainer's
float32 state bit for bit. See ``trainer``, ``intercept`` and ``thresholds``.
"""
from .codec import LogFormatError, StepLog
from .engine import RoundLogError
from .thresholds import Thresholds
from .trainer import Auditor, RoundLogTrainer, RunConfig

__all__ = ["Auditor", "LogFormatError", "RoundLogError", "RoundLogTrainer", "RunConfig", "StepLog", "Thresholds"]
