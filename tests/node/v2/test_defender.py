"""The defender on the real contract: a small MLP job's seats revealed by direct SettlementV2 calls,
each seat's lists from a real `TrainingOracle` (one honest, one whose node output at step 4 is
changed), games opened and picked by hand; the defender answers from the chain's events."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from contracts import Role
from contracts.settlement_v2 import trace_root
from contracts.settlement_v2_games import ClaimPicked, EvidencePosted, GameOpened, ListEndorsed, ListPosted
from node.cheats import WrongNodeOutput
from node.roles.v2.defender import RECORD_FILE, Defender
from node.training_oracle import TrainingOracle
from protocol import claim_lists
from protocol.claim_evidence import ClaimRef, evidence_hash, judge
from protocol.listtree import list_root
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram
from tests.contracts.settlement_world import ed25519_key
from tests.node.test_training_oracle import MLP_JOB  # 7 steps, a checkpoint every 3: intervals [0,3] [3,6] [6,7]

from ..conftest import running_hosts, trio_test
from .claim_world import EventPump, binding, cast_v2, _stage_v2  # noqa: F401

CHEATED_STEP = 4  # interval 1, its step j = 1


@dataclass
class Seat:
    """A provider's run as `ctx.trained` holds it (`TrainedJob`'s trace and oracle, without its files)."""

    oracle_made: TrainingOracle

    @property
    def trace(self) -> list[bytes]:
        return list(self.oracle_made.checkpoint_states())

    async def oracle(self) -> TrainingOracle:
        await trio.lowlevel.checkpoint()
        return self.oracle_made


@pytest.fixture(scope="session")
def runs(tmp_path_factory):  # one training for every claim-game test of a worker
    path = tmp_path_factory.mktemp("job") / "job.toml"
    path.write_text(MLP_JOB)
    training = TrainingProgram(load_job(path))
    node = next(n.id for n in training.graph.nodes if not n.is_leaf)
    honest = TrainingOracle(training)
    cheat = WrongNodeOutput(training, at=CHEATED_STEP, node=node, change=lambda v: v + 1, program=honest.program())
    honest.train(), cheat.train()
    return honest, cheat, node


def revealed_job(w, oracles, **terms) -> bytes:
    """A job on the MLP's terms (and `terms`) with one seat per oracle, committed and revealed."""
    first = oracles[0]
    jid = w.seated_job(len(oracles), steps=first.schedule.steps, checkpoint_every=first.schedule.every,
                       graph_nodes=first.program().size - 1, initial_state=first.checkpoint_states()[0], **terms)
    for seat, oracle in zip(w.providers, oracles):
        w.commit(jid, seat, list(oracle.checkpoint_states()))
    for seat, oracle in zip(w.providers, oracles):
        w.reveal(jid, seat, list(oracle.checkpoint_states()))
    return jid


def auditor_of(w) -> str:
    w.as_(w.keeper).register(ed25519_key("auditor"), Role.AUDITOR, stake=5 * 10**18)
    return w.keeper


async def defend(w, seat: str, jid: bytes, oracle, data_dir: Path, nursery, send=None) -> tuple[Defender, EventPump]:
    defender = Defender(binding(w, seat), {jid: Seat(oracle)}, data_dir, nursery.start_soon, send)
    pump = EventPump(w.settlement)
    defender.subscribe(pump)
    return defender, pump


def events_of(w, kind, since=0):
    return [e for e in w.settlement.events(since) if isinstance(e.event, kind)]


