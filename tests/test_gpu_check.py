"""scripts/gpu_check.sh (issue 15): without a GPU it says so and stops; its pieces, here."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repops_cupy._backend import gpu_available

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gpu_check  # dataclasses look their module up by name
_spec.loader.exec_module(gpu_check)


@pytest.mark.skipif(gpu_available(), reason="this machine has a GPU: the script runs every check instead")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "sub" / "summary.json"
    done = subprocess.run([str(ROOT / "scripts" / "gpu_check.sh"), str(out)], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable}, timeout=300)
    assert done.returncode == gpu_check.EXIT_NO_GPU == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA GPU with CuPy on this machine ("), lines
    report = json.loads(out.read_text())
    assert report["ok"] is False and report["gpu"] is False and report["checks"] == {}
    assert report["reason"] in lines[0]
    assert report["machine"]["packages"]["numpy"] and report["machine"]["packages"]["blake3"]


def test_pytest_counts_come_from_the_last_summary_line():
    output = "....s\n=== short test summary ===\nSKIPPED [1] x.py:3: why\n4 passed, 1 skipped, 700 deselected in 3.1s\n"
    counts = gpu_check.parse_pytest(output)
    assert counts == {"passed": 4, "failed": 0, "skipped": 1, "errors": 0, "deselected": 700}
    assert not gpu_check.pytest_ok(0, counts)  # a skipped GPU test on a GPU machine is a failure
    assert gpu_check.pytest_ok(0, gpu_check.parse_pytest("43 passed, 705 deselected in 9.0s"))
    failed = gpu_check.parse_pytest("2 failed, 41 passed, 1 error in 9.0s")
    assert (failed["failed"], failed["passed"], failed["errors"]) == (2, 41, 1) and not gpu_check.pytest_ok(1, failed)
    assert not gpu_check.pytest_ok(5, gpu_check.parse_pytest("no tests ran in 0.1s"))


def test_selfcheck_numbers_name_the_differing_operators():
    report = {"configs": ["base", "cupy"], "ok": False, "missing_examples": [],
              "ops": {"exp": {"hash": "ab", "agree": True, "differs": []},
                      "matmul": {"hash": "cd", "agree": False, "differs": ["cupy"]}}}
    numbers = gpu_check.parse_selfcheck("progress\n" + json.dumps(report) + "\n")
    assert numbers["cases"] == 2 and numbers["agree"] == 1 and numbers["differ"] == {"matmul": ["cupy"]}
    assert numbers["gpu_column"] and not numbers["report_ok"]
    assert gpu_check.parse_selfcheck("Traceback ...") == {"parsed": False}


def test_trace_root_and_bench_line():
    root = "14f818d722e96a2d82ae2b0d713434ca1715956eb3d18c844aeb1e42cc88892a"
    assert gpu_check.last_hex_line(f"params 1\n{root}\n") == root
    assert gpu_check.last_hex_line("error: no GPU\n") is None
    bench = {"parsed": True, "device": "H100", "rows": [{"case": "gpu matmul 4096x4096x4096", "ratio": 3.0}]}
    assert gpu_check.parse_bench("table\n" + json.dumps(bench) + "\n") == bench
    assert gpu_check.parse_bench("table only\n") == {"parsed": False}


def test_summary_is_ok_only_with_a_gpu_and_every_check_ok(tmp_path):
    good = gpu_check.CheckResult(True, 1.5, {"passed": 3}, ["pytest"], 0, "3 passed")
    bad = gpu_check.CheckResult(False, 2.0, {"roots_equal": False}, ["gavel"], 0, "roots differ")
    assert gpu_check.summary({"gpu_tests": good}, gpu=True)["ok"]
    assert not gpu_check.summary({"gpu_tests": good, "train": bad}, gpu=True)["ok"]
    assert not gpu_check.summary({}, gpu=True)["ok"]
    assert not gpu_check.summary({"gpu_tests": good}, gpu=False)["ok"]
    path = tmp_path / "a" / "s.json"
    obj = gpu_check.summary({"gpu_tests": good, "train": bad}, gpu=True, machine={"python": "3.12"})
    gpu_check.write_summary(path, obj)
    back = json.loads(path.read_text())
    assert back == obj and back["checks"]["train"]["numbers"] == {"roots_equal": False}
    assert set(back["checks"]["gpu_tests"]) == {"ok", "seconds", "numbers", "command", "returncode", "tail"}
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]  # no temporary file left


def test_a_command_that_hangs_is_stopped_and_reported():
    rc, out, err, _ = gpu_check.run_command([sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"], 1)
    assert rc == 124 and "started" in out and "timed out" in err
    assert gpu_check.tail("\n".join(str(i) for i in range(100)), 3) == "97\n98\n99"


def test_gpu_test_files_are_the_files_with_gpu_tests():
    files = gpu_check.gpu_test_files()
    assert "tests/repops/test_cupy_bitwise.py" in files and "tests/repops/test_matmul.py" in files
    assert "tests/test_gpu_check.py" not in files
    for f in files:
        assert gpu_check.GPU_MARK.search((ROOT / f).read_text())
