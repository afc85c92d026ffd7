"""The referee's side of the claim game and the game keeper's referee moves, on the real contract:
games driven by hand (tests/contracts/game_world_v2), the node's roles acting on the chain's events."""
from __future__ import annotations

import logging

import pytest

from contracts.settlement_v2 import ForfeitReason
from contracts.settlement_v2_games import ClaimStatus
from node.roles.v2.game_keeper import DRAW_REFEREE, RESOLVE_GAME, TIMEOUT, TIMEOUT_REFEREE, GameKeeper
from tests.contracts.game_world_v2 import CHEAT, EVERY, TRUTH, WRONG_NODE, WRONG_STEP, register_auditors

from ..conftest import trio_test
from .claim_world import EventPump, GameTable, Spawner, binding, cast_v2, _stage_v2  # noqa: F401
from .test_defender import runs  # noqa: F401  (a small MLP job's honest and cheating runs)

C_BAD, S_BAD = (WRONG_STEP - 1) // EVERY, (WRONG_STEP - 1) % EVERY + 1


def keeper_of(w, account):
    keeper, pump = GameKeeper(binding(w, account)), EventPump(w.settlement)
    keeper.subscribe(pump)
    return keeper, pump


@trio_test(60)
async def test_the_game_keeper_resolves_a_game_nobody_defended_once_its_window_passed(cast_v2):
    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    keeper, pump = keeper_of(w, auditor)
    game = t.open_game(auditor, cheater, C_BAD)
    await pump.deliver()
    assert await keeper.keep_once() == []  # stepsBy not passed: nothing is due
    t.after(w.settlement.claim(game).answer_by)
    assert await keeper.keep_once() == [(RESOLVE_GAME, game)]
    assert w.settlement.claim(game).status == ClaimStatus.UPHELD
    assert w.settlement.seat(t.jid, cheater).forfeit == ForfeitReason.SILENT_DEFENDER
    assert await keeper.keep_once() == [] and not keeper.kept


@trio_test(120)
async def test_the_game_keeper_burns_a_silent_client_draws_in_vain_and_voids_the_path(cast_v2, caplog):
    """The client never rules; no referee is registered: the keeper times the client out, makes
    MAX_DRAWS empty draws, and ends the node claim, the step claim and the game, all VOID, with
    no move refused on the way."""
    w = cast_v2
    auditor, _ = register_auditors(w)
    _, cheater = w.providers[:2]
    t = GameTable(w, (TRUTH, CHEAT))
    keeper, pump = keeper_of(w, auditor)
    game, step, node = t.path_to_evidence(auditor, cheater, C_BAD, S_BAD, WRONG_NODE)
    await pump.deliver()
    assert await keeper.keep_once() == []  # the client still may rule
    t.after(w.settlement.claim(node).rule_by)
    caplog.set_level(logging.INFO, logger="node.roles.v2.game_keeper")
    moves = []
    for _ in range(40):
        if w.settlement.claim(game).status != ClaimStatus.OPEN:
            break
        moves += await keeper.keep_once()
        await pump.deliver()
        w.chain.mine(w.chain.now() + 600)
    assert [m for m, _ in moves] == [TIMEOUT_REFEREE, DRAW_REFEREE, DRAW_REFEREE, DRAW_REFEREE, TIMEOUT, TIMEOUT,
                                     RESOLVE_GAME]
    assert [c for _, c in moves[-3:]] == [node, step, game]
    assert all(w.settlement.claim(c).status == ClaimStatus.VOID for c in (node, step, game))
    assert w.settlement.ruling(node).referees_out
    assert not [r for r in caplog.records if "refused" in r.getMessage()]
    w.assert_every_coin_accounted()


