"""A multi-layer perceptron classifier: Linear, activation, [Dropout], ..., Linear."""
from __future__ import annotations

from .layers import GELU, Dropout, Layer, Linear, ReLU, Sequential


def mlp_classifier(n_features: int, hidden: tuple[int, ...], n_classes: int, activation: str = "relu",
                   dropout: float = 0.0) -> Sequential:
    """The layer list torch's nn.Sequential would hold (so parameter names match: "0.weight", ...)."""
    layers: list[Layer] = []
    width = n_features
    for h in hidden:
        layers.append(Linear(width, h))
        layers.append(ReLU() if activation == "relu" else GELU("none"))
        if dropout > 0.0:
            layers.append(Dropout(dropout))
        width = h
    layers.append(Linear(width, n_classes))
    return Sequential(layers)
