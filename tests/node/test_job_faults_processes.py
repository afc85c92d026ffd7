"""Issue 21, in separate OS processes on anvil: a job whose only provider cheats ends
REFUNDED, and ``gavel submit --wait`` hands over no result: no ``result:`` line, no
``result_dir`` in result.json, exit status 3 (it used to print the cheater's weights and
exit 0)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from contracts import AnvilProcess, JobStatus, RpcChain, find_anvil
from node.cli.submit import EXIT_REFUNDED

from .test_e2e_network import ENV, GAVEL, NodeProcess, job_state, rows, wait_until
from .test_keeper_processes import dev_chain, end
from .test_roles_support import write_job

pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]


def test_a_cheating_providers_result_is_not_handed_over_and_submit_exits_refunded(tmp_path):
    job_file = write_job(tmp_path)
    nodes: list[NodeProcess] = []
    client = None
    with AnvilProcess() as anvil:
        address, chain_args, settlement = dev_chain(anvil.url)
        try:
            cheater = NodeProcess(tmp_path / "cheater", "--role", "provider", "--cheat", "perturb-weight", *chain_args)
            auditor = NodeProcess(tmp_path / "auditor", "--role", "auditor", "--bootstrap", cheater.addrs[0],
                                  *chain_args)
            nodes = [cheater, auditor]
            client_dir = tmp_path / "client"
            client = subprocess.Popen(
                [*GAVEL, "submit", str(job_file), "--data-dir", str(client_dir), "--bootstrap", cheater.addrs[0],
                 "--provider", cheater.addrs[0], *chain_args[:4], "--providers", "1", "--accept-within", "60",
                 "--commit-within", "120", "--challenge-within", "100", "--move-timeout", "60", "--clock", "300",
                 "--wait", "--json"], stdout=subprocess.PIPE, stderr=open(tmp_path / "client.log", "w"), text=True,
                env=ENV)

            def audited_and_ruled() -> bool:
                if client.poll() is not None:
                    raise AssertionError(f"the client exited early: {client.stdout.read()}")
                audit = job_state(auditor.data_dir)
                disputes = rows(client_dir, "SELECT status FROM disputes") if job_state(client_dir) else []
                return (audit is not None and audit[0] == "audited" and bool(disputes)
                        and all(status == "recorded" for (status,) in disputes))

            wait_until(audited_and_ruled, timeout=400, what="the auditor's dispute ruled and recorded")
            RpcChain(anvil.url).advance_time(3600)  # past the challenge window: the job settles now
            out, _ = client.communicate(timeout=180)
            assert client.returncode == EXIT_REFUNDED, out
            lines = out.strip().splitlines()
            result = json.loads(lines[-1])
            assert result["status"] == "REFUNDED" and result["ended"] == "refunded"
            assert "result_dir" not in result and not [line for line in lines if line.startswith("result:")]
            assert "no result: the job was refunded on chain: no provider's root stood" in out
            cheater_key = rows(cheater.data_dir, "SELECT signer FROM commitments")[0][0].hex()
            assert result["providers"][cheater_key]["outcome"] == "slashed"
            job_id = bytes.fromhex(result["job"])
            assert settlement.job(job_id).status == JobStatus.REFUNDED
            on_disk = json.loads((client_dir / "results" / job_id.hex() / "result.json").read_text())
            assert on_disk["status"] == "REFUNDED" and "result_dir" not in on_disk
            assert not (Path(client_dir) / "results" / job_id.hex() / "weights.safetensors").exists()
        finally:
            end(client)
            for node in nodes:
                node.stop()
