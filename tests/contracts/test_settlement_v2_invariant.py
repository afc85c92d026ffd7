"""A seeded random walk over version 2 (docs/economics.md, section 14.3: the balance invariant extended).

Each walk opens a two-seat job (one seat cheats half the time), then plays random moves by random
accounts (a client that referees or not, seats, an honest and a hostile auditor, three referees),
most of them sensible, many refused, with time and blocks moving between them: games, picks,
lists, evidence, rulings, appeals, draws, timeouts, demands of data and their witnesses (section 7),
settle, withdrawals. After every move:

- the contract's balance is the nodes' stakes + credits + the escrow of unsettled jobs (bonds and
  referee bonds are locks of stake; burned coins leave the contract), and no node's locks exceed
  its stake;
- a refused move moved no coin of anyone;
- an account that only calls the moves anyone may call (timeouts, draws, failDemand, settle) never
  gains or loses.
"""

from __future__ import annotations

import os
import random

import pytest
from eth_utils import keccak

from contracts.errors import ContractRevert
from contracts.settlement_v2_demands import DataDemanded
from contracts.settlement_v2_games import ClaimPicked, GameOpened

from .game_world_v2 import CHEAT, EVERY, NODES, STEPS, TRUTH, GameTable, register_auditors, register_referees

pytestmark = pytest.mark.settlement

MOVES_PER_WALK = 45
ZERO = "0x" + "0" * 40


