"""How far a testnet scales on this machine: nodes in one process, nodes as OS processes.

    python scripts/testnet_scale.py [--in-process 50,100,200] [--processes 20] [--out scale-out]

Each size is one `gavel testnet` run (a tenth of the providers cheating, one auditor per
twenty nodes replaying every interval, a job per ten nodes, 4-step MLP jobs), written to
``OUT/<mode>-<nodes>/``. The table printed at the end (and ``OUT/scale.json``) gives per
run: nodes, wall time to start them, seconds and CPU seconds per settled job, memory per
node, the trio loop's lag (in-process: every node shares it), and whether the run's
summary held.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node.testnet.threads import one_thread_per_node  # noqa: E402

one_thread_per_node()
import numba  # noqa: E402,F401

one_thread_per_node()

from node.testnet.plan import TestnetOptions  # noqa: E402
from node.testnet.run import IN_PROCESS, PROCESSES, run_testnet  # noqa: E402


def options_for(nodes: int, seed: int) -> TestnetOptions:
    """A network of ``nodes`` nodes in all: providers, auditors (1 per 20) and clients (1 per 20)."""
    auditors = max(1, nodes // 20)
    clients = max(1, nodes // 20)
    providers = nodes - auditors - clients
    return TestnetOptions(nodes=providers, cheaters=max(1, providers // 10), auditors=auditors, clients=clients,
                          jobs=max(4, nodes // 10), steps=4, checkpoint_every=1, seed=seed, capacity=2,
                          accept_within=60, commit_within=90, challenge_within=45)


def processes_options(nodes: int, seed: int) -> TestnetOptions:
    """``nodes`` node processes: providers and an auditor running all along, plus one client process per job."""
    jobs = max(4, nodes // 5)
    auditors = 1
    providers = nodes - auditors - jobs
    return TestnetOptions(nodes=providers, cheaters=max(1, providers // 10), auditors=auditors, clients=1, jobs=jobs,
                          steps=4, checkpoint_every=1, seed=seed, capacity=2,
                          accept_within=60, commit_within=90, challenge_within=45)


ROW = ("mode", "nodes", "start_s", "jobs_settled", "seconds_per_settled_job", "cpu_seconds_per_settled_job",
       "memory_per_node_mib", "peak_rss_mib", "total_rss_mib", "loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--in-process", default="50,100,200", help="network sizes to run in one process ('' for none)")
    p.add_argument("--processes", default="20", help="network sizes to run as OS processes ('' for none)")
    p.add_argument("--out", type=Path, default=Path("scale-out"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    runs = [(IN_PROCESS, int(n)) for n in args.in_process.split(",") if n] + \
           [(PROCESSES, int(n)) for n in args.processes.split(",") if n]
    rows = []
    for mode, nodes in runs:
        options = options_for(nodes, args.seed) if mode == IN_PROCESS else processes_options(nodes, args.seed)
        out = args.out / f"{mode}-{nodes}"
        print(f"--- {mode}, {nodes} nodes -> {out}", flush=True)
        report = run_testnet(options, out, mode=mode, chain="embedded" if mode == IN_PROCESS else "anvil",
                             command=f"scripts/testnet_scale.py ({mode}, {nodes} nodes)")
        row = {key: report["scale"].get(key) for key in ROW}
        row["nodes"] = len(report["nodes"])
        row["ok"] = report["summary"]["ok"]
        row["failures"] = report["summary"]["failures"][:5]
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(rows, indent=1) + "\n")
    print()
    print(" | ".join(ROW + ("ok",)))
    for row in rows:
        print(" | ".join(str(row.get(k)) for k in ROW + ("ok",)))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
