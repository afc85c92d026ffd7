"""The catch rate of audits, observed against `protocol.sampling`, over one or more runs.

A *trial* is a cheat that auditors alone could catch: a provider committed a root
that is not the job's, no other provider of the job committed (so no co-provider's
dispute catches it), and at least one auditor finished its audit. It succeeded when
the provider was slashed in that job: the whole way, from the sampled replay through
the dispute game to the contract.

Its prediction: the cheat corrupted j of the job's C intervals (measured by replay,
`truth.replay_run`); each auditor replayed m = ceil(rate * C) of them at random
(at least one), so all miss with probability (C(C-j, m) / C(C, m)) ** auditors.
A run gives one point (its audit rate): the observed fraction of trials caught with
its 95% interval, and the mean prediction over its trials. The curve is the same
arithmetic over all rates, for the trials' pooled (C, j).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any

from protocol import catch_probability_across_auditors
from protocol.sampling import sample_size

from .stats import clopper_pearson_interval, wilson_interval

INTERVALS = {"wilson": wilson_interval, "clopper-pearson": clopper_pearson_interval}
DEFAULT_RATES = (0.125, 0.25, 0.375, 0.5, 0.75)
# every strategy but wrong-lr corrupts exactly one interval, so the predicted curve is the single j = 1 one
SWEEP_STRATEGIES = ("perturb-weight", "skip-step", "wrong-batch", "poison-data", "lie-in-bisection",
                    "wrong-op-output", "equivocate", "stall")


def samples_for(rate: float, intervals: int) -> int:
    """The auditor's sample size for an audit rate (as `node.roles.auditor` draws it)."""
    return sample_size(rate, intervals)


def trials(report: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for job in report["jobs"]:
        commits = job.get("commitments", [])
        if len(commits) != 1:
            continue
        (c,) = commits
        finished = [a for a in c["audits"] if a["state"] in ("ok", "mismatch", "challenged")]
        if c["honest"] or not finished or not c["corrupted_intervals"] or c["predicted_catch"] is None:
            continue
        out.append({"intervals": job["intervals"], "corrupted": len(c["corrupted_intervals"]),
                    "caught": c["slashed"], "predicted": c["predicted_catch"], "auditors": len(finished)})
    return out


def catch_section(reports: list[dict[str, Any]], *, interval: str = "wilson", level: float = 0.95) -> dict[str, Any]:
    """report["catch"]: one point per run (its audit rate) and the analytic curve."""
    bounds = INTERVALS[interval]
    points = []
    pooled: Counter[tuple[int, int, int]] = Counter()
    for report in reports:
        rate = report["config"]["audit_rate"]
        ts = trials(report)
        caught = sum(t["caught"] for t in ts)
        low, high = bounds(caught, len(ts), level) if ts else (0.0, 1.0)
        predicted = sum(t["predicted"] for t in ts) / len(ts) if ts else None
        sizes = sorted({samples_for(rate, t["intervals"]) for t in ts})
        points.append({
            "audit_rate": rate, "samples": sizes, "trials": len(ts), "caught": caught,
            "observed": caught / len(ts) if ts else None, "ci_low": low, "ci_high": high, "predicted": predicted,
            "agrees": predicted is not None and low <= predicted <= high,
        })
        pooled.update((t["intervals"], t["corrupted"], t["auditors"]) for t in ts)
    rates = [i / 200 for i in range(201)]
    total = sum(pooled.values())
    curve = [sum(n * float(catch_probability_across_auditors(c, j, samples_for(r, c), a))
                 for (c, j, a), n in pooled.items()) / total if total else math.nan for r in rates]
    kinds = sorted(pooled)
    label = ", ".join(f"C={c}, j={j}, {a} auditor{'s' if a > 1 else ''}" for c, j, a in kinds[:3])
    if len(kinds) > 3:
        label += ", ..."
    return {"points": points, "interval": interval, "level": level,
            "curve": {"rates": rates, "predicted": curve}, "curve_label": label or "no trials",
            "agree": sum(p["agrees"] for p in points), "rated": sum(p["trials"] > 0 for p in points)}