@trio_test(60)
async def test_evidence_reaches_the_referee_over_libp2p_and_malformed_bytes_are_refused(runs):
    from node.errors import RemoteError
    from node.roles.v2.evidence_protocol import EVIDENCE_PROTOCOL, send_evidence, serve_evidence
    from protocol import claim_lists
    from protocol.claim_evidence import build_evidence, evidence_hash

    from ..conftest import running_hosts

    honest, _, node = runs
    evidence = build_evidence(honest, claim_id=b"\x01" * 32, step=4, node=node,
                              node_list=claim_lists.node_list(honest, 4))
    received = []

    async def accept(peer, got):
        received.append((peer, got))

    async with running_hosts(2) as (defender, referee):
        serve_evidence(referee, accept)
        await send_evidence(defender, referee.public_key, evidence)
        assert [(p, evidence_hash(e)) for p, e in received] == [(defender.peer_id, evidence_hash(evidence))]
        with pytest.raises(RemoteError, match="malformed evidence"):
            await defender.request(referee.peer_id, EVIDENCE_PROTOCOL, b"\xc1 not msgpack")
    assert len(received) == 1


# -- the referee's duty on a real MLP job ------------------------------------------------------

def _picked(w, by, jid, oracle, step_no, node):
    """Open the game on `oracle`'s root at step `step_no`'s interval and pick that step and `node`, each
    pick made once the defenders' list is on chain; yields between moves for the pump."""
    from contracts.settlement_v2_games import ClaimPicked, GameOpened
    from protocol import claim_lists
    from protocol.listtree import list_root

    from contracts.settlement_v2 import trace_root

    c, j = claim_lists.step_index(oracle.schedule, step_no)
    game = w.as_(by).open_game(jid, trace_root(list(oracle.checkpoint_states())), c).one(GameOpened).game_id
    yield game
    step = w.as_(by).pick_step(game, list_root(claim_lists.steps_list(oracle, c)), j).one(ClaimPicked).claim_id
    yield step
    nodes = claim_lists.node_list(oracle, step_no)
    yield w.as_(by).pick_node(step, list_root(nodes), node).one(ClaimPicked).claim_id


