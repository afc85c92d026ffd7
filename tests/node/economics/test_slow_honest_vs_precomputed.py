"""Slow honest recomputation against a precomputing challenger (economics §8.4, §12): the honest seat's
hardware takes SLOW_PACE·σ = 1.6σ a step (the slow provider of node/roles/v2/adversaries.py, within the s·σ = 2σ the
windows allow); the challenger X computed the honest lists beforehand and moves the moment each list is
on chain: it opens the game, picks a step and a node of an honest root at once. Every defender deadline
runs from the pick that forced it for the work it forces (E_list for a steps list, which the seat
answers from the step hashes it recorded while training; s·k·σ + 2Δ for a node list; E_xfer(Y) for the
evidence), so the slow seat answers each in time, the client rules it right, and X's bonds go to the
seats. Time on the slow device is chain time: each step the seat recomputes moves the embedded chain's
clock 1.6·σ (σ = 500 s, so the work, not the margin Δ = 30 s, decides whether a deadline holds). With two
games on the root and both node picks made at once, the evidence comes from the node values the seat kept
for each step it answered: evidenceBy allows no recompute.

Real claim-game roles (the seats' `Defender`s over the provider's recorded run, the client's referee
duty, keepers: `claim_world.ClaimRoles`); X's moves are scripted. Money read from the contract."""
from __future__ import annotations

import threading

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, trace_root
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, EvidencePosted, GameOpened, ListPosted
from node.roles.v2.adversaries import SLOW_PACE
from node.roles.v2.defender import Defender
from node.roles.v2.step_hashes import RecordedStepsOracle, StepHashes
from node.training_oracle import TrainingOracle
from protocol import claim_lists
from protocol.listtree import list_root
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from ..v2 import claim_world
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import CHEATED_STEP, runs  # noqa: F401

STAKE = 5 * 10**18
STEP_MILLIS = 500_000  # σ: s·k·σ = 3,000 s for k = 3, under the world's MAX_INTERVAL_SECONDS


class SlowDevice(TrainingOracle):
    """The honest run on a device that takes SLOW_PACE·σ a step: each step recomputed moves the chain's
    clock that far (under the chain's lock, as the nodes' calls take it)."""

    def __init__(self, training, *, program, chain, seconds: int) -> None:
        super().__init__(training, program=program)
        self.chain, self.seconds = chain, seconds
        self.lock = claim_world._chain_locks.setdefault(id(chain), threading.Lock())
        self.recomputed = 0

    def step(self, s, state):
        out = super().step(s, state)
        with self.lock:
            self.chain.mine(self.chain.now() + self.seconds)
        self.recomputed += 1
        return out


def slow_seat(w, honest, tmp_path) -> tuple[SlowDevice, RecordedStepsOracle]:
    """The seat's run as its provider keeps it: the checkpoints of `honest` on a slow device, and the step
    hashes recorded while training (what the defender is handed)."""
    device = SlowDevice(honest.training, program=honest.program(), chain=w.chain,
                        seconds=int(SLOW_PACE * STEP_MILLIS / 1000))
    device.train(prefix=honest, prefix_steps=honest.schedule.steps)
    recorded = StepHashes.in_dir(tmp_path / "run", honest.schedule)
    recorded.record_all(list(honest.state_hashes))
    return device, RecordedStepsOracle(device, recorded)


def slow_job(w, oracle) -> bytes:
    """A one-seat job on the MLP's terms with σ = STEP_MILLIS, its seat revealed `oracle`'s trace."""
    trace = list(oracle.checkpoint_states())
    jid = w.seated_job(1, steps=oracle.schedule.steps, checkpoint_every=oracle.schedule.every,
                       graph_nodes=oracle.program().size - 1, initial_state=trace[0], step_millis=STEP_MILLIS)
    w.commit(jid, w.providers[0], trace)
    w.reveal(jid, w.providers[0], trace)
    return jid


