"""One testnet run, or a sweep of runs over audit rates, from options to report.json and report.html.

    run_testnet(options, out, mode="in-process", chain="embedded")  -> the report (a dict)
    run_sweep(options, out, rates=(...))                            -> the combined report

A run: prepare the output folder, plan the nodes and jobs, start the network and run
the jobs (`launcher`), recompute every job's honest result and replay every cheating
run (`truth`), judge (`report`), and write the report with its figures. A sweep runs
one network per audit rate into ``OUT/rate-R/`` (each with its own report) and writes
the catch-rate comparison over all of them into ``OUT``.
"""
from __future__ import annotations

import dataclasses
import logging
import platform
import resource
import time
from pathlib import Path
from typing import Any

import trio

from .chaos import chaos_report
from .display import LiveDisplay
from .html import write_html
from .inprocess import InProcessNetwork
from .launcher import RunRecords, prepare_out_dir
from .plan import TestnetOptions, make_plan
from .report import Observed, build_report, write_report
from .sweep import catch_section
from .truth import honest_run, replay_run

log = logging.getLogger(__name__)

IN_PROCESS, PROCESSES = "in-process", "processes"
SWEEP_SEED_STRIDE = 1000


def observe(records: RunRecords, *, progress: Any = None) -> Observed:
    """The run's records with the truth recomputed: every job's honest run, every cheating run replayed."""
    honest = {}
    files = {}
    for sub in records.submissions:
        if sub.job_id is not None and sub.job_id in records.ledger.jobs:
            honest[sub.job_id] = honest_run(Path(sub.job_file))
            files[sub.job_id] = Path(sub.job_file)
    replays = {}
    for job in records.ledger.jobs.values():
        expected = honest.get(job.job_id)
        for provider, (root, _) in job.commits.items():
            run_dir = records.run_dirs.get((job.job_id, provider))
            if expected is None or root == expected.root or run_dir is None or not run_dir.exists():
                continue
            replays[(job.job_id, provider)] = replay_run(files[job.job_id], run_dir)
            if progress:
                progress(f"replayed the run of {provider[:10]} in job {job.job_id.hex()[:12]}")
    return Observed(records.nodes, records.submissions, records.ledger, honest, replays, records.audits,
                    records.verdicts)


def _scale(records: RunRecords, mode: str, nodes: int, cpu_seconds: float) -> dict[str, Any]:
    t = records.timings
    settled = records.ledger.settled_jobs
    span = t.get("jobs_done_at", 0.0) - t.get("jobs_started_at", 0.0)
    scale: dict[str, Any] = {
        "mode": mode, "nodes": nodes, "cpus": _cpus(), "machine": platform.machine(),
        "start_s": round(t.get("network_ready_at", 0.0), 2), "jobs_span_s": round(span, 2),
        "jobs_settled": settled,
        "seconds_per_settled_job": round(span / settled, 3) if settled else None,
        "cpu_seconds": round(cpu_seconds, 1),
        "cpu_seconds_per_settled_job": round(cpu_seconds / settled, 3) if settled else None,
    }
    for key in ("loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms"):
        if key in t:
            scale[key] = t[key]
    memory = records.memory
    if "per_node_bytes" in memory:
        scale["memory_per_node_mib"] = round(memory["per_node_bytes"] / 2**20, 2)
    for key in ("process_rss_bytes", "peak_rss_bytes", "median_node_rss_bytes", "max_node_rss_bytes",
                "total_rss_bytes"):
        if key in memory:
            scale[key.replace("_bytes", "_mib")] = round(memory[key] / 2**20, 1)
    return scale


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def config_of(options: TestnetOptions, *, mode: str, chain: str, command: str) -> dict[str, Any]:
    values = {k: (str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v)
              for k, v in dataclasses.asdict(options).items()}
    return {**values, "mode": mode, "chain": chain, "command": command}


def _opened_on_a_killed_chain(records: Any) -> set[int]:
    """Submissions whose job was open and unsettled on a chain the run killed. The chaos
    harness marks them lost at the kill, but a `gavel submit` restarted by an earlier fault
    may not have told it its job id by then."""
    killed = [seg for seg in records.segments if seg.lost_at is not None]
    return {sub.index for sub in records.submissions if sub.job_id is not None
            and any((job := seg.ledger.jobs.get(sub.job_id)) is not None and not job.settled for seg in killed)}


def report_v2(records: RunRecords, *, config: dict[str, Any], timings: dict[str, Any]) -> dict[str, Any]:
    """A settlement-2 run judged (`report_v2`): every job's honest run recomputed, money from the contract."""
    from .report_v2 import build_report_v2

    honest = {sub.job_id: honest_run(Path(sub.job_file)) for sub in records.submissions
              if sub.job_id is not None and sub.job_id in records.ledger.jobs}
    return build_report_v2(nodes=records.nodes, submissions=records.submissions, ledger=records.ledger,
                           nets=records.nets, audited=records.audited, honest=honest, mismatches=records.mismatches,
                           config=config, timings=timings)


