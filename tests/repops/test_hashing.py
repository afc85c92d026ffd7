import numpy as np
import pytest

from repops_cupy import hashing
from repops_cupy.data import dataset_root
from repops_cupy.hashing import canonical_array, hash_tensor, state_hash, state_leaf
from repops_cupy.merkle import merkle_root


def test_hash_depends_on_dtype_shape_and_bytes():
    x = np.arange(6, dtype=np.float32)
    base = hash_tensor(x)
    assert len(base) == 32
    assert hash_tensor(x.reshape(2, 3)) != base
    assert hash_tensor(x.astype(np.float64)) != base
    assert hash_tensor(x.view(np.int32)) != base
    y = x.copy()
    y.view(np.uint32)[3] ^= 1  # one bit
    assert hash_tensor(y) != base


def test_hash_ignores_layout_and_byte_order():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert hash_tensor(np.asfortranarray(x)) == hash_tensor(x)
    assert hash_tensor(x.astype(">f4")) == hash_tensor(x)
    assert hash_tensor(x.T.copy().T) == hash_tensor(x)
    assert hash_tensor(x[:, ::2]) == hash_tensor(np.ascontiguousarray(x[:, ::2]))


def test_every_nan_hashes_as_one_but_signed_zeros_differ():
    a = np.array([np.nan, 1.0], np.float32)
    b = a.copy()
    b.view(np.uint32)[0] = 0xFFC00000  # the x86 default NaN
    assert hash_tensor(a) == hash_tensor(b)
    assert hash_tensor(np.array([0.0], np.float32)) != hash_tensor(np.array([-0.0], np.float32))


def test_a_scalar_is_not_a_one_element_vector():
    assert canonical_array(np.float32(2.0)).shape == ()
    assert hash_tensor(np.array(2.0, np.float32)) != hash_tensor(np.array([2.0], np.float32))


def test_scalars_and_empty_tensors_hash():
    assert hash_tensor(np.float32(1.5)) == hash_tensor(np.array(1.5, np.float32))
    assert hash_tensor(np.zeros((0, 3), np.float32)) != hash_tensor(np.zeros((3, 0), np.float32))


def test_object_arrays_are_refused():
    with pytest.raises(TypeError):
        canonical_array(np.array([object()]))


# --- the layouts both parties hash: pinned bytes -------------------------------------------
# Computed by the encoders before they were merged into `hashing` (checkpoint.py,
# data.py, protocol/roundlog_dispute.py at 58491a1): a change here changes every trace root.
STATE = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array(7, np.int64),
         "émoji": np.ones(2, np.int32)}


def test_tensor_and_state_hashes_are_the_pinned_bytes():
    assert hash_tensor(STATE["w"]).hex() == "b58df08399c277f36d0d945b6918a922f2ac4e5891f80cc387d7d69f65d485a5"
    assert state_hash(STATE).hex() == "6722f014b50f9c3297f5c2c24053588e0c7ab99a8a62de6b9121e6df5ca32ad8"
    data = {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "y": np.arange(4)}
    assert dataset_root(data).hex() == "32dbf337ca6c9954d926dc68311666aa82160c197514769024808e259cdcca4d"
    rl = hashing.roundlog_state_hash(STATE, hashing.log_digest(b"log bytes"))
    assert rl.hex() == "7147a41c664d247bea97a6dcac9b243efb41dea552cbd78f61fc6b28b2a3fcb7"


def test_state_leaf_layout_and_order():
    digest = bytes(range(32))
    assert state_leaf("w", digest) == b"\x01\x00w" + digest
    assert state_leaf("é" * 200, digest)[:2] == (400).to_bytes(2, "little")
    assert hashing.sorted_names({"b": 0, "B": 0, "émoji": 0, "a.b": 0}) == ["B", "a.b", "b", "émoji"]
    hashes = {name: hash_tensor(value) for name, value in STATE.items()}
    leaves = [state_leaf(n, hashes[n]) for n in ["step", "w", "émoji"]]
    assert hashing.state_leaves(hashes) == leaves
    assert state_hash(STATE) == hashing.state_root(hashes) == merkle_root(leaves)


def test_state_leaf_refuses_what_it_cannot_encode():
    for name, digest in [("", bytes(32)), ("x" * 65536, bytes(32)), ("x", b"short"), ("x", bytearray(32))]:
        with pytest.raises(ValueError):
            state_leaf(name, digest)
    assert len(state_leaf("x" * 65535, bytes(32))) == 2 + 65535 + 32


def test_the_log_leaf_is_one_more_named_hash():
    log = b"\x01\x02 log"
    named = hashing.roundlog_named_hashes(STATE, hashing.log_digest(log))
    assert named[hashing.LOG_LEAF] == hash_tensor(np.frombuffer(log, np.uint8))
    assert hashing.roundlog_state_hash(STATE, hashing.log_digest(log)) == state_hash(
        {**STATE, "roundlog.log": np.frombuffer(log, np.uint8)})
    assert hashing.roundlog_state_hash(STATE, None) == state_hash(STATE)


def test_hashing_imports_without_torch():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; sys.modules['safetensors'] = None\n"
            "import protocol.roundlog_dispute, repops_cupy.hashing")
    subprocess.run([sys.executable, "-c", code], check=True)
