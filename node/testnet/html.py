"""report.html: one self-contained page (figures embedded as base64 PNG) from report.json's contents."""
from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from ..atomic_file import write_atomic
from .plots import FIGURES

ETHER = 10**18

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { margin-bottom: 0.2em; } .ok { color: #1a7f37; } .fail { color: #cf222e; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
td, th { border: 1px solid #ddd; padding: 3px 7px; text-align: right; } th { background: #f4f4f4; }
td.l, th.l { text-align: left; } figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; }
code { font-size: 0.9em; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _table(headers: list[str], rows: list[list[Any]], left: int = 1) -> str:
    head = "".join(f"<th class='l'>{_e(h)}</th>" if i < left else f"<th>{_e(h)}</th>" for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td class='l'>{_e(v)}</td>" if i < left else f"<td>{_e(v)}</td>"
                                    for i, v in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _s(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def render_html(report: dict[str, Any]) -> str:
    summary = report["summary"]
    config = report["config"]
    parts = [f"<!doctype html><meta charset='utf-8'><title>gavel testnet report</title><style>{STYLE}</style>",
             "<h1>gavel testnet</h1>"]
    verdict = "ok" if summary["ok"] else "FAILED"
    parts.append(f"<p class='{'ok' if summary['ok'] else 'fail'}'><b>{verdict}</b>: "
                 f"{summary['honest_slashed']} honest node(s) slashed, {summary['cheats_caught']} of "
                 f"{summary['cheats_audited']} audited cheats caught ({summary['cheats']} cheats in all), "
                 f"{summary['clients_unserved']} client(s) unserved.</p>")
    if summary.get("failures"):
        parts.append("<ul class='fail'>" + "".join(f"<li>{_e(f)}</li>" for f in summary["failures"]) + "</ul>")
    parts.append("<p><code>" + _e(config.get("command", "")) + "</code></p>")
    parts.append(_table(["summary", "value"], [[k, v] for k, v in summary.items() if k != "failures"]))

    catch = report.get("catch")
    if catch and catch.get("points"):
        parts.append("<h2>Catch rate</h2>")
        parts.append(_table(
            ["audit rate", "samples m", "trials", "caught", "observed", f"{int(catch['level'] * 100)}% {catch['interval']}",
             "predicted", "agrees"],
            [[p["audit_rate"], ",".join(map(str, p["samples"])), p["trials"], p["caught"], _s(p["observed"], 3),
              f"[{p['ci_low']:.3f}, {p['ci_high']:.3f}]", _s(p["predicted"], 3), "yes" if p["agrees"] else "no"]
             for p in catch["points"]]))

    for key, title, draw in FIGURES:
        png = draw(report)
        if png is None:
            continue
        data = base64.b64encode(png).decode()
        parts.append(f"<figure id='{key}'><img alt='{_e(title)}' src='data:image/png;base64,{data}'>"
                     f"<figcaption>{_e(title)}</figcaption></figure>")

    scale = report.get("scale") or {}
    if scale:
        parts.append("<h2>Scale</h2>")
        parts.append(_table(["measure", "value"], [[k, v] for k, v in scale.items()]))

    names = {n["name"]: n for n in report["nodes"]}
    parts.append("<h2>Nodes</h2>")
    parts.append(_table(["node", "role", "cheat", "account", "pid", "peak RSS MiB"],
                        [[n["name"], n["role"], n["cheat"], n["account"], n["pid"],
                          _s(n["rss_bytes"] / 2**20) if n.get("rss_bytes") else ""] for n in names.values()], left=4))
    parts.append("<h2>Jobs</h2>")
    rows = []
    for j in report["jobs"]:
        commits = j.get("commitments", [])
        rows.append([j["index"], (j["job_id"] or "")[:12], j["client"], j.get("status", ""),
                     " ".join(f"{c['provider']}{'' if c['honest'] else '✗'}" for c in commits),
                     " ".join(str(len(c["corrupted_intervals"])) for c in commits if not c["honest"]),
                     len(j.get("disputes", [])), j["client_outcome"], _s(j.get("submit_to_settled_s"))])
    parts.append(_table(["job", "id", "client", "status", "providers (✗ cheated)", "corrupted", "disputes",
                         "client got", "submit→settled s"], rows, left=5))
    if report["disputes"]:
        parts.append("<h2>Disputes</h2>")
        parts.append(_table(["#", "job", "challenger", "respondent", "outcome", "losers", "fault", "step", "node",
                             "rounds", "bytes to referee", "seconds"],
                            [[d["dispute_id"], d["job_id"][:12], d["challenger"], d["respondent"], d["outcome"],
                              " ".join(d["losers"]), " ".join(f["reason"] for f in d["faults"]), d["step"], d["node"],
                              d["rounds"], d["bytes_to_referee"], _s(d["duration_s"])] for d in report["disputes"]],
                            left=7))
    if report["slashes"]:
        parts.append("<h2>Slashes</h2>")
        parts.append(_table(["job", "loser", "ether", "beneficiary", "to beneficiary", "burned", "dispute"],
                            [[s["job_id"][:12], s["loser"], s["amount"] / ETHER, s["beneficiary"],
                              s["to_beneficiary"] / ETHER, s["burned"] / ETHER, s["dispute_id"]]
                             for s in report["slashes"]], left=2))
    parts.append("<h2>Configuration</h2>")
    parts.append(_table(["setting", "value"], [[k, v] for k, v in config.items()]))
    return "\n".join(parts)


def write_html(report: dict[str, Any], out_dir: Path) -> Path:
    path = Path(out_dir) / "report.html"
    write_atomic(path, render_html(report))
    return path
