"""finalBy (docs/economics.md, section 5) on the slowest paths, every move at its last second.

Each play runs a job to the latest moment a game can open: accept, commit and reveal at their last
seconds, a demand opened at the end of the seat's window and ended at its last moment, then games
opened at the end of the E_interval window that end reopens. Each settles by finalBy and after the
bound less the term it proves:

- one game, the client ruling at its last second: the E_interval a demand's end reopens;
- one game, the client silent, MAX_DRAWS drawn referees (two silent, the third ruling at its last
  second), an appeal at the window's last second, MAX_DRAWS silent appeal referees: the client's own
  E_rule comes before the MAX_DRAWS drawn ones, so T_game counts it when the client referees;
- C games queued on the root's recompute queue (T not a multiple of k): the last one's nodes are due
  C·⌈s·k·σ⌉ + 2Δ after its pick, more than one replay ⌈s·T·σ⌉ + 2Δ.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from eth_utils import keccak

from contracts.settlement_v2 import ForfeitReason, SeatForfeited
from contracts.settlement_v2_demands import DemandStage, checkpoint_item
from contracts.settlement_v2_games import ClaimPicked, GameOpened
from contracts.settlement_v2_referees import RefereeDrawn, RefereesExhausted
from protocol import economics
from protocol.listtree import ListTree, list_root

from .game_world_v2 import DRAW_DELAY, probe, register_auditors, register_referees
from .settlement_world_v2 import BLOCK_SECONDS, INITIAL_STATE, MARGIN, WorldV2

pytestmark = pytest.mark.settlement

NODES = 4
WRONG_NODE = 2
REFEREES = 12  # enough that a draw finds one with a seed block chosen within BLOCK_SECONDS
STEP_MILLIS = 500_000  # a long step: E_interval dwarfs the draws and rulings


@dataclass(frozen=True)
class LastStepCheat:
    """A seat's computation of T steps, a checkpoint every k: only the last state (step T) is wrong,
    from node WRONG_NODE on; so its last interval is the one to dispute."""

    steps: int
    every: int

    @property
    def intervals(self) -> int:
        return -(-self.steps // self.every)

    def state(self, step: int) -> bytes:
        if step == 0:
            return INITIAL_STATE
        return keccak(f"{'cheat' if step == self.steps else 'true'} state {step}".encode())

    def trace(self) -> list[bytes]:
        return [self.state(min(c * self.every, self.steps)) for c in range(self.intervals + 1)]

    def steps_list(self, c: int) -> list[bytes]:
        return [self.state(i) for i in range(c * self.every, min((c + 1) * self.every, self.steps) + 1)]

    def nodes(self, step: int) -> list[bytes]:
        outs = [keccak(f"true node {step} {n}".encode()) for n in range(NODES)]
        if step == self.steps:
            outs[WRONG_NODE:] = [keccak(f"cheat node {step} {n}".encode()) for n in range(WRONG_NODE, NODES)]
        return outs + [self.state(step)]


class LastSecondPlay:
    """One seat computing `cheat`, an auditor, a demander and REFEREES referees on the real contract."""

    def __init__(self, w: WorldV2, cheat: LastStepCheat):
        self.w, self.s, self.cheat = w, w.settlement, cheat
        self.auditor, self.demander = register_auditors(w)
        register_referees(w, REFEREES)
        self.seat = w.providers[0]
        self.jid = w.open_job(providers_wanted=1, steps=cheat.steps, checkpoint_every=cheat.every, graph_nodes=NODES,
                              step_millis=STEP_MILLIS, initial_state=INITIAL_STATE, witness_fee=10**15)
        self.allowed = economics.allowances(w.opened[self.jid].economic_terms(), self.s.chain_settings())
        a = self.s.job(self.jid).allowed
        assert (a.train, a.replay, a.interval, a.rule, a.demand, a.game) == (
            self.allowed.train, self.allowed.replay, self.allowed.interval, self.allowed.rule, self.allowed.demand,
            self.allowed.game)
        self.final_by = self.s.deadlines(self.jid).final_by
        assert self.final_by == economics.final_by(self.s.job(self.jid).accept_by, self.allowed)
        self.drawn: set[str] = set()  # referees drawn for the node claim, at either level
        self.games: list[bytes] = []

    def at(self, deadline: int) -> None:
        """The next transaction lands at deadline − 1, its last second."""
        self.w.mine_at(deadline - 2)

    def after(self, deadline: int) -> None:
        """The next transaction lands at the deadline, the first second a keeper may act on it (or next, if past)."""
        if deadline - 1 > self.w.chain.now():
            self.w.mine_at(deadline - 1)

    def to_latest_games(self) -> int:
        """Accept, commit, reveal at their last seconds; a demand opened at the last second of the seat's
        window and ended at its last moment: two witnesses refuse at the end of their allowance, the
        third is served at the end of its own. Returns the end of the window that end reopened."""
        w, s, jid, seat = self.w, self.s, self.jid, self.seat
        trace = self.cheat.trace()
        self.at(s.job(jid).accept_by)
        w.as_(seat).accept(jid)
        self.at(s.job(jid).commit_by)
        w.commit(jid, seat, trace)
        self.at(s.deadlines(jid).reveal_by)
        w.reveal(jid, seat, trace)
        self.at(s.seat(jid, seat).challenge_by)
        demand = w.as_(self.demander).demand_data(jid, seat, checkpoint_item(1)).events[0].demand_id
        self.at(s.demand(demand).deadline + MARGIN)
        w.as_(seat).call_witness(demand)
        while (d := s.demand(demand)).stage in (DemandStage.DRAWING, DemandStage.WITNESSING):
            if d.stage == DemandStage.DRAWING:
                while w.chain.block_number() < d.armed_block + DRAW_DELAY:
                    w.chain.mine()
                self.at(d.deadline)
                w.as_(w.keeper).draw_witness(demand)
            else:
                self.at(d.deadline)
                w.as_(d.witness).attest_served(demand, d.draws == economics.MAX_DRAWS)
            w.assert_every_coin_accounted()
        assert s.demand(demand).stage in (DemandStage.SERVED, DemandStage.VOID)
        close = s.seat(jid, seat).challenge_by
        assert close == w.chain.now() + self.allowed.interval
        return close

    def open_games(self, close: int, intervals: list[int]) -> list[bytes]:
        """Games on `intervals`, opened in consecutive seconds up to the window's last; the seat posts
        each steps list at its last second, the auditor picks each list's last step at the end of its
        window: the games join the root's recompute queue in this order. Returns the step claims."""
        w, s, cheat, root = self.w, self.s, self.cheat, list_root(self.cheat.trace())
        tree = ListTree(cheat.trace())
        w.mine_at(close - len(intervals) - 1)
        games = [w.as_(self.auditor).open_game(self.jid, root, c).one(GameOpened).game_id for c in intervals]
        self.games += games
        self.at(s.claim(games[0]).answer_by)
        for game, c in zip(games, intervals):
            w.as_(self.seat).post_steps(game, cheat.steps_list(c), tree.proof(c).siblings, tree.proof(c + 1).siblings)
        self.at(s.claim(games[0]).pick_until)
        steps = []
        for game, c in zip(games, intervals):
            picked = w.as_(self.auditor).pick_step(game, list_root(cheat.steps_list(c)), len(cheat.steps_list(c)) - 1)
            steps.append(picked.one(ClaimPicked).claim_id)
        w.assert_every_coin_accounted()
        return steps

    def post_nodes(self, step_claim: bytes, c: int) -> None:
        listed = self.cheat.steps_list(c)
        proof = ListTree(listed).proof(len(listed) - 1).siblings
        self.w.as_(self.seat).post_nodes(step_claim, self.cheat.nodes(c * self.cheat.every + len(listed) - 1), proof)

    def to_evidence(self, step_claim: bytes) -> bytes:
        """The last interval's nodes at their last second, the wrong node picked at the end of its window,
        the evidence at its last second. Returns the node claim."""
        w, s, cheat = self.w, self.s, self.cheat
        c = cheat.intervals - 1
        self.at(s.claim(step_claim).answer_by)
        self.post_nodes(step_claim, c)
        self.at(s.claim(step_claim).pick_until)
        picked = w.as_(self.auditor).pick_node(step_claim, list_root(cheat.nodes(cheat.steps)), WRONG_NODE)
        node = picked.one(ClaimPicked).claim_id
        self.at(s.claim(node).answer_by)
        w.as_(self.seat).post_evidence(node, keccak(b"evidence"))
        return node

    def draw_late(self, claim: bytes) -> str:
        """The draw armed at block b made at its latest under the model, E_draw = DRAW_DELAY·BLOCK_SECONDS + Δ
        after b: blocks b + 1 and b + 2 (the seed) BLOCK_SECONDS apart, the draw Δ after the seed block.
        The seed block's time is chosen within its BLOCK_SECONDS (as a block maker may) so that the draw
        finds a referee. Returns it."""
        w, s = self.w, self.s
        r = s.ruling(claim)
        assert w.chain.block_number() == r.armed_block
        armed_at = w.chain.now()
        w.mine_at(armed_at + BLOCK_SECONDS)
        expected = None
        for early in range(BLOCK_SECONDS):
            mark = w.chain.snapshot()
            w.mine_at(armed_at + DRAW_DELAY * BLOCK_SECONDS - early)
            raw = w.chain.tester.get_block_by_number(r.armed_block + DRAW_DELAY)["hash"]
            seed = bytes.fromhex(raw[2:]) if isinstance(raw, str) else bytes(raw)
            expected = probe(seed, claim, r.draws, s.referees(), lambda account: account not in self.drawn)
            if expected:
                break
            w.chain.revert(mark)
        assert expected, "no seed block time within BLOCK_SECONDS draws a referee"
        self.after(armed_at + self.allowed.draw)
        drawn = w.as_(w.keeper).draw_referee(claim).one(RefereeDrawn).referee
        assert drawn == expected and w.chain.now() == armed_at + self.allowed.draw
        self.drawn.add(drawn)
        return drawn

    def slowest_ruling(self, node: bytes) -> None:
        """The client silent; MAX_DRAWS drawn referees, two silent, the third ruling against the seat at
        its last second; an appeal at the window's last second; MAX_DRAWS silent appeal referees, so
        the first ruling stands."""
        w, s = self.w, self.s
        self.after(s.claim(node).rule_by)
        w.as_(w.keeper).timeout_referee(node)  # the client's allowance passed: its bond burned, a draw armed
        for draw in range(1, economics.MAX_DRAWS + 1):
            referee = self.draw_late(node)
            if draw < economics.MAX_DRAWS:
                self.after(s.claim(node).rule_by)
                w.as_(w.keeper).timeout_referee(node)
            else:
                self.at(s.claim(node).rule_by)
                w.as_(referee).rule(node, False, keccak(b"transcript"))
        self.at(s.claim(node).rule_by)
        w.as_(self.seat).appeal(node)
        for _ in range(economics.MAX_DRAWS):
            self.draw_late(node)
            self.after(s.ruling(node).appeal_rule_by)
            ended = w.as_(w.keeper).timeout_referee(node)
        assert RefereesExhausted(node, True) in ended.events
        w.assert_every_coin_accounted()

    def settle(self, node: bytes, steps: list[bytes]) -> int:
        """The keeper ends the node claim (the seat loses), every step claim and game, and settles.
        Returns the time of the settlement."""
        w, s = self.w, self.s
        self.after(s.claim(node).rule_by)
        assert SeatForfeited(self.jid, self.seat, ForfeitReason.LOST_GAME) in w.as_(w.keeper).timeout(node).events
        for step, game in zip(steps, self.games):
            self.after(s.claim(step).pick_until)
            w.as_(w.keeper).timeout(step)
            w.as_(w.keeper).resolve_game(game)
        w.as_(w.keeper).settle(self.jid)
        w.assert_every_coin_accounted()
        return w.chain.now()