@trio_test(180)
async def test_the_client_referee_rules_an_honest_defender_right_and_a_cheater_wrong_from_their_evidence(
        cast_v2, runs, tmp_path):
    """Games on both seats' roots, picked at the cheater's changed node; each seat's real defender posts
    its lists and evidence and hands the evidence to the client's `RefereeDuty`, which judges it and
    rules on chain. Evidence whose hash no seat posted is refused. The cheater's path then ends by the
    game keeper: the cheater forfeits LostGame, the challenger ends with more than it put in."""
    from contracts.settlement_v2_referees import ClaimRuled
    from node.roles.v2.defender import Defender
    from node.roles.v2.referee import RULE, RefereeDuty
    from node.streams import RequestRefused
    from protocol import claim_lists
    from protocol.claim_evidence import Transcript, build_evidence, check_transcript, evidence_hash, transcript_hash
    from node.training_oracle import batch_hashes

    from .test_defender import CHEATED_STEP, Seat, auditor_of, revealed_job
    from contracts import Role
    from tests.contracts.game_world_v2 import holdings
    from tests.contracts.settlement_world import ed25519_key

    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    wrong_challenger = w.outsider  # points at the honest root
    w.as_(wrong_challenger).register(ed25519_key("wrong challenger"), Role.AUDITOR, stake=5 * 10**18)
    before = {a: holdings(w, a) for a in (auditor, wrong_challenger, honest_seat, cheater)}
    pump = EventPump(w.settlement)

    async def training_of(job_id):
        assert job_id == jid
        return honest.training

    spawn = Spawner()
    duty = RefereeDuty(binding(w, w.client), tmp_path / "client", spawn, training_of)
    duty.subscribe(pump)
    for seat, oracle in ((honest_seat, honest), (cheater, cheat)):
        (tmp_path / seat).mkdir()
        Defender(binding(w, seat), {jid: Seat(oracle)}, tmp_path / seat, spawn,
                 lambda referee, evidence: duty.accept("a seat", evidence)).subscribe(pump)
    keepers = [keeper_of(w, account)[0] for account in (auditor, honest_seat)]  # each keeps its own games
    for keeper in keepers:
        keeper.subscribe(pump)
    paths = {seat: _picked(w, by, jid, oracle, CHEATED_STEP, cheated_node)
             for seat, oracle, by in ((honest_seat, honest, wrong_challenger), (cheater, cheat, auditor))}
    claims = {}
    for level in range(3):
        for seat, path in paths.items():
            async with spawn.tasks():  # each move's answers land before the next move
                claims.setdefault(seat, []).append(next(path))
                if level == 2 and seat == cheater:  # a stranger's evidence for the claim: no seat posted its hash
                    stranger = build_evidence(honest, claim_id=claims[cheater][2], step=CHEATED_STEP,
                                              node=cheated_node - 1,
                                              node_list=claim_lists.node_list(honest, CHEATED_STEP))
                    with pytest.raises(RequestRefused, match="no seat posted evidence"):
                        await duty.accept("a stranger", stranger)
                await pump.deliver()
    assert (claims[cheater][2], evidence_hash(stranger)) not in duty.judged
    ruled = {e.event.claim_id: e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimRuled)}
    assert {seat: ruled[claims[seat][2]].defender_right for seat in claims} == {honest_seat: True, cheater: False}
    for seat in claims:
        sent = duty.ruled[(claims[seat][2], RULE)]
        transcript = Transcript.decode(sent.path.read_bytes())
        assert transcript_hash(transcript) == ruled[claims[seat][2]].transcript_hash == sent.transcript_hash
        again = check_transcript(transcript, first_step=honest.schedule.checkpoint_step(transcript.interval),
                                 program_size=honest.program().size, batch_hashes=batch_hashes(honest.training))
        assert again.defender_right == (seat == honest_seat)
    assert not any(sent.judgement.reason.startswith("invalid") for sent in duty.ruled.values())
    restarted = RefereeDuty(binding(w, w.client), tmp_path / "client", spawn, training_of)  # handed no event
    assert restarted.holding == duty.holding == {claims[seat][2] for seat in claims}
    assert restarted.evidence == duty.evidence

    # no appeal: the keeper ends both paths once appealBy passed
    t_end = max(w.settlement.ruling(claims[s][2]).appeal_by for s in claims)
    w.mine_at(t_end)
    for _ in range(12):
        for keeper in keepers:
            await keeper.keep_once()
        await pump.deliver()
        w.chain.mine(w.chain.now() + 600)
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.LOST_GAME
    assert w.settlement.seat(jid, honest_seat).forfeit == ForfeitReason.NONE
    assert all(w.settlement.claim(c).status != ClaimStatus.OPEN for path in claims.values() for c in path)
    after = {a: holdings(w, a) for a in before}
    assert after[auditor] > before[auditor]
    assert after[wrong_challenger] < before[wrong_challenger]
    assert after[cheater] < before[cheater]
    assert after[honest_seat] >= before[honest_seat]
    w.assert_every_coin_accounted()


@trio_test(120)
async def test_evidence_posted_and_never_sent_is_ruled_against_before_the_referee_could_be_timed_out(
        cast_v2, runs, tmp_path):
    """The cheater's seat posts its evidence hash and keeps the evidence: the client's duty holds the
    claim and, Δ before ruleBy, rules the defender wrong on nothing; its referee bond stays whole."""
    from contracts.settlement_v2_referees import ClaimRuled
    from node.roles.v2.referee import NO_EVIDENCE, RULE
    from protocol.claim_evidence import Transcript

    from .claim_world import ClaimRoles
    from .test_defender import CHEATED_STEP, auditor_of, revealed_job

    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    cheater = w.providers[1]
    roles = ClaimRoles(w, jid, {w.providers[0]: honest, cheater: cheat}, tmp_path, honest.training)
    roles.silent.add(cheater)
    duty = roles.duties[w.client]
    client_before = w.settlement.node(w.client)
    path = _picked(w, auditor, jid, cheat, CHEATED_STEP, cheated_node)
    for _ in range(3):
        claim = next(path)
        await roles.play()
    assert claim in duty.holding and not w.settlement.claim(claim).ruled
    assert await duty.rule_overdue() == []  # not due yet: the evidence may still come
    margin = w.settlement.chain_settings().margin
    w.mine_at(w.settlement.claim(claim).rule_by - margin)
    (ruled,) = await duty.rule_overdue()
    assert ruled.move == RULE and ruled.judgement == NO_EVIDENCE
    (event,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimRuled)]
    assert (event.claim_id, event.defender_right, event.transcript_hash) == (claim, False, ruled.transcript_hash)
    assert Transcript.decode(ruled.path.read_bytes()).evidence == b""
    assert w.settlement.node(w.client) == client_before  # the bond is locked as before, nothing burned


