"""In-place layers and ops, and ops that draw from torch's global generator, are refused with an
error that names the module and says what to write instead (not torch's own autograd error)."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from repops_cupy.roundlog import RoundLogError, RoundLogTrainer, RunConfig
from repops_cupy.roundlog.batches import SyntheticImages

OPT = {"name": "sgd", "lr": 0.05}


def _data():
    return SyntheticImages(4, channels=3, size=4, num_classes=3, seed=1)


class Net(nn.Module):
    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x.flatten(1)))


class AddsInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 8)

    def forward(self, x):
        y = self.fc(x)
        y += 1.0
        return y


class FunctionalInPlace(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 8)

    def forward(self, x):
        return F.relu(self.fc(x), inplace=True)


class DrawsGlobalNoise(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(48, 8)

    def forward(self, x):
        y = self.fc(x)
        return y + torch.randn_like(y)


@pytest.mark.parametrize("layer", [nn.ReLU(inplace=True), nn.Dropout(0.1, inplace=True), nn.LeakyReLU(inplace=True)])
def test_inplace_layers_are_refused_before_training(layer):
    body = nn.Sequential(nn.Linear(48, 8), layer)
    with pytest.raises(RoundLogError, match=r"body\.1 \(" + type(layer).__name__ + r"\).*inplace=True.*inplace=False"):
        RoundLogTrainer(lambda: Net(body), OPT, _data(), RunConfig())


@pytest.mark.parametrize("body,op", [(AddsInPlace, "add_"), (FunctionalInPlace, "relu")])
def test_inplace_ops_name_the_module_and_the_fix(body, op):
    tr = RoundLogTrainer(lambda: Net(body()), OPT, _data(), RunConfig())
    before = tr.state_hash()
    with pytest.raises(RoundLogError, match=rf"in-place op {op} in body \({body.__name__}\).*out of place"):
        tr.step(1)
    assert tr.state_hash() == before  # refused before anything changed


def test_global_generator_draws_are_refused():
    tr = RoundLogTrainer(lambda: Net(DrawsGlobalNoise()), OPT, _data(), RunConfig())
    with pytest.raises(RoundLogError, match=r"randn_like in body \(DrawsGlobalNoise\).*global random generator"):
        tr.step(1)
