"""The claim game's world for the version 2 tests: a job whose seats revealed an honest or a cheated
trace, the per-step states and node lists each side holds, and the moves that post them with proofs.

The truth of the job: step i (1..T) turns state i−1 into state i through N nodes. A cheater
follows the truth up to its first wrong step j, where node m (and the state after it) differ,
and differs from then on. Checkpoints are every k steps, so the cheated root's first wrong
interval is c = (j − 1) // k.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2_games import ClaimPicked, GameOpened
from protocol.listtree import ListTree, list_root

from .settlement_world import NODE_STAKE, ed25519_key
from .settlement_world_v2 import INITIAL_STATE, WorldV2

STEPS, EVERY, NODES = 10, 2, 4  # T, k (C = 5 intervals, a trace of 6 hashes), N
WRONG_STEP, WRONG_NODE = 4, 2   # the cheater's first wrong step (interval 1, its step 2) and node
REFEREE_FEE = 10**15


@dataclass(frozen=True)
class Computation:
    """What one side computed: every state hash and every step's node outputs."""

    label: str
    wrong_from: int | None  # first wrong step, None for the truth

    def wrong(self, step: int) -> bool:
        return self.wrong_from is not None and step >= self.wrong_from

    def state(self, step: int) -> bytes:
        if step == 0:
            return INITIAL_STATE
        return keccak(f"{'cheat' if self.wrong(step) else 'true'} state {step}".encode())

    def trace(self) -> list[bytes]:
        return [self.state(c * EVERY) for c in range(STEPS // EVERY + 1)]

    def steps(self, c: int) -> list[bytes]:
        return [self.state(i) for i in range(c * EVERY, c * EVERY + EVERY + 1)]

    def nodes(self, step: int) -> list[bytes]:
        outs = [keccak(f"true node {step} {n}".encode()) for n in range(NODES)]
        if self.wrong(step):
            first = WRONG_NODE if step == self.wrong_from else 0
            outs[first:] = [keccak(f"cheat node {step} {n}".encode()) for n in range(first, NODES)]
        return outs + [self.state(step)]


TRUTH = Computation("truth", None)
CHEAT = Computation("cheat", WRONG_STEP)


class GameTable:
    """A job with one seat per computation, revealed, and helpers for the game's moves."""

    def __init__(self, w: WorldV2, computations: tuple[Computation, ...], **terms):
        self.w = w
        self.by_seat = dict(zip(w.providers, computations))
        self.jid = w.seated_job(len(computations), steps=STEPS, checkpoint_every=EVERY, graph_nodes=NODES,
                                referee_fee=REFEREE_FEE, **terms)
        for seat, comp in self.by_seat.items():
            w.commit(self.jid, seat, comp.trace())
        for seat, comp in self.by_seat.items():
            w.reveal(self.jid, seat, comp.trace())
        self.seats = list(self.by_seat)

    def _booked(self, result):
        """Every coin accounted for after the move (section 8's money tests check it after every step)."""
        self.w.assert_every_coin_accounted()
        return result

    def root(self, seat: str) -> bytes:
        return list_root(self.by_seat[seat].trace())

    def open_game(self, by: str, seat: str, c: int) -> bytes:
        return self._booked(self.w.as_(by).open_game(self.jid, self.root(seat), c)).one(GameOpened).game_id

    def post_steps(self, seat: str, game: bytes, c: int, comp: Computation | None = None):
        comp = comp or self.by_seat[seat]
        tree = ListTree(self.by_seat[seat].trace())
        return self._booked(
            self.w.as_(seat).post_steps(game, comp.steps(c), tree.proof(c).siblings, tree.proof(c + 1).siblings))

    def steps_root(self, seat: str, c: int) -> bytes:
        return list_root(self.by_seat[seat].steps(c))

    def pick_step(self, by: str, game: bytes, seat: str, c: int, s: int) -> bytes:
        return self._booked(self.w.as_(by).pick_step(game, self.steps_root(seat, c), s)).one(ClaimPicked).claim_id

    def post_nodes(self, seat: str, claim: bytes, c: int, s: int):
        comp = self.by_seat[seat]
        proof = ListTree(comp.steps(c)).proof(s).siblings
        return self._booked(self.w.as_(seat).post_nodes(claim, comp.nodes(c * EVERY + s), proof))

    def nodes_root(self, seat: str, step: int) -> bytes:
        return list_root(self.by_seat[seat].nodes(step))

    def pick_node(self, by: str, step_claim: bytes, seat: str, step: int, n: int) -> bytes:
        picked = self.w.as_(by).pick_node(step_claim, self.nodes_root(seat, step), n)
        return self._booked(picked).one(ClaimPicked).claim_id

    def post_evidence(self, seat: str, claim: bytes):
        return self._booked(self.w.as_(seat).post_evidence(claim, keccak(b"evidence of " + seat.encode() + claim)))

    def after(self, deadline: int) -> None:
        """Mines up to `deadline`: the next transaction lands after it."""
        if deadline > self.w.chain.now():
            self.w.mine_at(deadline)


def register_auditors(w: WorldV2) -> tuple[str, str]:
    """The keeper and the outsider as staked auditors (challengers)."""
    for i, account in enumerate((w.keeper, w.outsider)):
        w.as_(account).register(ed25519_key(f"auditor {i}"), Role.AUDITOR, stake=NODE_STAKE)
    return w.keeper, w.outsider


def holdings(w: WorldV2, account: str) -> int:
    """What the account has in the contract: its stake (locked or not) and its credit."""
    return w.settlement.node(account).stake + w.settlement.credit_of(account)
