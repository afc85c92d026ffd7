"""The game keeper: claim items anyone may push, for the games this node is in (docs/economics.md §8.4, §9).

A claim does not end by itself: once its deadlines passed somebody must call `timeout` (a
step or node claim), `resolveGame` (the game), `timeoutReferee` (a referee that stayed
silent) or `drawReferee` (a node claim whose chair is empty: armed first, made
DRAW_DELAY blocks later). A node claim played on the fourth level (docs/onchain-step.md) has
duels instead of referees: `settleStepGame` settles each once OneStepVerifier decided it or its
stepBy passed, and the claim's `timeout` comes once every duel is settled and none may open
(2Δ after its evidenceBy). Every party of a game wants it ended (its bonds and stake are
locked until then), so every node keeps the games it is in: those on a root it revealed,
those it opened, picked or joined, those of its jobs as a client, and those it was drawn
to referee.

Each pass reads every kept claim from the chain and sends only the move the chain's state
and clock allow now (`due_move`, the contract's guards read from `getClaim`/`getRuling`/`getStepClaim`);
a move another node sent first reverts, which is logged in one line and read again on the
next pass. A claim found ended is dropped, and a game with it once its own claim ended.

What the events told is written to ``game_keeper.json`` in the data directory as it is learnt
(`duty_state`), every open game seen with it (a node may join a game later, and then needs its
parties) and its duels: a restarted node, handed none of those events again, keeps its games, and
its first pass reads where each claim and duel stands on chain.
"""
from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from contracts.settlement_v2_games import (
    INTERVAL, NODE, ClaimJoined, ClaimPicked, ClaimResolved, ClaimStatus, GameOpened, ListEndorsed, ListPosted,
    EvidencePosted,
)
from contracts.settlement_v2_referees import AppealStage, RefereeDrawn, RefereeTimedOut, StepGameOpened
from protocol.economics import DRAW_DELAY

from ..chain import chain_failures, describe_chain_error
from .duty_state import DutyState

log = logging.getLogger(__name__)

STATE_FILE = "game_keeper.json"
GAME_KEEPER_POLL = 5.0
DRAW_WINDOW = 255  # GavelRefereesV2: a seed block older than this cannot be read; the draw re-arms
ZERO_ADDRESS = "0x" + "00" * 20

TIMEOUT, RESOLVE_GAME, TIMEOUT_REFEREE, DRAW_REFEREE = "timeout", "resolveGame", "timeoutReferee", "drawReferee"
SETTLE_STEP_GAME = "settleStepGame"


@dataclass
class KeptGame:
    """What the events told of one game: its job, its claims and who took part."""

    job_id: bytes
    client: str
    client_referees: bool
    claims: set[bytes] = field(default_factory=set)       # open claims, the game's own id included
    answered: set[bytes] = field(default_factory=set)     # claims some seat answered (a list or evidence)
    parties: set[str] = field(default_factory=set)        # openers, pickers and joiners
    client_timed_out: bool = False                        # the client's referee bond was burned
    duels: dict[int, bytes] = field(default_factory=dict)  # OneStepVerifier game id -> its node claim, until settled

    @property
    def client_may_rule(self) -> bool:
        """GavelRefereesV2's `_holder` for the client: it referees, its bond is intact, it is no party."""
        return self.client_referees and not self.client_timed_out and self.client not in self.parties

    def to_record(self) -> dict:
        return {"job": self.job_id.hex(), "client": self.client, "client_referees": self.client_referees,
                "claims": sorted(c.hex() for c in self.claims), "answered": sorted(c.hex() for c in self.answered),
                "parties": sorted(self.parties), "client_timed_out": self.client_timed_out,
                "duels": {str(d): c.hex() for d, c in self.duels.items()}}

    @classmethod
    def from_record(cls, record: dict) -> "KeptGame":
        return cls(bytes.fromhex(record["job"]), str(record["client"]), bool(record["client_referees"]),
                   {bytes.fromhex(c) for c in record["claims"]}, {bytes.fromhex(c) for c in record["answered"]},
                   {str(a) for a in record["parties"]}, bool(record["client_timed_out"]),
                   {int(d): bytes.fromhex(c) for d, c in record.get("duels", {}).items()})


