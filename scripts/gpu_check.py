"""Check a GPU machine from nothing (issue 15): every GPU test, the CPU-vs-GPU selfcheck,
a training run whose trace root must equal the CPU's, and the GPU benchmark.

    scripts/gpu_check.sh SUMMARY.json [--only CHECK ...] [--jobs N] [--steps N]

Each check runs in its own child process (the repository root on PYTHONPATH, nothing
installed needed beyond the packages `requirements` lists), its output kept. After
every check the summary is rewritten, so a run stopped part way still leaves what it
did. The summary is one JSON object:

    {"ok": bool, "gpu": bool, "reason": str, "machine": {...},
     "checks": {NAME: {"ok": bool, "seconds": float, "numbers": {...},
                       "command": [...], "returncode": int, "tail": str}}}

Without a CUDA GPU answering through CuPy it says so in one line on stderr, writes a
summary with "gpu": false and exits with status 2; a failed check gives status 1.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY_GPT = "scripts/jobs/tiny-gpt.toml"
GAVEL = "import sys; from node.cli import main; sys.exit(main())"  # `gavel`, without installing the package
CHECKS = ("gpu_tests", "selfcheck", "train", "bench")
# what the checks import on the GPU machine: repops_cupy itself needs only the first three;
# checkpoints need safetensors, `gavel train`'s progress bar rich, the tests pytest
REQUIRED = ("numpy", "blake3", "cupy", "safetensors", "rich", "pytest")
OPTIONAL = ("torch", "numba", "hypothesis", "xdist")  # faster CPU engines; some tests' helpers
EXIT_FAILED = 1
EXIT_NO_GPU = 2
TAIL_LINES = 40
GPU_MARK = re.compile(r"^\s*(@pytest\.mark\.gpu\b|pytestmark\s*=.*\bpytest\.mark\.gpu\b)", re.M)


@dataclass
class CheckResult:
    ok: bool
    seconds: float
    numbers: dict = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    returncode: int | None = None
    tail: str = ""


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a command's output."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


def child_env() -> dict[str, str]:
    """The environment of a check: the repository importable, output unbuffered, no TF32."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("CUPY_TF32", None)  # float32 products stay float32 (TF32 would change the baseline)
    return env


def run_command(cmd: list[str], timeout: float) -> tuple[int, str, str, float]:
    """(returncode, stdout, stderr, seconds); a timeout gives returncode 124 and what was said."""
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=timeout)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        decode = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")  # noqa: E731
        rc, out, err = 124, decode(exc.stdout), decode(exc.stderr) + f"\ngpu_check: timed out after {timeout:.0f} s"
    return rc, out, err, time.perf_counter() - started


# --- what each check's output says ------------------------------------------------------------


def parse_pytest(output: str) -> dict[str, int]:
    """Counts from pytest's last summary line ('3 passed, 1 skipped, 2 deselected in 4.2s')."""
    lines = [l for l in output.splitlines() if re.search(r"\b(passed|failed|skipped|error|errors|deselected|no tests ran)\b", l)]
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors", "deselected")}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)\b", lines[-1] if lines else ""):
        counts["errors" if word.startswith("error") else word] += int(number)
    return counts


def pytest_ok(rc: int, counts: dict[str, int]) -> bool:
    """Every GPU test ran and passed: a skipped GPU test on a GPU machine is a failure too."""
    return rc == 0 and counts["passed"] > 0 and counts["failed"] == counts["errors"] == counts["skipped"] == 0


def parse_selfcheck(stdout: str) -> dict:
    """Numbers from `selfcheck --json`: configurations, operators, which ones differ where."""
    try:
        report = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"parsed": False}
    ops = report.get("ops", {})
    differ = {k: v["differs"] for k, v in ops.items() if not v["agree"]}
    return {"parsed": True, "configs": report.get("configs", []), "cases": len(ops),
            "agree": len(ops) - len(differ), "differ": differ, "missing_examples": report.get("missing_examples", []),
            "gpu_column": "cupy" in report.get("configs", []), "report_ok": bool(report.get("ok"))}


