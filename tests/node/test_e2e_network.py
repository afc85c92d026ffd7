"""A gavel network of OS processes on loopback, settling on anvil.

A client (``gavel submit``), two providers (one cheating with perturb-weight), one
auditor, each its own process, and anvil: the job is trained, the differing roots are
disputed over libp2p, the verdicts go on chain, the honest provider is paid and the
cheater slashed, and the client's result is the honest provider's bits.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from contracts import AnvilProcess, ProviderPaid, RpcChain, Settlement, StakeSlashed, Withdrawn, find_anvil
from node.roles.chain import ensure_dev_contract

from .test_roles_support import write_job

ANVIL = find_anvil()
pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(ANVIL is None, reason="anvil not installed: run `npm install` at the repository root")]

GAVEL = [sys.executable, "-m", "node"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


class NodeProcess:
    """``gavel node start`` in a child process, logging to its data directory."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        subprocess.run([*GAVEL, "node", "init", "--data-dir", str(data_dir)], check=True, capture_output=True,
                       timeout=60, env=ENV)
        self.args = ["node", "start", "--data-dir", str(data_dir), "--log-file", "node.log", *args]
        self.addrs: list[str] = []
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen([*GAVEL, *self.args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=ENV)
        line = self.proc.stdout.readline()  # the node prints its start-up line first
        if not line:
            raise AssertionError(f"{self.data_dir.name} did not start: {self.proc.stderr.read()}")
        self.addrs = json.loads(line)["addrs"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log(self) -> str:
        path = self.data_dir / "node.log"
        return path.read_text()[-6000:] if path.exists() else ""


def rows(data_dir: Path, sql: str, *args) -> list[tuple]:
    """Rows of a running node's database; none while the node is still creating its schema."""
    db = sqlite3.connect(f"file:{data_dir / 'gavel.db'}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql, args).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def wait_until(predicate, *, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def job_state(data_dir: Path) -> tuple[str, dict] | None:
    found = rows(data_dir, "SELECT state, spec FROM jobs") if (data_dir / "gavel.db").exists() else []
    return (found[0][0], msgpack.unpackb(found[0][1], raw=False)) if found else None


def test_client_two_providers_one_cheating_and_an_auditor_settle_on_anvil(tmp_path):
    job_file = write_job(tmp_path)
    nodes: list[NodeProcess] = []
    client = None
    with AnvilProcess() as anvil:
        address = ensure_dev_contract(anvil.url)
        chain_args = ["--chain", anvil.url, "--contract", address, "--log-level", "info"]
        try:
            honest = NodeProcess(tmp_path / "honest", "--role", "provider", *chain_args)
            hub = honest.addrs[0]
            cheater = NodeProcess(tmp_path / "cheater", "--role", "provider", "--cheat", "perturb-weight",
                                  "--bootstrap", hub, *chain_args)
            auditor = NodeProcess(tmp_path / "auditor", "--role", "auditor", "--bootstrap", hub, *chain_args)
            nodes = [honest, cheater, auditor]
            client_dir = tmp_path / "client"
            client = subprocess.Popen(
                [*GAVEL, "submit", str(job_file), "--data-dir", str(client_dir), "--bootstrap", hub,
                 "--chain", anvil.url, "--contract", address, "--providers", "2", "--price", "1", "--stake", "1",
                 "--accept-within", "150", "--commit-within", "150", "--challenge-within", "100",
                 "--move-timeout", "60", "--clock", "300", "--wait", "--json", "--log-level", "info"],
                stdout=subprocess.PIPE, stderr=open(tmp_path / "client.log", "w"), text=True, env=ENV)

            def ready_to_settle() -> bool:
                if client.poll() is not None:
                    raise AssertionError(f"the client exited early: {client.stdout.read()}")
                mine, audit = job_state(client_dir), job_state(auditor.data_dir)
                disputes = rows(client_dir, "SELECT status FROM disputes") if mine else []
                return (mine is not None and mine[0] == "verified" and audit is not None and audit[0] == "audited"
                        and bool(disputes) and all(status == "recorded" for (status,) in disputes))

            try:
                wait_until(ready_to_settle, timeout=300, what="the job verified, audited and its disputes ruled")
            except AssertionError:
                for node in nodes:
                    print(f"--- {node.data_dir.name}\n{node.log()}")
                print(f"--- client\n{(tmp_path / 'client.log').read_text()[-6000:]}")
                raise
            # The challenge window would stay open for minutes: move the chain's clock past it.
            RpcChain(anvil.url).advance_time(3600)
            out, _ = client.communicate(timeout=120)
            assert client.returncode == 0, out
            result = json.loads(out.strip().splitlines()[-1])

            honest_key = rows(honest.data_dir, "SELECT signer FROM commitments")[0][0].hex()
            cheater_key = rows(cheater.data_dir, "SELECT signer FROM commitments")[0][0].hex()
            assert result["status"] == "FINALIZED"
            assert result["providers"][honest_key]["outcome"] == "paid"
            assert result["providers"][cheater_key]["outcome"] == "slashed"
            assert result["result_from"] == honest_key
            assert result["verdicts"] and all(v["recorded"] for v in result["verdicts"])
            assert all([f["party"] for f in v["faults"]] == [cheater_key] for v in result["verdicts"])

            job_id = bytes.fromhex(result["job"])
            run_dir = honest.data_dir / "jobs" / job_id.hex() / "run"
            weights = Path(result["result_dir"]) / "weights.safetensors"
            assert weights.read_bytes() == max(run_dir.glob("step-*.safetensors")).read_bytes()

            s = Settlement(RpcChain(anvil.url), address)
            honest_account = result["providers"][honest_key]["account"]
            cheater_account = result["providers"][cheater_key]["account"]
            events = [e.event for e in s.events()]
            assert ProviderPaid(job_id, honest_account, 10**18) in events
            assert any(isinstance(e, StakeSlashed) and e.loser == cheater_account for e in events)
            wait_until(lambda: any(isinstance(e.event, Withdrawn) and e.event.account == honest_account
                                   for e in s.events()), timeout=60, what="the honest provider to withdraw its pay")
        finally:
            if client is not None and client.poll() is None:
                client.kill()
                client.wait(timeout=10)
            for node in nodes:
                node.stop()