def due_move(claim: Any, ruling: Any, *, now: int, block: int, answered: bool, client_may_rule: bool,
             duels: Any = None, margin: int = 0) -> str | None:
    """The move on `claim` (a `ClaimInfo`) the contract accepts at chain time `now` and block `block`,
    or None. `ruling` is its `RulingInfo` and `duels` its `StepClaimInfo` (node claims only); `answered`:
    some seat answered it; `margin`: Δ."""
    if claim.status != ClaimStatus.OPEN:
        return None
    end = RESOLVE_GAME if claim.level == INTERVAL else TIMEOUT
    if duels is not None and duels.games:  # played on OneStepVerifier: no referee, no evidence owed
        ended = duels.open == 0 and now >= claim.answer_by + 2 * margin
        return end if ended else None
    if not answered:  # nobody defended: the claim is upheld once the answer window passed
        return end if now >= claim.answer_by else None
    if claim.level != NODE:
        ended = now >= max(claim.answer_by, claim.pick_until) and claim.open_children == 0
        return end if ended else None
    if ruling.appeal == AppealStage.OPEN:
        if ruling.appeal_referee != ZERO_ADDRESS:
            return TIMEOUT_REFEREE if now >= ruling.appeal_rule_by else None
        return _draw_due(ruling, block)
    if claim.ruled or ruling.referees_out:
        return end if now >= max(claim.answer_by, claim.rule_by) else None
    if ruling.referee != ZERO_ADDRESS or client_may_rule:
        return TIMEOUT_REFEREE if claim.rule_by and now >= claim.rule_by else None
    return _draw_due(ruling, block)


def _draw_due(ruling: Any, block: int) -> str | None:
    """drawReferee arms an unarmed (or stale) draw at once and makes an armed one after DRAW_DELAY blocks;
    `block` is the latest block, so the move lands in block + 1."""
    armed = ruling.armed_block
    if armed == 0 or block + 1 > armed + DRAW_WINDOW or block + 1 > armed + DRAW_DELAY:
        return DRAW_REFEREE
    return None


