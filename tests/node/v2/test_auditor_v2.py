"""The auditor on the real contract: a small MLP job revealed by hand (one honest seat, one whose node
output at step 4 is changed), every seat's real defender answering, the auditor learning the job and
the reveals from the chain's events alone and replaying from the seats' checkpoints."""
from __future__ import annotations

import json
import random

import pytest
import trio

from contracts.records import LoggedEvent
from contracts.settlement_v2 import ForfeitReason, JobSettled, JobStatus, TraceRevealed
from contracts.settlement_v2_games import NODE, STEP, ClaimPicked, ClaimStatus, GameOpened
from node.roles.v2.auditor import Audit, Auditor
from node.roles.v2.defender import Defender
from node.roles.v2.game_keeper import GameKeeper
from node.roles.v2.referee import RefereeDuty
from protocol import claim_lists
from protocol.claims import game_id
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from .claim_world import EventPump, Spawner, binding, cast_v2, play_out, _stage_v2  # noqa: F401
from .test_defender import CHEATED_STEP, Seat, auditor_of, events_of, revealed_job, runs  # noqa: F401


@trio_test(180)
async def test_the_auditor_finds_the_cheated_interval_and_picks_down_to_the_changed_node(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, cheat, cheated_node = runs
    account = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    oracles = {honest_seat: honest, cheater: cheat}
    before = {a: holdings(w, a) for a in (account, honest_seat, cheater)}
    pump, spawn = EventPump(w.settlement), Spawner()

    async def training_of(job_id):
        await trio.lowlevel.checkpoint()
        return honest.training

    async def checkpoint_of(job_id, seat, c):  # what the seat serves (the data service checks it against trace[c])
        await trio.lowlevel.checkpoint()
        return oracles[seat].checkpoint_state(c)

    auditor = Auditor(binding(w, account), spawn, training_of, checkpoint_of, rate=1.0, rng=random.Random(1))
    auditor.subscribe(pump)
    for seat, oracle in oracles.items():
        (tmp_path / seat).mkdir()
        Defender(binding(w, seat), {jid: Seat(oracle)}, tmp_path / seat, spawn,
                 lambda referee, evidence: duty.accept("a seat", evidence)).subscribe(pump)
    duty = RefereeDuty(binding(w, w.client), tmp_path / "client", spawn, training_of)
    duty.subscribe(pump)
    keeper = GameKeeper(binding(w, account))
    keeper.subscribe(pump)
    await play_out(pump, spawn)

    c, j = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    assert auditor.results[(jid, w.settlement.seat(jid, honest_seat).trace_root)] == {i: True for i in range(3)}
    assert auditor.results[(jid, w.settlement.seat(jid, cheater).trace_root)] == {0: True, c: False}
    opened = [e.event for e in w.settlement.events(0) if isinstance(e.event, GameOpened)]
    assert [(g.trace_root, g.interval, g.opener) for g in opened] == [
        (w.settlement.seat(jid, cheater).trace_root, c, account)]
    picks = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimPicked)]
    assert [(p.level, p.index, p.author) for p in picks] == [(STEP, j, account), (NODE, cheated_node, account)]
    node_claim = picks[1].claim_id
    assert w.settlement.claim(node_claim).ruled and not w.settlement.claim(node_claim).defender_right

    # the path ends by the auditor's own keeper once nobody appealed
    w.mine_at(w.settlement.ruling(node_claim).appeal_by)
    for _ in range(6):
        await keeper.keep_once()
        await play_out(pump, spawn)
        w.chain.mine(w.chain.now() + 600)
    assert w.settlement.claim(opened[0].game_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    after = {a: holdings(w, a) for a in before}
    assert after[account] > before[account] and after[cheater] < before[cheater]
    assert after[honest_seat] == before[honest_seat]
    assert not [m for m, _ in auditor.moves if m == "appeal"]
    w.assert_every_coin_accounted()

    # an auditor that audits no job (audit_jobs 0) fetches and moves nothing
    idle, again = Auditor(binding(w, account), spawn, training_of, checkpoint_of, rate=1.0, jobs=0.0), EventPump(
        w.settlement)
    idle.subscribe(again)
    await play_out(again, spawn)
    assert idle.chosen == {jid: False} and not idle.seat_of and not idle.moves


@trio_test(180)
async def test_a_restarted_auditor_still_picks_down_the_game_it_opened_and_prunes_its_file(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, cheat, cheated_node = runs
    account = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    oracles = {honest_seat: honest, cheater: cheat}
    spawn, data_dir = Spawner(), tmp_path / "auditor"

    async def training_of(job_id):
        await trio.lowlevel.checkpoint()
        return honest.training

    async def checkpoint_of(job_id, seat, c):
        await trio.lowlevel.checkpoint()
        return oracles[seat].checkpoint_state(c)

    def auditor_on(pump):
        made = Auditor(binding(w, account), spawn, training_of, checkpoint_of, rate=1.0, rng=random.Random(1),
                       data_dir=data_dir)
        made.subscribe(pump)
        return made

    # the auditor opens its game on the cheater's root and is dropped before any seat answers
    before = EventPump(w.settlement)
    first = auditor_on(before)
    await play_out(before, spawn)
    c, j = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    game = game_id(jid, w.settlement.seat(jid, cheater).trace_root, c)
    assert first.moves == [("openGame", game)]
    assert list(json.loads((data_dir / "auditor.json").read_text())["games"]) == [game.hex()]

    # started again on the same directory, on a follower that hands no event from before
    after = EventPump(w.settlement)
    after.seen = {(e.block_number, e.log_index) for e in w.settlement.events(0)}
    restarted = auditor_on(after)
    async with spawn.tasks():
        restarted.resume()
    others = EventPump(w.settlement)  # the seats, the client's referee duty and a keeper, answering only now
    for seat, oracle in oracles.items():
        (tmp_path / seat).mkdir()
        Defender(binding(w, seat), {jid: Seat(oracle)}, tmp_path / seat, spawn,
                 lambda referee, evidence: duty.accept("a seat", evidence)).subscribe(others)
    duty = RefereeDuty(binding(w, w.client), tmp_path / "client", spawn, training_of)
    duty.subscribe(others)
    keeper = GameKeeper(binding(w, account))
    keeper.subscribe(others)
    await play_both(others, after, spawn)

    picks = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimPicked)]
    assert [(p.level, p.index, p.author) for p in picks] == [(STEP, j, account), (NODE, cheated_node, account)]
    assert [m for m, _ in restarted.moves] == ["pick_step", "pick_node"]
    node_claim = picks[1].claim_id
    assert w.settlement.claim(node_claim).ruled and not w.settlement.claim(node_claim).defender_right

    w.mine_at(w.settlement.ruling(node_claim).appeal_by)
    for _ in range(6):
        await keeper.keep_once()
        await play_both(others, after, spawn)
        w.chain.mine(w.chain.now() + 600)
    assert w.settlement.claim(game).status == ClaimStatus.UPHELD
    assert json.loads((data_dir / "auditor.json").read_text())["games"] == {}
    assert not restarted.followed and not restarted.picks and not restarted.lists and not restarted.claim_game


