"""The claim game end to end on settlement version 2: a client (it referees its job), an honest provider,
a provider that changes one operator's output (``wrong-op-output``) and an auditor, each a node with
real libp2p hosts on loopback, all on the embedded EVM running GavelSettlementV2. Nothing is driven
by hand: the auditor learns the reveals from the chain, replays, opens the game and picks; the
cheater's defender posts its own lists and evidence; the client rules from that evidence; the game
keepers end the path and the keeper settles. The terms offer no fourth level (`on_chain_step` off): the
referee path, which a node no element program covers keeps. Money is read from the contract."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio

from contracts.settlement_v2 import ForfeitReason, SeatStatus
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, GameOpened
from contracts.settlement_v2_referees import ClaimRuled
from node.roles.client import SubmitOptions
from node.roles.context import context_of

from ..conftest import trio_test
from ..economics import Books, advance, on_chain
from ..test_roles_support import role, start_node, write_job


def game_events(s, kind, since: int):
    # from the test's first block: the process's embedded chain holds every earlier test's blocks too,
    # and reading them all on each poll slowed a late run in CI past its timeout
    return [e.event for e in s.events(since, None) if isinstance(e.event, kind)]


async def wait_on_chain(read, *, timeout: float) -> None:
    with trio.fail_after(timeout):
        while not await on_chain(read):
            await trio.sleep(0.2)


@dataclass
class CheatedNetwork:
    """The four nodes' network, their accounts by name and their books from its first block."""

    client: Any       # the client's node
    client_role: Any
    settlement: Any
    accounts: dict[str, str]
    books: Books
    since: int


async def cheated_network(nursery: trio.Nursery, tmp_path, *, client_nursery: trio.Nursery | None = None
                          ) -> CheatedNetwork:
    """A client, an honest provider, a ``wrong-op-output`` provider and an auditor (every interval
    replayed) on one network; the client runs in `client_nursery` when given (a test may stop it), and
    the others meet through the honest provider too, so their network outlives the client."""
    client = await start_node(client_nursery or nursery, tmp_path / "client", ["client"], settlement="2")
    honest = await start_node(nursery, tmp_path / "honest", ["provider"], bootstrap=client.host.listen_addrs,
                              settlement="2")
    hubs = client.host.listen_addrs + honest.host.listen_addrs
    cheater = await start_node(nursery, tmp_path / "cheater", ["provider"], bootstrap=hubs, settlement="2",
                               cheat="wrong-op-output")
    auditor = await start_node(nursery, tmp_path / "auditor", ["auditor"], bootstrap=hubs, settlement="2",
                               audit_rate=1.0)
    client_role = await role(client, "client")
    for node in (honest, cheater):
        await role(node, "provider")
    await role(auditor, "auditor")
    s = client_role.ctx.chain.settlement
    accounts = {name: context_of(node).chain.account
                for name, node in (("client", client), ("honest", honest), ("cheater", cheater), ("auditor", auditor))}
    books = await Books.open(s, list(accounts.values()))
    return CheatedNetwork(client, client_role, s, accounts, books, await on_chain(s.chain.block_number))


async def assert_the_cheater_paid(net: CheatedNetwork, job_id: bytes) -> None:
    """The settled job's money, read from the contract: the cheater lost its stake, the honest seat got
    its pay, the auditor gained, the client paid the honest seat only."""
    s, accounts = net.settlement, net.accounts
    info = await on_chain(s.job, job_id)
    assert (await on_chain(s.seat, job_id, accounts["cheater"])).forfeit == ForfeitReason.LOST_GAME
    assert (await on_chain(s.seat, job_id, accounts["honest"])).status == SeatStatus.PAID
    pay, stake = info.price // 2, info.provider_stake
    nets = await net.books.nets()
    assert nets[accounts["cheater"]] == -stake < 0
    assert nets[accounts["honest"]] == pay > 0
    assert nets[accounts["auditor"]] > 0  # its bonds back, the finders' share, the path's gas
    assert nets[accounts["client"]] == -pay  # the forfeited seat's p came back, and its referee bond


@pytest.mark.slow
@trio_test(timeout=400)
async def test_a_cheated_operator_is_caught_by_the_claim_game_and_the_money_follows(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        net = await cheated_network(nursery, tmp_path)
        client_role, s, accounts, since = net.client_role, net.settlement, net.accounts, net.since

        # terms without an elementSpecRoot: every node claim is the referee's (test_duel_network plays the
        # fourth level, the default)
        job_id = await client_role.submit(job_file, SubmitOptions(providers=2, accept_within=120, on_chain_step=False))
        # the auditor opens the game on the cheater's root, picks down to a node, the client rules it
        await wait_on_chain(lambda: any(e.job_id == job_id for e in game_events(s, GameOpened, since)), timeout=180)
        (game,) = [e for e in game_events(s, GameOpened, since) if e.job_id == job_id]
        assert game.opener == accounts["auditor"]
        assert game.trace_root == (await on_chain(s.seat, job_id, accounts["cheater"])).trace_root
        await wait_on_chain(lambda: any(True for _ in game_events(s, ClaimRuled, since)), timeout=120)
        (ruled,) = game_events(s, ClaimRuled, since)
        assert ruled.referee == accounts["client"] and not ruled.defender_right
        picks = [e for e in game_events(s, ClaimPicked, since)]
        assert [p.author for p in picks] == [accounts["auditor"]] * 2

        # nobody appeals: once appealBy passed the keepers end the path, then every window closes
        await advance(ruled.appeal_by - await on_chain(s.chain.now) + 1)
        await wait_on_chain(lambda: s.claim(game.game_id).status != ClaimStatus.OPEN, timeout=60)
        assert (await on_chain(s.claim, game.game_id)).status == ClaimStatus.UPHELD
        info = await on_chain(s.job, job_id)
        await advance(max(0, info.final_by - await on_chain(s.chain.now)) + 10)
        with trio.fail_after(120):
            summary = await client_role.wait(job_id)

        assert summary["status"] == "FINALIZED"
        await assert_the_cheater_paid(net, job_id)
        nursery.cancel_scope.cancel()
