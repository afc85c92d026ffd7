"""A provider killed with SIGKILL in the middle of a job, and restarted, finishes it with the
trace root an uninterrupted run has (separate OS processes, anvil)."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from contracts import AnvilProcess, RpcChain, find_anvil
from node.roles.chain import ensure_dev_contract

from .test_e2e_network import ENV, GAVEL, NodeProcess, job_state, wait_until
from .test_roles_support import write_job

ANVIL = find_anvil()
pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(ANVIL is None, reason="anvil not installed: run `npm install` at the repository root")]

# Long enough (several seconds) to be caught mid-run; checkpoints every 10 steps.
LONGER_JOB = """\
[job]
name = "longer"
seed = 11
steps = 80
batch_size = 32
checkpoint_interval = 10

[data]
kind = "synthetic"
n_samples = 512
n_features = 8
n_classes = 3

[model]
kind = "mlp"
hidden = [32]
activation = "relu"

[optimizer]
kind = "sgd"
lr = 0.05
momentum = 0.9
"""


def test_a_provider_killed_mid_job_resumes_and_commits_the_same_root(tmp_path):
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import Trace, train

    job_file = write_job(tmp_path, LONGER_JOB, "longer.toml")
    client = None
    provider = None
    with AnvilProcess() as anvil:
        address = ensure_dev_contract(anvil.url)
        chain_args = ["--chain", anvil.url, "--contract", address, "--log-level", "info"]
        try:
            provider = NodeProcess(tmp_path / "provider", "--role", "provider", *chain_args)
            listen = provider.addrs[0].split("/p2p/")[0]
            client_dir = tmp_path / "client"
            client = subprocess.Popen(
                [*GAVEL, "submit", str(job_file), "--data-dir", str(client_dir), "--bootstrap", provider.addrs[0],
                 "--chain", anvil.url, "--contract", address, "--providers", "1", "--accept-within", "150",
                 "--commit-within", "300", "--challenge-within", "60", "--wait", "--json", "--log-level", "info"],
                stdout=subprocess.PIPE, stderr=open(tmp_path / "client.log", "w"), text=True, env=ENV)

            def run_dir():
                jobs = list((provider.data_dir / "jobs").glob("*/run")) if (provider.data_dir / "jobs").exists() else []
                return jobs[0] if jobs else None

            wait_until(lambda: run_dir() is not None and (run_dir() / "step-00000020.safetensors").exists(),
                       timeout=300, what="the provider's second checkpoint", interval=0.05)
            os.kill(provider.proc.pid, signal.SIGKILL)
            provider.proc.wait(timeout=10)
            interrupted = Trace.load(run_dir() / "trace.json")
            assert interrupted.checkpoints[-1]["step"] < 80, "the run finished before it was killed"
            assert job_state(provider.data_dir)[0] == "accepted"

            provider.args += ["--listen", listen]
            provider.start()
            wait_until(lambda: job_state(client_dir) is not None and job_state(client_dir)[0] == "verified",
                       timeout=300, what="the client to check the resumed provider's result")
            assert "resuming its training run" in provider.log()
            RpcChain(anvil.url).advance_time(3600)
            out, _ = client.communicate(timeout=120)
            assert client.returncode == 0, out
            result = json.loads(out.strip().splitlines()[-1])
            assert result["status"] == "FINALIZED"
            assert [seat["outcome"] for seat in result["providers"].values()] == ["paid"]

            uninterrupted = train(load_job(job_file), tmp_path / "uninterrupted")
            assert result["trace_root"] == uninterrupted.root.hex()
            assert Trace.load(run_dir() / "trace.json").root == uninterrupted.root
        finally:
            if client is not None and client.poll() is None:
                client.kill()
                client.wait(timeout=10)
            if provider is not None:
                provider.stop()
