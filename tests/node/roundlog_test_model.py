"""A model class the tests define (it ships with no gavel package): a rounding-log job names it."""
from __future__ import annotations

import torch.nn as nn


class TinyTanhNet(nn.Module):
    """Flatten, one hidden tanh layer, a linear head."""

    def __init__(self, in_features: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.Tanh(),
                                  nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.body(x)