def last_hex_line(stdout: str) -> str | None:
    """The trace root `gavel train` prints as its last line, if it did."""
    lines = stdout.strip().splitlines()
    return lines[-1].strip() if lines and re.fullmatch(r"[0-9a-f]{64}", lines[-1].strip()) else None


def parse_bench(stdout: str) -> dict:
    """The JSON line `bench_repops.py --gpu --json` ends with ({"parsed": true, ...})."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {"parsed": False}


# --- the checks ---------------------------------------------------------------------------------


def gpu_test_files() -> list[str]:
    """Test files that hold GPU tests (the others need the network stack to be collected)."""
    files = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if GPU_MARK.search(path.read_text(errors="replace")):
            files.append(str(path.relative_to(ROOT)))
    return files


def check_gpu_tests(args) -> CheckResult:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs", *gpu_test_files()]
    rc, out, err, secs = run_command(cmd, args.timeout)
    counts = parse_pytest(out)
    return CheckResult(pytest_ok(rc, counts), secs, counts, cmd, rc, tail(out + err))


def check_selfcheck(args) -> CheckResult:
    cmd = [sys.executable, "-m", "repops_cupy.selfcheck", "--json", "--jobs", str(args.jobs)]
    rc, out, err, secs = run_command(cmd, args.timeout)
    numbers = parse_selfcheck(out)
    ok = rc == 0 and numbers.get("report_ok", False) and numbers.get("gpu_column", False)
    return CheckResult(ok, secs, numbers, cmd, rc, tail(err + "\n" + json.dumps(numbers.get("differ", {}))))


def check_train(args) -> CheckResult:
    roots, secs, outputs, cmds, rcs = {}, 0.0, [], [], []
    with tempfile.TemporaryDirectory(prefix="gpu_check_train_") as tmp:
        for device in ("cpu", "gpu"):
            cmd = [sys.executable, "-c", GAVEL, "train", TINY_GPT, "--steps", str(args.steps),
                   "--device", device, "--out", str(Path(tmp) / device)]
            rc, out, err, s = run_command(cmd, args.timeout)
            secs += s
            roots[device] = last_hex_line(out) if rc == 0 else None
            outputs.append(f"--- {device} (status {rc}, {s:.1f} s)\n{tail(out + err, TAIL_LINES // 2)}")
            cmds += cmd + [";"]
            rcs.append(rc)
    numbers = {"steps": args.steps, "cpu_root": roots["cpu"], "gpu_root": roots["gpu"],
               "roots_equal": roots["cpu"] is not None and roots["cpu"] == roots["gpu"]}
    return CheckResult(numbers["roots_equal"], secs, numbers, cmds[:-1], max(rcs), "\n".join(outputs))


def check_bench(args) -> CheckResult:
    cmd = [sys.executable, "scripts/bench_repops.py", "--gpu", "--json", "--repeats", str(args.repeats)]
    rc, out, err, secs = run_command(cmd, args.timeout)
    numbers = parse_bench(out)
    return CheckResult(rc == 0 and numbers.get("parsed") is True, secs, numbers, cmd, rc, tail(out + err))


RUNNERS = {"gpu_tests": check_gpu_tests, "selfcheck": check_selfcheck, "train": check_train, "bench": check_bench}


# --- machine, summary -------------------------------------------------------------------------


def package_versions(names) -> dict[str, str | None]:
    """Version of each importable package, None for a missing one (import errors of any kind)."""
    found = {}
    for name in names:
        try:
            module = importlib.import_module(name)
        except Exception:  # a broken install is as missing as an absent one
            found[name] = None
            continue
        found[name] = str(getattr(module, "__version__", "installed"))
    return found


def gpu_probe() -> tuple[bool, str, dict]:
    """(GPU usable, why not, what the device says) through the same test the operators use."""
    sys.path.insert(0, str(ROOT))
    try:
        from repops_cupy._backend import cupy_module  # noqa: PLC0415 - after sys.path is set
    except Exception as exc:  # noqa: BLE001 - say why in one line
        return False, f"repops_cupy does not import ({type(exc).__name__}: {exc})", {}
    cp = cupy_module()
    if cp is None:
        try:
            import cupy  # noqa: F401, PLC0415
        except Exception:
            return False, "CuPy is not installed", {}
        return False, "CuPy imports but no CUDA device answers", {}
    info = {"cupy": cp.__version__}
    try:  # which engine the matrix product takes here, and whether the fused kernels serve CuPy
        from repops_cupy import gpu_kernels  # noqa: PLC0415
        from repops_cupy.matmul import int8_ready  # noqa: PLC0415

        info["matmul_engine"] = "int8" if int8_ready(cp) else "float64"
        info["fused_kernels"] = gpu_kernels.enabled(cp)
    except Exception as exc:  # noqa: BLE001 - reported, the checks still run
        info["engine_error"] = f"{type(exc).__name__}: {exc}"
    try:
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        info["device"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        info["multiprocessors"] = int(props["multiProcessorCount"])
        info["cuda_runtime"] = int(cp.cuda.runtime.runtimeGetVersion())
        info["cuda_driver"] = int(cp.cuda.runtime.driverGetVersion())
    except Exception as exc:  # noqa: BLE001 - a description is optional
        info["describe_error"] = f"{type(exc).__name__}: {exc}"
    return True, "", info


def summary(results: dict[str, CheckResult], *, gpu: bool, reason: str = "", machine: dict | None = None) -> dict:
    """The summary object: ok only with a GPU and every check run and ok."""
    return {"ok": gpu and bool(results) and all(r.ok for r in results.values()), "gpu": gpu, "reason": reason,
            "machine": machine or {}, "checks": {name: asdict(r) for name, r in results.items()}}


def write_summary(path: str | Path, obj: dict) -> None:
    """Write the JSON atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("summary", help="where the JSON summary goes")
    parser.add_argument("--only", nargs="+", choices=CHECKS, default=list(CHECKS), help="run these checks only")
    parser.add_argument("--jobs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                        help="selfcheck child processes at once")
    parser.add_argument("--steps", type=int, default=4, help="training steps on each device")
    parser.add_argument("--repeats", type=int, default=7, help="benchmark repeats")
    parser.add_argument("--timeout", type=float, default=900, help="seconds each check's command may take")
    args = parser.parse_args(argv)

    machine = {"python": sys.version.split()[0], "executable": sys.executable,
               "packages": package_versions(REQUIRED + OPTIONAL)}
    gpu, reason, info = gpu_probe()
    machine["gpu"] = info
    if not gpu:
        write_summary(args.summary, summary({}, gpu=False, reason=reason, machine=machine))
        print(f"gpu_check: no CUDA GPU with CuPy on this machine ({reason}); nothing checked", file=sys.stderr)
        return EXIT_NO_GPU
    missing = [n for n in REQUIRED if machine["packages"][n] is None]
    if missing:
        reason = f"missing packages: {', '.join(missing)} (carry them as wheels: see scripts/gpu_check.sh)"
        write_summary(args.summary, summary({}, gpu=True, reason=reason, machine=machine))
        print(f"gpu_check: {reason}", file=sys.stderr)
        return EXIT_FAILED

    results: dict[str, CheckResult] = {}
    print(f"gpu_check: {info.get('device', 'GPU')}, CuPy {info.get('cupy')}; checks: {', '.join(args.only)}", flush=True)
    for name in args.only:
        print(f"gpu_check: {name} ...", flush=True)
        result = RUNNERS[name](args)
        results[name] = result
        write_summary(args.summary, summary(results, gpu=True, machine=machine))
        numbers = json.dumps(result.numbers)
        print(f"gpu_check: {name} {'ok' if result.ok else 'FAILED'} in {result.seconds:.1f} s: "
              f"{numbers if len(numbers) < 400 else numbers[:400] + '...'}", flush=True)
        if not result.ok:
            print(result.tail, flush=True)
    report = summary(results, gpu=True, machine=machine)
    print(f"gpu_check: {'all checks passed' if report['ok'] else 'FAILED'}; summary in {args.summary}")
    return 0 if report["ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