async def play_both(others, auditor_pump, spawn, *, rounds: int = 20) -> None:
    """play_out over two followers: the other roles' and the restarted auditor's."""
    for _ in range(rounds):
        async with spawn.tasks():
            if not await others.deliver() + await auditor_pump.deliver():
                return


@pytest.mark.parametrize("rate", [0.5, 1.0])
@trio_test(180)
async def test_every_seat_of_an_audited_root_is_asked_its_signed_steps_lists_the_replay_made_once(cast_v2, runs, rate):
    """Two seats reveal one root: the auditor replays it once and asks each seat its signed steps list
    of every replayed interval (an equivocating co-seat is caught only where two samplers asked it); a
    seat that reveals after the audit is asked the replayed intervals. A sample (rate 0.5: two of the
    three intervals) is replayed from the first seat's checkpoints; the whole job (rate 1) from the
    auditor's own run, which fetches no checkpoint."""
    w = cast_v2
    honest = runs[0]
    account = auditor_of(w)
    jid = revealed_job(w, (honest, honest))
    first, second = w.providers[:2]
    pump, spawn = EventPump(w.settlement), Spawner()
    fetched: list[tuple[str, int]] = []
    asked: list[tuple[str, int, tuple]] = []

    async def training_of(job_id):
        await trio.lowlevel.checkpoint()
        return honest.training

    async def checkpoint_of(job_id, seat, c):
        await trio.lowlevel.checkpoint()
        fetched.append((seat, c))
        return honest.checkpoint_state(c)

    asking: dict[str, int] = {}  # seat -> its asks under way
    most_at_once: list[int] = []
    asks: list[str] = []  # the seat of each ask, one per stream a node would open

    async def told_steps(job_id, seat, lists):
        asking[seat] = asking.get(seat, 0) + 1
        most_at_once.append(asking[seat])
        asks.append(seat)
        await trio.sleep(0.01)  # an answer takes a while: every other ask due meanwhile comes now
        asking[seat] -= 1
        asked.extend((seat, c, tuple(ours)) for c, ours in lists.items())

    auditor = Auditor(binding(w, account), spawn, training_of, checkpoint_of, rate=rate, rng=random.Random(1),
                      told_steps=told_steps)
    auditor.subscribe(pump)
    await play_out(pump, spawn)
    root = w.settlement.seat(jid, first).trace_root
    intervals = len(honest.checkpoint_states()) - 1
    replayed = sorted(auditor.results[(jid, root)])
    assert auditor.results[(jid, root)] == {c: True for c in replayed}
    if rate == 1.0:
        assert replayed == list(range(intervals)) and fetched == []
    else:
        assert len(replayed) == 2 and sorted(fetched) == [(first, c) for c in replayed]  # from the first revealer
    lists = {c: tuple(claim_lists.steps_list(honest, c)) for c in range(intervals)}
    assert sorted(asked) == sorted((seat, c, lists[c]) for seat in (first, second) for c in replayed)
    assert max(most_at_once) == 1  # one ask of a seat at a time (an own run's asks come all at once)
    if rate == 1.0:  # the own run's intervals come due together: one ask per seat carries them all
        assert sorted(asks) == sorted([first, second])

    # a third seat of the root, revealed once the audit is over, is asked the intervals replayed (and only once)
    late = w.providers[2]
    asked.clear()
    reveal = LoggedEvent(TraceRevealed(jid, late, root, 0, ()), 0, bytes(32), 0)
    async with spawn.tasks():
        for _ in range(2):  # a reveal handed twice (a follower's catch-up) asks nothing twice
            await auditor.on_revealed(reveal)
    assert sorted(asked) == sorted((late, c, lists[c]) for c in replayed)


