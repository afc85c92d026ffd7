"""A small convolutional image classifier: [Conv-ReLU-downsample] per width, average, Linear."""
from __future__ import annotations

from .layers import Conv2d, Dropout, Flatten, GlobalAvgPool2d, Layer, Linear, MaxPool2d, ReLU, Sequential


def cnn_classifier(in_channels: int, channels: tuple[int, ...], n_classes: int, kernel: int = 3,
                   downsample: str = "maxpool", dropout: float = 0.0) -> Sequential:
    """The layer list torch's nn.Sequential would hold, so parameter names match ("0.weight", ...).

    Each width is a kernel x kernel convolution with padding kernel // 2 and a ReLU, then the
    image halves: a 2 x 2 max-pool (downsample = "maxpool"), or the convolution itself has
    stride 2 ("stride"). The channels are averaged over the image (AdaptiveAvgPool2d(1) and
    Flatten in torch), so the head does not depend on the image size.
    """
    if downsample not in ("maxpool", "stride"):
        raise ValueError(f"downsample must be 'maxpool' or 'stride', got {downsample!r}")
    pad = kernel // 2
    layers: list[Layer] = []
    width = in_channels
    for out in channels:
        stride = (2, 2) if downsample == "stride" else (1, 1)
        layers += [Conv2d(width, out, (kernel, kernel), stride, (pad, pad)), ReLU()]
        if downsample == "maxpool":
            layers.append(MaxPool2d((2, 2), (2, 2)))
        width = out
    layers += [GlobalAvgPool2d(), Flatten()]
    if dropout > 0.0:
        layers.append(Dropout(dropout))
    layers.append(Linear(width, n_classes))
    return Sequential(layers)
