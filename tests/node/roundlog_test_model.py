"""Model classes the tests define (they ship with no gavel package): rounding-log jobs name them."""
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


class TinyTokenNet(nn.Module):
    """A language model of the next token from the current one: an embedding, tanh, a linear head."""

    def __init__(self, vocab: int, d: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Embedding(vocab, d), nn.Tanh(), nn.Linear(d, vocab))

    def forward(self, idx):
        return self.body(idx)
