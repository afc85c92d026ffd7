#!/usr/bin/env bash
# Check a GPU machine from nothing (issue 15): every GPU test, the CPU-vs-GPU bitwise
# selfcheck, a tiny-gpt run whose trace root must equal the CPU's, the GPU benchmark;
# one JSON summary. What runs and what the summary holds: scripts/gpu_check.py.
#
#   scripts/gpu_check.sh SUMMARY.json [--only gpu_tests selfcheck train bench] [--jobs N]
#
# Exit status: 0 all checks passed, 1 a check failed (or a package is missing),
# 2 no CUDA GPU answers through CuPy (said in one line on stderr).
#
# Nothing is installed and nothing is fetched: the repository root goes on PYTHONPATH.
# A machine without network access that lacks a package (this workplace's GPU image has
# numpy, cupy, torch, numba, safetensors, rich and pytest, but not blake3) takes it as
# wheels in .whl/ at the repository root, downloaded on a machine with network:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux2014_x86_64 -d .whl blake3
# They are installed into a private folder only when a required package is missing.
set -u
cd "$(dirname "$0")/.." || exit 1
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import numpy, blake3, safetensors, rich, pytest" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/gavel-gpu-check-site"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl \
    || { echo "gpu_check: installing the wheels in .whl/ failed" >&2; exit 1; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
exec "$PYTHON" scripts/gpu_check.py "$@"
