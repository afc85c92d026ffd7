"""Issue 21, in separate OS processes on anvil: a client killed with SIGKILL while its job
cannot fill leaves no coin locked. The provider's node, the only one left, refunds the job
with its keeper once acceptance closed; the client, started again as a node, reconciles its
row with the chain and withdraws its price."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from contracts import AnvilProcess, JobStatus, RpcChain, Settlement, find_anvil
from node.roles.chain import ensure_dev_contract

from .test_e2e_network import ENV, GAVEL, NodeProcess, job_state, rows, wait_until
from .test_roles_support import write_job

ANVIL = find_anvil()
pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(ANVIL is None, reason="anvil not installed: run `npm install` at the repository root")]
ETHER = 10**18


def dev_chain(url: str) -> tuple[str, list[str], Settlement]:
    """The dev contract on anvil at ``url`` (deployed if missing), the node flags naming it
    (logging at info), and a reader of it."""
    address = ensure_dev_contract(url)
    return address, ["--chain", url, "--contract", address, "--log-level", "info"], Settlement(RpcChain(url), address)


def end(proc: subprocess.Popen | None) -> None:
    """Stop a command the test started, if it still runs."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


def test_a_killed_clients_unfilled_job_is_refunded_by_the_providers_keeper_and_reconciled_on_restart(tmp_path):
    job_file = write_job(tmp_path)
    provider = client = restarted = None
    with AnvilProcess() as anvil:
        address, chain_args, settlement = dev_chain(anvil.url)
        try:
            provider = NodeProcess(tmp_path / "provider", "--role", "provider", *chain_args)
            client_dir = tmp_path / "client"
            client = subprocess.Popen(
                [*GAVEL, "submit", str(job_file), "--data-dir", str(client_dir), "--provider", provider.addrs[0],
                 "--chain", anvil.url, "--contract", address, "--providers", "2", "--accept-within", "30",
                 "--json", "--log-level", "info"],
                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "client.log", "w"), env=ENV)

            def seat_taken() -> bytes | None:
                found = rows(provider.data_dir, "SELECT job_id FROM jobs")
                return found[0][0] if found and settlement.providers(found[0][0]) else None

            wait_until(lambda: seat_taken() is not None, timeout=120, what="the provider to take its seat")
            job_id = seat_taken()
            os.kill(client.pid, signal.SIGKILL)  # before acceptance closes: nobody has refunded the job
            client.wait(timeout=10)
            info = settlement.job(job_id)
            assert info.status == JobStatus.OPEN
            (account,) = settlement.providers(job_id)
            assert settlement.node(account).locked == info.provider_stake

            wait_until(lambda: settlement.job(job_id).status != JobStatus.OPEN, timeout=120,
                       what="a keeper to settle the unfilled job")
            assert settlement.job(job_id).status == JobStatus.REFUNDED
            wait_until(lambda: f"keeper: job {job_id.hex()[:12]} settled on chain (REFUNDED)" in provider.log(),
                       timeout=20, what="the provider node's keeper line")
            assert settlement.node(account).locked == 0
            assert settlement.credit_of(info.client) == info.price
            balance = settlement.chain.balance(info.client)

            restarted = subprocess.Popen(
                [*GAVEL, "node", "start", "--data-dir", str(client_dir), "--log-file", "node.log", "--role", "client",
                 *chain_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
            wait_until(lambda: (job_state(client_dir) or ("",))[0] == "refunded", timeout=120,
                       what="the restarted client to reconcile its job")
            state, record = job_state(client_dir)
            assert record["result"]["ended"] == "unfilled" and "result_dir" not in record["result"]
            wait_until(lambda: settlement.credit_of(info.client) == 0, timeout=30, what="the client's withdrawal")
            assert settlement.chain.balance(info.client) > balance + info.price - ETHER // 100
        finally:
            for proc in (client, restarted):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=20)
            if provider is not None:
                provider.stop()
