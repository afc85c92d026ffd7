"""The chain follower hands the version-2 contract's events in order, once, across a restart,
again after a reorganisation (anvil), and goes on past a handler that raises."""
from __future__ import annotations

import logging
import sqlite3

import pytest
import trio

from contracts import AnvilProcess, NodeRegistered, Role, find_anvil
from node.config import Settings
from node.roles.chain import fresh_embedded_contract, open_binding_sync
from node.roles.chain_watch import ChainWatch
from node.roles.v2.follower import ChainFollower
from node.storage import MIGRATIONS, SCHEMA_VERSION, Storage

from ..conftest import trio_test

ETHER = 10**18


class Bound:
    """What a follower reads of its node: the chain binding and the database (a RoleContext's)."""

    def __init__(self, binding, storage: Storage) -> None:
        self.chain = binding
        self.storage = storage

    async def wait_chain(self):
        await trio.lowlevel.checkpoint()
        return self.chain


def fresh_contract() -> str:
    """A version-2 deployment of its own on the process's embedded chain: only this test's events."""
    return fresh_embedded_contract("2")


def bindings(settings: Settings, count: int, label: str):
    return [open_binding_sync(settings, f"{label} {i}".encode()) for i in range(count)]


def register(binding, i: int) -> None:
    binding.ensure_registered_sync(bytes([i + 1]) * 32, Role.CLIENT, 0)


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[int, int, str]] = []

    async def __call__(self, logged) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append((logged.block_number, logged.log_index, logged.event.account))


def on_chain(binding) -> list[tuple[int, int, str]]:
    return [(e.block_number, e.log_index, e.event.account) for e in binding.settlement.events(0)
            if isinstance(e.event, NodeRegistered)]


@trio_test(timeout=60)
async def test_events_come_in_chain_order_once_and_a_raising_handler_is_one_line(tmp_path, caplog):
    settings = Settings(settlement="2", contract=fresh_contract())
    nodes = bindings(settings, 4, "follower order")
    seen = Seen()
    calls = []

    async def broken(logged) -> None:
        await trio.lowlevel.checkpoint()
        calls.append(logged.event.account)
        raise ValueError("a role's bug")

    with Storage(tmp_path / "db") as storage:
        follower = ChainFollower(Bound(nodes[0], storage), poll=0.05)
        follower.subscribe(NodeRegistered, broken)  # first: its failure must not keep the next handler waiting
        follower.subscribe(NodeRegistered, seen)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follower.run)
            for i, binding in enumerate(nodes[:3]):
                await binding.run(register, binding, i)
            await follower.wait_caught_up()
            assert seen.events == on_chain(nodes[0]) and len(seen.events) == 3
            await nodes[3].run(register, nodes[3], 3)
            await follower.wait_caught_up()
            await follower.wait_caught_up()  # nothing new: no event handed again
            nursery.cancel_scope.cancel()
    assert seen.events == on_chain(nodes[0]) and len(seen.events) == 4
    assert calls == [account for _, _, account in seen.events]
    failures = [r.getMessage() for r in caplog.records if "failed" in r.getMessage() and r.levelno == logging.WARNING]
    assert len(failures) == 4 and all("NodeRegistered" in line and "a role's bug" in line for line in failures)


@trio_test(timeout=60)
async def test_a_restarted_follower_resumes_where_it_stopped_and_a_late_subscriber_catches_up(tmp_path):
    settings = Settings(settlement="2", contract=fresh_contract())
    nodes = bindings(settings, 4, "follower restart")

    async def follow(seen: Seen, *, late: Seen | None = None) -> None:
        with Storage(tmp_path / "db") as storage:  # the node's database, reopened as on a restart
            follower = ChainFollower(Bound(nodes[0], storage), poll=0.05)
            follower.subscribe(NodeRegistered, seen)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                await follower.wait_caught_up()
                if late is not None:  # a role that subscribes once the follower handed events
                    follower.subscribe(NodeRegistered, late)
                    await follower.wait_caught_up()
                nursery.cancel_scope.cancel()

    for i, binding in enumerate(nodes[:2]):
        await binding.run(register, binding, i)
    first = Seen()
    await follow(first)
    assert first.events == on_chain(nodes[0])  # a new node: every event from the deployment on
    for i, binding in enumerate(nodes[2:], start=2):
        await binding.run(register, binding, i)
    again, late = Seen(), Seen()
    await follow(again, late=late)
    everything = on_chain(nodes[0])
    assert len(everything) == 4 and again.events == everything[2:]  # only what came while it was down
    assert late.events == everything[2:]  # from where this run began, not twice across the restart
    nothing = Seen()
    await follow(nothing)  # restarted with no new block: caught up at once, nothing handed again
    assert nothing.events == []