def run_testnet(options: TestnetOptions, out: Path, *, mode: str = IN_PROCESS, chain: str = "embedded",
                display: LiveDisplay | None = None, command: str = "", clock: Any = None) -> dict[str, Any]:
    """``clock``: an in-process run's task that moves the embedded chain's clock (`InProcessNetwork`)."""
    out = Path(out)
    prepare_out_dir(out)
    plan = make_plan(options, out / "jobs")
    started = time.time()
    cpu_before = _cpu_seconds()
    if mode == IN_PROCESS:
        network: Any = InProcessNetwork(plan, out, chain=chain, clock=clock,
                                        on_progress=(display.update if display else None))
    else:
        from .processes import ProcessNetwork

        network = ProcessNetwork(plan, out, chain=chain, on_progress=(display.update if display else None))
    records = trio.run(network.run)
    # jobs that died with a killed chain are the chaos section's, not judged as jobs of the surviving chain
    lost_indexes = set(records.chaos.lost) | _opened_on_a_killed_chain(records) if records.chaos is not None else set()
    lost = [s for s in records.submissions if s.index in lost_indexes]
    records.submissions = [s for s in records.submissions if s.index not in lost_indexes]
    if display:
        display.update(network, force=True)
    cpu = _cpu_seconds() - cpu_before
    wall = time.time() - started
    if options.settlement == "2":
        from .report_v2 import write_html_v2

        report = report_v2(records, config=config_of(options, mode=mode, chain=chain, command=command)
                           | {"contract": records.contract, "margin_s": records.margin},
                           timings={**records.timings, "wall_s": round(wall, 2)})
        write_report(report, out)
        write_html_v2(report, out)
        return report
    note = (lambda line: print(line, flush=True)) if display else None
    truth_started = time.perf_counter()
    observed = observe(records, progress=note)
    report = build_report(observed, config=config_of(options, mode=mode, chain=chain, command=command),
                          timings={**records.timings, "wall_s": round(wall, 2),
                                   "truth_s": round(time.perf_counter() - truth_started, 2)},
                          scale=_scale(records, mode, len(plan.nodes), cpu))
    report["ledger_mismatches"] = records.mismatches
    summary = report["summary"]
    summary["jobs_planned"] = len(plan.jobs)
    if options.chaos:
        report["chaos"] = chaos_report(records, {j: run.root for j, run in observed.honest.items()}, lost)
        summary["jobs_lost_with_chain"] = len(lost)
        summary["invariants_ok"] = report["chaos"]["invariants_ok"]
        for check in report["chaos"]["invariants"]:
            summary["failures"] += [f"invariant {check['name']}: {line}" for line in check["failures"]]
        summary["ok"] = summary["ok"] and summary["invariants_ok"]
    if len(records.submissions) + len(lost) < len(plan.jobs):
        summary["ok"] = False
        summary["failures"].append(f"{len(plan.jobs) - len(records.submissions) - len(lost)} of {len(plan.jobs)} planned "
                                   "job(s) never submitted before the run's deadline")
    if records.mismatches:
        summary["ok"] = False
        summary["failures"].append(f"{len(records.mismatches)} ledger balance(s) differ from the contract: "
                                   f"{'; '.join(records.mismatches[:3])}")
    report["catch"] = catch_section([report])
    write_report(report, out)
    write_html(report, out)
    return report


def run_sweep(options: TestnetOptions, out: Path, *, rates: tuple[float, ...], mode: str = IN_PROCESS,
              chain: str = "embedded", display_factory: Any = None, command: str = "") -> dict[str, Any]:
    out = Path(out)
    prepare_out_dir(out)
    reports = []
    for i, rate in enumerate(rates):
        run_out = out / f"rate-{rate:g}"
        # its own seed: new accounts and jobs, since every run of the sweep shares this process's embedded chain
        run_options = dataclasses.replace(options, audit_rate=rate, seed=options.seed + SWEEP_SEED_STRIDE * i)
        display = display_factory() if display_factory else None
        if display:
            print(f"--- audit rate {rate:g} ---", flush=True)
            with display:
                report = run_testnet(run_options, run_out, mode=mode, chain=chain, display=display, command=command)
        else:
            report = run_testnet(run_options, run_out, mode=mode, chain=chain, command=command)
        reports.append(report)
    combined = combine(reports, config=config_of(options, mode=mode, chain=chain, command=command) |
                       {"sweep_rates": list(rates)})
    write_report(combined, out)
    write_html(combined, out)
    return combined


def combine(reports: list[dict[str, Any]], *, config: dict[str, Any]) -> dict[str, Any]:
    """One report over several runs: their jobs, disputes and slashes side by side, summed summaries."""
    summary: dict[str, Any] = {}
    for report in reports:
        for key, value in report["summary"].items():
            if isinstance(value, bool):
                summary[key] = summary.get(key, True) and value
            elif isinstance(value, (int, float)):
                summary[key] = summary.get(key, 0) + value
            elif isinstance(value, list):
                summary[key] = summary.get(key, []) + [f"rate {report['config']['audit_rate']:g}: {v}" for v in value]
    catch = catch_section(reports)
    return {
        "format": reports[0]["format"] if reports else "",
        "config": config, "summary": summary, "catch": catch,
        "runs": [{"audit_rate": r["config"]["audit_rate"], "summary": r["summary"], "scale": r["scale"]}
                 for r in reports],
        "nodes": reports[-1]["nodes"] if reports else [],
        "jobs": [j | {"run": i} for i, r in enumerate(reports) for j in r["jobs"]],
        "disputes": [d | {"run": i} for i, r in enumerate(reports) for d in r["disputes"]],
        "slashes": [s | {"run": i} for i, r in enumerate(reports) for s in r["slashes"]],
        "payments": [p | {"run": i} for i, r in enumerate(reports) for p in r["payments"]],
        "balances": {}, "scale": {},
    }