class GameKeeper:
    """Ends the claims of the games this node is in once the chain allows it; what it follows is kept
    in ``data_dir`` (None: in memory only)."""

    def __init__(self, chain: Any, *, data_dir: Path | None = None, poll: float = GAME_KEEPER_POLL) -> None:
        self.chain = chain  # node.roles.chain.ChainBinding
        self.poll = poll
        self.games: dict[bytes, KeptGame] = {}   # every open game seen (parties are needed before we are in it)
        self.kept: set[bytes] = set()            # the games this node is in
        self.claim_game: dict[bytes, bytes] = {}  # open claim id -> game id
        self.sent: list[tuple[str, bytes]] = []   # moves that landed, in order (for status and tests)
        self._delta: int | None = None             # Δ, read once
        self.state = DutyState(data_dir, STATE_FILE)
        self.state.restore(self._restore)

    # -- what is kept across a restart ------------------------------------------------

    def _restore(self, state: dict) -> None:
        for game_hex, record in state["games"].items():
            game_id, game = bytes.fromhex(game_hex), KeptGame.from_record(record)
            self.games[game_id] = game
            self.claim_game.update({claim_id: game_id for claim_id in game.claims | {game_id}})
        self.kept.update(g for g in map(bytes.fromhex, state["kept"]) if g in self.games)

    async def _save(self) -> None:
        await self.state.save(lambda: {"games": {g.hex(): game.to_record() for g, game in self.games.items()},
                                       "kept": sorted(g.hex() for g in self.kept)})

    def _forget(self, game_id: bytes) -> None:
        """A game whose own claim ended: nothing of it is due any more."""
        self.games.pop(game_id, None)
        self.kept.discard(game_id)
        for claim_id in [c for c, g in self.claim_game.items() if g == game_id]:
            del self.claim_game[claim_id]

    # -- what the chain told ----------------------------------------------------------

    def subscribe(self, follower: Any) -> None:
        for kind, handler in ((GameOpened, self.on_game_opened), (ClaimPicked, self.on_claim_picked),
                              (ClaimJoined, self.on_claim_joined), (ListPosted, self.on_answered),
                              (ListEndorsed, self.on_answered), (EvidencePosted, self.on_answered),
                              (RefereeDrawn, self.on_referee_drawn), (RefereeTimedOut, self.on_referee_timed_out),
                              (StepGameOpened, self.on_step_game_opened), (ClaimResolved, self.on_resolved)):
            follower.subscribe(kind, handler)

    async def on_game_opened(self, logged: Any) -> None:
        e: GameOpened = logged.event
        s = self.chain.settlement
        job = await self.chain.run(s.job, e.job_id)
        seat = await self.chain.run(s.seat, e.job_id, self.chain.account)
        self.games[e.game_id] = KeptGame(e.job_id, job.client, job.client_referees, {e.game_id}, parties={e.opener})
        self.claim_game[e.game_id] = e.game_id
        if self.chain.account in (e.opener, job.client) or seat.trace_root == e.trace_root:
            self.kept.add(e.game_id)
        await self._save()

    async def on_claim_picked(self, logged: Any) -> None:
        e: ClaimPicked = logged.event
        game_id = self.claim_game.get(e.parent)
        if game_id is None:
            await trio.lowlevel.checkpoint()
            return
        self.claim_game[e.claim_id] = game_id
        game = self.games[game_id]
        game.claims.add(e.claim_id)
        game.parties.add(e.author)
        if e.author == self.chain.account:
            self.kept.add(game_id)
        await self._save()

    async def on_claim_joined(self, logged: Any) -> None:
        game = self._game_of(logged.event.claim_id)
        if game is None:
            await trio.lowlevel.checkpoint()
            return
        game.parties.add(logged.event.account)
        if logged.event.account == self.chain.account:
            self.kept.add(self.claim_game[logged.event.claim_id])
        await self._save()

    async def on_answered(self, logged: Any) -> None:
        game = self._game_of(logged.event.claim_id)
        if game is None or logged.event.claim_id in game.answered:
            await trio.lowlevel.checkpoint()
            return
        game.answered.add(logged.event.claim_id)
        await self._save()

    async def on_referee_drawn(self, logged: Any) -> None:
        if logged.event.referee != self.chain.account or logged.event.claim_id not in self.claim_game:
            await trio.lowlevel.checkpoint()
            return
        self.kept.add(self.claim_game[logged.event.claim_id])
        await self._save()

    async def on_step_game_opened(self, logged: Any) -> None:
        """A duel on a claim of a game seen: settled by its players' keepers (anyone may)."""
        e: StepGameOpened = logged.event
        game = self._game_of(e.claim_id)
        if game is None:
            await trio.lowlevel.checkpoint()
            return
        game.duels[e.id] = e.claim_id
        if self.chain.account in (e.challenger, e.defender):
            self.kept.add(self.claim_game[e.claim_id])
        await self._save()

    async def on_referee_timed_out(self, logged: Any) -> None:
        game = self._game_of(logged.event.claim_id)
        if game is None or logged.event.referee != game.client:
            await trio.lowlevel.checkpoint()
            return
        # the client's one bond for the job is gone: it holds no claim of the job any more
        for other in self.games.values():
            if other.job_id == game.job_id:
                other.client_timed_out = True
        await self._save()

    async def on_resolved(self, logged: Any) -> None:
        """A claim ended: a game's own claim takes the game with it (whether this node was in it or not)."""
        claim_id = logged.event.claim_id
        game_id = self.claim_game.get(claim_id)
        if game_id is None:
            await trio.lowlevel.checkpoint()
            return
        if claim_id == game_id:
            self._forget(game_id)
        else:
            self._drop_claim(self.games[game_id], claim_id)
        await self._save()

    def _drop_claim(self, game: KeptGame, claim_id: bytes) -> None:
        game.claims.discard(claim_id)
        game.answered.discard(claim_id)
        self.claim_game.pop(claim_id, None)

    def _game_of(self, claim_id: bytes) -> KeptGame | None:
        game_id = self.claim_game.get(claim_id)
        return None if game_id is None else self.games[game_id]

    # -- moving -----------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self.keep_once()
            await trio.sleep(self.poll)

    async def keep_once(self) -> list[tuple[str, bytes]]:
        """One pass over the kept games' open claims, deepest first (a parent waits for its children);
        returns the moves that landed."""
        s, chain = self.chain.settlement, self.chain.chain
        try:
            now, block = await self.chain.run(lambda: (chain.now(), chain.block_number()))
        except chain_failures() as error:
            log.info("game keeper: reading the chain's clock: %s", describe_chain_error(error))
            return []
        landed, changed = [], False
        for game_id in sorted(self.kept):
            game = self.games.get(game_id)
            if game is None:  # its end was handed while this pass read the chain
                continue
            claims = []
            for claim_id in list(game.claims):
                try:
                    claims.append((claim_id, await self.chain.run(s.claim, claim_id)))
                except chain_failures() as error:
                    log.info("game keeper: reading claim %s: %s", claim_id.hex()[:12], describe_chain_error(error))
            landed += await self._settle_duels(game, now)
            for claim_id, info in sorted(claims, key=lambda pair: -pair[1].level):
                move = await self._move_of(game, claim_id, info, now, block)
                if move is None:
                    continue
                try:
                    await self.chain.run(getattr(s, _PYTHON_NAMES[move]), claim_id)
                except chain_failures() as error:  # another keeper was first, or the state moved: read again next pass
                    log.info("game keeper: %s(%s) refused: %s", move, claim_id.hex()[:12], describe_chain_error(error))
                    continue
                landed.append((move, claim_id))
                log.info("game keeper: %s(%s) landed", move, claim_id.hex()[:12])
                if move in (TIMEOUT, RESOLVE_GAME):
                    break  # a parent's state changed with its child: read it again next pass
            for claim_id, info in claims:
                if info.status not in (ClaimStatus.NONE, ClaimStatus.OPEN):
                    self._drop_claim(game, claim_id)
                    changed = True
            if game_id not in game.claims:  # the game itself ended
                self._forget(game_id)
        if changed:
            await self._save()
        self.sent += landed
        return landed

    async def _move_of(self, game: KeptGame, claim_id: bytes, info: Any, now: int, block: int) -> str | None:
        if info.status != ClaimStatus.OPEN:
            return None
        s = self.chain.settlement
        ruling = duels = None
        if info.level == NODE:  # a claim some duel plays (settled or not, ours or not) has no referee
            ruling = await self.chain.run(s.ruling, claim_id)
            duels = await self.chain.run(s.step_claim, claim_id)
        return due_move(info, ruling, now=now, block=block, answered=claim_id in game.answered,
                        client_may_rule=game.client_may_rule, duels=duels, margin=await self._margin())

    async def _settle_duels(self, game: KeptGame, now: int) -> list[tuple[str, bytes]]:
        """settleStepGame for each of the game's duels OneStepVerifier decided, or whose stepBy passed; a
        settled duel is dropped (the moves are listed by their node claim)."""
        from contracts.step_verifier import StepVerifier

        s, landed = self.chain.settlement, []
        for duel, claim_id in sorted(game.duels.items()):
            try:
                info = await self.chain.run(s.step_game, duel)
                if info.settled:
                    del game.duels[duel]
                    continue
                address = await self.chain.run(s.setting, "STEP_VERIFIER")
                verifier = StepVerifier(self.chain.chain, address, self.chain.account)
                if now < info.step_by and (await self.chain.run(verifier.game, duel)).outcome is None:
                    continue
                await self.chain.run(s.settle_step_game, duel)
            except chain_failures() as error:  # another keeper was first: read again next pass
                log.info("game keeper: settleStepGame(%d) refused: %s", duel, describe_chain_error(error))
                continue
            del game.duels[duel]
            landed.append((SETTLE_STEP_GAME, claim_id))
        if landed:
            await self._save()
        return landed

    async def _margin(self) -> int:
        if self._delta is None:
            self._delta = (await self.chain.run(self.chain.settlement.chain_settings)).margin
        return self._delta


_started: "weakref.WeakKeyDictionary[Any, GameKeeper]" = weakref.WeakKeyDictionary()


def start_game_keeper(ctx: Any) -> GameKeeper:
    """The node's one game keeper (a role context's), subscribed to its follower and running; every
    role of the node that takes part in games calls this, the first starts it."""
    if ctx not in _started:
        keeper = _started[ctx] = GameKeeper(ctx.chain, data_dir=ctx.config.data_dir)
        keeper.subscribe(ctx.follower)
        ctx.start_soon(keeper.run, name="game keeper")
    return _started[ctx]


_PYTHON_NAMES = {TIMEOUT: "timeout", RESOLVE_GAME: "resolve_game", TIMEOUT_REFEREE: "timeout_referee",
                 DRAW_REFEREE: "draw_referee"}

__all__ = ["GAME_KEEPER_POLL", "GameKeeper", "KeptGame", "SETTLE_STEP_GAME", "STATE_FILE", "due_move",
           "start_game_keeper"]
