"""Issue 21: a node whose chain restarts (a fresh anvil on the same port) says so once, joins
the new chain as at start and forgets the jobs the new chain does not know."""
from __future__ import annotations

import logging

import pytest
import trio

import contracts.anvil
from contracts import AnvilProcess, NodeStatus, find_anvil
from node.roles.context import context_of, decode_record, encode_record
from node.storage import Job

from .conftest import trio_test
from .test_roles_support import role, start_node, wait_for


class Lines(logging.Handler):
    """The messages of one logger, whatever the logging set-up of the tests run before."""

    def __init__(self, name: str, monkeypatch) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        logger = logging.getLogger(name)
        monkeypatch.setattr(logger, "level", logger.level)  # put back after the test
        logger.setLevel(logging.INFO)  # (setLevel also clears the loggers' cached levels)
        monkeypatch.setattr(logger, "handlers", logger.handlers + [self])  # the old list back after the test

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


pytestmark = [pytest.mark.anvil,
              pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")]


@trio_test(timeout=180)
async def test_a_node_whose_chain_restarts_joins_the_new_chain_and_forgets_its_jobs(tmp_path, monkeypatch):
    lines = Lines("node.roles.chain_watch", monkeypatch)
    everything = Lines("node", monkeypatch)
    first = AnvilProcess().start()
    second = None
    try:
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, tmp_path / "node", ["provider", "auditor"], chain=first.url)
            await role(node, "provider")
            await role(node, "auditor")
            ctx = context_of(node)
            old = ctx.chain
            # A job the node is in the middle of, on the chain that is about to go.
            job_id = b"\x21" * 32
            await node.storage.run(node.storage.put_job, Job(job_id, encode_record({"note": "on the old chain"}),
                                                             "provider", "delivered"))
            port, url = first.port, first.url
            first.stop()
            monkeypatch.setattr(contracts.anvil, "_free_loopback_port", lambda: port)  # the same URL, a fresh chain
            second = AnvilProcess().start()
            assert second.url == url

            await wait_for(lambda: node.storage.get_job(job_id).state == "lost", timeout=120)
            new = ctx.chain
            # Seen by its genesis, or (two anvils started in the same second share one) by the missing contract.
            assert new is not old and old.stale and new.stale is None
            assert (await new.run(new.settlement.node, new.account)).status == NodeStatus.ACTIVE  # registered and staked
            record = decode_record(node.storage.get_job(job_id).spec)
            assert record["lost_with_chain"] == {"chain_id": old.identity[0], "genesis": old.identity[1],
                                                 "state": "delivered"}
            changed = [m for m in lines.lines if "joining it as at start" in m]
            assert len(changed) == 1, changed
            assert not [m for m in everything.lines + lines.lines if "InsufficientDataBytes" in m]
            nursery.cancel_scope.cancel()
    finally:
        first.stop()
        if second is not None:
            second.stop()



@pytest.mark.e2e
@pytest.mark.slow
def test_a_submit_whose_chain_restarts_under_it_ends_with_one_line_and_exit_5(tmp_path, monkeypatch):
    """``gavel submit --wait`` and a provider, each its own process, on anvil; once the job is
    handed out anvil is killed and a fresh one started on its port. The command says so once,
    joins the new chain, finds its job gone with the old one and exits 5 (no result)."""
    import subprocess

    from node.cli.submit import EXIT_NO_RESULT

    from .test_e2e_network import ENV, GAVEL, NodeProcess, rows, wait_until
    from .test_keeper_processes import end
    from .test_roles_support import write_job

    first = AnvilProcess().start()
    second = provider = client = None
    try:
        provider = NodeProcess(tmp_path / "provider", "--role", "provider", "--chain", first.url, "--log-level", "info")
        errors = tmp_path / "submit.err"
        client = subprocess.Popen(
            [*GAVEL, "submit", str(write_job(tmp_path)), "--data-dir", str(tmp_path / "client"), "--provider",
             provider.addrs[0], "--chain", first.url, "--providers", "1", "--wait", "--json"],
            stdout=subprocess.PIPE, stderr=open(errors, "w"), text=True, env=ENV)
        wait_until(lambda: rows(provider.data_dir, "SELECT job_id FROM jobs"), timeout=120,
                   what="the provider to take its seat")
        port = first.port
        first.stop()
        monkeypatch.setattr(contracts.anvil, "_free_loopback_port", lambda: port)  # the same URL, a fresh chain
        second = AnvilProcess().start()
        out, _ = client.communicate(timeout=180)
        assert client.returncode == EXIT_NO_RESULT, (out, errors.read_text())
        assert "no result: the job failed (never opened, or lost with the chain that held it)" in out
        said = errors.read_text()
        changed = [line for line in said.splitlines() if "joining it as at start" in line]
        assert len(changed) == 1, said
        assert "client job(s) lost with the old chain" in said
        assert "Traceback" not in said and "InsufficientDataBytes" not in said, said
        # The provider too joined the new chain and let its job go; the next job finds it there, not restarted.
        wait_until(lambda: rows(provider.data_dir, "SELECT state FROM jobs") in ([("lost",)], [("abandoned",)]),
                   timeout=60, what="the provider to forget its job")
        again = subprocess.run(
            [*GAVEL, "submit", str(write_job(tmp_path)), "--data-dir", str(tmp_path / "client"), "--provider",
             provider.addrs[0], "--chain", second.url, "--providers", "1", "--json"],
            capture_output=True, text=True, env=ENV, timeout=180)
        assert again.returncode == 0, (again.stdout, again.stderr)
        assert ", 1 provider(s)" in again.stdout  # handed to the provider on the new chain
        assert len(rows(provider.data_dir, "SELECT job_id FROM jobs WHERE state NOT IN ('lost', 'abandoned')")) == 1
    finally:
        end(client)
        if provider is not None:
            provider.stop()
        first.stop()
        if second is not None:
            second.stop()
