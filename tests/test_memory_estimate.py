"""The peak-memory estimate from the step graph, against what a step really allocates."""
from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from repops_cupy.graph import execute
from repops_cupy.jobspec import load_job
from repops_cupy.memory import describe, graph_live_bytes, peak_bytes
from repops_cupy.train import TrainingProgram

JOBS = Path(__file__).resolve().parents[1] / "scripts" / "jobs"
# The estimate is of the operators' arrays; NumPy's are what tracemalloc sees (numba's
# and torch's own scratch it does not), so the bound is a factor, stated here.
FACTOR = 2.0


def _program(job: str) -> TrainingProgram:
    return TrainingProgram(load_job(JOBS / job))


@pytest.mark.parametrize("job", ["mlp.toml", pytest.param("tiny-gpt.toml", marks=pytest.mark.slow)])
def test_live_bytes_of_the_graph_are_what_the_interpreter_holds(job):
    program = _program(job)
    run = execute(program.graph, program.leaf_values(program.initial_state()))
    assert max(graph_live_bytes(program.graph)) == run.peak_bytes


@pytest.mark.parametrize("job", ["mlp.toml", pytest.param("tiny-gpt.toml", marks=pytest.mark.slow)])
def test_peak_estimate_is_within_a_factor_of_two_of_a_measured_step(job):
    program = _program(job)
    leaves = program.leaf_values(program.initial_state())
    execute(program.graph, leaves)  # compiles the kernels, so that their start is not measured
    held = sum(v.nbytes for v in leaves.values())  # the leaves exist before the step starts
    tracemalloc.start()
    try:
        execute(program.graph, leaves)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    measured, estimate = peak + held, peak_bytes(program.graph)
    assert measured / FACTOR <= estimate <= measured * FACTOR, (describe(estimate), describe(measured))


def test_describe_names_the_unit():
    assert describe(512) == "512 B"
    assert describe(3 * 1024 * 1024) == "3.0 MiB"
