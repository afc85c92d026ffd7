"""Equivocation outside a dispute (economics §10, §12): a seat's EIP-712 `SeatStatement`s, signed with its
account key (protocol/statements.py), are evidence anyone holding them can take to the contract.

Two statements for one slot with different lists (`slashEquivocation`): the seat told one auditor one
steps list and another a different one. A statement the chain contradicts (`slashContradiction`): the
seat signed a trace root other than the one it revealed, or a steps list other than the one its own
defender posted when a game opened on its root.

What the node does: a seat signs each steps list it hands a sampler (`data.JobDataService.serve_steps`),
the client's sampling and the auditor keep what they are told in the node's `StatementsKeeper`
(node/roles/v2/statements_keeper.py), which shares it on gossip and reports an equivocation or a
contradiction on its own. The last test plays that between nodes: the `equivocate` adversary
(node/roles/v2/adversaries.py) tells the client and an auditor two lists, and one of them slashes it.
In the others the reporter is that keeper on its own account's binding, handed the statements as a
sampler's fetch hands them; the cheater's signatures are
made with the account keys of the embedded chain (no seat signs a list it did not compute, so the lies
are scripted), the lists in them are the seats' real runs (`TrainingOracle`s of the MLP job), the game's
list is posted by the cheater's real `Defender` and the game is played to its end by the real roles
(`claim_world.ClaimRoles`), whose events the keeper follows. Money read from the contract."""
from __future__ import annotations

import trio

from contracts import Role
from contracts.settlement_v2 import ForfeitReason, JobOpened, JobStatus, SeatStatus, trace_root
from contracts.settlement_v2_games import EquivocationSlashed, GameOpened, ListPosted
from protocol import claim_lists
from protocol.listtree import list_root
from protocol.statements import STEPS, TRACE, find_equivocation
from tests.contracts.game_world_v2 import holdings
from tests.contracts.settlement_world import reverts
from tests.contracts.test_settlement_v2_statements import _domain, _signed
from node.roles.client import SubmitOptions
from node.roles.v2.statements_keeper import StatementsKeeper

from . import Books, advance, on_chain
from ..conftest import trio_test
from ..test_roles_support import role, start_node, wait_for, write_job
from ..v2.claim_world import ClaimRoles, binding, cast_v2, new_account, _stage_v2  # noqa: F401
from ..v2.test_defender import CHEATED_STEP, revealed_job, runs  # noqa: F401

STAKE = 5 * 10**18


def _share(w) -> int:
    """w, in basis points."""
    return w.settlement.chain_settings().winner_share_bps


def _keeper(w, reporter: str) -> StatementsKeeper:
    """The reporter node's keeper of statements, on its own account's binding."""
    return StatementsKeeper(binding(w, reporter), _domain(w))


@trio_test(60)
async def test_two_signed_steps_lists_for_one_interval_cost_the_seat_its_stake_and_pay_the_reporter(cast_v2, runs):
    w = cast_v2
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    reporter = new_account(w, "reporter", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, cheater, reporter, w.client)}
    c = cheat.schedule.interval_of_step(CHEATED_STEP)
    # what the cheater told two auditors off chain: its own steps list, and the honest one
    told_one = _signed(w, cheater, jid, STEPS, c, list_root(claim_lists.steps_list(cheat, c)))
    told_other = _signed(w, cheater, jid, STEPS, c, list_root(claim_lists.steps_list(honest, c)))
    proof = find_equivocation(told_one, told_other, _domain(w))
    assert proof is not None and proof.culprit == cheater

    keeper = _keeper(w, reporter)
    assert await keeper.add(told_one) and not keeper.slashed  # one list alone convicts nobody
    assert await keeper.add(told_other)
    assert keeper.slashed == [("equivocation", (jid, cheater, STEPS, c))]
    (slashed,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, EquivocationSlashed)]
    assert (slashed.seat, slashed.reporter) == (cheater, reporter)
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.EQUIVOCATED

    info = w.settlement.job(jid)
    w.mine_at(info.final_by)
    w.as_(w.keeper).settle(jid)
    assert w.settlement.job(jid).status == JobStatus.FINALIZED
    after = {a: holdings(w, a) for a in before}
    stake, pay = info.provider_stake, info.price // 2
    share = stake * _share(w) // 10_000
    assert after[cheater] - before[cheater] == -stake < 0
    assert after[reporter] - before[reporter] == share > 0  # w·S (its gas at γ is not paid yet, §10)
    assert after[honest_seat] - before[honest_seat] == pay
    assert after[w.client] - before[w.client] == info.price - pay  # the cheater's p back
    w.assert_every_coin_accounted()


