"""A node with settlement "2" runs the version-2 plumbing: a role whose module is not built says
so and idles, the follower resumes across a restart on the same data directory without
handing an event twice, and the version-2 keeper (not version 1's) refunds a job of the node's
that nobody took, withdrawing the price."""
from __future__ import annotations

import logging
import os

import trio

from contracts import NodeRegistered, Role, Withdrawn
from contracts.settlement_v2 import JobOpened, JobStatus
from node.config import Settings, load_config
from node.datadir import load_seed
from node.roles import v2
from node.roles.chain import DEV_MARGIN_V2, open_binding_sync
from node.roles.keeper import keeper_of
from node.roles.v2.keeper import keeper_v2_of
from node.roles.v2.trained import TrainedJobs
from node.runtime import Node

from ..conftest import trio_test
from ...contracts.settlement_world_v2 import SPEC, default_terms
from ..test_roles_support import advance_embedded_chain, start_node, wait_for
from .test_data_v2 import ready


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[int, int]] = []

    async def __call__(self, logged) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append((logged.block_number, logged.log_index))


async def run_once(tmp_path, seen: Seen):
    """Start the node of ``tmp_path / node``, hand ``seen`` its follower's registrations, stop it."""
    async with trio.open_nursery() as nursery:
        directory = tmp_path / "node"
        if (directory / "config.toml").exists():  # a restart: the same data directory, a new Node
            config = load_config(directory)
            node = Node(config, load_seed(config))
            await nursery.start(node.run)
        else:
            node = await start_node(nursery, directory, ["client"], settlement="2")
        ctx = await ready(node)
        ctx.follower.subscribe(NodeRegistered, seen)
        await ctx.follower.wait_caught_up()
        # the keeper starts beside the roles: on a loaded machine it may still be coming up here
        await wait_for(lambda: keeper_v2_of(node) is not None, timeout=30)
        nursery.cancel_scope.cancel()
    return node, ctx


@trio_test(timeout=90)
async def test_a_v2_node_idles_an_unbuilt_role_and_its_follower_resumes_after_a_restart(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="node.roles.v2")
    monkeypatch.setitem(v2.ROLE_CLASSES_V2, "client", ("not_written_yet", "ClientRoleV2"))
    first = Seen()
    node, ctx = await run_once(tmp_path, first)
    assert "the client role is not built for settlement 2 yet" in caplog.messages
    assert isinstance(ctx.trained, TrainedJobs) and ctx.job_data is not None
    assert ctx.chain.settlement.chain_settings().margin == DEV_MARGIN_V2
    assert keeper_v2_of(node) is not None and keeper_of(node) is None
    assert first.events and first.events == sorted(set(first.events))  # a new node: from the deployment on

    other = open_binding_sync(Settings(settlement="2"), os.urandom(32))
    await other.run(other.ensure_registered_sync, os.urandom(32), Role.CLIENT, 0)
    again = Seen()
    await run_once(tmp_path, again)  # a new RoleContext on the same data directory
    assert again.events and min(again.events) > max(first.events)  # nothing handed twice across the restart


@trio_test(timeout=90)
async def test_the_v2_keeper_of_a_node_refunds_its_unfilled_job_and_withdraws(tmp_path):
    async with trio.open_nursery() as nursery:
        node = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
        ctx = await ready(node)
        with trio.fail_after(30):
            while keeper_v2_of(node) is None:
                await trio.sleep(0.05)
        keeper = keeper_v2_of(node)
        keeper.poll = 0.1
        chain = ctx.chain
        terms = default_terms(ctx.identity.node_id, client_referees=False, nonce=int.from_bytes(os.urandom(7), "big"))
        jid = (await chain.run(chain.settlement.open_job, terms, SPEC)).one(JobOpened).job_id
        await ctx.follower.wait_caught_up()
        advance_embedded_chain(terms.accept_window + 10)
        with trio.fail_after(30):
            while node.storage.final_status(jid) is None:
                await trio.sleep(0.05)
        assert keeper.settled == [jid] and keeper.refused == 0
        assert (await chain.run(chain.settlement.job, jid)).status == JobStatus.REFUNDED
        withdrawn = [e.event.amount for e in await chain.run(chain.settlement.events, 0)
                     if isinstance(e.event, Withdrawn) and e.event.account == chain.account]
        assert sum(withdrawn) == terms.price and await chain.run(chain.settlement.credit_of, chain.account) == 0
        nursery.cancel_scope.cancel()
