"""The auditor role of a settlement-2 node: the node's shell around `auditor.Auditor`, with the
seat's checkpoints and signed steps lists fetched over the data service, its node outputs over
/gavel/node-output/2.0.0 (a duel's element), and the duels, game keeper and referee duty it starts
(docs/roles-v2.md)."""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import trio

from ...errors import LocalError, PeerError
from .auditor import Auditor, CheckpointSource
from .steps_asks import ToldStepsSource

log = logging.getLogger(__name__)


def checkpoint_source(ctx: Any, reach: Callable[[str], Awaitable[Any]]) -> CheckpointSource:
    """A node's `checkpoint_of`: the item fetched from the seat (`reach(account)` connects to it and
    returns its peer) and checked against its revealed trace (`data.JobDataService.fetch_item`), then loaded."""
    from repops_cupy.checkpoint import load_checkpoint

    async def checkpoint_of(job_id: bytes, seat: str, c: int) -> Any:
        path = await ctx.job_data.fetch_item(job_id, seat, c + 1, peer=await reach(seat))
        state, _, _ = await trio.to_thread.run_sync(load_checkpoint, path)
        return state

    return checkpoint_of


def told_steps_source(ctx: Any, reach: Callable[[str], Awaitable[Any]], keeper: Any) -> ToldStepsSource:
    """A node's `told_steps`: the seat's signed steps lists of some intervals (interval -> our list)
    fetched in one ask (`data.JobDataService.fetch_steps`) and handed to the statements keeper; a
    refused answer (no or a forged signature) is logged, and the audit goes on from the replay."""

    async def told_steps(job_id: bytes, seat: str, lists: dict[int, list]) -> None:
        try:
            told = await ctx.job_data.fetch_steps(job_id, seat, list(lists), peer=await reach(seat))
        except (PeerError, LocalError) as error:
            log.warning("auditor: job %s: the steps lists of intervals %s of %s refused: %s", job_id.hex()[:12],
                        sorted(lists), seat, error)
            return
        for (c, ours), one in zip(lists.items(), told):
            if list(one.steps) != list(ours):
                log.warning("auditor: job %s: %s's signed steps list of interval %d is not our replay's (kept)",
                            job_id.hex()[:12], seat, c)
            await keeper.add(one.signed)

    return told_steps


class AuditorRoleV2:
    """The auditor role of a settlement-2 node (`node.roles.v2.ROLE_CLASSES_V2`)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.auditor: Auditor | None = None
        self.statements: Any = None  # the node's StatementsKeeper, once the chain is up
        ctx.roles["auditor"] = self

    async def run(self) -> None:
        from ..job_protocols import TOPIC_PROVIDERS
        from .duels import start_duels
        from .game_keeper import start_game_keeper
        from .node_output_protocol import node_output_source
        from .referee import start_referee, training_source

        ctx = self.ctx
        await ctx.on_gossip(TOPIC_PROVIDERS, self._on_advert)
        from .statements_keeper import start_statements_keeper

        from .adversaries import challenger_behaviour

        chain = await ctx.wait_chain()
        self.statements = await start_statements_keeper(ctx)
        self.auditor = Auditor(chain, ctx.start_soon, training_source(ctx, self.reach),
                               checkpoint_source(ctx, self.reach), rate=ctx.config.audit_rate,
                               jobs=ctx.config.audit_jobs, data_dir=ctx.config.data_dir,
                               told_steps=told_steps_source(ctx, self.reach, self.statements),
                               duels=start_duels(ctx), output_of=node_output_source(ctx, self.reach),
                               lies=challenger_behaviour(ctx.config.cheat).lies)
        self.auditor.subscribe(ctx.follower)  # a late subscriber: the follower hands it what came before
        self.auditor.resume()  # what a previous run left: the follower hands none of it again
        start_game_keeper(ctx)
        start_referee(ctx, self.reach, self.auditor.own_runs)  # a drawn referee fetches the bundle and builds evidence as the auditor does
        await trio.sleep_forever()

    async def _on_advert(self, message: Any) -> None:
        """Providers' adverts give their addresses: a seat is reached by them (the chain names its key)."""
        from ...framing import unpack
        from ..job_protocols import Advert

        try:
            advert = Advert.from_wire(unpack(message.data, peer=message.origin), message.origin)
        except PeerError:
            return
        if advert.peer == str(message.origin):
            self.ctx.remember(message.origin, list(advert.addrs))
        await trio.lowlevel.checkpoint()

    async def reach(self, account: str) -> Any:
        """The peer of a seat's account, connected by the addresses this node knows of it (its adverts'
        among them): the data service's way, the witness duty's too."""
        return await self.ctx.job_data.peer_of_seat(account)


__all__ = ["AuditorRoleV2", "checkpoint_source", "told_steps_source"]
