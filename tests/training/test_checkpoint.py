"""Checkpoints round-trip bit for bit and refuse tensors that do not match their hash."""
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from repops_cupy.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, state_hash


def _state():
    return {
        "params/w": np.arange(12, dtype=np.float32).reshape(3, 4) / np.float32(7),
        "params/b": np.array([-0.0, 1.5, np.inf], dtype=np.float32),
        "optim/beta1_power": np.array(0.9, dtype=np.float32),
        "step": np.array(41, dtype=np.int64),
    }


def test_roundtrip_keeps_bits_shapes_and_hash(tmp_path):
    state = _state()
    digest = save_checkpoint(tmp_path / "c.safetensors", state, step=41)
    loaded, step, digest2 = load_checkpoint(tmp_path / "c.safetensors")
    assert step == 41 and digest == digest2 == state_hash(state)
    for name, value in state.items():
        assert loaded[name].shape == value.shape and loaded[name].dtype == value.dtype
        assert loaded[name].tobytes() == value.tobytes()


def test_state_hash_binds_names_to_tensors():
    state = _state()
    assert state_hash(dict(reversed(list(state.items())))) == state_hash(state)  # order of insertion is irrelevant
    swapped = dict(state)
    swapped["params/w"], swapped["params/b"] = state["params/b"], state["params/w"]
    assert state_hash(swapped) != state_hash(state)
    flipped = dict(state)
    flipped["params/b"] = np.array([0.0, 1.5, np.inf], dtype=np.float32)  # -0 vs +0 differ in bits
    assert state_hash(flipped) != state_hash(state)


def test_tampered_file_is_refused(tmp_path):
    path = tmp_path / "c.safetensors"
    save_checkpoint(path, _state(), step=41)
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    tensors["params/w"][0, 0] += 1
    save_file(tensors, str(path), metadata=meta)
    with pytest.raises(CheckpointError, match="hash"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.safetensors")
