"""`gavel train` gives one trace root, and one list of node hashes, under every CPU setting.

Each configuration runs in its own process (BLAS kernels, thread counts and NumPy's SIMD
level are fixed at import): the CLI trains a tiny GPT for a few steps, then the child
hashes every node of step 2; the base process also trains half the steps in another
directory and resumes from there.
"""
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from repops_cupy.selfcheck import cpu_has

from .conftest import tiny_gpt_raw, to_toml

ROOT = Path(__file__).resolve().parents[2]
NO_AVX = "AVX512_ICL AVX512_SPR X86_V4 X86_V3"
# The default CPU engine multiplies integer digits with torch; the OpenBLAS settings
# matter to the float64 engine, so those configurations select it (and so also check
# that the two engines agree).
FLOAT64 = {"REPOPS_GEMM_ENGINE": "float64"}
CONFIGS = {
    "base": {"OPENBLAS_NUM_THREADS": "1"},
    "threads=2": {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2", **FLOAT64},
    "Haswell": {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "Haswell", **FLOAT64},
    "SkylakeX": {"OPENBLAS_NUM_THREADS": "1", "OPENBLAS_CORETYPE": "SkylakeX", **FLOAT64},
    "no-AVX2/512": {"OPENBLAS_NUM_THREADS": "1", "NPY_DISABLE_CPU_FEATURES": NO_AVX},
}
if not cpu_has("AVX512F"):  # OpenBLAS forced to SkylakeX dies of SIGILL without AVX-512
    del CONFIGS["SkylakeX"]
STEPS = 4

CHILD = r"""
import contextlib, io, json, sys
from node.cli import main
job, out, mode = sys.argv[1:4]
def cli(*args):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["train", job, "--out", out, *args])
    assert rc == 0, buf.getvalue()
    return buf.getvalue().strip().splitlines()[-1]
root = cli("--steps", str(%(steps)d))
from repops_cupy.checkpoint import load_checkpoint
from repops_cupy.graph import node_hashes_root
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram, checkpoint_file
state, _, _ = load_checkpoint(f"{out}/{checkpoint_file(2)}")
hashes = TrainingProgram(load_job(job)).node_hashes(state)
result = {"root": root, "nodes": node_hashes_root(hashes).hex(), "count": len(hashes)}
if mode == "resume":  # train half the steps in a new directory, then resume from that checkpoint
    out = out + "-resumed"
    cli("--steps", str(%(half)d))
    result["resumed"] = cli("--steps", str(%(steps)d), "--resume")
print(json.dumps(result))
""" % {"steps": STEPS, "half": STEPS // 2}


def _child(job: Path, out: Path, mode: str, env_extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                        "REPOPS_GEMM_ENGINE")}
    env.setdefault("NUMBA_NUM_THREADS", "1")  # parallel kernels crawl on an oversubscribed machine
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(job), str(out), mode], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_trace_root_and_node_hashes_agree_across_cpu_settings_and_resume(tmp_path):
    job = tmp_path / "tiny.toml"
    job.write_text(to_toml(tiny_gpt_raw(steps=STEPS, interval=2)))
    runs = [(name, env, "resume" if name == "base" else "full") for name, env in CONFIGS.items()]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(zip([r[0] for r in runs],
                           pool.map(lambda r: _child(job, tmp_path / r[0], r[2], r[1]), runs)))
    roots = {name: r["root"] for name, r in results.items()}
    roots["base, resumed"] = results["base"]["resumed"]
    assert len(set(roots.values())) == 1, roots
    assert len(roots["base"]) == 64 and int(roots["base"], 16) > 0
    nodes = {name: r["nodes"] for name, r in results.items()}
    assert len(set(nodes.values())) == 1, nodes
    assert results["base"]["count"] > 200