@trio_test(120)
async def test_the_cheaters_defender_posts_its_own_lists_and_the_first_wrong_node_is_found_in_them(cast_v2, runs,
                                                                                                tmp_path):
    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    _, cheater = w.providers[:2]
    c = cheat.schedule.interval_of_step(CHEATED_STEP)
    async with trio.open_nursery() as nursery:
        defender, pump = await defend(w, cheater, jid, cheat, tmp_path, nursery)
        game = w.as_(auditor).open_game(jid, trace_root(list(cheat.checkpoint_states())), c).one(GameOpened).game_id
        await pump.deliver()
    (posted,) = events_of(w, ListPosted)
    steps = list(w.settlement.posted_list(posted))
    assert steps == list(cheat.step_states(c)) and posted.event.seat == cheater
    j = claim_lists.first_difference(claim_lists.steps_list(honest, c), steps)
    assert cheat.schedule.checkpoint_step(c) + j == CHEATED_STEP
    async with trio.open_nursery() as nursery:
        defender.spawn = nursery.start_soon
        step = w.as_(auditor).pick_step(game, list_root(steps), j).one(ClaimPicked).claim_id
        await pump.deliver()
    (_, node_list_posted) = events_of(w, ListPosted)
    nodes = list(w.settlement.posted_list(node_list_posted))
    assert nodes == claim_lists.node_list(cheat, CHEATED_STEP)
    assert claim_lists.first_difference(claim_lists.node_list(honest, CHEATED_STEP), nodes) == cheated_node
    w.as_(auditor).pick_node(step, list_root(nodes), cheated_node).one(ClaimPicked)  # the contract takes the pick
    record = json.loads((tmp_path / RECORD_FILE).read_text())
    assert {k: v["move"] for k, v in record.items()} == {game.hex(): "postSteps", step.hex(): "postNodes"}


@trio_test(120)
async def test_a_co_seat_endorses_the_list_already_posted_and_a_restarted_defender_repeats_nothing(cast_v2, runs,
                                                                                                   tmp_path):
    w = cast_v2
    honest, _, _ = runs
    adversary = auditor_of(w)
    jid = revealed_job(w, (honest, honest))
    first, second = w.providers[:2]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    async with trio.open_nursery() as nursery:
        a, pump_a = await defend(w, first, jid, honest, tmp_path / "a", nursery)
        b, pump_b = await defend(w, second, jid, honest, tmp_path / "b", nursery)
        w.as_(adversary).open_game(jid, trace_root(list(honest.checkpoint_states())), 0)
        await pump_a.deliver()
    async with trio.open_nursery() as nursery:
        b.spawn = nursery.start_soon
        await pump_b.deliver()
    assert [e.event.seat for e in events_of(w, ListPosted)] == [first]
    assert [e.event.seat for e in events_of(w, ListEndorsed)] == [second]
    moves = len(w.settlement.events(0))
    async with trio.open_nursery() as nursery:  # both restart and are handed every event again
        for seat, d in ((first, "a"), (second, "b")):
            again, pump = await defend(w, seat, jid, honest, tmp_path / d, nursery)
            await pump.deliver()
    assert len(w.settlement.events(0)) == moves


@trio_test(120)
async def test_the_defender_posts_evidence_for_a_node_claim_and_hands_it_to_the_client_referee(cast_v2, runs,
                                                                                                 tmp_path):
    """The cheater's seat answers a pick on its changed node: postEvidence, then the evidence itself over
    /gavel/evidence/2.0.0 to the job's client (it referees); a restarted defender posts nothing again and
    sends the same evidence again."""
    from node.roles.v2.evidence_protocol import send_evidence, serve_evidence

    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    cheater = w.providers[1]
    c, j = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    received = []

    async def accept(peer, evidence):
        received.append(evidence)

    async with running_hosts(2) as (seat_host, referee_host):
        serve_evidence(referee_host, accept)

        async def send(referee, evidence):
            assert referee == w.client  # the job's terms: the client referees
            await send_evidence(seat_host, referee_host.public_key, evidence)

        async with trio.open_nursery() as nursery:
            defender, pump = await defend(w, cheater, jid, cheat, tmp_path, nursery, send)
            game = w.as_(auditor).open_game(jid, trace_root(list(cheat.checkpoint_states())), c).one(GameOpened).game_id
            await pump.deliver()
        async with trio.open_nursery() as nursery:
            defender.spawn = nursery.start_soon
            steps = claim_lists.steps_list(cheat, c)
            step = w.as_(auditor).pick_step(game, list_root(steps), j).one(ClaimPicked).claim_id
            await pump.deliver()
        nodes = claim_lists.node_list(cheat, CHEATED_STEP)
        async with trio.open_nursery() as nursery:
            defender.spawn = nursery.start_soon
            node = w.as_(auditor).pick_node(step, list_root(nodes), cheated_node).one(ClaimPicked).claim_id
            await pump.deliver()
        (posted,) = events_of(w, EvidencePosted)
        assert (posted.event.claim_id, posted.event.seat) == (node, cheater)
        assert [evidence_hash(e) for e in received] == [posted.event.evidence_hash]
        # what arrived is the evidence of the claim the chain holds, and it convicts its sender
        ruling = judge(received[0], claim=ClaimRef(node, CHEATED_STEP, cheated_node),
                       program_root=cheat.program().root, program_size=cheat.program().size, node_list=nodes,
                       state_before=steps[j - 1], batch_hashes=None)
        assert not ruling.defender_right
        record = json.loads((tmp_path / RECORD_FILE).read_text())
        assert record[node.hex()] == {"move": "postEvidence", "value": posted.event.evidence_hash.hex()}

        moves = len(w.settlement.events(0))
        async with trio.open_nursery() as nursery:  # restarted: handed every event again
            again, pump = await defend(w, cheater, jid, cheat, tmp_path, nursery, send)
            await pump.deliver()
        assert len(w.settlement.events(0)) == moves
        assert [evidence_hash(e) for e in received] == [posted.event.evidence_hash] * 2


