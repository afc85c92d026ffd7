"""Thresholds: the shipped table covers the disagreement measured on this machine, and
ops declared exact really give the same float64 bits across configurations."""
import pytest

from repops_cupy.roundlog import RunConfig
from repops_cupy.roundlog.thresholds import DEFAULT_BETA, FLOOR_BETA, MIN_BETA, Thresholds
from repops_cupy.roundlog.trainer import calibrate


def test_from_ratios_applies_margin_floor_and_powers_of_two():
    betas = Thresholds.from_ratios({"a": 0.0, "b": 40.0, "c": 1000.0}, margin=16)
    assert betas == {"a": FLOOR_BETA, "b": 1024.0, "c": 16384.0}


def test_lookup_order_and_exact_zero():
    t = Thresholds({"linear:out0": 512.0, "gelu:*": 300.0, "zero": 0.0, "tiny": 1.0})
    assert t.beta("linear:out0") == 512.0
    assert t.beta("gelu:grad0") == 300.0
    assert t.beta("never-seen") == DEFAULT_BETA
    assert t.beta("zero") == 0.0
    assert t.beta("tiny") == MIN_BETA
    assert Thresholds.from_dict(t.to_dict()).betas == t.betas


@pytest.mark.parametrize("model,pair", [("gpt", dict(backend="numpy")), ("cnn", dict(micro_batch=2))])
def test_shipped_table_covers_measured_disagreement(setup_of, thresholds, model, pair):
    cal = calibrate(*setup_of(model), RunConfig(threads=1), RunConfig(threads=1, **pair), steps=2)
    assert not cal.exactness_violations()
    assert any(r > 0 for r in cal.ratios.values()), "the configurations never disagreed: nothing measured"
    for key, ratio in cal.ratios.items():
        if key in cal.exact:
            continue
        assert thresholds.beta(key) >= 4 * ratio, (key, ratio, thresholds.beta(key))