class Walk:
    def __init__(self, w, rng: random.Random):
        self.w, self.rng = w, rng
        self.honest_auditor, self.hostile = register_auditors(w)
        self.referees = register_referees(w, 3)
        cheats = rng.random() < 0.5
        # σ = 100 s: a replay window of ~34 min and intervals of ~8 min, so games happen before it closes.
        self.t = GameTable(w, (TRUTH, CHEAT if cheats else TRUTH), client_referees=rng.random() < 0.7,
                           step_millis=100_000, witness_fee=10**15)
        self.seats = self.t.seats
        self.games: dict[bytes, tuple[int, str]] = {}            # game -> (interval c, seat of the root)
        self.steps: dict[bytes, tuple[int, int, str]] = {}       # step claim -> (c, s, seat of the picked list)
        self.nodes: dict[bytes, str] = {}                        # node claim -> seat of the picked list
        self.demands: list[bytes] = []
        self.anyone = w.deployer  # calls only what anyone may call; registered nowhere
        self.accounts = [w.client, *self.seats, self.honest_auditor, self.hostile, *self.referees, self.anyone]

    def books(self) -> dict[str, tuple[int, int, int]]:
        s = self.w.settlement
        out = {}
        for a in self.accounts:
            node = s.node(a)
            out[a] = (node.stake, node.locked, s.credit_of(a))
        return out

    def check(self, before, after, refused: bool) -> None:
        self.w.assert_every_coin_accounted()
        for a, (stake, locked, _) in after.items():
            assert locked <= stake, a
        if refused:
            assert after == before
        assert after[self.anyone] == before[self.anyone]

    def step(self) -> None:
        move = self.rng.choice(self.MOVES)
        before = self.books()
        try:
            move(self)
            refused = False
        except ContractRevert:
            refused = True
        self.check(before, self.books(), refused)

    # ------------------------------------------------------------ moves

    def _any(self, items):
        return self.rng.choice(list(items)) if items else None

    def _seat(self, owing: str) -> str:
        """Mostly the seat that owes the answer, sometimes the other."""
        return owing if self.rng.random() < 0.85 else self.rng.choice(self.seats)

    def _challenger(self):
        return self.rng.choice([self.honest_auditor, self.hostile, self.w.client, self.seats[0]])

    def open_game(self):
        seat = self.rng.choice(self.seats)
        c = self.rng.choice((0, 1, 1, self.rng.randrange(STEPS // EVERY)))  # interval 1 holds the cheat
        result = self.w.as_(self._challenger()).open_game(self.t.jid, self.t.root(seat), c)
        for e in result.all(GameOpened):
            self.games[e.game_id] = (c, seat)

    def post_steps(self):
        game = self._any(self.games)
        if game:
            c, seat = self.games[game]
            self.t.post_steps(self._seat(seat), game, c)

    def endorse(self):
        claim = self._any([*self.games, *self.steps])
        if claim:
            seat, other = self.rng.choice(self.seats), self.rng.choice(self.seats)
            if claim in self.games:
                root = self.t.steps_root(other, self.games[claim][0])
            else:
                c, s, _ = self.steps[claim]
                root = self.t.nodes_root(other, c * EVERY + s)
            self.w.as_(seat).endorse(claim, root)

    def pick_step(self):
        game = self._any(self.games)
        if game:
            (c, seat), s = self.games[game], self.rng.randrange(1, EVERY + 1)
            seat = self._seat(seat)
            result = self.w.as_(self._challenger()).pick_step(game, self.t.steps_root(seat, c), s)
            for e in result.all(ClaimPicked):
                self.steps[e.claim_id] = (c, s, seat)

    def post_nodes(self):
        claim = self._any(self.steps)
        if claim:
            c, s, seat = self.steps[claim]
            self.t.post_nodes(self._seat(seat), claim, c, s)

    def pick_node(self):
        claim = self._any(self.steps)
        if claim:
            c, s, seat = self.steps[claim]
            seat, n = self._seat(seat), self.rng.randrange(NODES)
            root = self.t.nodes_root(seat, c * EVERY + s)
            result = self.w.as_(self._challenger()).pick_node(claim, root, n)
            for e in result.all(ClaimPicked):
                self.nodes[e.claim_id] = seat

    def post_evidence(self):
        node = self._any(self.nodes)
        if node:
            self.t.post_evidence(self._seat(self.nodes[node]), node)

    def rule(self):
        node = self._any(self.nodes)
        if node:
            holder = self.w.settlement.ruling(node).referee
            holder = holder if holder != ZERO else self.w.client
            by = holder if self.rng.random() < 0.8 else self.rng.choice(self.referees)
            self.w.as_(by).rule(node, self.rng.random() < 0.5, keccak(b"t"))

    def appeal(self):
        node = self._any(self.nodes)
        if node:
            self.w.as_(self.rng.choice([*self.seats, self.honest_auditor, self.hostile])).appeal(node)

    def draw(self):
        node = self._any(self.nodes)
        if node:
            for _ in range(self.rng.choice((0, 3))):
                self.w.chain.mine()
            self.w.as_(self.anyone).draw_referee(node)

    def rule_appeal(self):
        node = self._any(self.nodes)
        if node:
            drawn = self.w.settlement.ruling(node).appeal_referee
            by = drawn if drawn != ZERO and self.rng.random() < 0.8 else self.rng.choice(self.referees)
            self.w.as_(by).rule_appeal(node, self.rng.random() < 0.5, keccak(b"t"))

    def timeout_referee(self):
        node = self._any(self.nodes)
        if node:
            self.w.as_(self.anyone).timeout_referee(node)

    def timeout(self):
        claim = self._any([*self.nodes, *self.steps])
        if claim:
            self.w.as_(self.anyone).timeout(claim)

    def resolve_game(self):
        game = self._any(self.games)
        if game:
            self.w.as_(self.anyone).resolve_game(game)

    def demand_data(self):
        by = self.rng.choice([self.honest_auditor, self.hostile, self.w.client, *self.seats])
        item = self.rng.choice((0, 1, STEPS // EVERY + 1, self.rng.randrange(STEPS // EVERY + 3)))
        result = self.w.as_(by).demand_data(self.t.jid, self.rng.choice(self.seats), item)
        self.demands.extend(e.demand_id for e in result.all(DataDemanded))

    def release_demand(self):
        demand = self._any(self.demands)
        if demand:
            d = self.w.settlement.demand(demand)
            self.w.as_(d.demander if self.rng.random() < 0.8 else d.seat).release_demand(demand)

    def call_witness(self):
        demand = self._any(self.demands)
        if demand:
            d = self.w.settlement.demand(demand)
            self.w.as_(d.seat if self.rng.random() < 0.9 else d.demander).call_witness(demand)

    def draw_witness(self):
        demand = self._any(self.demands)
        if demand:
            for _ in range(self.rng.choice((0, 3))):
                self.w.chain.mine()
            self.w.as_(self.anyone).draw_witness(demand)

    def attest_served(self):
        demand = self._any(self.demands)
        if demand:
            drawn = self.w.settlement.demand(demand).witness
            by = drawn if drawn != ZERO and self.rng.random() < 0.9 else self.rng.choice(self.referees)
            self.w.as_(by).attest_served(demand, self.rng.random() < 0.5)

    def fail_or_timeout_demand(self):
        demand = self._any(self.demands)
        if demand:
            call = self.w.as_(self.anyone)
            (call.fail_demand if self.rng.random() < 0.5 else call.timeout_witness)(demand)

    def settle(self):
        self.w.as_(self.anyone).settle(self.t.jid)

    def withdraw(self):
        self.w.as_(self.rng.choice(self.accounts[:-1])).withdraw()

    def wait(self):
        # Lists, evidence and rulings have a minute or two (Δ = 30 s): mostly short waits.
        self.w.mine_at(self.w.chain.now() + self.rng.choice((3, 10, 20, 40, 70, 400)))

    MOVES = [open_game, open_game, open_game, post_steps, post_steps, endorse, pick_step, pick_step, post_nodes,
             post_nodes, pick_node, pick_node, post_evidence, post_evidence, post_evidence, rule, rule, appeal, appeal, draw, draw,
             rule_appeal, timeout_referee, timeout, timeout, resolve_game, settle, withdraw, wait, wait,
             demand_data, demand_data, release_demand, call_witness, draw_witness, attest_served,
             fail_or_timeout_demand]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_random_walks_keep_every_coin_accounted(cast_v2, seed):
    walk = Walk(cast_v2, random.Random(seed))
    for _ in range(MOVES_PER_WALK):
        walk.step()


# Two long walks in every run (about 25 s each on a quiet core); GAVEL_LONG_WALKS=20 for a deeper search.
LONG_WALKS = int(os.environ.get("GAVEL_LONG_WALKS", "2"))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4, 4 + LONG_WALKS))
def test_longer_random_walks_keep_every_coin_accounted(cast_v2, seed):
    walk = Walk(cast_v2, random.Random(seed))
    for _ in range(3 * MOVES_PER_WALK):
        walk.step()
