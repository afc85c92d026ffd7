"""Audit sampling: how likely an auditor that replays sampled intervals catches a cheater.

A job has C checkpoint intervals; a cheater corrupts j of them. An auditor picks m
distinct intervals uniformly at random and replays each; it catches the cheater if
any picked interval is corrupted. It misses with the hypergeometric probability

    P(miss) = C(C - j, m) / C(C, m)

Auditors (and jobs) sample independently, so their miss probabilities multiply. Everything is exact:
Python integers and `fractions.Fraction`, never floats.
"""
from __future__ import annotations

from fractions import Fraction
from math import ceil, comb

from .errors import LocalProtocolError


def _check(intervals: int, corrupted: int, samples: int) -> None:
    for name, value in (("intervals", intervals), ("corrupted", corrupted), ("samples", samples)):
        if type(value) is not int or value < 0:
            raise LocalProtocolError(f"{name} must be a non-negative int, got {value!r}")
    if intervals < 1:
        raise LocalProtocolError("a job has at least one interval")
    if corrupted > intervals or samples > intervals:
        raise LocalProtocolError(f"corrupted ({corrupted}) and samples ({samples}) are at most intervals ({intervals})")


def _check_count(name: str, value: int) -> None:
    if type(value) is not int or value < 1:
        raise LocalProtocolError(f"{name} must be a positive int, got {value!r}")


def sample_size(rate: float, intervals: int) -> int:
    """m: how many of a job's `intervals` an auditor replays at audit `rate`:
    ceil(rate * intervals), at least one, at most all. The product is a float's, as
    auditors have always drawn it (0.07 * 100 is 7.000000000000001, so 8)."""
    if type(intervals) is not int or intervals < 1:
        raise LocalProtocolError(f"a job has at least one interval, got {intervals!r}")
    if isinstance(rate, bool) or not isinstance(rate, (int, float, Fraction)) or not 0 <= rate <= 1:
        raise LocalProtocolError(f"an audit rate lies in [0, 1], got {rate!r}")
    return max(1, min(intervals, ceil(rate * intervals)))


def miss_probability(intervals: int, corrupted: int, samples: int) -> Fraction:
    """P(no sampled interval is corrupted) for one auditor sampling without replacement."""
    _check(intervals, corrupted, samples)
    return Fraction(comb(intervals - corrupted, samples), comb(intervals, samples))


def catch_probability(intervals: int, corrupted: int, samples: int) -> Fraction:
    """P(at least one of `samples` distinct random intervals is among the `corrupted`)."""
    return 1 - miss_probability(intervals, corrupted, samples)


def catch_probability_across_auditors(intervals: int, corrupted: int, samples: int, auditors: int) -> Fraction:
    """P(at least one of `auditors` independent auditors, each sampling `samples` intervals, catches it)."""
    _check_count("auditors", auditors)
    return 1 - miss_probability(intervals, corrupted, samples) ** auditors


def catch_probability_across_jobs(intervals: int, corrupted: int, samples: int, *, jobs: int,
                                  auditors: int = 1) -> Fraction:
    """P(a cheater who corrupts `corrupted` intervals in each of `jobs` jobs is caught at least once)."""
    _check_count("jobs", jobs)
    _check_count("auditors", auditors)
    return 1 - miss_probability(intervals, corrupted, samples) ** (auditors * jobs)


def min_samples(intervals: int, corrupted: int, target: Fraction | float | int, *, auditors: int = 1) -> int:
    """The smallest m with catch probability >= `target` (each of `auditors` sampling m intervals).

    Raises LocalProtocolError when no m reaches it (nothing corrupted, or a target above 1).
    """
    _check(intervals, corrupted, 0)
    _check_count("auditors", auditors)
    goal = Fraction(target)
    if not 0 <= goal <= 1:
        raise LocalProtocolError(f"a target probability lies in [0, 1], got {target!r}")
    if catch_probability_across_auditors(intervals, corrupted, intervals, auditors) < goal:
        raise LocalProtocolError(f"no sample size catches {corrupted} of {intervals} intervals with probability {goal}")
    lo, hi = 0, intervals  # the catch probability never decreases with m: bisect
    while lo < hi:
        mid = (lo + hi) // 2
        if catch_probability_across_auditors(intervals, corrupted, mid, auditors) >= goal:
            hi = mid
        else:
            lo = mid + 1
    return lo
