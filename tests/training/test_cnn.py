"""The convolutional image model in graph mode: unfold2d against torch, the CNN against torch float64,
determinism, the image data kinds, the torch bridge for Conv2d / MaxPool2d, and a job trained twice."""
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from repops_cupy import ops, registry  # noqa: F401 - fills the registry
from repops_cupy._backend import cupy_module
from repops_cupy.data import DataError, image_dataset, load_dataset
from repops_cupy.graph import GraphBuilder, execute
from node.cli import main
from repops_cupy.jobspec import JobSpecError, load_job, parse_job
from repops_cupy.models import ForwardContext, classification_loss, cnn_classifier, init_params
from repops_cupy.torch_bridge import UnsupportedLayer, load_into_module, program_from_torch, to_layer, to_torch
from repops_cupy.train import TrainingProgram

ROOT = Path(__file__).resolve().parents[2]

GEOMETRIES = [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0)), ((2, 2), (2, 2), (0, 0)), ((1, 1), (1, 1), (0, 0))]


def _images(seed, shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kernel,stride,padding", GEOMETRIES)
def test_unfold2d_moves_the_bits_of_torch_unfold(kernel, stride, padding):
    x = _images(0, (2, 3, 7, 6))
    x[0, 0, 0, 0] = -0.0
    out = registry.run("unfold2d", [x], dict(kernel=kernel, stride=stride, padding=padding))
    ref = nn.functional.unfold(torch.from_numpy(x), kernel, stride=stride, padding=padding)  # (N, C*KK, L)
    n, c, oh, ow, kk = out.shape
    ref = ref.reshape(n, c, kk, oh, ow).permute(0, 1, 3, 4, 2).numpy()
    assert out.tobytes() == np.ascontiguousarray(ref).tobytes()  # copies only: same bits, -0.0 included


@pytest.mark.parametrize("kernel,stride,padding", GEOMETRIES)
def test_unfold2d_backward_is_torch_fold(kernel, stride, padding):
    x = _images(1, (2, 3, 7, 6))
    attrs = dict(kernel=kernel, stride=stride, padding=padding)
    out = registry.run("unfold2d", [x], attrs)
    g = _images(2, out.shape)
    (grad,) = registry.vjp("unfold2d", g, [x], out, attrs)
    n, c, oh, ow, kk = g.shape
    cols = torch.from_numpy(g.astype(np.float64)).permute(0, 1, 4, 2, 3).reshape(n, c * kk, oh * ow)
    ref = nn.functional.fold(cols, (7, 6), kernel, stride=stride, padding=padding).numpy()
    assert grad.dtype == np.float32 and grad.shape == x.shape
    np.testing.assert_allclose(grad, ref, rtol=2e-7, atol=1e-7)  # one float64 tree, rounded once


def _graph_values(net, params, x, y):
    b = GraphBuilder()
    leaves = {n: b.leaf(n, v) for n, v in params.items()}
    xl, yl = b.leaf("x", x, "batch"), b.leaf("y", y, "batch")
    ctx = ForwardContext(b, leaves)
    logits = net.forward(ctx, "", xl)
    loss = classification_loss(ctx, net, xl, yl)
    grads = b.gradients(loss, [leaves[n] for n in params])
    return b.value(logits), float(b.value(loss)), {n: b.value(g) for n, g in zip(params, grads)}


@pytest.mark.parametrize("downsample", ["maxpool", "stride"])
def test_cnn_forward_and_gradients_match_torch_float64(downsample):
    net = cnn_classifier(3, (4, 6), 5, kernel=3, downsample=downsample)
    params = init_params(net, 3)
    x, y = _images(4, (4, 3, 9, 8)), np.array([0, 4, 2, 1], np.int64)
    logits, loss, grads = _graph_values(net, params, x, y)

    module = load_into_module(to_torch(net), params).double()
    xt = torch.from_numpy(x.astype(np.float64))
    out = module(xt)
    ref_loss = nn.functional.cross_entropy(out, torch.from_numpy(y))
    ref_loss.backward()
    np.testing.assert_allclose(logits, out.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert loss == pytest.approx(ref_loss.item(), rel=1e-6)
    for name, p in module.named_parameters():
        ref = p.grad.numpy()
        np.testing.assert_allclose(grads[name], ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max(), err_msg=name)


def test_cnn_step_is_deterministic_and_its_node_hashes_repeat():
    spec = parse_job(_cnn_raw())
    program = TrainingProgram(spec)
    assert {"unfold2d", "unfold2d_grad", "matmul", "max", "max_grad"} <= set(program.graph.op_counts())
    state = program.initial_state()
    first = program.run_step(state, hashes=True)
    again = TrainingProgram(spec).run_step(program.initial_state(), hashes=True)
    assert first.node_hashes == again.node_hashes
    assert first.loss == again.loss


def test_cnn_nodes_give_the_same_bits_on_cupy():
    cp = cupy_module()
    if cp is None:
        pytest.skip("no CUDA GPU with CuPy on this machine")
    program = TrainingProgram(parse_job(_cnn_raw()))
    state = program.initial_state()
    cpu = execute(program.graph, program.leaf_values(state), hashes=True).node_hashes
    gpu = execute(program.graph, program.leaf_values(state), xp=cp, hashes=True).node_hashes
    assert cpu == gpu


def _cnn_raw(data=None, steps=4, **model):
    return {
        "job": {"name": "tiny-cnn", "seed": 3, "steps": steps, "batch_size": 8, "checkpoint_interval": 2},
        "data": data or {"kind": "synthetic-images", "n_samples": 64, "channels": 2, "size": 8, "n_classes": 3},
        "model": {"kind": "cnn", "channels": [4, 6], **model},
        "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9},
    }


def test_image_job_specs_are_checked():
    spec = parse_job(_cnn_raw(kernel=5, downsample="stride"))
    assert (spec.model.channels, spec.model.kernel, spec.model.downsample) == ((4, 6), 5, "stride")
    with pytest.raises(JobSpecError, match="model.kernel: must be odd"):
        parse_job(_cnn_raw(kernel=2))
    with pytest.raises(JobSpecError, match="model.kind: 'cnn' needs image data"):
        parse_job({**_cnn_raw(), "data": {"kind": "synthetic", "n_samples": 8, "n_features": 3, "n_classes": 2}})
    with pytest.raises(JobSpecError, match="model.kind: 'mlp' needs classification data"):
        parse_job({**_cnn_raw(), "model": {"kind": "mlp", "hidden": [4]}})
    with pytest.raises(JobSpecError, match="data.std: must have one value per channel"):
        parse_job(_cnn_raw({"kind": "images", "path": "x.npy", "labels": "y.npy", "mean": [0.5, 0.5], "std": [0.2]}))
    with pytest.raises(JobSpecError, match="data.std: must be a list of positive numbers"):
        parse_job(_cnn_raw({"kind": "images", "path": "x.npy", "labels": "y.npy", "mean": [0.5], "std": [0.0]}))
    # jobs that name no image fields keep their identity (published roots stay)
    mlp = {**_cnn_raw(), "data": {"kind": "synthetic", "n_samples": 8, "n_features": 3, "n_classes": 2},
           "model": {"kind": "mlp", "hidden": [4]}}
    identity = parse_job(mlp).identity()
    assert "channels" not in identity and "mean" not in identity and "downsample" not in identity


def test_uint8_images_are_normalised_by_one_division_then_mean_and_std():
    raw = np.random.default_rng(5).integers(0, 256, (6, 3, 4, 5), dtype=np.uint8)
    y = np.arange(6) % 2
    plain = image_dataset(raw, y)
    assert plain.arrays["x"].dtype == np.float32
    expected = (raw.astype(np.float32) / np.float32(255)).astype(np.float32)
    assert plain.arrays["x"].tobytes() == expected.tobytes()
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    norm = image_dataset(raw, y, mean, std).arrays["x"]
    m, s = np.float32(mean).reshape(3, 1, 1), np.float32(std).reshape(3, 1, 1)
    assert norm.tobytes() == ((expected - m) / s).astype(np.float32).tobytes()
    # the same values from Python's correctly rounded float64 arithmetic, rounded to float32 per step
    v = float(np.float32(float(raw[1, 2, 3, 4]) / 255.0))
    step = float(np.float32(v - float(np.float32(mean[2]))))
    assert norm[1, 2, 3, 4] == np.float32(step / float(np.float32(std[2])))
    assert image_dataset(raw.astype(np.float32), y).arrays["x"].tobytes() == raw.astype(np.float32).tobytes()
    with pytest.raises(DataError, match="uint8 or float32"):
        image_dataset(raw.astype(np.float64), y)
    with pytest.raises(DataError, match=r"\(N, C, H, W\)"):
        image_dataset(raw[0], y)
    with pytest.raises(DataError, match="labels must be integers"):
        image_dataset(raw, y.astype(np.float32))


def test_image_files_load_by_the_job_file(tmp_path):
    raw = np.random.default_rng(6).integers(0, 256, (10, 1, 6, 6), dtype=np.uint8)
    np.save(tmp_path / "images.npy", raw)
    np.save(tmp_path / "labels.npy", np.arange(10) % 3)
    spec = parse_job(_cnn_raw({"kind": "images", "path": "images.npy", "labels": "labels.npy", "mean": [0.5],
                               "std": [0.25]}), tmp_path)
    ds = load_dataset(spec.data, spec.seed, tmp_path)
    assert ds.arrays["x"].shape == (10, 1, 6, 6) and ds.n_classes == 3 and ds.n_features == 1
    program = TrainingProgram(spec, dataset=ds)
    assert program.batch(0)["batch/x"].shape == (8, 1, 6, 6)
    assert np.isfinite(program.run_step(program.initial_state()).loss)


def test_gavel_train_of_the_shipped_cnn_job_twice_gives_one_root(tmp_path, capsys):
    job = ROOT / "scripts/jobs/cnn.toml"
    spec = load_job(job)
    assert spec.model.kind == "cnn" and spec.data.kind == "synthetic-images"
    roots = []
    for run in ("a", "b"):
        assert main(["train", str(job), "--out", str(tmp_path / run), "--steps", "12"]) == 0
        roots.append(capsys.readouterr().out.strip().splitlines()[-1])
    assert roots[0] == roots[1] and len(roots[0]) == 64
    assert main(["replay", str(job), "--from", str(tmp_path / "a"), "--checkpoint", "1"]) == 0


def test_a_users_torch_cnn_converts_and_trains():
    class UserNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                          nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU())
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))

    torch.manual_seed(0)
    user = UserNet()
    seq = nn.Sequential(user.features, user.head)
    program = program_from_torch(seq, parse_job(_cnn_raw()))
    assert [n for n, _ in program.net.named_params()] == list(seq.state_dict())
    assert np.isfinite(program.run_step(program.initial_state()).loss)
    with pytest.raises(UnsupportedLayer, match=r"'0' \(Conv2d\): only groups 1"):
        to_layer(nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)))
    with pytest.raises(UnsupportedLayer, match=r"MaxPool2d\): only padding 0"):
        to_layer(nn.MaxPool2d(3, padding=1))
    with pytest.raises(UnsupportedLayer, match="only output size 1"):
        to_layer(nn.AdaptiveAvgPool2d(2))
