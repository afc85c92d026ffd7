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
from .test_roles_support import role, start_node, wait_for

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

