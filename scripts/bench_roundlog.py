"""Rounding-log mode: log size, share of values logged, step time, and replay across configurations.

For each example job (scripts/jobs/{cnn,gpt}-roundlog.toml by default; also mlp, gru), measured in one run on
this CPU with one torch thread unless a configuration says otherwise:

- plain torch float32 and float64 training under each other configuration: the first
  step whose weights (as float32) differ from the reference run;
- time per step of plain torch float32 and float64 training (torch.optim), of the
  rounding-log trainer and of the auditor replaying its logs, as ratios to float32;
- log bytes per step and per parameter, share of rounded values logged, bits per
  rounded value and per logged value (the published scheme stores 1.6 bits per
  rounded value);
- replay on another configuration (2 threads; NumPy/OpenBLAS products; micro-batches):
  trace roots with and without the log, corrections applied, breaches, and the first
  step where replay without the log leaves the trainer's state.

``--calibrate N`` instead measures float64 disagreement per site key over N steps for
every configuration pair on all four example jobs (cnn, gpt, mlp, gru) and prints the thresholds it implies; ``--write`` stores them
as the shipped table (repops_cupy/roundlog/calibrated.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from repops_cupy.roundlog.roundlog_job import Job, load_spec
from repops_cupy.roundlog.plain import PlainRun, plain_divergence
from repops_cupy.roundlog.state import trace_root
from repops_cupy.roundlog.thresholds import MARGIN, Thresholds
from repops_cupy.roundlog.trainer import Auditor, RoundLogTrainer, calibrate

ROOT = Path(__file__).resolve().parents[1]
JOBS = {name: ROOT / f"scripts/jobs/{name}-roundlog.toml" for name in ("cnn", "gpt", "mlp", "gru")}


def _gpt_on_synthetic_tokens() -> dict:
    """The GPT job on synthetic Markov-chain tokens (vocabulary 64) instead of the sonnets."""
    raw = load_spec(JOBS["gpt"])
    raw["data"] = {"kind": "synthetic-tokens", "vocab": 64, "block": 64}
    raw["model"]["args"]["vocab"] = 64
    raw["job"]["name"] = "gpt-synthetic-roundlog"
    return raw


JOB_BUILDERS = {**{name: (lambda path=path: path) for name, path in JOBS.items()}, "gpt-syn": _gpt_on_synthetic_tokens}
SPEED_MODELS, CALIBRATION_MODELS = "cnn,gpt", "cnn,gpt,mlp,gru"
PAIRS = {
    "threads": dict(threads=2),
    "numpy": dict(threads=1, backend="numpy"),
    "micro": dict(threads=1, micro_batch=4),
}
REFERENCE = dict(threads=1)
PUBLISHED_BITS_PER_VALUE = 1.6
TABLE = ROOT / "repops_cupy/roundlog/calibrated.py"


def bench_model(name: str, steps: int, pairs: list[str], interval: int) -> dict:
    job = Job(JOB_BUILDERS[name]())
    torch.set_num_threads(1)
    out: dict = {"model": name, "steps": steps}
    factory = job.model_factory()
    n_params = sum(p.numel() for p in factory().parameters())
    out["parameters"] = n_params

    out["plain_first_differing_step"] = plain_divergence(job, steps, {pair: PAIRS[pair] for pair in pairs})

    # the four kinds of step interleaved, so that load from other processes hits all alike
    plain32, plain64 = PlainRun(job, torch.float32), PlainRun(job, torch.float64)
    trainer = RoundLogTrainer(factory, job.optimizer, job.data, job.config(**REFERENCE))
    auditor = Auditor(factory, job.optimizer, job.data, job.config(**REFERENCE))
    hashes, logs, t32, t64, t_train, t_replay = [trainer.state_hash()], [], [], [], [], []
    entries = rounded = value_entries = 0
    for i in range(1, steps + 1):
        t32.append(plain32.step(i)[0])
        t64.append(plain64.step(i)[0])
        t = time.perf_counter()
        h, log = trainer.step(i)
        t_train.append(time.perf_counter() - t)
        t = time.perf_counter()
        ha = auditor.replay_step(i, log)
        t_replay.append(time.perf_counter() - t)
        assert ha == h, f"same-configuration replay differs at step {i}"
        hashes.append(h)
        logs.append(log)
        entries += trainer.last.total("entries")
        value_entries += trainer.last.total("value_entries")
        rounded += trainer.last.total("rounded")
    med32 = statistics.median(t32[1:] or t32)  # the first step of each warms up
    out["time_per_step_s"] = {"float32": med32, "float64": statistics.median(t64[1:] or t64),
                              "roundlog_train": statistics.median(t_train[1:] or t_train),
                              "roundlog_replay": statistics.median(t_replay[1:] or t_replay)}
    out["time_ratio_to_float32"] = {k: v / med32 for k, v in out["time_per_step_s"].items()}
    log_bytes = sum(len(b) for b in logs)
    out["log"] = {
        "bytes_per_step": log_bytes / steps,
        "bytes_per_parameter_per_step": log_bytes / steps / n_params,
        "rounded_values_per_step": rounded / steps,
        "entries_per_step": entries / steps,
        "value_entries_per_step": value_entries / steps,
        "share_logged": entries / rounded,
        "bits_per_rounded_value": 8 * log_bytes / rounded,
        "bits_per_logged_value": 8 * log_bytes / max(entries, 1),
        "published_bits_per_rounded_value": PUBLISHED_BITS_PER_VALUE,
    }
    ckpt_steps = list(range(0, steps + 1, interval))
    root = trace_root([hashes[s] for s in ckpt_steps])
    out["trace_root"] = root.hex()

    out["pairs"] = {}
    for pair in pairs:
        cfg = job.config(**PAIRS[pair])
        with_log = Auditor(factory, job.optimizer, job.data, cfg)
        no_log = Auditor(factory, job.optimizer, job.data, cfg)
        h_log, h_nolog = [with_log.state_hash()], [no_log.state_hash()]
        corrections = breaches = implausible = 0
        first_nolog = None
        t = time.perf_counter()
        for i in range(1, steps + 1):
            h_log.append(with_log.replay_step(i, logs[i - 1]))
            h_nolog.append(no_log.replay_step(i, logs[i - 1], apply_log=False))
            rep = with_log.report()
            corrections += rep["corrections"]
            breaches += rep["breaches"]
            implausible += rep["implausible"]
            if first_nolog is None and h_nolog[-1] != hashes[i]:
                first_nolog = i
        out["pairs"][pair] = {
            "config": PAIRS[pair],
            "trace_root_with_log_matches": trace_root([h_log[s] for s in ckpt_steps]) == root,
            "steps_matching_with_log": sum(a == b for a, b in zip(h_log[1:], hashes[1:])),
            "trace_root_without_log_matches": trace_root([h_nolog[s] for s in ckpt_steps]) == root,
            "first_step_without_log_differs": first_nolog,
            "corrections_applied": corrections,
            "breaches": breaches,
            "implausible_entries": implausible,
            "seconds": time.perf_counter() - t,
        }
    return out


def run_calibration(steps: int, models: list[str], pairs: list[str]) -> dict:
    merged = None
    report = {}
    for name in models:
        job = Job(JOB_BUILDERS[name]())
        for pair in pairs:
            t = time.perf_counter()
            c = calibrate(job.model_factory(), job.optimizer, job.data, job.config(**REFERENCE),
                          job.config(**PAIRS[pair]), steps)
            report[f"{name}/{pair}"] = {k: (c.ratios[k], c.flips[k], c.rounded[k]) for k in sorted(c.ratios)
                                         if c.ratios[k] or c.flips[k]}
            print(f"{name}/{pair}: {steps} steps in {time.perf_counter() - t:.1f}s, "
                  f"{sum(c.flips.values())} plain-rounding flips", flush=True)
            for k, (r, fl, n) in report[f"{name}/{pair}"].items():
                print(f"    {k:42s} max ratio {r:9.3g}   flips {fl:6d} of {n}")
            if c.exactness_violations():
                raise SystemExit(f"sites declared exact disagreed: {c.exactness_violations()}")
            merged = c if merged is None else merged.merge(c)
    inexact = sorted(k for k in merged.ratios if k not in merged.exact)
    return {"ratios": {k: merged.ratios[k] for k in inexact}, "report": report, "steps": steps,
            "models": models, "pairs": pairs}


def write_table(cal: dict) -> None:
    """Store beta = MARGIN * the largest ratio measured so far: this run's merged with the
    table's earlier ones (RATIOS), so a run that happened to disagree less never lowers one."""
    from repops_cupy.roundlog import calibrated  # noqa: PLC0415

    earlier = dict(getattr(calibrated, "RATIOS", {}))
    ratios = {k: max(cal["ratios"].get(k, 0.0), earlier.get(k, 0.0)) for k in set(cal["ratios"]) | set(earlier)}
    betas = Thresholds.from_ratios(ratios, MARGIN)
    models = sorted(set(cal["models"]) | set(getattr(calibrated, "MODELS", ())))
    lines = ['"""Measured thresholds: beta per site key (see thresholds.py). Generated by',
             f"scripts/bench_roundlog.py --calibrate {cal['steps']} --write, over models {models} and",
             f"configuration pairs {cal['pairs']} against 1 thread / torch products / whole batch.",
             "", "RATIOS: per key, the largest max |v_A - v_B| / (u * chunk max|v|) measured by any calibration",
             "written here (each run merges its own with these). BETAS: MARGIN times that ratio, rounded up",
             'to a power of two, at least the floor."""', "", f"MODELS = {tuple(models)!r}", "", "RATIOS = {"]
    lines += [f"    {k!r}: {ratios[k]!r}," for k in sorted(ratios)]
    lines += ["}", "", "BETAS = {"]
    lines += [f"    {k!r}: {b!r},  # max ratio {ratios[k]:.3g}" for k, b in betas.items()]
    lines.append("}")
    TABLE.write_text("\n".join(lines) + "\n")
    print(f"wrote {TABLE.relative_to(ROOT)} ({len(betas)} keys)")
    for k in sorted(betas):
        before = calibrated.BETAS.get(k)
        if before != betas[k]:
            print(f"    {k:42s} {before} -> {betas[k]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--models", help=f"of {sorted(JOB_BUILDERS)} (gpt-syn: the GPT on synthetic tokens); "
                    f"default {SPEED_MODELS}, with --calibrate {CALIBRATION_MODELS}")
    ap.add_argument("--pairs", default="threads,numpy,micro", help='"none": time and log size only')
    ap.add_argument("--interval", type=int, default=5, help="checkpoint interval for the trace roots")
    ap.add_argument("--calibrate", type=int, default=0, metavar="N")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    models = (args.models or (CALIBRATION_MODELS if args.calibrate else SPEED_MODELS)).split(",")
    pairs = [] if args.pairs == "none" else args.pairs.split(",")
    if args.calibrate:
        cal = run_calibration(args.calibrate, models, pairs)
        if args.write:
            write_table(cal)
        if args.json:
            args.json.write_text(json.dumps(cal, indent=1))
        return
    results = []
    for name in models:
        r = bench_model(name, args.steps, pairs, args.interval)
        results.append(r)
        print(f"\n== {name}: {r['parameters']} parameters, {r['steps']} steps, batch {Job(JOB_BUILDERS[name]()).batch_size}")
        ts, tr = r["time_per_step_s"], r["time_ratio_to_float32"]
        print("time per step: " + ", ".join(f"{k} {ts[k] * 1e3:.1f} ms ({tr[k]:.1f}x)" for k in ts))
        lg = r["log"]
        print(f"log: {lg['bytes_per_step']:.0f} B/step, {lg['bytes_per_parameter_per_step']:.4f} B/parameter/step, "
              f"{lg['entries_per_step']:.1f} entries/step ({lg['value_entries_per_step']:.1f} value entries) of "
              f"{lg['rounded_values_per_step']:.0f} rounded values: share {lg['share_logged']:.2e}")
        print(f"     {lg['bits_per_rounded_value']:.2e} bits per rounded value (published scheme: "
              f"{PUBLISHED_BITS_PER_VALUE}), {lg['bits_per_logged_value']:.1f} bits per logged value")
        print("plain training (no rounding), first step whose float32 weights differ from 1 thread/torch/whole batch: "
              + ", ".join(f"{k} {v}" for k, v in r["plain_first_differing_step"].items()))
        for pair, p in r["pairs"].items():
            print(f"replay {pair:8s} {json.dumps(p['config'])}: with log root match {p['trace_root_with_log_matches']} "
                  f"({p['steps_matching_with_log']}/{r['steps']} steps), corrections {p['corrections_applied']}, "
                  f"breaches {p['breaches']}, implausible {p['implausible_entries']}; without log root match "
                  f"{p['trace_root_without_log_matches']}, first differing step {p['first_step_without_log_differs']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