@trio_test(180)
async def test_a_slow_honest_seat_answers_a_precomputing_challenger_in_time_and_takes_its_bonds(cast_v2, runs,
                                                                                               tmp_path):
    w = cast_v2
    honest, _, node = runs
    seat = w.providers[0]
    device, recorded = slow_seat(w, honest, tmp_path)
    jid = slow_job(w, honest)
    challenger = new_account(w, "precomputing challenger", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (challenger, seat, w.client)}
    roles = ClaimRoles(w, jid, {seat: recorded}, tmp_path, honest.training)
    device.recomputed = 0

    c, j = claim_lists.step_index(honest.schedule, CHEATED_STEP)
    steps, nodes = claim_lists.steps_list(honest, c), claim_lists.node_list(honest, CHEATED_STEP)  # precomputed
    game = w.as_(challenger).open_game(jid, trace_root(list(honest.checkpoint_states())), c).one(GameOpened)
    await roles.play()  # a lookup: no step recomputed
    assert device.recomputed == 0
    step = w.as_(challenger).pick_step(game.game_id, list_root(steps), j).one(ClaimPicked)
    await roles.play()  # the interval recomputed at 1.6σ a step, within s·k·σ + 2Δ of the pick
    assert device.recomputed == honest.schedule.every
    node_claim = w.as_(challenger).pick_node(step.claim_id, list_root(nodes), node).one(ClaimPicked)
    await roles.play()  # evidence from the interval just recomputed; the client rules

    answers = {x.event.claim_id: x for x in w.settlement.events(0)
               if isinstance(x.event, (ListPosted, EvidencePosted)) and x.event.seat == seat}
    for claim, deadline in ((game.game_id, game.steps_by), (step.claim_id, step.answer_by),
                            (node_claim.claim_id, node_claim.answer_by)):
        assert w.chain.tester.get_block_by_number(answers[claim].block_number)["timestamp"] <= deadline
    assert answers[step.claim_id].event.list_root == list_root(nodes)
    assert w.settlement.claim(node_claim.claim_id).defender_right

    await roles.finish([game.game_id])
    roles.settle()
    assert all(w.settlement.claim(x).status == ClaimStatus.FAILED
               for x in (game.game_id, step.claim_id, node_claim.claim_id))
    assert w.settlement.seat(jid, seat).forfeit == ForfeitReason.NONE
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    assert after[seat] - before[seat] > info.price  # its pay and X's bonds
    assert after[challenger] < before[challenger]
    assert after[w.client] >= before[w.client]
    w.assert_every_coin_accounted()


