"""Accuracy of the reproducible operators against exact or high-precision references.

For each operator and data set: the share of float32 results that are correctly
rounded (equal to the float32 nearest the true value) and the largest error in float32
ulps (at the correctly rounded value) among the results that are not ("<=0.5" when all
are). For comparison, the same numbers for NumPy's
own float32 computation where one exists (which is not reproducible across machines).

References:
- sum, mean, var, matmul: exact rational arithmetic (fractions.Fraction) on the float32
  inputs, then exact rounding to float32.
- large samples of exp, log, tanh, sigmoid and every float32 in [1, 4) for rsqrt: this
  machine's 80-bit long double (64-bit mantissa) decides where its value lies clearly
  inside the rounding interval (margin 2^-58 relative, far above long double libm
  error); the remaining cases go to the decimal reference below.
- exp, log, tanh, erf, sigmoid, sqrt, rsqrt, softmax, log_softmax, layer_norm, gelu:
  Python's decimal with 40 significant digits (see repops_cupy/scalar_reference.py; erf by
  its Taylor series, pi by the series of the decimal documentation). The true value is
  known to about 1e-40 relative, far below a float32 rounding boundary's resolution.

Operators not registered yet print "n/a". Usage: python scripts/accuracy_repops.py [--quick]
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

from repops_cupy import scalar_reference as ref
from repops_cupy import registry

for _module in ("elementwise", "shape", "reduce", "transcendental", "nn", "matmul"):
    try:
        importlib.import_module(f"repops_cupy.{_module}")
    except ImportError:
        pass

PREC = ref.PRECISION


def _d(v: float) -> Decimal:
    return Decimal(float(v))


# --- data sets ---------------------------------------------------------------------


def normal(gen, shape, scale=1.0):
    return (gen.normal(size=shape) * scale).astype(np.float32)


def spanning(gen, shape, positive=False):
    """Magnitudes spanning 10^-8 .. 10^8, random signs unless positive."""
    mag = gen.uniform(1, 10, size=shape) * 10.0 ** gen.integers(-8, 9, size=shape)
    sign = 1.0 if positive else np.where(gen.integers(0, 2, size=shape) == 1, 1.0, -1.0)
    return (sign * mag).astype(np.float32)


def cancelling(gen, shape):
    """Rows whose big terms cancel: x, -x and small noise, shuffled within each row."""
    rows, n = shape
    big = gen.normal(size=(rows, n // 3)) * 1e6
    small = gen.normal(size=(rows, n - 2 * (n // 3)))
    x = np.concatenate([big, -big, small], axis=1)
    idx = np.argsort(gen.random(size=x.shape), axis=1)
    return np.take_along_axis(x, idx, axis=1).astype(np.float32)


def offset(gen, shape, base=1e4):
    """A large common offset plus unit noise: cancellation for mean-subtracting ops."""
    return (base + gen.normal(size=shape)).astype(np.float32)


# --- scoring -----------------------------------------------------------------------


class Score:
    def __init__(self) -> None:
        self.n = 0
        self.exact = 0
        self.max_ulp = 0.0

    def add(self, y, truth) -> None:
        y = np.float32(y)
        r = ref.nearest_f32(truth)
        self.n += 1
        if y == r or (np.isnan(y) and np.isnan(r)):
            self.exact += 1
        else:
            self.max_ulp = max(self.max_ulp, ref.ulp_error_f32(y, truth))

    def cells(self) -> tuple[str, str]:
        if not self.n:
            return "-", "-"
        # max_ulp counts only results that are not correctly rounded; those are within 0.5
        ulp = "<=0.5" if self.max_ulp == 0 else (f"{self.max_ulp:.3g}" if self.max_ulp < 1e4 else f"{self.max_ulp:.2e}")
        return f"{100.0 * self.exact / self.n:.3f}%", ulp


def _have(op: str) -> bool:
    return op in registry.names()


# --- elementwise functions ------------------------------------------------------------

ELEMENTWISE = {
    # op: (true value, numpy float32 baseline, domain)
    "exp": (ref.true_exp, np.exp, "any"),  # exact: baseline shown for comparison only
    "log": (ref.true_log, np.log, "positive"),  # exact: baseline shown for comparison only
    "tanh": (ref.true_tanh, np.tanh, "any"),  # exact: baseline shown for comparison only
    "erf": (ref.true_erf, None, "any"),
    "sigmoid": (ref.true_sigmoid, lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)), "any"),  # exact: baseline
    "sqrt": (ref.true_sqrt, np.sqrt, "positive"),
    "rsqrt": (ref.true_rsqrt, lambda x: np.float32(1) / np.sqrt(x), "positive"),
}


def _gelu_truth(x: float) -> Decimal:
    """0.5 x (1 + erf(x / sqrt 2)), all in Decimal (erf carries the digits 1 + erf needs)."""
    with ref._context(PREC + 20):
        arg = _d(x) / Decimal(2).sqrt()
    erf = ref.true_erf(arg)
    with ref._context(PREC + 20):
        return _d(x) * (1 + erf) / 2


def elementwise_rows(gen, size):
    rows = []
    for op, (truth, baseline, domain) in ELEMENTWISE.items():
        sets = {
            "normal": np.abs(normal(gen, size, 3.0)) if domain == "positive" else normal(gen, size, 3.0),
            "10^+-8": spanning(gen, size, positive=domain == "positive"),
        }
        for name, x in sets.items():
            rows.append(_elementwise_row(op, name, x, truth, baseline))
    for name, x in {"normal": normal(gen, size, 3.0), "10^+-8": spanning(gen, size)}.items():
        rows.append(_elementwise_row("gelu", name, x, _gelu_truth, None))
    return rows


def _elementwise_row(op, name, x, truth, baseline):
    if not _have(op):
        return (op, name, len(x), "n/a", "n/a", "", "", "")
    y = registry.run(op, (x,))
    ours, base = Score(), Score()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        yb = baseline(x) if baseline is not None else None
    for i, xi in enumerate(x):
        t = truth(float(xi))
        ours.add(y[i], t)
        if yb is not None:
            base.add(yb[i], t)
    return (op, name, len(x), *ours.cells(), *(base.cells() if yb is not None else ("", "")), "decimal 40 digits")


# --- reductions and row-wise ops --------------------------------------------------------


def _exact_var(row, correction=0):
    fr = [Fraction(float(v)) for v in row]
    n = len(fr)
    m = sum(fr) / n
    return sum((v - m) ** 2 for v in fr) / (n - correction)


def reduction_rows(gen, rows_n, length):
    sets = {
        "normal": normal(gen, (rows_n, length)),
        "10^+-8": spanning(gen, (rows_n, length)),
        "cancelling": cancelling(gen, (rows_n, length)),
        "offset 1e4": offset(gen, (rows_n, length)),
    }
    truths = {
        "sum": lambda r: sum(Fraction(float(v)) for v in r),
        "mean": lambda r: sum(Fraction(float(v)) for v in r) / len(r),
        "var": _exact_var,
    }
    baselines = {
        "sum": lambda x: x.sum(axis=1),  # exact: baseline shown for comparison only
        "mean": lambda x: x.mean(axis=1),  # exact: baseline shown for comparison only
        "var": lambda x: x.var(axis=1),  # exact: baseline shown for comparison only
    }
    out = []
    for op in ("sum", "mean", "var"):
        for name, x in sets.items():
            if not _have(op):
                out.append((op, name, rows_n, "n/a", "n/a", "", "", ""))
                continue
            y = registry.run(op, (x,), {"axis": (1,)})
            with np.errstate(all="ignore"):
                yb = baselines[op](x)
            ours, base = Score(), Score()
            for i in range(rows_n):
                t = truths[op](x[i])
                ours.add(y[i], t)
                base.add(yb[i], t)
            out.append((op, f"{name}, rows of {length}", rows_n, *ours.cells(), *base.cells(), "exact (fractions)"))
    return out


def _softmax_truth(row, log=False):
    with localcontext() as ctx:
        ctx.prec = PREC + 10
        d = [_d(v) for v in row]
        m = max(d)
        e = [(v - m).exp() for v in d]
        s = sum(e)
        if log:
            ls = s.ln()
            return [v - m - ls for v in d]
        return [v / s for v in e]


def _layer_norm_truth(row, gamma, beta, eps):
    fr = [Fraction(float(v)) for v in row]
    n = len(fr)
    m = sum(fr) / n
    var = sum((v - m) ** 2 for v in fr) / n
    with localcontext() as ctx:
        ctx.prec = PREC + 10
        inv = 1 / (Decimal(var.numerator) / Decimal(var.denominator) + _d(eps)).sqrt()
        md = Decimal(m.numerator) / Decimal(m.denominator)
        return [(_d(v) - md) * inv * _d(g) + _d(b) for v, g, b in zip(row, gamma, beta)]


def rowwise_rows(gen, rows_n, length):
    out = []
    sets = {"normal x3": normal(gen, (rows_n, length), 3.0), "10^+-8": spanning(gen, (rows_n, length)),
            "offset 1e4": offset(gen, (rows_n, length))}
    for op, log in (("softmax", False), ("log_softmax", True)):
        for name, x in sets.items():
            if not _have(op):
                out.append((op, name, rows_n * length, "n/a", "n/a", "", "", ""))
                continue
            y = registry.run(op, (x,), {"axis": -1})
            score = Score()
            for i in range(rows_n):
                for yi, t in zip(y[i], _softmax_truth(x[i], log)):
                    score.add(yi, t)
            out.append((op, f"{name}, rows of {length}", rows_n * length, *score.cells(), "", "", "decimal 50 digits"))
    gamma, beta, eps = normal(gen, (length,)), normal(gen, (length,)), 1e-5
    for name, x in sets.items():
        if not _have("layer_norm"):
            out.append(("layer_norm", name, rows_n * length, "n/a", "n/a", "", "", ""))
            continue
        y = registry.run("layer_norm", (x, gamma, beta), {"eps": eps})
        score = Score()
        for i in range(rows_n):
            for yi, t in zip(y[i], _layer_norm_truth(x[i], gamma, beta, eps)):
                score.add(yi, t)
        out.append(("layer_norm", f"{name}, rows of {length}", rows_n * length, *score.cells(), "", "",
                    "exact mean/var, decimal 50"))
    return out


def matmul_rows(gen, m, k, n):
    out = []
    sets = {
        "normal": (normal(gen, (m, k)), normal(gen, (k, n))),
        "10^+-8": (spanning(gen, (m, k)), spanning(gen, (k, n))),
        "cancelling": (cancelling(gen, (m, k)), normal(gen, (k, n))),
    }
    for name, (a, b) in sets.items():
        if not _have("matmul"):
            out.append(("matmul", name, m * n, "n/a", "n/a", "", "", ""))
            continue
        y = registry.run("matmul", (a, b))
        yb = a @ b
        ours, base = Score(), Score()
        fa = [[Fraction(float(v)) for v in row] for row in a]
        fb = [[Fraction(float(b[r, c])) for r in range(k)] for c in range(n)]
        for i in range(m):
            for j in range(n):
                t = sum(p * q for p, q in zip(fa[i], fb[j]))
                ours.add(y[i, j], t)
                base.add(yb[i, j], t)
        out.append(("matmul", f"{name}, K={k}", m * n, *ours.cells(), *base.cells(), "exact (fractions)"))
    return out


# --- large samples against 64-bit-mantissa long double -----------------------------------

LONG_MARGIN = 2.0**-58  # relative: far above the error of this machine's long double libm


def _long_double_check(x32, y32, long_fn, truth):
    """Correctly rounded share and max ulp of y32 = f(x32) on many inputs.

    The long double value t (64-bit mantissa) decides where it lies clearly between the
    two rounding midpoints around y; every other case (t near a midpoint, non-finite or
    zero results) is decided by the 40-digit Decimal reference.
    """
    ld = np.longdouble
    with np.errstate(all="ignore"):
        t = long_fn(x32.astype(ld))
        below = np.nextafter(y32, np.float32(-np.inf)).astype(ld)
        above = np.nextafter(y32, np.float32(np.inf)).astype(ld)
        y = y32.astype(ld)
        margin = np.abs(t) * ld(LONG_MARGIN)
        clear = np.isfinite(t) & np.isfinite(y) & (y != 0) & (t > (y + below) / 2 + margin) & (t < (y + above) / 2 - margin)
    score = Score()
    score.n = score.exact = int(clear.sum())  # strictly inside the rounding interval of y
    for i in np.flatnonzero(~clear):
        score.add(y32[i], truth(float(x32[i])))
    return score, int((~clear).sum())


def _bit_patterns(gen, count, limit, positive=False):
    """float32 from random bit patterns with |x| < limit (every binade, subnormals included)."""
    bits = gen.integers(0, 1 << 31, size=4 * count, dtype=np.int64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) < limit)][:count]
    return x if positive else np.where(gen.integers(0, 2, size=x.size) == 1, x, -x).astype(np.float32)


def large_sample_rows(gen, count):
    cases = {
        # op: (inputs, long double function, Decimal truth)
        "exp": (np.concatenate([_bit_patterns(gen, count // 2, 88.7), gen.uniform(-103.9, 88.7, count // 2).astype(np.float32)]),
                np.exp, ref.true_exp),  # exact: long double reference, checked near midpoints
        "log": (_bit_patterns(gen, count, np.inf, positive=True), np.log, ref.true_log),  # exact: reference as above
        "tanh": (np.concatenate([_bit_patterns(gen, count // 2, 10.0), gen.uniform(-10, 10, count // 2).astype(np.float32)]),
                 np.tanh, ref.true_tanh),  # exact: reference as above
        "sigmoid": (np.concatenate([_bit_patterns(gen, count // 2, 110.0), gen.uniform(-110, 40, count // 2).astype(np.float32)]),
                    lambda v: 1 / (1 + np.exp(-v)), ref.true_sigmoid),  # exact: reference as above
    }
    rows = []
    for op, (x, long_fn, truth) in cases.items():
        if not _have(op):
            rows.append((op, "bit patterns + uniform", len(x), "n/a", "n/a", "", "", ""))
            continue
        y = registry.run(op, (x,))
        score, decided = _long_double_check(x, y, long_fn, truth)
        rows.append((op, "bit patterns + uniform", len(x), *score.cells(), "", "",
                     f"long double; {decided} by decimal"))
    if _have("rsqrt"):
        # every float32 in [1, 4): rsqrt(4^k x) = 2^-k rsqrt(x) exactly, here and in the
        # true function, so this covers every positive finite float32 input
        x = (np.arange(1 << 24, dtype=np.uint32) + np.float32(1.0).view(np.uint32)).view(np.float32)
        y = registry.run("rsqrt", (x,))
        score, decided = _long_double_check(x, y, lambda v: 1 / np.sqrt(v), ref.true_rsqrt)
        rows.append(("rsqrt", "all float32 in [1, 4)", len(x), *score.cells(), "", "", f"long double; {decided} by decimal"))
    return rows


HEADER = ("op", "data", "n", "correctly rounded", "max ulp", "numpy f32 CR", "numpy max ulp", "reference")


def print_table(rows) -> None:
    rows = [HEADER] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    for j, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller samples")
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args(argv)
    gen = np.random.default_rng(args.seed)
    size = 400 if args.quick else 4000
    start = time.time()
    rows = elementwise_rows(gen, size)
    rows += reduction_rows(gen, 20 if args.quick else 100, 1000)
    rows += rowwise_rows(gen, 8 if args.quick else 40, 64)
    rows += matmul_rows(gen, 8, 256, 8 if args.quick else 24)
    rows += large_sample_rows(gen, 1 << (14 if args.quick else 21))
    print_table(rows)
    print(f"\n({time.time() - start:.0f} s; numpy f32 columns: NumPy's own float32 result on this machine, "
          "not reproducible across machines; blank where NumPy has no such function)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
