"""`gavel testnet`: a network on loopback with cheating providers, and a report of what happened.

    gavel testnet [--nodes N] [--cheaters M] [--auditors A] [--jobs J] [--audit-rate R] [--seed S]
                  [--in-process | --processes] [--chain embedded|anvil] [--out DIR] [--sweep]

Without options: 6 providers (2 of them cheating), 1 auditor replaying every interval,
2 clients and 8 small MLP jobs, all in this process on the embedded EVM; a few minutes
on two cores. The report goes to ``DIR/report.json`` and ``DIR/report.html``.

``--settlement 2`` plays settlement version 2 (docs/economics.md): one provider per strategy
of `node.roles.v2.adversaries` (``--strategies``, all by default) beside honest ones, one of
them slow (σ·1.6 a step), two seats a job; the report gives each party's net money from the
contract and why each cheat was caught or not, and the run holds only when no honest party
lost money and every cheater's net is negative. With ``--processes`` each node is its own process
and each job its own ``gavel submit`` (a client playing settlement 2) on a shared anvil chain.

``--sweep`` runs one network per audit rate (``--rates``) with every provider cheating,
and compares the observed catch rate with `protocol.sampling`'s prediction.

Exit status: 0 when the run's summary is ok (no honest node slashed, every audited cheat
slashed, every unaudited cheat missed by the sampling draw alone, every client served or
refunded, or missed by sampling only); 1 when it is not;
2 on a usage error (an --out that is a file, or a folder holding something other than an
earlier testnet's output, among them); 3 when the network could not be started.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LAUNCH = 0, 1, 2, 3
# A sweep runs many jobs in one process; a few at a time keep its event loop responsive.
SWEEP_MAX_RUNNING = 6


def chaos_wave(jobs: int) -> int:
    """A chaos run's jobs under way at once: half of them, so a second wave starts after the chain restart."""
    return max(1, -(-jobs // 2))


def _parser() -> argparse.ArgumentParser:
    from node.testnet.plan import DEFAULT_JOB, TestnetOptions
    from node.testnet.sweep import DEFAULT_RATES

    d = TestnetOptions()
    p = argparse.ArgumentParser(prog="gavel testnet", description=__doc__.split("\n\n")[0],
                                usage="gavel testnet [--nodes N] [--cheaters M] [--jobs J] [--out DIR] [options] "
                                      "(see --help)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--nodes", type=int, default=d.nodes, help="provider nodes")
    p.add_argument("--cheaters", type=int, default=d.cheaters, help="providers that cheat on purpose")
    p.add_argument("--auditors", type=int, default=d.auditors, help="auditor nodes")
    p.add_argument("--clients", type=int, default=d.clients, help="client nodes (they take the jobs in turn)")
    p.add_argument("--jobs", type=int, default=d.jobs, help="jobs submitted")
    p.add_argument("--audit-rate", type=float, default=d.audit_rate,
                   help="fraction of each job's checkpoint intervals an auditor replays")
    p.add_argument("--cheat-rate", type=float, default=d.cheat_rate,
                   help="fraction of its jobs a cheater cheats on (needs the provider's cheat_rate setting)")
    p.add_argument("--replicas", type=int, default=d.replicas, help="providers per job (2: they check each other)")
    p.add_argument("--seed", type=int, default=d.seed, help="seeds keys, cheaters, strategies and jobs")
    p.add_argument("--job", type=Path, default=DEFAULT_JOB, help="job file the jobs are variants of")
    p.add_argument("--steps", type=int, default=d.steps, help="training steps per job")
    p.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, help="steps per checkpoint interval")
    p.add_argument("--strategies", default="", help="comma-separated cheat strategies (default: all)")
    p.add_argument("--settlement", choices=("1", "2"), default=d.settlement,
                   help="settlement contract version the network plays (2: one provider per strategy)")
    p.add_argument("--capacity", type=int, default=d.capacity, help="jobs a provider trains at once")
    p.add_argument("--accept-within", type=float, default=d.accept_within, help="seconds for providers to take a job")
    p.add_argument("--commit-within", type=float, default=d.commit_within, help="seconds to train and commit")
    p.add_argument("--challenge-within", type=float, default=d.challenge_within, help="seconds for challenges")
    p.add_argument("--max-running", type=int, default=None,
                   help="jobs under way at once (default: all in a run, 6 in a sweep)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--in-process", dest="mode", action="store_const", const="in-process",
                      help="every node a task of this process (real libp2p on loopback)")
    mode.add_argument("--processes", dest="mode", action="store_const", const="processes",
                      help="every node its own OS process, on a shared anvil chain")
    p.set_defaults(mode="in-process")
    p.add_argument("--chain", choices=("embedded", "anvil"), default=None,
                   help="settlement chain (default: embedded in-process, anvil with --processes)")
    p.add_argument("--chaos", action="store_true",
                   help="kill -9 and restart random nodes during the run (with --processes, once the chain too) "
                        "and check the invariants: no coin locked, no wrong result, no honest loss, escrow back "
                        "or paid for a verified result, the chain's balances summing up")
    p.add_argument("--kills", type=int, default=d.kills, help="node kills of a --chaos run")
    p.add_argument("--out", type=Path, default=Path("testnet-out"), help="output folder")
    p.add_argument("--sweep", action="store_true", help="run one network per audit rate and compare catch rates")
    p.add_argument("--rates", default=",".join(f"{r:g}" for r in DEFAULT_RATES), help="audit rates of --sweep")
    p.add_argument("--plain", action="store_true", help="plain progress lines even on a terminal")
    p.add_argument("--json", action="store_true", help="end with the summary as one JSON line")
    return p


def testnet_main(argv: list[str]) -> int:
    from node.testnet.threads import one_thread_per_node

    # many nodes share the cores: one compute thread each, set for BLAS before numpy loads, then for numba
    one_thread_per_node()
    import numba  # noqa: F401

    one_thread_per_node()
    parser = _parser()
    args = parser.parse_args(argv)
    from node.testnet.display import LiveDisplay
    from node.testnet.launcher import MARKER, LaunchError
    from node.testnet.plan import TestnetOptions
    from node.testnet.run import run_sweep, run_testnet
    from node.testnet.sweep import SWEEP_STRATEGIES

    chain = args.chain or ("anvil" if args.mode == "processes" else "embedded")
    strategies = tuple(s for s in args.strategies.split(",") if s)
    try:
        rates = tuple(float(r) for r in args.rates.split(",") if r)
        options = TestnetOptions(
            nodes=args.nodes, cheaters=args.nodes if args.sweep else args.cheaters, auditors=args.auditors,
            clients=args.clients, jobs=args.jobs, audit_rate=args.audit_rate, cheat_rate=args.cheat_rate,
            replicas=args.replicas, seed=args.seed, steps=args.steps, checkpoint_every=args.checkpoint_every,
            job_file=args.job.resolve(), strategies=strategies or (SWEEP_STRATEGIES if args.sweep else ()),
            capacity=args.capacity, accept_within=args.accept_within, commit_within=args.commit_within,
            challenge_within=args.challenge_within, chaos=args.chaos, kills=args.kills, settlement=args.settlement,
            max_running=args.max_running if args.max_running is not None else (
                SWEEP_MAX_RUNNING if args.sweep else chaos_wave(args.jobs) if args.chaos else 0))
        if args.chaos and args.sweep:
            raise ValueError("--chaos and --sweep: one at a time")
        if args.settlement == "2" and args.sweep:
            raise ValueError("--settlement 2: no --sweep for now")

        if args.sweep and (len(rates) < 1 or not all(0 < r <= 1 for r in rates)):
            raise ValueError("--rates: audit rates in (0, 1]")
        if args.sweep and args.auditors < 1:
            raise ValueError("--sweep needs at least one auditor")
        _check_out(args.out, MARKER)
    except ValueError as error:
        parser.error(str(error))
    command = "gavel testnet " + shlex.join(argv)

    def display() -> LiveDisplay:
        return LiveDisplay(live=False if args.plain else None)

    try:
        if args.sweep:
            report = run_sweep(options, args.out, rates=rates, mode=args.mode, chain=chain, display_factory=display,
                               command=command)
        else:
            with display() as live:
                report = run_testnet(options, args.out, mode=args.mode, chain=chain, display=live, command=command)
    except LaunchError as error:
        print(f"gavel testnet: {error}", file=sys.stderr)
        return EXIT_LAUNCH
    print_summary(report, args.out)
    if args.json:
        print(json.dumps(report["summary"], sort_keys=True))
    return EXIT_OK if report["summary"]["ok"] else EXIT_FAILED


def _check_out(out: Path, marker: str) -> None:
    """--out is new, or empty, or an earlier testnet's output (which the run replaces)."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).exists():
        raise ValueError(f"--out {out} is not empty and holds no earlier testnet: choose another --out")


def print_chaos(chaos: dict) -> None:
    """Every fault and how the network recovered, then each invariant with its verdict."""
    print(f"chaos: {chaos['kills']} node kill(s), {chaos['chain_restarts']} chain restart(s)")
    for f in chaos["faults"]:
        down = f"down {f['restarted_at'] - f['at']:.1f} s" if f["restarted_at"] is not None else "not restarted"
        print(f"  [{f['at']:7.1f} s] kill {f['kind']} {f['target'] or '-'} ({down}){': ' + f['detail'] if f['detail'] else ''}")
        for line in f["recovery"]:
            print(f"      {line}")
    for seg in chaos["lost_with_chain"]["segments"]:
        print(f"  chain {seg['chain']} killed at {seg['killed_at']:.1f} s: {len(seg['jobs_unsettled'])} unsettled "
              f"job(s), {seg['escrow_unsettled_wei']} wei of escrow lost with it by design")
    for check in chaos["invariants"]:
        print(f"  invariant {check['name']}: {'holds' if check['ok'] else 'BROKEN'}")
    if not chaos["keeper_in_tree"]:
        print("  (no keeper loop in this tree: jobs are settled by their own parties only)")


def print_summary(report: dict, out: Path) -> None:
    s = report["summary"]
    if s.get("settlement") == "2":
        from node.testnet.report_v2 import summary_line_v2

        print("\n" + summary_line_v2(s))
        for failure in s["failures"]:
            print(f"  - {failure}")
        print(f"report: {out / 'report.json'}, {out / 'report.html'}")
        return
    print(f"\n{'OK' if s['ok'] else 'FAILED'}: {s['jobs']} jobs, {s['cheats']} cheats "
          f"({s['cheats_audited']} audited, {s['cheats_caught']} caught), {s['honest_slashed']} honest node(s) "
          f"slashed, clients: {s['clients_served']} served ({s['clients_refunded']} refunded), "
          f"{s['clients_missed']} missed by sampling, {s['clients_unserved']} unserved")
    unaudited = ", ".join(f"{n} {kind}" for kind, n in s.get("unaudited_reasons", {}).items())
    if unaudited:
        print(f"  unaudited cheats: {unaudited}")
    for failure in s.get("failures", []):
        print(f"  - {failure}")
    if "chaos" in report:
        print_chaos(report["chaos"])
    catch = report.get("catch") or {}
    for p in catch.get("points", []):
        if p["trials"]:
            print(f"  audit rate {p['audit_rate']:g}: caught {p['caught']}/{p['trials']} = {p['observed']:.3f} "
                  f"[{p['ci_low']:.3f}, {p['ci_high']:.3f}], predicted {p['predicted']:.3f}"
                  f"{'' if p['agrees'] else '  (outside the interval)'}")
    scale = report.get("scale") or {}
    if scale.get("seconds_per_settled_job") is not None:
        print(f"  {scale['nodes']} nodes ({scale['mode']}): {scale['seconds_per_settled_job']} s per settled job, "
              f"{scale.get('memory_per_node_mib', '?')} MiB per node")
    print(f"report: {out / 'report.json'}, {out / 'report.html'}")