@trio_test(120)
async def test_statements_the_seats_own_trace_and_posted_list_contradict_cost_it_its_stake(cast_v2, runs, tmp_path):
    """The cheater told an auditor, signed, that its root and its steps list of the cheated interval were
    the honest ones. Its trace root is on chain from the reveal; its steps list is on chain once its own
    defender posts it in the game an auditor opened. Either statement alone slashes it (the second is
    refused: it already forfeited). The auditor's game goes on to its end; nobody honest pays."""
    w = cast_v2
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    auditor = new_account(w, "auditor", Role.AUDITOR, STAKE)
    reporter = new_account(w, "reporter", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, cheater, auditor, reporter, w.client)}
    c = cheat.schedule.interval_of_step(CHEATED_STEP)
    told_root = _signed(w, cheater, jid, TRACE, 0, trace_root(list(honest.checkpoint_states())))
    told_steps = _signed(w, cheater, jid, STEPS, c, list_root(claim_lists.steps_list(honest, c)))

    roles = ClaimRoles(w, jid, {honest_seat: honest, cheater: cheat}, tmp_path, honest.training)
    roles.auditor(auditor)
    keeper = _keeper(w, reporter)
    keeper.subscribe(roles.pump)
    assert await keeper.add(told_steps) and not keeper.slashed  # no list of the seat's on chain yet
    await roles.play()  # the auditor replays both roots from the chain, opens the game on the cheated interval
    (game,) = [e.event for e in w.settlement.events(0) if isinstance(e.event, GameOpened)]
    assert (game.opener, game.interval) == (auditor, c)
    posted = [e for e in w.settlement.events(0) if isinstance(e.event, ListPosted) and e.event.claim_id == game.game_id]
    assert [p.event.seat for p in posted] == [cheater]  # its own defender posted its own list
    assert list(w.settlement.posted_list(posted[0])) != list(claim_lists.steps_list(honest, c))

    # the keeper saw the seat's list posted and reported the statement it contradicts
    assert keeper.slashed == [("contradiction", (jid, cheater, STEPS, c))]
    assert w.settlement.seat(jid, cheater).forfeit == ForfeitReason.EQUIVOCATED
    assert await keeper.add(told_root) and len(keeper.slashed) == 1  # it forfeited already: nothing more to send
    with reverts("StatementNothingToSlash", seat=cheater):  # which the contract would refuse: one slash a seat
        w.as_(reporter).slash_contradiction(told_root)

    await roles.finish([game.game_id])
    roles.settle()
    info = w.settlement.job(jid)
    after = {a: holdings(w, a) for a in before}
    stake, pay = info.provider_stake, info.price // 2
    assert after[cheater] - before[cheater] == -stake < 0
    assert after[reporter] - before[reporter] == stake * _share(w) // 10_000 > 0
    assert after[auditor] >= before[auditor]
    assert after[honest_seat] - before[honest_seat] == pay
    assert after[w.client] >= before[w.client]
    w.assert_every_coin_accounted()


@trio_test(60)
async def test_a_trace_statement_other_than_the_revealed_root_is_slashed_by_anyone(cast_v2, runs):
    w = cast_v2
    honest, cheat, _ = runs
    jid = revealed_job(w, (honest, cheat))
    honest_seat, cheater = w.providers[:2]
    reporter = new_account(w, "reporter", Role.AUDITOR, STAKE)
    before = {a: holdings(w, a) for a in (honest_seat, cheater, reporter)}
    # the honest seat's own statement agrees with the chain: nothing to slash
    truthful = _signed(w, honest_seat, jid, TRACE, 0, trace_root(list(honest.checkpoint_states())))
    with reverts("StatementNoContradiction"):
        w.as_(reporter).slash_contradiction(truthful)
    keeper = _keeper(w, reporter)
    assert await keeper.add(truthful) and not keeper.slashed
    lie = _signed(w, cheater, jid, TRACE, 0, trace_root(list(honest.checkpoint_states())))
    assert await keeper.add(lie)
    assert keeper.slashed == [("contradiction", (jid, cheater, TRACE, 0))]
    info = w.settlement.job(jid)
    w.mine_at(info.final_by)
    w.as_(w.keeper).settle(jid)
    after = {a: holdings(w, a) for a in before}
    assert after[cheater] - before[cheater] == -info.provider_stake
    assert after[reporter] - before[reporter] == info.provider_stake * _share(w) // 10_000
    assert after[honest_seat] - before[honest_seat] == info.price // 2
    w.assert_every_coin_accounted()