@trio_test(120)
async def test_an_audit_still_running_when_its_job_settles_stops_without_an_error(cast_v2, runs):
    """The job's JobSettled forgets its audits; an audit task still replaying afterwards ends quietly
    (it raised KeyError on the forgotten audit and the node logged the task as failed)."""
    w = cast_v2
    honest = runs[0]
    account = auditor_of(w)
    jid = revealed_job(w, (honest,))
    fetched: list[int] = []

    async def training_of(job_id):
        await trio.lowlevel.checkpoint()
        return honest.training

    async def checkpoint_of(job_id, seat, c):
        await trio.lowlevel.checkpoint()
        fetched.append(c)
        return honest.checkpoint_state(c)

    auditor = Auditor(binding(w, account), Spawner(), training_of, checkpoint_of, rate=1.0, rng=random.Random(1))
    (reveal,) = events_of(w, TraceRevealed)
    auditor.chosen[jid] = True
    auditor.audits[(jid, reveal.event.trace_root)] = Audit(reveal.event.seat, reveal.block_number)
    settled = LoggedEvent(JobSettled(jid, JobStatus.FINALIZED, 1), 0, bytes(32), 0)
    await auditor.on_settled(settled)  # as the follower hands it while the audit task waits its turn
    assert await auditor.audit(reveal) == {} and fetched == []


