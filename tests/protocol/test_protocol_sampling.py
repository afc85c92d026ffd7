"""Audit sampling math, against brute-force enumeration and Monte Carlo."""
from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest

from protocol import (
    LocalProtocolError, catch_probability, catch_probability_across_auditors, catch_probability_across_jobs,
    miss_probability, min_samples,
)


def brute_force(intervals: int, corrupted: int, samples: int) -> Fraction:
    bad = set(range(corrupted))  # which ones are corrupted does not matter by symmetry
    picks = list(itertools.combinations(range(intervals), samples))
    return Fraction(sum(1 for p in picks if bad & set(p)), len(picks))


def test_exact_against_enumeration():
    for intervals in range(1, 9):
        for corrupted in range(intervals + 1):
            for samples in range(intervals + 1):
                assert catch_probability(intervals, corrupted, samples) == brute_force(intervals, corrupted, samples)


def test_known_values():
    assert catch_probability(10, 1, 1) == Fraction(1, 10)
    assert catch_probability(10, 2, 3) == 1 - Fraction(8 * 7 * 6, 10 * 9 * 8)
    assert catch_probability(10, 0, 10) == 0 and catch_probability(10, 1, 10) == 1
    assert miss_probability(100, 5, 0) == 1


def test_auditors_and_jobs_multiply_misses():
    one = miss_probability(20, 2, 3)
    assert catch_probability_across_auditors(20, 2, 3, 4) == 1 - one ** 4
    assert catch_probability_across_jobs(20, 2, 3, jobs=5) == 1 - one ** 5
    assert catch_probability_across_jobs(20, 2, 3, jobs=5, auditors=2) == 1 - one ** 10


def test_monte_carlo_agrees_across_auditors():
    rng = random.Random(7)
    intervals, corrupted, samples, auditors, trials = 12, 2, 2, 3, 20_000
    bad = set(range(corrupted))
    caught = sum(
        any(bad & set(rng.sample(range(intervals), samples)) for _ in range(auditors)) for _ in range(trials))
    exact = float(catch_probability_across_auditors(intervals, corrupted, samples, auditors))
    assert abs(caught / trials - exact) < 0.015  # ~4.5 standard deviations


def test_min_samples_is_the_smallest_sufficient_size():
    for intervals, corrupted, target, auditors in ((100, 1, Fraction(1, 2), 1), (100, 5, 0.99, 1), (50, 3, 0.9, 3),
                                                   (10, 10, 1, 1), (10, 1, 0, 1), (1000, 10, 0.999, 2)):
        m = min_samples(intervals, corrupted, target, auditors=auditors)
        assert catch_probability_across_auditors(intervals, corrupted, m, auditors) >= Fraction(target)
        if m > 0:
            assert catch_probability_across_auditors(intervals, corrupted, m - 1, auditors) < Fraction(target)
    assert min_samples(100, 1, Fraction(1, 2)) == 50


def test_invalid_arguments():
    for bad in (lambda: catch_probability(0, 0, 0), lambda: catch_probability(5, 6, 1),
                lambda: catch_probability(5, 1, 6), lambda: catch_probability(5, -1, 1),
                lambda: catch_probability(5, True, 1), lambda: catch_probability_across_auditors(5, 1, 1, 0),
                lambda: catch_probability_across_jobs(5, 1, 1, jobs=0), lambda: min_samples(10, 0, 0.5),
                lambda: min_samples(10, 1, 1.5)):
        with pytest.raises(LocalProtocolError):
            bad()


def test_sample_size_is_the_rate_of_the_intervals_rounded_up_at_least_one():
    from protocol.sampling import sample_size

    assert [sample_size(r, 8) for r in (0, 0.125, 0.2, 0.5, 1)] == [1, 1, 2, 4, 8]
    assert sample_size(Fraction(1, 3), 9) == 3 and sample_size(1, 1) == 1
    assert sample_size(0.07, 100) == 8  # a float product, as auditors have always drawn it: 7.000000000000001
    for rate in (0.125, 0.25, 0.375, 0.5, 0.75):  # the sweep's rates are exact in binary
        assert all(sample_size(rate, c) == max(1, -(-int(rate * 1000) * c // 1000)) for c in range(1, 40))


@pytest.mark.parametrize("rate, intervals", [(0.5, 0), (0.5, 2.0), (-0.1, 4), (1.5, 4), ("1", 4), (True, 4)])
def test_sample_size_refuses_what_is_no_rate_or_no_job(rate, intervals):
    from protocol.sampling import sample_size

    with pytest.raises(LocalProtocolError):
        sample_size(rate, intervals)