@trio_test(120)
async def test_the_defender_sends_its_evidence_again_until_the_referee_rules_on_what_it_holds(cast_v2, runs, tmp_path,
                                                                                             monkeypatch):
    """A referee that does not answer is tried again while it may still rule on the evidence (its
    deadline less Δ ahead, the claim open and unruled), not a fixed number of times: on a congested
    network four quick tries gave up tens of seconds before the ruling, and the referee, holding
    nothing, ruled the defender wrong. Once that point has passed, nothing is sent again."""
    import node.roles.v2.defender as defender_module
    from node.errors import PeerTimeout

    monkeypatch.setattr(defender_module, "SEND_RETRY_DELAY", 0.001)
    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    cheater = w.providers[1]
    c, j = claim_lists.step_index(cheat.schedule, CHEATED_STEP)
    tries: list[int] = []
    delivered_on = {"try": 6}  # the sixth try goes through: the old policy stopped after four

    async def send(referee, evidence):
        await trio.lowlevel.checkpoint()
        tries.append(w.chain.now())
        if len(tries) == delivered_on["try"]:
            return
        raise PeerTimeout("opening /gavel/evidence/2.0.0 took over 14.2 s")

    async with trio.open_nursery() as nursery:
        defender, pump = await defend(w, cheater, jid, cheat, tmp_path, nursery, send)
        game = w.as_(auditor).open_game(jid, trace_root(list(cheat.checkpoint_states())), c).one(GameOpened).game_id
        await pump.deliver()
    async with trio.open_nursery() as nursery:
        defender.spawn = nursery.start_soon
        step = w.as_(auditor).pick_step(game, list_root(claim_lists.steps_list(cheat, c)), j).one(ClaimPicked).claim_id
        await pump.deliver()
    async with trio.open_nursery() as nursery:
        defender.spawn = nursery.start_soon
        nodes = claim_lists.node_list(cheat, CHEATED_STEP)
        node = w.as_(auditor).pick_node(step, list_root(nodes), cheated_node).one(ClaimPicked).claim_id
        await pump.deliver()
    assert len(tries) == 6 and w.client in defender.delivered[node]

    # restarted, with a referee that never answers: tried until its deadline less Δ, then no more
    tries.clear()
    delivered_on["try"] = 0
    due = w.settlement.claim(node).rule_by - w.settlement.chain_settings().margin

    async def send_until_due(referee, evidence):
        if len(tries) == 8:
            w.chain.mine(due)  # the referee now rules on what it holds
        await send(referee, evidence)

    async with trio.open_nursery() as nursery:
        again, pump = await defend(w, cheater, jid, cheat, tmp_path, nursery, send_until_due)
        await pump.deliver()
    assert len(tries) == 9 and tries[-1] == due and node not in again.delivered
