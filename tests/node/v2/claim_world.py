"""Support of the claim-game role tests: the contract world of tests/contracts (a job revealed by direct
SettlementV2 calls, `GameTable`'s hand-driven moves), a node's chain binding on it, and the chain's
events handed to a role's handlers in block order."""
from __future__ import annotations

import threading
from contextlib import asynccontextmanager

import trio
from typing import Any

from node.roles.chain import ChainBinding
from tests.contracts.game_world_v2 import GameTable  # noqa: F401  (re-exported for the role tests)
from tests.contracts.settlement_world_v2 import _stage_v2, cast_v2  # noqa: F401  (the fixtures)


_chain_locks: dict[int, threading.Lock] = {}


def binding(w: Any, account: str) -> ChainBinding:
    """`account`'s binding to the world's contract, as a node holds it: the embedded chain is not
    thread-safe, so every binding to one chain shares one lock (as the nodes of a process do)."""
    lock = _chain_locks.setdefault(id(w.chain), threading.Lock())
    return ChainBinding(w.chain, w.settlement.connect(account), lock, dev=True)


class EventPump:
    """Hands the contract's events to the handlers subscribed to their type, in block and log order,
    each once: `await pump.deliver()` after the moves a test made."""

    def __init__(self, settlement: Any) -> None:
        self.settlement = settlement
        self.handlers: dict[type, list] = {}
        self.next_block = 0
        self.seen: set[tuple[int, int]] = set()

    def subscribe(self, kind: type, handler) -> None:
        self.handlers.setdefault(kind, []).append(handler)

    async def deliver(self) -> int:
        delivered = 0
        for logged in self.settlement.events(self.next_block):
            if (logged.block_number, logged.log_index) in self.seen:
                continue
            self.seen.add((logged.block_number, logged.log_index))
            for handler in self.handlers.get(type(logged.event), ()):
                await handler(logged)
            delivered += 1
            self.next_block = logged.block_number
        return delivered


class Spawner:
    """A role's `spawn` whose tasks run in the nursery a test opens with `tasks()`, which waits for them."""

    def __init__(self):
        self.nursery = None

    def __call__(self, fn, *args, name=None):
        self.nursery.start_soon(fn, *args, name=name)

    @asynccontextmanager
    async def tasks(self):
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            yield nursery


async def play_out(pump: EventPump, spawn: Spawner, *, rounds: int = 20) -> None:
    """Hand the chain's events to the roles and let their tasks move, until a round brings no event."""
    for _ in range(rounds):
        async with spawn.tasks():
            if not await pump.deliver():
                return