def _against_a_wrong_challenger(w, honest, cheat, tmp_path):
    """A revealed job of an honest and a cheating seat, a registered auditor that will challenge the honest
    one, and the seats' roles with no referee yet: (job, honest seat, challenger, roles)."""
    from contracts import Role
    from tests.contracts.settlement_world import ed25519_key

    from .claim_world import ClaimRoles
    from .test_defender import revealed_job

    jid = revealed_job(w, (honest, cheat))
    honest_seat, wrong_challenger = w.providers[0], w.outsider
    w.as_(wrong_challenger).register(ed25519_key("wrong challenger"), Role.AUDITOR, stake=5 * 10**18)
    roles = ClaimRoles(w, jid, {honest_seat: honest, w.providers[1]: cheat}, tmp_path, honest.training, referee=False)
    return jid, honest_seat, wrong_challenger, roles


@trio_test(120)
async def test_a_referee_no_push_reaches_asks_the_seat_and_rules_the_honest_defender_right(cast_v2, runs, tmp_path,
                                                                                          monkeypatch):
    """The honest seat's evidence pushes are all lost (a congested network): the client's duty asks the
    seat for the evidence it posted, takes it as it takes a push, and rules the defender right before
    its ruling is due. Holding nothing then, it ruled the honest defender wrong, and an appeal that
    overturned that cost the referee its bond (the full v2 testnet)."""
    import node.roles.v2.referee as referee_module
    from contracts.settlement_v2_referees import ClaimRuled
    from node.roles.v2.referee import RULE

    from .test_defender import CHEATED_STEP

    monkeypatch.setattr(referee_module, "PULL_DELAY", 0.001)
    w = cast_v2
    honest, cheat, cheated_node = runs
    jid, honest_seat, wrong_challenger, roles = _against_a_wrong_challenger(w, honest, cheat, tmp_path)
    duty = roles.referee(w.client, pulls=True)
    roles.pushes_lost.add(honest_seat)
    path = _picked(w, wrong_challenger, jid, honest, CHEATED_STEP, cheated_node)
    for _ in range(3):
        claim = next(path)
        await roles.play()
    ruled = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimRuled)]
    assert [(e.claim_id, e.defender_right) for e in ruled] == [(claim, True)]
    assert duty.ruled[(claim, RULE)].judgement.defender_right
    assert w.chain.now() < w.settlement.claim(claim).rule_by - w.settlement.chain_settings().margin  # not when due
    assert not duty._pulling  # the ask ended with the evidence in


@trio_test(120)
async def test_a_referee_no_evidence_reaches_builds_the_honest_seats_evidence_from_its_own_run(
        cast_v2, runs, tmp_path, monkeypatch):
    """The honest seat posts its evidence hash, and neither its pushes nor the referee's asks arrive: the
    client's duty builds the evidence from its own run of the job, finds its keccak posted, and rules the
    defender right before its ruling is due, with a transcript carrying exactly the seat's evidence. A duty
    that only waited for the seat ruled on nothing, the defender wrong (the full v2 testnet: the honest
    slow provider lost its seat to a false challenger so)."""
    import node.roles.v2.referee as referee_module
    from contracts.settlement_v2_referees import ClaimRuled
    from node.roles.v2.referee import RULE
    from protocol.claim_evidence import Transcript

    from .test_defender import CHEATED_STEP

    monkeypatch.setattr(referee_module, "PULL_DELAY", 0.001)
    w = cast_v2
    honest, cheat, cheated_node = runs
    jid, honest_seat, wrong_challenger, roles = _against_a_wrong_challenger(w, honest, cheat, tmp_path)
    duty = roles.referee(w.client, pulls=True, builds=True)
    roles.silent.add(honest_seat)  # its pushes are lost and its answers to asks too
    path = _picked(w, wrong_challenger, jid, honest, CHEATED_STEP, cheated_node)
    for _ in range(3):
        claim = next(path)
        await roles.play()
    ruled = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimRuled)]
    assert [(e.claim_id, e.defender_right) for e in ruled] == [(claim, True)]
    assert w.chain.now() < w.settlement.claim(claim).rule_by - w.settlement.chain_settings().margin  # not when due
    sent = roles.defenders[honest_seat].evidence[claim]
    assert Transcript.decode(duty.ruled[(claim, RULE)].path.read_bytes()).evidence == sent.encode()


