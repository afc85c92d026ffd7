"""Tiny versions of the example models, small enough for a step in a fraction of a second."""
import pytest
import torch

from repops_cupy.roundlog.batches import SyntheticImages, SyntheticTokens
from repops_cupy.roundlog.torch_models import ResidualMLP, SmallCNN, TinyGPT, TinyGRU
from repops_cupy.roundlog.thresholds import Thresholds


def tiny_cnn():
    torch.manual_seed(0)
    return SmallCNN(in_channels=3, widths=(4, 8, 8), num_classes=5, bn_group=2)


def tiny_gpt():
    torch.manual_seed(0)
    return TinyGPT(vocab=16, d=16, heads=2, layers=1, block=16)


def tiny_mlp():
    torch.manual_seed(0)
    return ResidualMLP(in_features=3 * 8 * 8, d=16, blocks=2, num_classes=5, dropout=0.2)


def tiny_gru():
    torch.manual_seed(0)
    return TinyGRU(vocab=16, d=16, dropout=0.2)


SETUPS = {
    "cnn": (tiny_cnn, {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
            lambda: SyntheticImages(8, channels=3, size=8, num_classes=5, seed=3)),
    "gpt": (tiny_gpt, {"name": "adamw", "lr": 3e-3, "betas": (0.9, 0.99), "weight_decay": 0.01},
            lambda: SyntheticTokens(4, vocab=16, block=16, seed=3)),
    # with dropout: a residual MLP with layer norm, and a GRU written out gate by gate
    "mlp": (tiny_mlp, {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
            lambda: SyntheticImages(8, channels=3, size=8, num_classes=5, seed=3)),
    "gru": (tiny_gru, {"name": "adamw", "lr": 3e-3, "betas": (0.9, 0.99), "weight_decay": 0.01},
            lambda: SyntheticTokens(4, vocab=16, block=8, seed=3)),
}


@pytest.fixture
def setup_of():
    """setup_of(name) -> (model_factory, optimizer_spec, data)."""
    def get(name):
        factory, opt, data = SETUPS[name]
        return factory, dict(opt), data()
    return get


@pytest.fixture(scope="session")
def thresholds():
    return Thresholds.measured()