class ClaimRoles:
    """The claim game's roles of a node, each on its own account's binding, played on a hand-made job of
    the contract world: a `Defender` per seat (its run's oracle), `Auditor`s, the client's
    `RefereeDuty`, drawn referees' duties, and every party's `GameKeeper`; evidence goes from the
    defender straight to the duty of the account it names, a node output from the seat's defender
    straight to the claimant (the libp2p legs have their own tests). With `duels`, each seat's and
    auditor's node also plays its side of the fourth level (`Duels`)."""

    def __init__(self, w: Any, jid: bytes, seats: dict, data_dir, training, *, referee: bool = True,
                 duels: bool = False) -> None:
        from node.roles.v2.defender import Defender
        from node.roles.v2.duels import DEFENDER

        self.w, self.jid, self.data_dir, self.training = w, jid, data_dir, training
        self.pump, self.spawn = EventPump(w.settlement), Spawner()
        self.duties: dict[str, Any] = {}  # account -> its RefereeDuty
        self.auditors: dict[str, Any] = {}
        self.defenders: dict[str, Any] = {}
        self.duels: dict[str, Any] = {}  # account -> its node's Duels
        self.keepers = []
        self.seats = seats
        self.silent: set[str] = set()  # seats whose evidence never leaves them (posted, never sent)
        self.pushes_lost: set[str] = set()  # seats whose pushes never arrive, though they answer an ask
        for seat, oracle in seats.items():
            send = (lambda referee, evidence, seat=seat: self.send(referee, evidence, seat))
            self.defenders[seat] = Defender(binding(w, seat), {jid: _Seat(oracle)}, self._dir(seat), self.spawn, send)
            self.defenders[seat].subscribe(self.pump)
            if duels:
                self.duel_player(seat).serve(DEFENDER, self.defenders[seat].duel_material)
            self.keep(seat)
        if referee:
            self.referee(w.client)

    def _dir(self, account: str):
        path = self.data_dir / account
        path.mkdir(exist_ok=True)
        return path

    async def training_of(self, job_id: bytes) -> Any:
        await trio.lowlevel.checkpoint()
        return self.training

    async def send(self, referee: str, evidence: Any, seat: str) -> None:
        if referee not in self.duties or seat in self.silent or seat in self.pushes_lost:  # a referee that runs no duty here takes the evidence and ignores it
            await trio.lowlevel.checkpoint()
            return
        await self.duties[referee].accept(f"seat to {referee}", evidence)

    async def fetch(self, seat: str, claim_id: bytes) -> Any:
        """A referee's ask for the evidence a seat posted (`RefereeDuty.pull`): a silent seat never answers."""
        from node.errors import PeerTimeout
        from node.streams import RequestRefused

        await trio.lowlevel.checkpoint()
        if seat in self.silent:
            raise PeerTimeout("opening /gavel/evidence-of/2.0.0 took over 14.2 s")
        evidence = self.defenders[seat].evidence.get(claim_id)
        if evidence is None:
            raise RequestRefused(f"no evidence of claim {claim_id.hex()} here")
        return evidence

    def referee(self, account: str, behaviour: Any = None, *, pulls: bool = False, builds: bool = False) -> Any:
        """The account's RefereeDuty; with `pulls`, it asks the seats for evidence their pushes did not bring;
        with `builds`, it builds that evidence from its own run of the job."""
        from node.roles.v2.referee import RefereeDuty
        from node.roles.v2.replays import OwnRuns

        self.duties[account] = RefereeDuty(binding(self.w, account), self._dir(account), self.spawn, self.training_of,
                                           behaviour, self.fetch if pulls else None,
                                           OwnRuns(self.training_of, {}) if builds else None)
        self.duties[account].subscribe(self.pump)
        return self.duties[account]

    def duel_player(self, account: str) -> Any:
        """The account's node's `Duels` (made on first use, kept in the account's data directory)."""
        from node.roles.v2.duels import Duels

        if account not in self.duels:
            self.duels[account] = Duels(binding(self.w, account), self.spawn, data_dir=self._dir(account))
            self.duels[account].subscribe(self.pump)
        return self.duels[account]

    async def output_of(self, seat: str, claim_id: bytes, entry: bytes) -> Any:
        """A seat's node output as a claimant gets it (`node_output_protocol`'s check included)."""
        from node.errors import BadMessage
        from repops_cupy.hashing import hash_tensor

        output = await self.defenders[seat].node_output(claim_id)
        if hash_tensor(output) != entry:
            raise BadMessage("not the tensor of the node list's entry")
        return output

    async def duel(self, *, rounds: int = 200) -> None:
        """Every node plays its duels (each pass a move at most per side and duel) until none is open."""
        for _ in range(rounds):
            await self.play()
            if not any(d.open for d in self.duels.values()):
                return
            for duels in self.duels.values():
                await duels.play_once()
        raise AssertionError("the duels did not end")

    def keep(self, account: str) -> None:
        from node.roles.v2.game_keeper import GameKeeper

        keeper = GameKeeper(binding(self.w, account))
        keeper.subscribe(self.pump)
        self.keepers.append(keeper)

    def auditor(self, account: str, *, seed: int = 1, duels: bool = False, lies: bool = False) -> Any:
        import random

        from node.roles.v2.auditor import Auditor

        async def checkpoint_of(job_id, seat, c):
            await trio.lowlevel.checkpoint()
            return self.seats[seat].checkpoint_state(c)

        self.auditors[account] = Auditor(binding(self.w, account), self.spawn, self.training_of, checkpoint_of,
                                         rate=1.0, rng=random.Random(seed),
                                         duels=self.duel_player(account) if duels else None,
                                         output_of=self.output_of if duels else None, lies=lies)
        self.auditors[account].subscribe(self.pump)
        self.keep(account)
        return self.auditors[account]

    async def play(self) -> None:
        await play_out(self.pump, self.spawn)

    async def finish(self, games: list[bytes], *, rounds: int = 60) -> None:
        """Move the chain's clock on and let the keepers push every game to its end."""
        from contracts.settlement_v2_games import ClaimStatus

        for _ in range(rounds):
            if all(self.w.settlement.claim(g).status != ClaimStatus.OPEN for g in games):
                return
            for keeper in self.keepers:
                await keeper.keep_once()
            await self.play()
            self.w.chain.mine(self.w.chain.now() + 600)
        raise AssertionError("the games did not end")

    def settle(self) -> None:
        """Every window of the job passed: anyone settles."""
        info = self.w.settlement.job(self.jid)
        if info.final_by > self.w.chain.now():
            self.w.mine_at(info.final_by)
        self.w.as_(self.w.keeper).settle(self.jid)


class _Seat:
    """A provider's run as `ctx.trained` holds it (its trace and oracle, without files)."""

    def __init__(self, oracle: Any) -> None:
        self._oracle = oracle

    @property
    def trace(self) -> list[bytes]:
        return list(self._oracle.checkpoint_states())

    async def oracle(self) -> Any:
        await trio.lowlevel.checkpoint()
        return self._oracle


def new_account(w: Any, label: str, role: Any, stake: int) -> str:
    """A fresh registered account, counted in the world's books."""
    from tests.contracts.settlement_world import ed25519_key

    account = w.chain.new_account(stake + 10**18)
    w.others.append(account)
    w.as_(account).register(ed25519_key(label), role, stake=stake)
    return account
