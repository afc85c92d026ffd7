"""Issue 21, in separate OS processes on anvil: a provider and an auditor killed with SIGKILL
while their job is alive find it over on chain when they start again, and reconcile their
rows with the chain before any work: the provider does not train the refunded job again
(it used to retrain it and fail with JobWrongStatus), the auditor drops the job it watched."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from contracts import AnvilProcess, JobStatus, find_anvil
from node.cli.submit import EXIT_REFUNDED

from .test_e2e_network import ENV, GAVEL, NodeProcess, job_state, rows, wait_until
from .test_keeper_processes import dev_chain, end
from .test_roles_support import TINY_JOB, write_job

pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]
# Minutes of training: the provider is killed long before it could commit.
LONG_JOB = TINY_JOB.replace("steps = 6", "steps = 60000").replace("checkpoint_interval = 2", "checkpoint_interval = 20000")


def kill(node: NodeProcess) -> None:
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(timeout=10)


def log_size(node: NodeProcess) -> int:
    return len((node.data_dir / "node.log").read_text())


def log_since(node: NodeProcess, size: int) -> str:
    """What the node logged after its log held ``size`` characters (its restart)."""
    return (node.data_dir / "node.log").read_text()[size:]


def test_a_restarted_provider_and_auditor_reconcile_a_job_refunded_while_they_were_down(tmp_path):
    job_file = write_job(tmp_path, LONG_JOB, "long.toml")
    provider = auditor = client = None
    with AnvilProcess() as anvil:
        address, chain_args, settlement = dev_chain(anvil.url)
        try:
            provider = NodeProcess(tmp_path / "provider", "--role", "provider", *chain_args)
            auditor = NodeProcess(tmp_path / "auditor", "--role", "auditor", "--bootstrap", provider.addrs[0],
                                  *chain_args)
            client = subprocess.Popen(
                [*GAVEL, "submit", str(job_file), "--data-dir", str(tmp_path / "client"), "--provider",
                 provider.addrs[0], "--bootstrap", provider.addrs[0], "--chain", anvil.url, "--contract", address,
                 "--providers", "1", "--accept-within", "30", "--commit-within", "30", "--challenge-within", "30",
                 "--json", "--wait"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=ENV)
            wait_until(lambda: (job_state(provider.data_dir) or ("",))[0] == "accepted", timeout=120,
                       what="the provider to take its seat")
            wait_until(lambda: (job_state(auditor.data_dir) or ("",))[0] == "watching", timeout=120,
                       what="the auditor to hear of the job")
            (job_id,) = rows(provider.data_dir, "SELECT job_id FROM jobs")[0]
            kill(provider)
            kill(auditor)

            # The provider never commits: the client's keeper refunds the job after the commit deadline.
            out, _ = client.communicate(timeout=240)
            assert client.returncode == EXIT_REFUNDED, out
            assert settlement.job(job_id).status == JobStatus.REFUNDED

            provider_log, auditor_log = log_size(provider), log_size(auditor)
            provider.start()
            auditor.start()
            wait_until(lambda: job_state(provider.data_dir)[0] == "abandoned", timeout=120,
                       what="the provider to reconcile its job")
            wait_until(lambda: job_state(auditor.data_dir)[0] == "closed", timeout=120,
                       what="the auditor to reconcile its job")
            short = job_id.hex()[:12]
            said = log_since(provider, provider_log)
            assert (f"job {short}: stopped working on it: the job is REFUNDED on chain (found on restart, "
                    f"before resuming its run)") in said
            assert "trained" not in said and "JobWrongStatus" not in said and "Traceback" not in said
            _, record = job_state(provider.data_dir)
            assert record["abandoned"] == "the job is REFUNDED on chain"
            heard = log_since(auditor, auditor_log)
            assert (f"job {short}: the job was REFUNDED on chain before the audit ended (found on restart): "
                    f"0 audit(s) dropped") in heard
            assert "audit of" not in heard and "Traceback" not in heard
        finally:
            end(client)
            for node in (provider, auditor):
                if node is not None:
                    node.stop()