@trio_test(300)
async def test_a_seat_that_tells_the_client_and_an_auditor_two_steps_lists_loses_its_stake(tmp_path):
    """The whole strategy between nodes: a client, an honest provider, an `equivocate` provider and an
    auditor. The client samples m intervals of each seat, the auditor all of them once for the root both
    seats revealed, asking each seat its signed steps list of every interval it replays; the equivocator
    tells whichever asks an interval second a list other than the first's. The two keepers meet on gossip and one slashes it: the equivocator −S, the honest
    seat +p, the reporter +w·S, the other sampler even, the client pays only the honest seat's p."""
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        client_node = await start_node(nursery, tmp_path / "client", ["client"], settlement="2")
        hub = client_node.host.listen_addrs
        honest_node, cheat_node = [await start_node(nursery, tmp_path / name, ["provider"], settlement="2",
                                                    bootstrap=hub, **extra)
                                   for name, extra in (("honest", {}), ("equivocate", {"cheat": "equivocate"}))]
        auditor_node = await start_node(nursery, tmp_path / "auditor", ["auditor"], settlement="2", bootstrap=hub)
        client = await role(client_node, "client")
        honest_seat, cheater = [(await role(n, "provider")).ctx.chain.account for n in (honest_node, cheat_node)]
        auditor = await role(auditor_node, "auditor")
        s = client.ctx.chain.settlement
        books = await Books.open(s, [client.ctx.chain.account, honest_seat, cheater, auditor.ctx.chain.account])

        job_id = await client.submit(job_file, SubmitOptions(providers=2, accept_within=120))
        assert sorted(await on_chain(s.seats, job_id)) == sorted([honest_seat, cheater])
        with trio.fail_after(180):  # both sampled; the second asker of an interval was told another list
            while (await on_chain(s.seat, job_id, cheater)).forfeit == ForfeitReason.NONE:
                await trio.sleep(0.2)
        assert (await on_chain(s.seat, job_id, cheater)).forfeit == ForfeitReason.EQUIVOCATED
        (slashed,) = [e.event for e in await on_chain(s.events, 0, None)
                      if isinstance(e.event, EquivocationSlashed) and e.event.job_id == job_id]
        samplers = {client.ctx.chain.account: client.statements, auditor.ctx.chain.account: auditor.statements}
        assert slashed.seat == cheater and slashed.reporter in samplers and slashed.kind == STEPS
        assert [what for what, _ in samplers[slashed.reporter].slashed] == ["equivocation"]
        assert len(samplers[slashed.reporter].held[(job_id, cheater, STEPS, slashed.index)]) == 2

        await wait_for(lambda: client.jobs[job_id].state in ("verified", "settled"), timeout=120)
        info = await on_chain(s.job, job_id)
        await advance(max(0, info.final_by - await on_chain(s.chain.now)) + 10)  # the keepers settle
        with trio.fail_after(120):
            summary = await client.wait(job_id)
        assert summary["status"] == "FINALIZED"
        assert (await on_chain(s.seat, job_id, honest_seat)).status == SeatStatus.PAID
        (terms,) = [e.event.terms for e in await on_chain(s.events, 0, None)
                    if isinstance(e.event, JobOpened) and e.event.job_id == job_id]
        pay, stake = terms.price // 2, terms.provider_stake
        share = stake * (await on_chain(s.chain_settings)).winner_share_bps // 10_000
        nets = await books.nets()
        assert nets[cheater] == -stake < 0
        assert nets[honest_seat] == pay > 0
        reported = {a: share if a == slashed.reporter else 0 for a in samplers}
        assert nets[auditor.ctx.chain.account] == reported[auditor.ctx.chain.account] >= 0
        assert nets[client.ctx.chain.account] == -pay + reported[client.ctx.chain.account]  # the cheater's p back
        nursery.cancel_scope.cancel()
