"""Strategy tests of docs/economics.md §12 and §14.3: real roles (a version-2 client and an honest
provider on libp2p hosts on loopback) against the embedded EVM running GavelSettlementV2, the
adversary an account on the same contract that plays the strategy by hand. Money is read from
the contract: each party's net is the change of its stake and credit, plus what it withdrew,
less what it sent in (stake added, a job's price), over the test's blocks.

The embedded chain is shared by every node of the process and is not thread-safe: every
call here goes through `on_chain`, under the chain's lock, like the nodes' own calls.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import trio

from contracts import ETHER, NodeRegistered, Role, StakeAdded, Withdrawn
from contracts.settlement_v2 import JobOpened, SettlementV2
from protocol import Identity

from ..test_roles_support import role, start_node, wait_for, write_job


def _shared():
    from node.roles import chain

    return chain._embedded_chain()


async def on_chain(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the process's embedded chain, under its lock, in a worker thread."""
    shared = _shared()

    def locked() -> Any:
        with shared.lock:
            return fn(*args)

    return await trio.to_thread.run_sync(locked)


async def advance(seconds: int) -> None:
    await on_chain(_shared().chain.advance_time, seconds)


def contract_money(s: SettlementV2, accounts: list[str], since: int) -> dict[str, int]:
    """Each account's stake and credit on the contract now, plus what it withdrew since block
    ``since``, less the stakes it sent and the prices it escrowed since (blocking)."""
    flows = {a: 0 for a in accounts}
    for found in s.events(since, None):
        e = found.event
        if isinstance(e, Withdrawn) and e.account in flows:
            flows[e.account] += e.amount
        elif isinstance(e, StakeAdded) and e.account in flows:
            flows[e.account] -= e.amount
        elif isinstance(e, NodeRegistered) and e.account in flows:
            flows[e.account] -= e.stake
        elif isinstance(e, JobOpened) and e.client in flows:
            flows[e.client] -= e.terms.price
    return {a: s.node(a).stake + s.credit_of(a) + flows[a] for a in accounts}


@dataclass
class Books:
    """Each account's stake and credit at the first block of a test."""

    settlement: SettlementV2
    block: int
    start: dict[str, tuple[int, int]]

    @classmethod
    async def open(cls, settlement: SettlementV2, accounts: list[str]) -> "Books":
        def read() -> tuple[int, dict]:
            return settlement.chain.block_number(), {
                a: (settlement.node(a).stake, settlement.credit_of(a)) for a in accounts}

        block, start = await on_chain(read)
        return cls(settlement, block + 1, start)

    async def nets(self) -> dict[str, int]:
        """account -> what it has on (or got from) the contract now less what it had and put in."""
        s = self.settlement

        def read() -> dict[str, int]:
            held = contract_money(s, list(self.start), self.block)
            return {a: held[a] - stake - credit for a, (stake, credit) in self.start.items()}

        return await on_chain(read)


@dataclass
class Network:
    """A version-2 client node, one honest provider node, and an adversary's registered account."""

    client: Any  # ClientRoleV2
    provider: Any  # ProviderRoleV2
    settlement: SettlementV2  # bound to the client's account
    adversary: SettlementV2  # bound to the adversary's account
    adversary_identity: Identity  # the node key its account registered
    job_file: Path

    @property
    def accounts(self) -> list[str]:
        return [self.client.ctx.chain.account, self.provider.ctx.chain.account, self.adversary.account]


async def start_network(nursery: trio.Nursery, tmp_path: Path, *, adversary_stake: int = 5 * ETHER) -> Network:
    client_node = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
    provider_node = await start_node(nursery, tmp_path / "honest", ["provider"], settlement="2",
                                     bootstrap=client_node.host.listen_addrs)
    client = await role(client_node, "client")
    provider = await role(provider_node, "provider")
    s = client.ctx.chain.settlement

    identity = Identity.generate()

    def make_adversary() -> SettlementV2:
        account = s.chain.new_account(100 * ETHER)
        adversary = s.connect(account)
        adversary.register(identity.node_id, Role.PROVIDER | Role.CLIENT, stake=adversary_stake)
        return adversary

    adversary = await on_chain(make_adversary)
    return Network(client, provider, s, adversary, identity, write_job(tmp_path))


async def submit_with_adversary_seat(net: Network, options: Any) -> tuple[bytes, Any]:
    """The client submits a two-seat job; the adversary takes a seat on chain as soon as it opens
    (it needs no offer: any active provider may accept an open job). Returns (job id, client job)."""
    from contracts.settlement_v2 import JobStatus

    result: dict[str, bytes] = {}

    async def submit() -> None:
        result["job"] = await net.client.submit(net.job_file, options)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit)
        await wait_for(lambda: len(net.client.jobs) > 0, timeout=60)
        (job_id,) = list(net.client.jobs)
        for _ in range(600):
            if (await on_chain(net.settlement.job, job_id)).status == JobStatus.OPEN:
                break
            await trio.sleep(0.1)
        await on_chain(net.adversary.accept, job_id)
    return result["job"], net.client.jobs[result["job"]]


async def settled(net: Network, job_id: bytes) -> dict:
    """Every window of the job closed (the chain's clock moved past finalBy): the keepers close
    silent seats and settle; the client's summary once it recorded the end. The clock moves past
    finalBy only once the client checked what the seats revealed (its sampling and result fetch run
    inside the challenge window, as on a real chain, where that window outlasts them): a job settled
    first has no revealed seat left to read, only paid ones."""
    s = net.settlement
    reveal_by = (await on_chain(s.deadlines, job_id)).reveal_by
    ahead = reveal_by - await on_chain(s.chain.now)
    if ahead > 0:  # reveals in, or the silent seats' window closed
        await advance(ahead)
    cj = net.client.jobs[job_id]
    await wait_for(lambda: cj.state not in ("submitted", "opened", "handed", "verifying"), timeout=120)
    info = await on_chain(net.settlement.job, job_id)
    now = await on_chain(net.settlement.chain.now)
    await advance(max(0, info.final_by - now) + 10)
    with trio.fail_after(120):
        return await net.client.wait(job_id)


__all__ = ["Books", "Network", "advance", "on_chain", "settled", "start_network", "submit_with_adversary_seat"]