def test_a_game_opened_after_a_demands_last_moment_settles_by_final_by(cast_v2):
    play = LastSecondPlay(cast_v2, LastStepCheat(steps=2, every=2))
    a = play.allowed
    close = play.to_latest_games()
    (step,) = play.open_games(close, [0])
    node = play.to_evidence(step)
    play.at(play.s.claim(node).rule_by)
    play.w.as_(play.w.client).rule(node, False, keccak(b"transcript"))
    settled = play.settle(node, [step])
    before_issue_17 = play.s.job(play.jid).accept_by + a.train + MARGIN + a.replay + a.demand + a.game
    assert before_issue_17 < settled <= play.final_by


def test_the_slowest_ruling_after_a_silent_client_settles_by_final_by(cast_v2):
    """The client's E_rule, the MAX_DRAWS referees, the appeal window and the MAX_DRAWS appeal referees:
    2·E_rule + 2·MAX_DRAWS·(E_draw + E_rule) after the evidence; the bound without the client's own
    E_rule is passed."""
    play = LastSecondPlay(cast_v2, LastStepCheat(steps=2, every=2))
    close = play.to_latest_games()
    (step,) = play.open_games(close, [0])
    node = play.to_evidence(step)
    evidence_at = play.w.chain.now()
    play.slowest_ruling(node)
    a = play.allowed
    assert play.w.chain.now() == evidence_at + 2 * a.rule + 2 * economics.MAX_DRAWS * (a.draw + a.rule) - 2
    settled = play.settle(node, [step])
    assert play.final_by - a.rule < settled <= play.final_by


def test_games_queued_on_every_interval_of_a_root_settle_by_final_by(cast_v2):
    """T = 5 steps, k = 2: C = 3 intervals, the last one step long. Three games picked in consecutive
    seconds queue their recomputes; the last game's nodes are due C·⌈s·k·σ⌉ + 2Δ after its pick, a
    whole interval more than one replay ⌈s·T·σ⌉ + 2Δ; then the slowest ruling."""
    cheat = LastStepCheat(steps=5, every=2)
    play = LastSecondPlay(cast_v2, cheat)
    a, s = play.allowed, play.s
    close = play.to_latest_games()
    steps = play.open_games(close, list(range(cheat.intervals)))
    picked_last = play.w.chain.now()
    queued = cheat.intervals * (a.interval - 2 * MARGIN) + 2 * MARGIN
    assert s.claim(steps[-1]).answer_by == picked_last + queued - (cheat.intervals - 1)
    for step, c in zip(steps[:-1], range(cheat.intervals - 1)):
        play.post_nodes(step, c)
    node = play.to_evidence(steps[-1])
    play.slowest_ruling(node)
    settled = play.settle(node, steps)
    assert play.final_by - (queued - a.replay) < settled <= play.final_by