@trio_test(120)
async def test_a_referee_that_builds_evidence_rules_a_silent_cheater_wrong_on_the_cheaters_own_evidence(
        cast_v2, runs, tmp_path, monkeypatch):
    """The cheater posts its evidence hash and keeps the evidence. The node it answers for is the first
    it changed, so its inputs are the honest run's: the client's own run builds the same evidence, byte
    for byte, and the duty rules on it before the ruling is due, the defender wrong because the operator
    gives another output than the cheater's list (not for want of evidence)."""
    import node.roles.v2.referee as referee_module
    from contracts.settlement_v2_referees import ClaimRuled
    from node.roles.v2.referee import NO_EVIDENCE, RULE
    from protocol.claim_evidence import Transcript

    from .claim_world import ClaimRoles
    from .test_defender import CHEATED_STEP, auditor_of, revealed_job

    monkeypatch.setattr(referee_module, "PULL_DELAY", 0.001)
    w = cast_v2
    honest, cheat, cheated_node = runs
    auditor = auditor_of(w)
    jid = revealed_job(w, (honest, cheat))
    cheater = w.providers[1]
    roles = ClaimRoles(w, jid, {w.providers[0]: honest, cheater: cheat}, tmp_path, honest.training, referee=False)
    duty = roles.referee(w.client, builds=True)
    roles.silent.add(cheater)
    path = _picked(w, auditor, jid, cheat, CHEATED_STEP, cheated_node)
    for _ in range(3):
        claim = next(path)
        await roles.play()
    ruled = [e.event for e in w.settlement.events(0) if isinstance(e.event, ClaimRuled)]
    assert [(e.claim_id, e.defender_right) for e in ruled] == [(claim, False)]
    assert w.chain.now() < w.settlement.claim(claim).rule_by - w.settlement.chain_settings().margin  # not when due
    judgement = duty.ruled[(claim, RULE)].judgement
    assert judgement != NO_EVIDENCE and not judgement.defender_right
    kept = roles.defenders[cheater].evidence[claim]
    assert Transcript.decode(duty.ruled[(claim, RULE)].path.read_bytes()).evidence == kept.encode()


@trio_test(60)
async def test_a_seat_answers_an_ask_for_its_evidence_over_libp2p_and_refuses_what_it_does_not_hold(runs):
    from node.errors import BadMessage, RemoteError
    from node.roles.v2.evidence_protocol import EVIDENCE_OF_PROTOCOL, fetch_evidence, serve_evidence_of
    from protocol import claim_lists
    from protocol.claim_evidence import build_evidence, evidence_hash

    from ..conftest import running_hosts

    honest, _, node = runs
    claim = b"\x01" * 32
    evidence = build_evidence(honest, claim_id=claim, step=4, node=node, node_list=claim_lists.node_list(honest, 4))
    async with running_hosts(3) as (seat, referee, liar):
        serve_evidence_of(seat, {claim: evidence}.get)
        got = await fetch_evidence(referee, seat.public_key, claim)
        assert evidence_hash(got) == evidence_hash(evidence)
        with pytest.raises(RemoteError, match="no evidence of claim"):
            await fetch_evidence(referee, seat.public_key, b"\x02" * 32)
        with pytest.raises(RemoteError, match="32 bytes"):
            await referee.request(seat.peer_id, EVIDENCE_OF_PROTOCOL, b"short")

        async def garbage(peer, request):
            return b"\xc1 not msgpack"

        liar.handle_requests(EVIDENCE_OF_PROTOCOL, garbage)
        with pytest.raises(BadMessage, match="evidence of claim"):
            await fetch_evidence(referee, liar.public_key, claim)
