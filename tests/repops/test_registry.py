import numpy as np
import pytest

from repops_cupy import registry
from repops_cupy.errors import OpError
from repops_cupy.registry import Attr, OpDef


def _scale_forward(x, *, factor, flip):
    return (x * np.float32(factor) * (np.float32(-1) if flip else np.float32(1))).astype(np.float32)


SCALE = OpDef("test_scale", _scale_forward, 1, {"factor": Attr(float), "flip": Attr(bool, False)})


def test_canonical_attrs_fills_defaults_and_sorts():
    assert list(SCALE.canonical_attrs({"factor": 2})) == ["factor", "flip"]
    assert SCALE.canonical_attrs({"factor": 2}) == {"factor": 2.0, "flip": False}


@pytest.mark.parametrize(
    "attrs, message",
    [
        ({}, "missing required attribute 'factor'"),
        ({"factor": 1.0, "bogus": 1}, "unknown attribute"),
        ({"factor": "2"}, "must be a number"),
        ({"factor": True}, "must be a number"),
        ({"factor": 1.0, "flip": 1}, "must be bool"),
    ],
)
def test_bad_attributes_raise_op_error(attrs, message):
    with pytest.raises(OpError, match=message):
        SCALE.canonical_attrs(attrs)


def test_tuple_attribute_accepts_lists_and_rejects_non_ints():
    spec = Attr(tuple)
    assert spec.coerce("op", "axis", [0, 2]) == (0, 2)
    with pytest.raises(OpError):
        spec.coerce("op", "axis", (0, 1.5))
    with pytest.raises(OpError):
        spec.coerce("op", "axis", (True,))


def test_unknown_operator_is_an_op_error():
    with pytest.raises(OpError, match="unknown operator 'no_such_op'"):
        registry.run("no_such_op", ())


def test_register_run_and_vjp_through_emit(monkeypatch):
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))

    def twice(x):
        return (x + x).astype(np.float32)

    def twice_vjp(emit, g, inputs, out, attrs):
        return (emit("test_twice", g),)

    registry.register("test_twice", twice, arity=1, vjp=twice_vjp)
    with pytest.raises(RuntimeError, match="registered twice"):
        registry.register("test_twice", twice, arity=1)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(registry.run("test_twice", (x,)), 2 * x)
    with pytest.raises(OpError, match="expected 1 input"):
        registry.run("test_twice", (x, x))

    emitted = []

    def recording_emit(name, *inputs, **attrs):
        emitted.append(name)
        return registry.run(name, inputs, attrs)

    (gx,) = registry.vjp("test_twice", np.ones(4, np.float32), (x,), twice(x), emit=recording_emit)
    assert emitted == ["test_twice"]
    np.testing.assert_array_equal(gx, np.full(4, 2, np.float32))
