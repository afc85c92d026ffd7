"""The report's figures, drawn with matplotlib (Agg) from report.json's contents.

Each function takes the report (a dict, as written to report.json) and returns PNG
bytes, or None when the run has nothing to show in that figure.
"""
from __future__ import annotations

import io
from typing import Any

ETHER = 10**18
HONEST_COLOUR, CHEAT_COLOUR, OTHER_COLOUR = "#1f77b4", "#d62728", "#7f7f7f"


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def catch_rate_plot(report: dict[str, Any]) -> bytes | None:
    """Observed catch rate with its 95% interval against the sampling arithmetic, by audit rate."""
    catch = report.get("catch")
    if not catch or not catch.get("points"):
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curve = catch["curve"]
    ax.step(curve["rates"], curve["predicted"], where="post", color=OTHER_COLOUR,
            label=f"predicted ({catch['curve_label']})")
    points = [p for p in catch["points"] if p["trials"]]
    x = [p["audit_rate"] for p in points]
    y = [p["observed"] for p in points]
    low = [p["observed"] - p["ci_low"] for p in points]
    high = [p["ci_high"] - p["observed"] for p in points]
    ax.errorbar(x, y, yerr=[low, high], fmt="o", color=CHEAT_COLOUR, capsize=4,
                label=f"observed, 95% {catch['interval']} interval")
    ax.scatter([p["audit_rate"] for p in points], [p["predicted"] for p in points], marker="_", s=300,
               color="black", zorder=3, label="predicted for the cheats of that run")
    for p in points:
        ax.annotate(f"{p['caught']}/{p['trials']}", (p["audit_rate"], p["observed"]), textcoords="offset points",
                    xytext=(8, -4), fontsize=8)
    ax.set_xlabel("audit rate (fraction of checkpoint intervals each auditor replays)")
    ax.set_ylabel("cheats caught")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(-0.02, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Catch rate: observed vs protocol.sampling")
    return _png(fig)


def job_timeline_plot(report: dict[str, Any]) -> bytes | None:
    """Each job from submission to settlement: opened, first commitment, disputes, settled."""
    jobs = [j for j in report["jobs"] if j.get("opened_at") is not None]
    if not jobs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 0.6 + 0.28 * len(jobs)))
    for row, job in enumerate(jobs):
        start = job["submitted_at"]
        end = job.get("settled_at")
        cheated = any(not c["honest"] for c in job.get("commitments", []))
        colour = CHEAT_COLOUR if cheated else HONEST_COLOUR
        ax.plot([start, end if end is not None else start], [row, row], color=colour, lw=4, alpha=0.6,
                solid_capstyle="butt")
        commits = [c["committed_at"] for c in job.get("commitments", [])]
        if commits:
            ax.plot(commits, [row] * len(commits), "k|", ms=9)
        if end is None:
            ax.plot([start], [row], "x", color=colour)
    disputes = {d["dispute_id"]: d for d in report["disputes"]}
    for row, job in enumerate(jobs):
        for dispute_id in job.get("disputes", []):
            d = disputes.get(dispute_id)
            if d and d["closed_at"] is not None:
                ax.plot([d["opened_at"], d["closed_at"]], [row + 0.25, row + 0.25], color="orange", lw=2)
    ax.set_yticks(range(len(jobs)), [f"job {j['index']}" for j in jobs], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the network started")
    ax.set_title("Jobs: submitted → settled (red: a provider cheated; | commitment; orange: dispute)")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def settle_time_plot(report: dict[str, Any]) -> bytes | None:
    """Distribution of the time from submission to the settled result, honest and cheated jobs apart."""
    times = [(j["submit_to_settled_s"], any(not c["honest"] for c in j.get("commitments", [])))
             for j in report["jobs"] if j.get("submit_to_settled_s") is not None]
    if not times:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    honest = [t for t, c in times if not c]
    cheated = [t for t, c in times if c]
    bins = max(5, min(30, len(times) // 2))
    ax.hist([honest, cheated], bins=bins, stacked=True, color=[HONEST_COLOUR, CHEAT_COLOUR],
            label=[f"honest jobs ({len(honest)})", f"a provider cheated ({len(cheated)})"])
    config = report.get("config", {})
    windows = sum(config.get(k, 0) for k in ("accept_within", "commit_within", "challenge_within"))
    if windows:
        ax.axvline(windows, color="black", ls="--", lw=1, label=f"job windows ({windows:g} s)")
    ax.set_xlabel("seconds from submission to settlement")
    ax.set_ylabel("jobs")
    ax.legend(fontsize=8)
    ax.set_title("Time from submit to settled result")
    return _png(fig)


def dispute_plot(report: dict[str, Any]) -> bytes | None:
    """Rounds and bytes of every dispute."""
    disputes = [d for d in report["disputes"] if d.get("rounds") is not None]
    if not disputes:
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.0, 3.2))
    rounds = [d["rounds"] for d in disputes]
    left.hist(rounds, bins=range(min(rounds), max(rounds) + 2), color=OTHER_COLOUR, align="left")
    left.set_xlabel("rounds per dispute")
    left.set_ylabel("disputes")
    sized = [d for d in disputes if d.get("bytes_to_referee") is not None]
    if sized:
        right.scatter([d["rounds"] for d in sized], [d["bytes_to_referee"] / 1024 for d in sized], color=CHEAT_COLOUR)
        right.set_xlabel("rounds")
        right.set_ylabel("KiB of moves the referee received")
    else:
        right.text(0.5, 0.5, "no referee logs", ha="center", va="center", transform=right.transAxes)
    fig.suptitle(f"Disputes ({len(disputes)})")
    return _png(fig)


def balance_plot(report: dict[str, Any]) -> bytes | None:
    """Stake and earnings (credit + withdrawn) of every staked node over time."""
    nodes = {n["name"]: n for n in report["nodes"]}
    series = {name: b for name, b in report["balances"].items() if name in nodes and nodes[name]["role"] != "client"}
    if not series:
        return None
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 5.2), sharex=True)
    end = max((rows[-1][0] for b in series.values() if (rows := b["rows"])), default=0.0)
    for name, b in sorted(series.items()):
        rows = b["rows"]
        if not rows:
            continue
        t = [r[0] for r in rows] + [end]
        stake = [r[1] / ETHER for r in rows] + [rows[-1][1] / ETHER]
        earned = [(r[3] + r[4]) / ETHER for r in rows] + [(rows[-1][3] + rows[-1][4]) / ETHER]
        colour = CHEAT_COLOUR if nodes[name]["cheat"] else (HONEST_COLOUR if nodes[name]["role"] == "provider"
                                                            else "#2ca02c")
        top.step(t, stake, where="post", color=colour, alpha=0.7, lw=1)
        bottom.step(t, earned, where="post", color=colour, alpha=0.7, lw=1)
    top.set_ylabel("stake (ether)")
    bottom.set_ylabel("earned (ether)")
    bottom.set_xlabel("seconds since the network started")
    from matplotlib.lines import Line2D

    top.legend(handles=[Line2D([], [], color=c, label=l) for c, l in (
        (HONEST_COLOUR, "honest provider"), (CHEAT_COLOUR, "cheating provider"), ("#2ca02c", "auditor"))],
        fontsize=8, loc="lower left")
    top.set_title("Stake and earnings of every node")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    return _png(fig)


FIGURES = (
    ("catch", "Catch rate against the sampling arithmetic", catch_rate_plot),
    ("timeline", "Jobs over time", job_timeline_plot),
    ("settle", "Time from submission to settled result", settle_time_plot),
    ("disputes", "Rounds and bytes per dispute", dispute_plot),
    ("balances", "Stake and earnings over time", balance_plot),
)
