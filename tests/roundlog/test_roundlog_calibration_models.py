"""The shipped thresholds were measured on four models; on the two added ones (a residual MLP
with layer norm and dropout, a gate-by-gate GRU) they cover the disagreement measured here and
no site falls back to the unmeasured default."""
import pytest

from repops_cupy.roundlog import RunConfig
from repops_cupy.roundlog.calibrated import BETAS, MODELS, RATIOS
from repops_cupy.roundlog.thresholds import MARGIN
from repops_cupy.roundlog.trainer import calibrate


def test_table_records_its_models_and_ratios():
    assert set(MODELS) >= {"cnn", "gpt", "mlp", "gru"}
    assert set(RATIOS) == set(BETAS)
    for key, beta in BETAS.items():
        assert beta >= MARGIN * RATIOS[key], key


@pytest.mark.parametrize("model,pair", [("mlp", dict(backend="numpy")), ("gru", dict(backend="numpy")),
                                        ("gru", dict(micro_batch=2))])
def test_table_covers_the_added_models(setup_of, thresholds, model, pair):
    cal = calibrate(*setup_of(model), RunConfig(threads=1), RunConfig(threads=1, **pair), steps=2)
    assert not cal.exactness_violations()
    assert any(r > 0 for r in cal.ratios.values()), "the configurations never disagreed: nothing measured"
    for key, ratio in cal.ratios.items():
        if key in cal.exact:
            continue
        assert key in BETAS or f"{key.split(':', 1)[0]}:*" in BETAS, f"{key} was never calibrated"
        assert thresholds.beta(key) >= 4 * ratio, (key, ratio, thresholds.beta(key))
