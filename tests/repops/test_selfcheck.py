"""Every operator, every machine configuration, one answer (the `gavel selfcheck` run)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from repops_cupy import ops  # noqa: F401 - fills the registry
from repops_cupy.op_examples import example, missing_examples
from repops_cupy.registry import names
from repops_cupy.selfcheck import run_cases


def test_every_registered_operator_has_example_inputs():
    assert missing_examples(names()) == []


def test_examples_are_fixed_bits():
    for name in names():
        (a, _), (b, _) = example(name), example(name)
        assert all(np.array_equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b)), name


def test_run_cases_in_process_has_no_errors():
    hashes = run_cases()
    errors = {k: v for k, v in hashes.items() if v.startswith("error")}
    assert not errors


@pytest.mark.slow
def test_selfcheck_agrees_across_configurations():
    proc = subprocess.run(
        [sys.executable, "-m", "repops_cupy.selfcheck", "--json"], capture_output=True, text=True, timeout=1200
    )
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    differing = {k: v["differs"] for k, v in report["ops"].items() if not v["agree"]}
    assert report["ok"] and proc.returncode == 0, differing
    assert len(report["configs"]) >= 8
    said = [line for line in proc.stderr.splitlines() if line.startswith("selfcheck: config ")]
    children = [name for name in report["configs"] if name != "cupy"]  # the GPU column runs in-process
    total = len(children)
    for i, name in enumerate(children, 1):  # each configuration said when it started and ended
        assert f"selfcheck: config {i}/{total}: {name} started" in said
        assert any(line.startswith(f"selfcheck: config {i}/{total}: {name} done in ") for line in said)
    assert said[-1].endswith(f"{total}/{total} done")
