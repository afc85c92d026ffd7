"""torch modules in, trained weights out: the graph is built from a module, the weights go back."""
import numpy as np
import pytest
import torch
from torch import nn

from repops_cupy.checkpoint import load_checkpoint
from repops_cupy.jobspec import parse_job
from repops_cupy.models import GPT
from repops_cupy import torch_bridge
from repops_cupy.torch_bridge import (
    SUPPORTED_LAYERS,
    TinyGPT,
    UnsupportedLayer,
    load_into_module,
    params_from_module,
    program_from_torch,
    to_layer,
    to_torch,
)
from repops_cupy.train import TrainingProgram, train

from .conftest import tiny_mlp_raw


def test_unsupported_layer_is_named():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Conv1d(1, 1, 3)))
    with pytest.raises(UnsupportedLayer, match=r"'2\.0' \(Conv1d\)"):
        to_layer(model)
    with pytest.raises(UnsupportedLayer, match="LayerNorm"):
        to_layer(nn.LayerNorm(4, elementwise_affine=False))


def test_unsupported_layer_refusal_lists_the_supported_ones():
    class UserModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4))

    with pytest.raises(UnsupportedLayer) as refused:
        to_layer(UserModel())
    message = str(refused.value)
    assert "'<root>' (UserModel)" in message
    assert message.endswith("supported layers: " + ", ".join(SUPPORTED_LAYERS))
    with pytest.raises(UnsupportedLayer, match=r"'1' \(LSTM\).*supported layers: Linear, Embedding"):
        to_layer(UserModel().body)
    # every listed layer converts (the list cannot drift from what to_layer takes)
    examples = {"Linear": nn.Linear(2, 3), "Embedding": nn.Embedding(5, 2), "LayerNorm": nn.LayerNorm(2),
                "GELU": nn.GELU(), "ReLU": nn.ReLU(), "Dropout": nn.Dropout(0.1), "Sequential": nn.Sequential(),
                "Conv2d": nn.Conv2d(2, 3, 3), "MaxPool2d": nn.MaxPool2d(2), "AdaptiveAvgPool2d": nn.AdaptiveAvgPool2d(1),
                "Flatten": nn.Flatten(),
                "CausalSelfAttention": torch_bridge.CausalSelfAttention(4, 2),
                "TransformerBlock": torch_bridge.TransformerBlock(4, 2, 8), "TinyGPT": TinyGPT(5, 4, 4, 1, 2, 8)}
    assert sorted(examples) == sorted(SUPPORTED_LAYERS)
    for name in SUPPORTED_LAYERS:
        to_layer(examples[name])


def test_a_gpt2_shaped_gpt_has_no_torch_module_and_says_where_its_weights_go():
    with pytest.raises(UnsupportedLayer, match="tied head.*layout='gpt2'"):
        to_torch(GPT(50, 8, 16, 1, 2, 32, tie_head=True))
    with pytest.raises(UnsupportedLayer, match="more positions than its context"):
        to_torch(GPT(50, 8, 16, 1, 2, 32, n_positions=16))


def test_layer_trees_and_torch_modules_share_parameter_names():
    gpt = GPT(vocab_size=13, context=8, d_model=16, n_layers=2, n_heads=4, d_ff=32)
    module = to_torch(gpt)
    assert [n for n, _ in gpt.named_params()] == list(module.state_dict())
    back = to_layer(module)
    assert isinstance(back, GPT) and [n for n, _ in back.named_params()] == [n for n, _ in gpt.named_params()]
    assert all(spec.shape == tuple(module.state_dict()[n].shape) for n, spec in gpt.named_params())


def test_exported_gpt_weights_reproduce_the_trace_loss(tmp_path, tiny_gpt_spec):
    program = TrainingProgram(tiny_gpt_spec)
    trace = train(tiny_gpt_spec.with_steps(3), tmp_path, program=program)
    state, step, _ = load_checkpoint(tmp_path / trace.checkpoints[1]["file"])  # the state after 2 steps
    model = load_into_module(to_torch(program.net), state).eval()
    batch = program.batch(step)
    with torch.no_grad():
        logits = model(torch.from_numpy(batch["batch/x"]))
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                           torch.from_numpy(batch["batch/y"]).reshape(-1))
    assert loss.dtype == torch.float32
    assert abs(loss.item() - trace.losses[step]) <= 1e-3 * trace.losses[step]


def test_training_a_torch_module_and_exporting_it():
    spec = parse_job(tiny_mlp_raw(steps=3))
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 3))
    before = params_from_module(module)
    program = program_from_torch(module, spec)
    state = program.initial_state()
    assert all(np.array_equal(state["params/" + n], v) for n, v in before.items())
    for _ in range(3):
        out = program.run_step(state)
        state = out.state
    load_into_module(module, state)
    module.eval()
    batch = program.batch(3)
    with torch.no_grad():
        loss = nn.functional.cross_entropy(module(torch.from_numpy(batch["batch/x"])),
                                           torch.from_numpy(batch["batch/y"]))
    after_eval = program.run_step(state).loss  # trains with dropout on: only roughly equal
    assert np.isfinite(loss.item()) and abs(loss.item() - after_eval) < 0.5
    assert not np.array_equal(module[0].weight.detach().numpy(), before["0.weight"])


def test_tinygpt_module_runs():
    model = TinyGPT(vocab_size=5, context=4, d_model=8, n_layers=1, n_heads=2, d_ff=16)
    assert model(torch.zeros(2, 4, dtype=torch.long)).shape == (2, 4, 5)
