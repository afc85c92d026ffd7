"""Binomial confidence intervals for observed catch rates (standard library only).

Wilson's score interval is what the report plots: it stays inside [0, 1], is not
degenerate at 0 or n successes, and its coverage is close to nominal for the
20-100 trials a sweep point has. Clopper-Pearson (exact, conservative) is there to
state the same point the strict way; both take the confidence level as an argument.
"""
from __future__ import annotations

from math import comb, sqrt
from statistics import NormalDist


def _check(successes: int, trials: int, level: float) -> None:
    if type(successes) is not int or type(trials) is not int or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials (ints), got {successes!r} of {trials!r}")
    if not 0 < level < 1:
        raise ValueError(f"the confidence level lies in (0, 1), got {level!r}")


def wilson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when there are no trials."""
    _check(successes, trials, level)
    if trials == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # The exact ends: 0 successes has lower end 0, all successes upper end 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def _bisect(f, target: float, increasing: bool) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def clopper_pearson_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval: each tail holds at most (1 - level) / 2."""
    _check(successes, trials, level)
    if trials == 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    # lower end: P(X >= successes | p) = tail; upper end: P(X <= successes | p) = tail
    low = 0.0 if successes == 0 else _bisect(
        lambda p: 1 - _binomial_cdf(successes - 1, trials, p), tail, increasing=True)
    high = 1.0 if successes == trials else _bisect(
        lambda p: _binomial_cdf(successes, trials, p), tail, increasing=False)
    return low, high
