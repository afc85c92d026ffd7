"""Confidence intervals of the testnet's catch-rate plot, against published values."""
from __future__ import annotations

import pytest

from node.testnet.stats import clopper_pearson_interval, wilson_interval


def test_wilson_matches_the_textbook_value():
    # 8 of 10 at 95%: (0.4902, 0.9433) (Newcombe 1998, method 3)
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)


def test_clopper_pearson_matches_the_textbook_value():
    # 8 of 10 at 95%: (0.4439, 0.9748)
    low, high = clopper_pearson_interval(8, 10)
    assert low == pytest.approx(0.4439, abs=1e-4) and high == pytest.approx(0.9748, abs=1e-4)


@pytest.mark.parametrize("interval", [wilson_interval, clopper_pearson_interval])
def test_intervals_hold_the_observed_rate_and_close_at_the_ends(interval):
    assert interval(0, 20)[0] == 0.0 and interval(20, 20)[1] == 1.0
    assert interval(0, 0) == (0.0, 1.0)
    for k in range(0, 31):
        low, high = interval(k, 30)
        assert 0.0 <= low <= k / 30 <= high <= 1.0
    # more trials, narrower interval
    assert interval(50, 100)[1] - interval(50, 100)[0] < interval(5, 10)[1] - interval(5, 10)[0]


def test_clopper_pearson_is_the_wider_one():
    for k in (1, 5, 9):
        w, c = wilson_interval(k, 10), clopper_pearson_interval(k, 10)
        assert c[0] <= w[0] and w[1] <= c[1]


@pytest.mark.parametrize("args", [(3, 2), (-1, 4), (1.0, 4)])
def test_bad_counts_are_refused(args):
    with pytest.raises(ValueError):
        wilson_interval(*args)
