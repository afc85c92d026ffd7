"""No trusted referee, end to end (issue 18, docs/onchain-step.md): a client, an honest provider, a
provider that changes one operator's output (``wrong-op-output``) and an auditor, each a node with real
libp2p hosts on loopback, all on the embedded EVM running GavelSettlementV2 and its OneStepVerifier.
The client's terms carry the job graph's elementSpecRoot (the default for a job with a step graph), and
its node stops once the job is open: nobody is left to referee. The auditor learns the reveals from the
chain, replays, opens the game and picks down to the cheated node; it asks the cheater for its output of
that node, names the first element where the two differ and duels it on the verifier; both nodes play
every move from the chain's state, and the auditor hands in the located step. The keepers settle the
duel, end the claims and settle the job. Money is read from the contract."""
from __future__ import annotations

import pytest
import trio

from contracts.settlement_v2 import JobOpened, JobStatus
from contracts.settlement_v2_games import ClaimStatus, GameOpened, StepGameSettled
from contracts.settlement_v2_referees import ClaimRuled, StepGameOpened
from contracts.step_verifier import StepVerifier
from node.roles.client import SubmitOptions
from protocol.step_game import CHALLENGER_WON, OUTCOME_CODES

from ..conftest import trio_test
from ..economics import advance, on_chain
from ..test_roles_support import write_job
from .test_claim_game_network import assert_the_cheater_paid, cheated_network, game_events, wait_on_chain

GAS_TARGET = 5_000_000  # docs/onchain-step.md: every transaction of the fourth level under 5M


def _duel_gas(s, verifier: str, since: int) -> dict[str, int]:
    """Gas of the duel's transactions since block `since`, by name: the settlement's openStepGame and
    settleStepGame, and every move sent to the verifier (a first reveal of a round logs nothing)."""
    tester, gas = s.chain.tester, {}
    for number in range(since, s.chain.block_number() + 1):
        for tx_hash in tester.get_block_by_number(number)["transactions"]:
            tx = tester.get_transaction_by_hash(tx_hash)
            to, data = (tx["to"] or "").lower(), tx["data"]
            data = bytes.fromhex(data[2:]) if isinstance(data, str) else bytes(data)
            if to == verifier.lower():
                name = "verifier"
            elif to == s.address.lower() and s.abi.decode_call(data)[0] in ("openStepGame", "settleStepGame"):
                name = s.abi.decode_call(data)[0]
            else:
                continue
            gas[f"{name} {tx_hash}"] = tester.get_transaction_receipt(tx_hash)["gas_used"]
    return gas


@pytest.mark.slow
@trio_test(timeout=400)
async def test_a_cheated_operator_is_slashed_by_the_contract_alone_while_the_client_is_offline(tmp_path):
    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        async with trio.open_nursery() as client_nursery:
            net = await cheated_network(nursery, tmp_path, client_nursery=client_nursery)
            s, accounts, since = net.settlement, net.accounts, net.since
            job_id = await net.client_role.submit(job_file, SubmitOptions(providers=2, accept_within=120))
            client_nursery.cancel_scope.cancel()  # the client goes offline: its seats are taken
        (opened_job,) = [e for e in game_events(s, JobOpened, since) if e.job_id == job_id]
        assert opened_job.terms.element_spec_root != bytes(32) and opened_job.terms.client_referees

        # the auditor opens the game on the cheater's root, picks down to the node and duels the cheater
        await wait_on_chain(lambda: any(True for _ in game_events(s, StepGameOpened, since)), timeout=240)
        (duel,) = game_events(s, StepGameOpened, since)
        assert (duel.challenger, duel.defender) == (accounts["auditor"], accounts["cheater"])
        (game,) = [e for e in game_events(s, GameOpened, since) if e.job_id == job_id]
        assert game.opener == accounts["auditor"]
        await wait_on_chain(lambda: any(True for _ in game_events(s, StepGameSettled, since)), timeout=180)
        (settled,) = game_events(s, StepGameSettled, since)
        assert settled.outcome == OUTCOME_CODES[CHALLENGER_WON]
        address = await on_chain(s.setting, "STEP_VERIFIER")
        view = await on_chain(StepVerifier(s.chain, address, s.account).game, duel.id)
        gas = list((await on_chain(_duel_gas, s, address, since)).values())
        assert view.outcome == CHALLENGER_WON and max(gas) < GAS_TARGET
        print(f"duel {duel.id}: {view.level} rounds, located step {view.position}, {len(gas)} transactions, "
              f"{sum(gas):,} gas, the largest {max(gas):,}")

        # the claims end once the duels' window closed, the steps' pick windows too; then the job settles
        node_claim, margin = await on_chain(s.claim, duel.claim_id), (await on_chain(s.chain_settings)).margin
        step_claim, game_claim = await on_chain(s.claim, node_claim.parent), await on_chain(s.claim, game.game_id)
        ends = max(node_claim.answer_by + 2 * margin, step_claim.pick_until, game_claim.pick_until)
        await advance(max(0, ends - await on_chain(s.chain.now)) + 1)
        await wait_on_chain(lambda: s.claim(game.game_id).status != ClaimStatus.OPEN, timeout=120)
        assert (await on_chain(s.claim, game.game_id)).status == ClaimStatus.UPHELD
        assert (await on_chain(s.claim, duel.claim_id)).status == ClaimStatus.UPHELD
        assert not game_events(s, ClaimRuled, since)  # no referee: the verifier ruled
        info = await on_chain(s.job, job_id)
        await advance(max(0, info.final_by - await on_chain(s.chain.now)) + 10)
        await wait_on_chain(lambda: s.job(job_id).status == JobStatus.FINALIZED, timeout=120)

        await assert_the_cheater_paid(net, job_id)
        nursery.cancel_scope.cancel()
