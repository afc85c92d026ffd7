import numpy as np
import pytest

from repops_cupy.hashing import canonical_array, hash_tensor


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
