"""Benchmark of the settlement contract's client: median wall time per transaction and per read on
each back-end (the embedded EVM; anvil when installed), and the gas each operation uses.

    python scripts/bench_settlement.py [--rounds 10] [--no-anvil]

Each round plays one job's life: open, two seats, two commitments, a provider dispute ruled
and an auditor dispute lapsed, settlement, withdrawal, stake top-up, and one node's
register / unbond / exit. "gas used" is the median over rounds from the receipts; "gas
needed" is the largest eth_estimateGas answer seen (what a transaction needs up front, more
than it uses when storage refunds apply); "limit" is what the client sends.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections import defaultdict

import numpy as np
from eth_utils import keccak as keccak_

from contracts import (
    ETHER,
    GAS_LIMITS,
    AnvilProcess,
    DisputeOpened,
    EmbeddedChain,
    Outcome,
    Role,
    RpcChain,
    Settlement,
    find_anvil,
)
from contracts.chain import Chain
from contracts.settlement_v2 import GAS_LIMITS_V2, JobOpened, JobTerms, SettlementV2, commitment_of
from contracts.settlement_v2_demands import DataDemanded, WitnessDrawn
from contracts.settlement_v2_games import ClaimPicked, GameOpened
from contracts.settlement_v2_referees import RefereeDrawn
from protocol.economics import DRAW_DELAY
from protocol.listtree import ListTree

RULING_PERIOD = 30
DRAW_WINDOW = 255  # GavelRefereesV2.DRAW_WINDOW: blocks a draw's seed stays readable
UNBONDING_DELAY = 100


class Recorder:
    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.gas: dict[str, list[int]] = defaultdict(list)
        self.needed: dict[str, int] = defaultdict(int)

    def tx(self, name: str, call):
        start = time.perf_counter()
        result = call()
        self.seconds[name].append(time.perf_counter() - start)
        self.gas[name].append(result.gas_used)
        return result

    def read(self, name: str, call):
        start = time.perf_counter()
        value = call()
        self.seconds[name].append(time.perf_counter() - start)
        return value


def _estimating(chain: Chain, settlement: Settlement, recorder: Recorder):
    """Wraps chain.transact so that every transaction is estimated first (gas round only)."""
    names = {f.selector: f.name for f in settlement.abi.functions.values()}
    plain = chain.transact

    def transact(sender, to, data, *, value=0, gas):
        if to == settlement.address:
            name = names[data[:4]]
            recorder.needed[name] = max(recorder.needed[name], chain.estimate_gas(sender, to, data, value=value))
        return plain(sender, to, data, value=value, gas=gas)

    return transact


def play_round(s: Settlement, chain: Chain, accounts: list[str], i: int, rec: Recorder) -> None:
    client, p1, p2, auditor, leaver = accounts[1:6]
    job = hashlib.sha256(b"bench job %d" % i).digest()
    now = chain.now()
    rec.tx("openJob", lambda: s.connect(client).open_job(
        job, price=2 * ETHER + 1, providers_wanted=2, provider_stake=ETHER,
        accept_by=now + 100, commit_by=now + 200, challenge_by=now + 300, ruling_period=RULING_PERIOD))
    rec.tx("accept", lambda: s.connect(p1).accept(job))
    rec.tx("accept", lambda: s.connect(p2).accept(job))
    rec.tx("commit", lambda: s.connect(p1).commit(job, b"\x01" * 32))
    rec.tx("commit", lambda: s.connect(p2).commit(job, b"\x02" * 32))
    provider_dispute = rec.tx("openDispute", lambda: s.connect(p1).open_dispute(job, p2)).one(DisputeOpened)
    audit = rec.tx("openDispute", lambda: s.connect(auditor).open_dispute(job, p1)).one(DisputeOpened)
    rec.tx("rule", lambda: s.connect(client).rule(provider_dispute.dispute_id, Outcome.CHALLENGER_WINS,
                                                  step=3, node=42, transcript_hash=b"\x0a" * 32))
    rec.read("read getJob", lambda: s.job(job))
    rec.read("read getNode", lambda: s.node(p1))
    rec.read("read getDispute", lambda: s.dispute(audit.dispute_id))
    rec.read("read creditOf", lambda: s.credit_of(p1))
    chain.advance_time(RULING_PERIOD)
    rec.tx("lapse", lambda: s.lapse(audit.dispute_id))
    chain.advance_time(300)
    rec.tx("settle", lambda: s.settle(job))
    rec.tx("withdraw", lambda: s.connect(p1).withdraw())
    rec.tx("addStake", lambda: s.connect(p2).add_stake(ETHER))

    rec.tx("register", lambda: s.connect(leaver).register(b"\x05" * 32, Role.PROVIDER, stake=ETHER))
    rec.tx("beginUnbonding", lambda: s.connect(leaver).begin_unbonding())
    rec.tx("cancelUnbonding", lambda: s.connect(leaver).cancel_unbonding())
    rec.tx("beginUnbonding", lambda: s.connect(leaver).begin_unbonding())
    chain.advance_time(UNBONDING_DELAY)
    rec.tx("completeUnbonding", lambda: s.connect(leaver).complete_unbonding())
    rec.tx("withdraw", lambda: s.connect(leaver).withdraw())


def bench(chain: Chain, rounds: int) -> Recorder:
    accounts = chain.accounts
    s = Settlement.deploy(chain, unbonding_delay=UNBONDING_DELAY, min_stake=ETHER)
    for account, roles in ((accounts[2], Role.PROVIDER), (accounts[3], Role.PROVIDER), (accounts[4], Role.AUDITOR)):
        s.connect(account).register(account.encode()[:32].ljust(32, b"\0"), roles, stake=10 * ETHER)
    timing = Recorder()
    gas_round = Recorder()
    chain.transact = _estimating(chain, s, gas_round)  # type: ignore[method-assign]
    play_round(s, chain, accounts, -1, gas_round)
    del chain.transact
    for i in range(rounds):
        play_round(s, chain, accounts, i, timing)
    timing.needed = gas_round.needed
    return timing


def worst_settle(chain: Chain) -> tuple[int, int]:
    """Gas used and needed by settle with MAX_PROVIDERS seats, each paid into a fresh credit slot."""
    s = Settlement.deploy(chain, min_stake=ETHER)
    now = chain.now()
    job = b"\x77" * 32
    s.open_job(job, price=16 * ETHER, providers_wanted=16, provider_stake=ETHER,
               accept_by=now + 200, commit_by=now + 400, challenge_by=now + 600, ruling_period=10)
    seats = [chain.new_account(3 * ETHER) for _ in range(16)]
    for i, account in enumerate(seats):
        s.connect(account).register(bytes([i + 1]) * 32, Role.PROVIDER, stake=ETHER)
        s.connect(account).accept(job)
    for account in seats:
        s.connect(account).commit(job, b"\x01" * 32)
    chain.advance_time(600)
    needed = chain.estimate_gas(chain.accounts[0], s.address, s.abi.encode_call("settle", job))
    return s.settle(job).gas_used, needed


def _h(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def _v2_job(chain: Chain, gas: dict[str, int], interval_steps: int, graph_nodes: int, intervals: int = 10,
            witness_fee: int = 0, element_spec_root: bytes = bytes(32)):
    """A one-seat version 2 job, revealed (each move's gas in `gas`); the client, seat and auditor
    registered. Returns (settlement, job id, the states of every step, the trace's ListTree)."""
    accounts = chain.accounts
    client, seat, auditor = accounts[1], accounts[2], accounts[3]
    s = SettlementV2.deploy(chain, unbonding_delay=UNBONDING_DELAY, min_stake=ETHER)
    s.connect(client).register(_h("client"), Role.CLIENT, stake=10 * ETHER)
    s.connect(seat).register(_h("seat"), Role.PROVIDER, stake=10 * ETHER)
    s.connect(auditor).register(_h("auditor"), Role.AUDITOR, stake=10 * ETHER)

    def tx(name, result):
        gas[name] = result.gas_used
        return result

    spec = b"bench spec " * 36
    steps = interval_steps * intervals
    states = [_h(f"state {i}") for i in range(steps + 1)]
    trace = states[::interval_steps]
    terms = JobTerms(
        nonce=1, client_key=_h("client"), client_referees=True, spec_hash=keccak_(spec), initial_state=trace[0],
        steps=steps, checkpoint_every=interval_steps, graph_nodes=graph_nodes, step_millis=1_000, node_millis=100,
        state_bytes=10**6, evidence_bytes=10**5, providers_wanted=1, catch_bps=9_000, accept_window=100,
        price=ETHER, provider_stake=ETHER, gas_price_cap=10**9, referee_fee=10**15, witness_fee=witness_fee,
        element_spec_root=element_spec_root)
    jid = tx("openJob", s.connect(client).open_job(terms, spec)).one(JobOpened).job_id
    tx("accept", s.connect(seat).accept(jid))
    tree = ListTree(trace)
    tx("commit", s.connect(seat).commit(jid, commitment_of(jid, seat, tree.root, _h("salt"))))
    tx("reveal", s.connect(seat).reveal(jid, trace, _h("salt")))
    return s, jid, states, tree


def _v2_dispute(chain: Chain, gas: dict[str, int], interval_steps: int, graph_nodes: int, intervals: int = 10,
                picked_nodes: tuple[int, ...] = (0,), outputs: list[bytes] | None = None,
                element_spec_root: bytes = bytes(32)):
    """A one-seat version 2 job revealed and a dispute over its interval 0 played to the evidence of
    one node claim per `picked_nodes` (one pick a level); each move's gas in `gas`. The seat's node
    list of step 1 is `outputs` (made-up hashes by default) and the state after the step; with
    `element_spec_root` the pick is left to the fourth level (no evidence posted).
    Returns (settlement, job id, game, step claim, node claims)."""
    seat, auditor = chain.accounts[2], chain.accounts[3]

    def tx(name, result):
        gas[name] = result.gas_used
        return result

    s, jid, states, tree = _v2_job(chain, gas, interval_steps, graph_nodes, intervals,
                                   element_spec_root=element_spec_root)
    game = tx("openGame", s.connect(auditor).open_game(jid, tree.root, 0)).one(GameOpened).game_id
    interval = states[:interval_steps + 1]
    tx("postSteps", s.connect(seat).post_steps(game, interval, tree.proof(0).siblings, tree.proof(1).siblings))
    steps_tree = ListTree(interval)
    step = tx("pickStep", s.connect(auditor).pick_step(game, steps_tree.root, 1)).one(ClaimPicked).claim_id
    nodes = (outputs or [_h(f"node {n}") for n in range(graph_nodes)]) + [states[1]]
    tx("postNodes", s.connect(seat).post_nodes(step, nodes, steps_tree.proof(1).siblings))
    claims = []
    for n in picked_nodes:
        claims.append(tx("pickNode", s.connect(auditor).pick_node(step, ListTree(nodes).root, n))
                      .one(ClaimPicked).claim_id)
        if element_spec_root == bytes(32):
            tx("postEvidence", s.connect(seat).post_evidence(claims[-1], _h(f"evidence {n}")))
    return s, jid, game, step, claims


def bench_v2(chain: Chain, interval_steps: int, graph_nodes: int, intervals: int = 10) -> dict[str, int]:
    """Gas used by version 2: a one-seat job revealed, then a dispute over its interval 0 played to a
    ruling (one pick a level) and resolved; the job settled and both credits withdrawn."""
    gas: dict[str, int] = {}
    s, jid, game, step, (node,) = _v2_dispute(chain, gas, interval_steps, graph_nodes, intervals)
    client = chain.accounts[1]
    gas["rule"] = s.connect(client).rule(node, False, _h("transcript")).gas_used
    for name, claim in (("timeout node", node), ("timeout step", step), ("resolveGame", game)):
        info = s.claim(claim)
        chain.mine(max(info.answer_by, info.pick_until, info.rule_by, chain.now() + 1))
        gas[name] = (s.timeout(claim) if name != "resolveGame" else s.resolve_game(claim)).gas_used
    chain.mine(max(s.deadlines(jid).challenge_end, chain.now() + 1))
    gas["settle"] = s.settle(jid).gas_used
    gas["withdraw"] = s.connect(client).withdraw().gas_used
    gas["dispute to a ruling"] = sum(gas[n] for n in ("openGame", "postSteps", "pickStep", "postNodes", "pickNode",
                                                     "postEvidence", "rule"))
    gas["dispute resolved"] = gas["dispute to a ruling"] + sum(
        gas[n] for n in ("timeout node", "timeout step", "resolveGame"))
    return gas


def bench_v2_referees(chain: Chain, referees: int = 5) -> dict[str, int]:
    """Gas of section 9 on the mlp shape: two node claims ruled by the client; the seat appeals the
    first (the draw armed, then made; the drawn referee stalls and is timed out; a second draw rules
    and overturns), the auditor the second (a drawn referee upholds)."""
    gas: dict[str, int] = {}
    accounts = chain.accounts
    client, seat, auditor = accounts[1], accounts[2], accounts[3]
    s, _, _, _, (first, second) = _v2_dispute(chain, {}, 20, 53, picked_nodes=(0, 1))
    for i, account in enumerate(accounts[4:4 + referees]):
        gas["register (referee)"] = s.connect(account).register(_h(f"referee {i}"), Role.REFEREE,
                                                                stake=10 * ETHER).gas_used
    s.connect(client).rule(first, False, _h("transcript"))
    s.connect(client).rule(second, True, _h("transcript"))

    def draw(claim: bytes) -> str:
        """The draw armed by the appeal or a timeout: from its seed block on."""
        for _ in range(DRAW_DELAY):
            chain.mine()
        drawn = s.draw_referee(claim)
        gas["drawReferee (draw)"] = drawn.gas_used
        return drawn.one(RefereeDrawn).referee

    gas["appeal"] = s.connect(seat).appeal(first).gas_used
    s.connect(auditor).appeal(second)
    stalling = draw(first)
    chain.mine(max(s.ruling(first).appeal_rule_by, chain.now() + 1))
    gas["timeoutReferee"] = s.timeout_referee(first).gas_used
    referee = draw(first)
    assert referee != stalling
    gas["ruleAppeal (overturned)"] = s.connect(referee).rule_appeal(first, True, _h("appeal")).gas_used
    for _ in range(DRAW_WINDOW + 1):  # the seed block's hash goes out of reach: the next call re-arms
        chain.mine()
    gas["drawReferee (arm)"] = s.draw_referee(second).gas_used
    referee = draw(second)
    gas["ruleAppeal (upheld)"] = s.connect(referee).rule_appeal(second, True, _h("appeal")).gas_used
    return gas


def bench_v2_step_game(chain: Chain, job: str, op: str) -> tuple[dict[str, int], str]:
    """Gas of the fourth level through the settlement (docs/onchain-step.md) on `job`'s graph (its
    element spec root in the terms): a one-seat job whose seat claims a wrong output element of the
    first `op` node at step 1 (its trace wrong from a random step on); the auditor's dispute down to
    that node, a duel opened on it, played on OneStepVerifier, settled, and the claims resolved."""
    from contracts.settlement_v2_games import StepGameSettled
    from contracts.settlement_v2_referees import StepGameOpened
    from contracts.step_verifier import StepVerifier, play
    from node.cli.train import load_training
    from node.training_oracle import TrainingOracle
    from protocol.element_specs import duel_proofs, duel_setup, element_spec_leaves, node_element_spec
    from protocol.step_game import CHALLENGER_WON, StepPlayer, cheat_values, claimed_output
    from protocol.step_programs import trace_element
    from repops_cupy.hashing import canonical_array, hash_tensor

    training = load_training(job, 1)
    oracle = TrainingOracle(training)
    values = [canonical_array(v) for v in oracle.step_values(1, oracle.state_before(1))]
    graph = training.graph
    n = next(node.id for node in graph.nodes if node.op == op)
    inputs = [values[j] for j in graph.nodes[n].inputs]
    element = values[n].size // 2
    honest = trace_element(op, dict(graph.nodes[n].attrs), inputs, element)
    wrong = cheat_values(honest.spec, element, inputs, honest.values, np.random.default_rng(0), "step")
    claimed = claimed_output(values[n], element, wrong[-1])
    outputs = [hash_tensor(v) for v in values]
    outputs[n] = hash_tensor(claimed)
    leaves = element_spec_leaves(graph)
    gas: dict[str, int] = {}
    s, jid, game, step, (node,) = _v2_dispute(
        chain, gas, training.spec.checkpoint_interval, len(graph.nodes), picked_nodes=(n,), outputs=outputs,
        element_spec_root=ListTree(leaves).root)
    seat, auditor = chain.accounts[2], chain.accounts[3]
    spec = node_element_spec(graph, n)
    node_list = outputs + [_h("state 1")]  # the state after step 1, as _v2_job made it
    setup = duel_setup(spec, element, node_list, hash_tensor(values[n]))
    opened = s.connect(auditor).open_step_game(node, setup, duel_proofs(spec, node_list, leaves), seat)
    gas["openStepGame"] = opened.gas_used
    duel = opened.one(StepGameOpened)
    players = (StepPlayer(setup, 0, honest.values, values[n], inputs), StepPlayer(setup, 1, wrong, claimed, inputs))
    verifier = StepVerifier(chain, s.setting("STEP_VERIFIER"), auditor)
    played = play(verifier, setup, players, (auditor, seat), clock=duel.clock, ruler=0, game_id=duel.id)
    assert played.outcome == CHALLENGER_WON, played.outcome
    for kind in ("commit", "reveal", "rule"):
        moves = [t.gas for t in played.transactions if t.name == kind]
        gas[f"verifier {kind} (largest)"] = max(moves, default=0)
    gas["verifier game"] = played.total_gas
    settled = s.settle_step_game(duel.id)
    assert settled.one(StepGameSettled).outcome == 1
    gas["settleStepGame"] = settled.gas_used
    for name, claim in (("timeout node", node), ("timeout step", step), ("resolveGame", game)):
        info = s.claim(claim)
        chain.mine(max(info.answer_by + 2 * s.setting("MARGIN"), info.pick_until, chain.now() + 1))
        gas[name] = (s.timeout(claim) if name != "resolveGame" else s.resolve_game(claim)).gas_used
    path = ("openGame", "postSteps", "pickStep", "postNodes", "pickNode", "openStepGame")
    gas["dispute to an on-chain ruling"] = sum(gas[n] for n in path) + gas["verifier game"]
    gas["dispute settled"] = gas["dispute to an on-chain ruling"] + gas["settleStepGame"] + sum(
        gas[n] for n in ("timeout node", "timeout step", "resolveGame"))
    return gas, f"{op}, {spec.spec.length} steps: {played.rounds} rounds, {len(played.transactions)} verifier transactions"


def bench_v2_demands(chain: Chain, witnesses: int = 5) -> dict[str, int]:
    """Gas of section 7 on a one-seat job: a demand released; a demand whose first witness refuses and
    second finds it served (one refuser charged); a demand whose witnesses time out and refuse to
    MAX_DRAWS, then failed (two refusers paid from the seat's lock)."""
    gas: dict[str, int] = {}
    seat, auditor = chain.accounts[2], chain.accounts[3]
    s, jid, _, _ = _v2_job(chain, {}, 20, 53, witness_fee=10**15)
    for i, account in enumerate(chain.accounts[4:4 + witnesses]):
        s.connect(account).register(_h(f"witness {i}"), Role.REFEREE, stake=10 * ETHER)
    by_auditor = s.connect(auditor)

    def demand(item: int) -> bytes:
        result = by_auditor.demand_data(jid, seat, item)
        gas["demandData"] = result.gas_used
        return result.one(DataDemanded).demand_id

    def witness(d: bytes, name: str = "drawWitness") -> str:
        armed = s.demand(d).armed_block
        while chain.block_number() < armed + DRAW_DELAY:
            chain.mine()
        result = s.connect(seat).draw_witness(d)
        gas[name] = result.gas_used
        return result.one(WitnessDrawn).witness

    def call(d: bytes) -> None:
        chain.mine(max(s.demand(d).deadline - 1, chain.now() + 1))
        gas["callWitness"] = s.connect(seat).call_witness(d).gas_used

    gas["releaseDemand"] = by_auditor.release_demand(demand(0)).gas_used
    served = demand(1)
    call(served)
    gas["attestServed (refused)"] = s.connect(witness(served)).attest_served(served, False).gas_used
    gas["attestServed (served, 1 refuser)"] = s.connect(witness(served, "drawWitness (redraw)")).attest_served(
        served, True).gas_used
    failed = demand(2)
    call(failed)
    witness(failed)
    chain.mine(max(s.demand(failed).deadline, chain.now() + 1))
    gas["timeoutWitness"] = s.timeout_witness(failed).gas_used
    for _ in range(2):
        s.connect(witness(failed)).attest_served(failed, False)
    gas["failDemand (2 refusers)"] = s.fail_demand(failed).gas_used
    gas["the seat's calls (callWitness + drawWitness)"] = gas["callWitness"] + gas["drawWitness"]
    return gas


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--no-anvil", action="store_true")
    args = parser.parse_args()

    results: dict[str, Recorder] = {}
    embedded = EmbeddedChain()
    results["embedded"] = bench(embedded, args.rounds)
    worst = worst_settle(EmbeddedChain())
    anvil_note = ""
    if not args.no_anvil and find_anvil():
        with AnvilProcess() as anvil:
            results["anvil"] = bench(RpcChain(anvil.url), args.rounds)
    elif not args.no_anvil:
        anvil_note = "  (anvil not installed: `npm install` at the repository root)"

    backends = list(results)
    first = results[backends[0]]
    tx_names = [n for n in first.gas]
    read_names = [n for n in first.seconds if n.startswith("read ")]
    header = f"{'operation':<20}{'gas used':>11}{'gas needed':>12}{'limit':>11}" + "".join(
        f"{b + ' ms':>13}" for b in backends)
    print(f"settlement bench: {args.rounds} rounds per back-end, median wall time per call{anvil_note}")
    print(header)
    print("-" * len(header))
    for name in tx_names:
        gas = int(statistics.median(first.gas[name]))
        row = f"{name:<20}{gas:>11,}{first.needed.get(name, 0):>12,}{GAS_LIMITS[name]:>11,}"
        row += "".join(f"{statistics.median(results[b].seconds[name]) * 1e3:>13.2f}" for b in backends)
        print(row)
    for name in read_names:
        row = f"{name:<20}{'':>11}{'':>12}{'':>11}"
        row += "".join(f"{statistics.median(results[b].seconds[name]) * 1e3:>13.2f}" for b in backends)
        print(row)
    all_tx = {b: statistics.median([t for n in tx_names for t in results[b].seconds[n]]) for b in backends}
    all_read = {b: statistics.median([t for n in read_names for t in results[b].seconds[n]]) for b in backends}
    print(f"{'any transaction':<54}" + "".join(f"{all_tx[b] * 1e3:>13.2f}" for b in backends))
    print(f"{'any read':<54}" + "".join(f"{all_read[b] * 1e3:>13.2f}" for b in backends))
    print(f"settle, 16 seats all paid (worst case): gas used {worst[0]:,}, needed {worst[1]:,}, "
          f"limit {GAS_LIMITS['settle']:,}")

    shapes = {"mlp (k=20, N=53)": (20, 53), "tiny-gpt (k=25, N=471)": (25, 471)}
    v2 = {label: bench_v2(EmbeddedChain(), *shape) for label, shape in shapes.items()}
    print("\nversion 2, gas used on the embedded EVM (one seat; a dispute over one interval, one pick a level)")
    print(f"{'operation':<22}" + "".join(f"{label:>26}" for label in v2) + f"{'limit':>11}")
    for name in v2[next(iter(v2))]:
        limit = GAS_LIMITS_V2.get(name.split()[0], 0)
        print(f"{name:<22}" + "".join(f"{g[name]:>26,}" for g in v2.values()) + (f"{limit:>11,}" if limit else ""))
    sections = [("section 9 (mlp shape, five referees registered)", bench_v2_referees(EmbeddedChain())),
                ("section 7 (one seat, five witnesses registered)", bench_v2_demands(EmbeddedChain()))]
    for op in ("relu", "matmul"):
        gas, played = bench_v2_step_game(EmbeddedChain(), "scripts/jobs/mlp.toml", op)
        sections.append((f"the fourth level through the settlement (mlp job; {played})", gas))
    for title, gas in sections:
        print(f"\nversion 2, {title}: gas used, limit")
        for name, used in gas.items():
            limit = GAS_LIMITS_V2.get(name.split()[0], 0)
            print(f"{name:<46}{used:>11,}" + (f"{limit:>11,}" if limit else ""))

    # a one-seat job that nobody disputes, from open to the seat's pay withdrawn
    v1_path = sum(int(statistics.median(first.gas[n])) for n in ("openJob", "accept", "commit", "settle", "withdraw"))
    mlp = v2[next(iter(v2))]
    v2_path = sum(mlp[n] for n in ("openJob", "accept", "commit", "reveal", "settle", "withdraw"))
    print(f"\nhappy-path job, one seat (open, accept, commit, reveal in version 2, settle, withdraw): "
          f"version 1 {v1_path:,} gas, version 2 {v2_path:,} gas ({v2_path / v1_path:.2f}x)")


if __name__ == "__main__":
    main()
