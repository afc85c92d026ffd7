"""The GPU extras accept CUDA 12 and CUDA 13 machines, and the README says how (issue 15)."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# What this workplace's GPU image carries (its package list, 2026-11): CUDA 13 with its own torch.
GPU_IMAGE = {"torch": "2.11.0+cu130", "numpy": "2.5.2", "safetensors": "0.8.0", "cupy-cuda13x": "14.2.0"}


def _extras() -> dict[str, list[Requirement]]:
    return {name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()}


def test_one_gpu_extra_per_cuda_major_each_naming_its_cupy_build():
    gpu = {name: reqs for name, reqs in _extras().items() if name.startswith("gpu")}
    assert set(gpu) == {"gpu-cuda12", "gpu-cuda13"}  # no bare `gpu`: it would pick one CUDA for every machine
    for name, reqs in gpu.items():
        major = re.fullmatch(r"gpu-cuda(\d+)", name).group(1)
        assert [r.name for r in reqs] == [f"cupy-cuda{major}x"], name


def test_a_cuda_13_machine_with_its_own_torch_meets_the_requirements():
    reqs = [Requirement(r) for r in PROJECT["dependencies"]] + _extras()["gpu-cuda13"]
    for req in reqs:
        if req.name in GPU_IMAGE:
            assert req.specifier.contains(GPU_IMAGE[req.name], prereleases=True), (req, GPU_IMAGE[req.name])


def test_the_readme_names_every_gpu_extra_and_the_check():
    readme = (ROOT / "README.md").read_text()
    for name in ("gpu-cuda12", "gpu-cuda13"):
        assert f'.[{name}]' in readme or f'".[{name}]"' in readme, name
    assert "[gpu]" not in readme
    assert "scripts/gpu_check.sh" in readme and (ROOT / "scripts" / "gpu_check.sh").exists()