def test_a_schema_3_database_gains_the_follower_position_and_party_jobs(tmp_path):
    path = tmp_path / "db"
    raw = sqlite3.connect(path)
    for migration in MIGRATIONS[:3]:
        raw.executescript(migration)
    raw.execute("PRAGMA user_version = 3")
    raw.execute("INSERT INTO final_on_chain(job_id, status, seen, block) VALUES (?, 'FINALIZED', 1.0, 7)", (b"f" * 32,))
    raw.commit()
    raw.close()
    with Storage(path) as db:
        assert db.schema_version == SCHEMA_VERSION == 4
        assert db.follower_position("0xC0") is None
        db.set_follower_position("0xC0", 12, 3, "0xabc")
        db.set_follower_position("0xC0", 13, 0, "0xdef")
        assert db.follower_position("0xC0") == (13, 0, "0xdef")
        for job_id, block in ((b"f" * 32, 2), (b"g" * 32, 5), (b"h" * 32, 4), (b"g" * 32, 9)):
            db.add_party_job(job_id, block)
        assert db.party_jobs_not_final() == [b"h" * 32, b"g" * 32]  # the final one left out, oldest first


@pytest.mark.anvil
@pytest.mark.skipif(find_anvil() is None, reason="anvil not installed: run `npm install` at the repository root")
@trio_test(timeout=120)
async def test_a_reorganisation_rewinds_the_follower_to_the_first_replaced_block(tmp_path):
    with AnvilProcess() as anvil:
        settings = Settings(settlement="2", chain=anvil.url)
        nodes = bindings(settings, 3, "follower reorg")
        seen = Seen()
        with Storage(tmp_path / "db") as storage:
            bound = Bound(nodes[0], storage)
            follower = ChainFollower(bound, poll=0.05)
            watch = ChainWatch(bound, poll=0.05)
            watch.on_reorg.append(follower.on_reorg)
            follower.subscribe(NodeRegistered, seen)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                nursery.start_soon(watch.run)
                await nodes[0].run(register, nodes[0], 0)
                await follower.wait_caught_up()
                mark = nodes[0].chain.snapshot()
                await nodes[1].run(register, nodes[1], 1)  # on the branch that will be dropped
                await follower.wait_caught_up()
                dropped = on_chain(nodes[0])[-1]
                assert seen.events == on_chain(nodes[0])
                with trio.fail_after(30):  # the watch remembers the block of the dropped registration
                    while dropped[0] not in watch.blocks:
                        await trio.sleep(0.05)
                nodes[0].chain.revert(mark)
                nodes[0].chain.mine()  # the new branch: another block at that height, then ours
                await nodes[2].run(lambda: nodes[2].chain.forget_nonces())
                await nodes[2].run(register, nodes[2], 2)
                with trio.fail_after(30):
                    while not watch.reorgs:
                        await trio.sleep(0.05)
                await follower.wait_caught_up()
                nursery.cancel_scope.cancel()
        (first, _), = watch.reorgs
        assert first <= dropped[0]
        now = on_chain(nodes[0])
        assert [e[2] for e in now] == [nodes[0].account, nodes[2].account]
        # handed in order before the reorganisation, then again from the first replaced block
        assert seen.events == [now[0], dropped, now[1]]