@pytest.mark.parametrize("rate, bundle_fails", [(0.5, 0), (1.0, 0), (1.0, 3)])
@trio_test(180)
async def test_an_auditor_that_is_served_no_checkpoint_replays_from_its_own_run_and_still_catches_the_cheat(
        cast_v2, runs, tmp_path, monkeypatch, rate, bundle_fails):
    """No seat serves the auditor a checkpoint (a congested network, or seats that keep them from
    auditors): it runs the job from its initial state itself, which the challenge window allows for,
    and disputes the cheated interval from its own state there, which is the cheater's too. A sample
    (rate 0.5) tries one fetch per seat first; the whole job (rate 1) tries none, and its game and the
    referee's evidence are played from that run too. The job's bundle, which the run needs, may not
    come at first either (`bundle_fails`): it is asked again while the window is open (an auditor that
    gave up on it let a cheater be paid in the full v2 run)."""
    import node.roles.v2.replays as replays_module
    from node.errors import LocalError, PeerTimeout

    monkeypatch.setattr(replays_module, "RUN_RETRY", 0.001)
    w = cast_v2
    honest, cheat, cheated_node = runs
    account = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    pump, spawn = EventPump(w.settlement), Spawner()
    asked: list[tuple[str, int]] = []
    bundle_asks: list[bytes] = []

    async def training_of(job_id):
        await trio.lowlevel.checkpoint()
        return honest.training

    async def auditors_training_of(job_id):
        bundle_asks.append(job_id)
        if len(bundle_asks) <= bundle_fails:
            raise LocalError(f"job {job_id.hex()[:12]}: no revealed seat served its bundle (took over 14.2 s)")
        return await training_of(job_id)

    async def checkpoint_of(job_id, seat, c):
        await trio.lowlevel.checkpoint()
        asked.append((seat, c))
        raise PeerTimeout("opening /gavel/job-data/2.0.0 took over 14.2 s")

    auditor = Auditor(binding(w, account), spawn, auditors_training_of, checkpoint_of, rate=rate,
                      rng=random.Random(1))
    auditor.subscribe(pump)
    for seat, oracle in {honest_seat: honest, cheater: cheat}.items():
        (tmp_path / seat).mkdir()
        Defender(binding(w, seat), {jid: Seat(oracle)}, tmp_path / seat, spawn,
                 lambda referee, evidence: duty.accept("a seat", evidence)).subscribe(pump)
    duty = RefereeDuty(binding(w, w.client), tmp_path / "client", spawn, training_of)
    duty.subscribe(pump)
    await play_out(pump, spawn)

    c, j = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    # a sample: the first checkpoint a seat does not serve makes the rest of that audit its own run's, and a
    # root audited once that run exists replays from it: one fetch per seat at most (none at rate 1)
    seats = [seat for seat, _ in asked]
    assert len(seats) == len(set(seats)) and set(seats) <= {honest_seat, cheater} and bool(seats) == (rate < 1)
    # which checks every interval, up to the first wrong one
    assert auditor.results[(jid, w.settlement.seat(jid, honest_seat).trace_root)] == {i: True for i in range(3)}
    assert auditor.results[(jid, w.settlement.seat(jid, cheater).trace_root)] == {i: i != c for i in range(c + 1)}
    opened = [e.event for e in w.settlement.events(0) if isinstance(e.event, GameOpened)]
    assert [(g.trace_root, g.interval, g.opener) for g in opened] == [
        (w.settlement.seat(jid, cheater).trace_root, c, account)]
    picks = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimPicked)]
    assert [(p.level, p.index, p.author) for p in picks] == [(STEP, j, account), (NODE, cheated_node, account)]
    assert not w.settlement.claim(picks[1].claim_id).defender_right


def test_an_own_run_disputes_the_first_interval_it_finds_wrong_from_the_state_the_trace_agrees_with(runs):
    from node.roles.v2.replays import own_audit
    from node.training_oracle import TrainingOracle
    from repops_cupy.hashing import state_hash

    honest, cheat, _ = runs
    trace = list(cheat.checkpoint_states())
    c, _ = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    assert c < len(trace) - 2  # intervals after the cheated one, which a sample could have drawn
    results, oracle = own_audit(TrainingOracle(honest.training), trace)
    assert results == {i: i != c for i in range(c + 1)}
    # from the cheated interval's start, where our own state is the cheater's: a game there starts agreed
    assert oracle.c == c and state_hash(oracle.checkpoint_state(c)) == trace[c]
    assert claim_lists.steps_list(oracle, c)[-1] != trace[c + 1]
    # a trace our run agrees with everywhere: every interval checked, nothing to dispute
    assert own_audit(TrainingOracle(honest.training), list(honest.checkpoint_states())) == (
        {i: True for i in range(len(trace) - 1)}, None)
