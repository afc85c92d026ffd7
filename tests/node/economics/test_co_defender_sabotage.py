"""Co-defender sabotage (economics §8.2, §12): two seats reveal the same honest root; one of them (the
saboteur, with a puppet that opens and picks) answers the game with a wrong list or wrong evidence to
sink the root. A list is its poster's: the honest seat's real `Defender` posts its own correct list
beside the wrong one, a claim upheld against the wrong list costs only the seats covering it, and the
referee rules the defenders right on any evidence that holds. Only the saboteur forfeits; the honest
co-seat is paid. Real claim-game roles (the honest seat's defender, an auditor, the client's referee
duty, keepers: `claim_world.ClaimRoles`); the saboteur's and its puppet's moves are scripted. Money read
from the contract."""
from __future__ import annotations

from dataclasses import replace

from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, trace_root
from contracts.settlement_v2_games import ClaimPicked, ClaimStatus, EvidencePosted, GameOpened, ListPosted
from protocol import claim_lists
from protocol.claim_evidence import build_evidence, evidence_hash
from protocol.listtree import list_root
from tests.contracts.game_world_v2 import holdings

from ..conftest import trio_test
from ..v2.claim_world import ClaimRoles, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import CHEATED_STEP, revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


def _lists_posted(w, claim: bytes) -> dict[str, bytes]:
    """seat -> the list root it posted under the claim."""
    return {e.event.seat: e.event.list_root for e in w.settlement.events(0)
            if isinstance(e.event, ListPosted) and e.event.claim_id == claim}


@trio_test(180)
async def test_a_co_seat_posting_a_wrong_steps_list_sinks_only_itself(cast_v2, runs, tmp_path):
    w = cast_v2
    honest, _, _ = runs
    jid = revealed_job(w, (honest, honest))
    honest_seat, saboteur = w.providers[:2]
    puppet = new_account(w, "saboteur's puppet", Role.AUDITOR, STAKE)
    auditor = new_account(w, "auditor", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, saboteur, puppet, auditor, w.client)}
    roles = ClaimRoles(w, jid, {honest_seat: honest}, tmp_path, honest.training)  # the saboteur runs no defender
    roles.auditor(auditor)
    await roles.play()  # the auditor replays the root: it checks

    trace, c = list(honest.checkpoint_states()), 1
    game = w.as_(puppet).open_game(jid, trace_root(trace), c).one(GameOpened).game_id
    # the saboteur posts first: the interval's ends are proven, its inside is junk
    truth = claim_lists.steps_list(honest, c)
    wrong = [truth[0], *(keccak(b"sabotage %d" % j) for j in range(1, len(truth) - 1)), truth[-1]]
    proof_from, proof_to = claim_lists.steps_proofs(trace, c)
    w.as_(saboteur).post_steps(game, wrong, proof_from.siblings, proof_to.siblings)
    await roles.play()  # the honest defender posts its own list; the auditor picks the saboteur's first wrong step

    assert _lists_posted(w, game) == {saboteur: list_root(wrong), honest_seat: list_root(truth)}
    picks = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimPicked)]
    assert [(p.author, p.list_root, p.index) for p in picks] == [(auditor, list_root(wrong), 1)]
    await roles.finish([game])  # the saboteur cannot answer for its list: the keepers time the claim out
    roles.settle()

    assert w.settlement.claim(picks[0].claim_id).status == ClaimStatus.UPHELD
    assert w.settlement.seat(jid, honest_seat).forfeit == ForfeitReason.NONE
    assert w.settlement.seat(jid, saboteur).forfeit != ForfeitReason.NONE
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    coalition = after[saboteur] + after[puppet] - before[saboteur] - before[puppet]
    assert after[saboteur] - before[saboteur] == -info.provider_stake
    assert coalition < 0
    assert after[honest_seat] - before[honest_seat] >= info.price // 2
    assert after[auditor] > before[auditor]  # its step bond back and the saboteur's w·S
    assert after[w.client] >= before[w.client] - (info.price - info.price // 2)  # it paid for one result at most
    w.assert_every_coin_accounted()


@trio_test(180)
async def test_a_co_seat_posting_wrong_evidence_cannot_sink_the_list_it_covers(cast_v2, runs, tmp_path):
    """Both seats cover the honest lists (the saboteur endorses); the puppet picks a node; the saboteur posts
    the hash of evidence naming another operator's program entry and sends it to the referee. The client
    judges both and rules the defenders right on the honest seat's evidence; the puppet's claims fail."""
    w = cast_v2
    honest, _, node = runs
    jid = revealed_job(w, (honest, honest))
    honest_seat, saboteur = w.providers[:2]
    puppet = new_account(w, "saboteur's puppet", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, saboteur, puppet)}
    roles = ClaimRoles(w, jid, {honest_seat: honest}, tmp_path, honest.training)
    c, j = claim_lists.step_index(honest.schedule, CHEATED_STEP)
    trace = list(honest.checkpoint_states())

    game = w.as_(puppet).open_game(jid, trace_root(trace), c).one(GameOpened).game_id
    await roles.play()
    steps = list_root(claim_lists.steps_list(honest, c))
    w.as_(saboteur).endorse(game, steps)
    step = w.as_(puppet).pick_step(game, steps, j).one(ClaimPicked).claim_id
    await roles.play()
    nodes = list_root(claim_lists.node_list(honest, CHEATED_STEP))
    w.as_(saboteur).endorse(step, nodes)
    claim = w.as_(puppet).pick_node(step, nodes, node).one(ClaimPicked).claim_id
    listed = claim_lists.node_list(honest, CHEATED_STEP)
    right = build_evidence(honest, claim_id=claim, step=CHEATED_STEP, node=node, node_list=listed)
    other = build_evidence(honest, claim_id=claim, step=CHEATED_STEP, node=node - 1, node_list=listed)
    wrong = replace(right, entry=other.entry)  # another operator's program entry: it is not node n's
    w.as_(saboteur).post_evidence(claim, evidence_hash(wrong))
    async with roles.spawn.tasks():
        await roles.duties[w.client].accept("saboteur", wrong)  # taken (its hash is posted), judged wrong
    await roles.play()  # the honest defender posts and sends its evidence; the client rules

    posted = {e.event.seat for e in w.settlement.events(0) if isinstance(e.event, EvidencePosted)}
    assert posted == {saboteur, honest_seat}
    judged = roles.duties[w.client].judged
    assert not judged[(claim, evidence_hash(wrong))].defender_right  # the saboteur's evidence did not hold
    assert w.settlement.claim(claim).ruled and w.settlement.claim(claim).defender_right
    await roles.finish([game])
    roles.settle()
    assert all(w.settlement.claim(x).status == ClaimStatus.FAILED for x in (game, step, claim))
    assert all(w.settlement.seat(jid, s).forfeit == ForfeitReason.NONE for s in (honest_seat, saboteur))
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    pay = info.price // 2
    coalition = after[saboteur] + after[puppet] - before[saboteur] - before[puppet]
    assert coalition - pay < 0  # against the pay its seat earns honestly, the sabotage cost the puppet's bonds
    assert after[honest_seat] - before[honest_seat] >= info.price // 2
    w.assert_every_coin_accounted()