@trio_test(180)
async def test_a_slow_honest_seat_answers_two_games_node_picks_made_at_once_without_recomputing(cast_v2, runs,
                                                                                               tmp_path):
    """Two games on one root (intervals 0 and 1, one challenger each), each picked to a step, then both
    node picks at once: the evidence for each is built from the node values the seat kept when it posted
    that step's node list. Recomputing would be too late: the seat's oracle holds the interval it
    recomputed last, and one interval takes k·1.6σ of chain time, far past evidenceBy = E_xfer(Y)."""
    w = cast_v2
    honest, _, node = runs
    seat = w.providers[0]
    device, recorded = slow_seat(w, honest, tmp_path)
    jid = slow_job(w, honest)
    challengers = [new_account(w, f"precomputing challenger {i}", Role.AUDITOR, STAKE) for i in range(2)]
    before = {a: holdings(w, a) for a in (*challengers, seat, w.client)}
    roles = ClaimRoles(w, jid, {seat: recorded}, tmp_path, honest.training)
    defender = next(h.__self__ for h in roles.pump.handlers[ClaimPicked] if isinstance(h.__self__, Defender))
    device.recomputed = 0

    root = trace_root(list(honest.checkpoint_states()))
    picked = [(0, 2), claim_lists.step_index(honest.schedule, CHEATED_STEP)]  # (interval c, step j) per game
    games = [w.as_(x).open_game(jid, root, c).one(GameOpened) for x, (c, _) in zip(challengers, picked)]
    await roles.play()
    step_claims = [w.as_(x).pick_step(g.game_id, list_root(claim_lists.steps_list(honest, c)), j).one(ClaimPicked)
                   for x, g, (c, j) in zip(challengers, games, picked)]
    # a second step of game 0, picked after game 1's: due with game 0's first, so answered right after it
    later = w.as_(challengers[0]).pick_step(games[0].game_id, list_root(claim_lists.steps_list(honest, 0)),
                                            3).one(ClaimPicked)
    assert later.answer_by == step_claims[0].answer_by < step_claims[1].answer_by
    await roles.play()  # both intervals recomputed once each, earliest nodesBy first
    lists = {x.event.claim_id: x for x in w.settlement.events(0) if isinstance(x.event, ListPosted)}
    for claim in (*step_claims, later):
        assert w.chain.tester.get_block_by_number(lists[claim.claim_id].block_number)["timestamp"] <= claim.answer_by
    assert device.recomputed == 2 * honest.schedule.every
    node_lists = [claim_lists.node_list(honest, honest.schedule.checkpoint_step(c) + j) for c, j in picked]
    node_claims = [w.as_(x).pick_node(sc.claim_id, list_root(nodes), node).one(ClaimPicked)
                   for x, sc, nodes in zip(challengers, step_claims, node_lists)]
    await roles.play()  # both node picks made before the seat answers either

    evidence = {x.event.claim_id: x for x in w.settlement.events(0)
                if isinstance(x.event, EvidencePosted) and x.event.seat == seat}
    assert {x.claim_id for x in node_claims} <= evidence.keys()
    for claim in node_claims:
        posted_at = w.chain.tester.get_block_by_number(evidence[claim.claim_id].block_number)["timestamp"]
        assert posted_at <= claim.answer_by
        assert w.settlement.claim(claim.claim_id).defender_right
    assert device.recomputed == 2 * honest.schedule.every  # both evidences from the kept node values
    assert defender.kept.keys() == {x.claim_id for x in (*step_claims, later)}  # until no node pick can come

    await roles.finish([g.game_id for g in games])
    assert not defender.kept and not defender.unanswered
    roles.settle()
    assert all(w.settlement.claim(x.claim_id).status == ClaimStatus.FAILED
               for x in (*step_claims, later, *node_claims))
    assert all(w.settlement.claim(g.game_id).status == ClaimStatus.FAILED for g in games)
    assert w.settlement.seat(jid, seat).forfeit == ForfeitReason.NONE
    after = {a: holdings(w, a) for a in before}
    assert after[seat] - before[seat] > w.settlement.job(jid).price  # its pay and both challengers' bonds
    assert all(after[x] < before[x] for x in challengers)
    assert after[w.client] >= before[w.client]
    w.assert_every_coin_accounted()


def test_the_providers_run_answers_steps_lists_from_its_record(tmp_path):
    """What the provider hands its defender (`RecordedRun.oracle`) looks a steps list up in the step hashes
    the run recorded (they are what a recompute gives), and recomputes only what the file does not hold."""
    from node.roles.jobfiles import load_training
    from node.roles.v2.step_hashes import RecordedRun

    from ..test_roles_support import in_a_thread, write_job

    training = load_training(write_job(tmp_path))
    run = RecordedRun(training, None, tmp_path / "job" / "run", job_id=bytes(32))
    trace = in_a_thread(lambda: run.train_sync(threading.Event()))
    oracle = run.oracle(trace)
    assert isinstance(oracle, RecordedStepsOracle)
    recomputed = TrainingOracle(training)
    recomputed.train()
    for c in range(run.schedule.intervals):
        assert list(oracle.step_states(c)) == list(recomputed.step_states(c))
    run.step_hashes.path.write_bytes(bytes(32 * (run.schedule.steps + 1)))  # a record lost: recompute
    assert list(oracle.step_states(0)) == list(recomputed.step_states(0))
