"""The numbers of docs/economics.md: allowances, deadlines, bonds and the stake, as the contract computes them.

Everything here is integer arithmetic on the values the settlement contract (version 2)
holds: money in wei, time in whole on-chain seconds, rates in basis points (10⁴). Each
formula is written the way Solidity will compute it, so the contract's views
(`allowancesOf`, `bondsOf`, `minStake`, `deadlinesOf`) and these functions agree to the
wei and the second; a contract test compares them.

Rounding, and why (each is chosen so the rounding never favours the party it could harm):

- allowances round **up** to a whole second (``ceil(s·T·σ / 1000)``): a deadline is never
  shorter than the work it allows for. Each millisecond product is rounded once, before
  the Δ terms are added; sums of allowances add the rounded parts.
- bonds round **up** (``ceil(k·p / T)`` for k·v, ``ceil(w·S·n / 10⁴)`` in the referee
  bond): a bond pre-pays work or covers a loss, so it is never a wei short.
- one seat's pay p = ``floor(P / n)``: the escrow pays at most P; the remainder goes
  back to the client with its refund.
- payouts from a forfeited lock round **down** (``floor(w·S / 10⁴)``, each third of it):
  a lock never pays out more than it holds; the remainder is burned.
- the least stake is the smallest integer **strictly above** S_min of section 11
  (``floor(num / den) + 1``), so the contract's ``providerStake >= minStake`` is exactly
  the note's ``S > S_min``; at p* = 1 it is 1 wei ("any S > 0").

Choices where the note leaves a detail open:

- E_draw = DRAW_DELAY blocks at the chain's ``block_seconds`` (an immutable) + Δ.
- T_game's queue term is C·⌈s·k·σ⌉ + 2Δ, not W_replay: `busyUntil` adds each queued interval's
  rounded recompute, and C·k ≥ T (the last interval may be shorter than k, and k may exceed T).
- T_game counts one E_rule more when the client referees: its own allowance comes before the
  MAX_DRAWS drawn first-level referees and is not one of them.
- With the fourth level offered (an elementSpecRoot), T_game's ruling part is the longer of the
  referees' and a duel's: duels open until 2Δ after evidenceBy, and each ends 2·clock + 2Δ after it
  opened, a clock being E_rule + Δ for the commit and each of up to MAX_STEP_DEPTH reveals.
- G_postSteps(k) and G_postNodes(N) are linear in the entries posted: base + per entry;
  `ESTIMATED_GAS` holds section 13's estimates until the bench measures the contract.
- G_path (the winning path's transactions) = openGame + pickStep + pickNode + resolveGame.
- every allowance must fit a uint32 (the contract packs eight of them in one slot).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from fractions import Fraction

from .errors import LocalProtocolError
from .sampling import min_samples

BPS = 10_000
HARDWARE_SLACK = 2           # s: a seat gets twice the declared cost of the work it must redo
MILLIS = 1_000
MAX_INTERVAL_STEPS = 1024    # k
MAX_LIST = 1024              # entries of one LibList list: C + 1 and N + 1
MAX_DRAWS = 3                # referees or witnesses drawn for one item before it voids
MAX_JOINERS = 8              # joiners of a claim whose join gas is reimbursed
MAX_REIMBURSED_DEMANDS = 8   # demands a seat served only through a witness that its forfeited lock pays back
DRAW_DELAY = 2               # blocks between recording a draw and making it
MAX_STEP_DEPTH = 40          # levels of the fourth level's deepest trace tree (OneStepVerifier: 2^40 steps)
U16, U32, U64, U128 = (1 << 16) - 1, (1 << 32) - 1, (1 << 64) - 1, (1 << 128) - 1


def ceil_div(a: int, b: int) -> int:
    """⌈a / b⌉ for a ≥ 0, b > 0, as Solidity's ``(a + b - 1) / b`` (OpenZeppelin's Math.ceilDiv)."""
    return -(-a // b)


def _check_uint(name: str, value: object, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise LocalProtocolError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")


def _check_fields(owner: object, bounds: dict[str, tuple[int, int]]) -> None:
    for f in dataclasses.fields(owner):  # type: ignore[arg-type]
        if f.name in bounds:
            _check_uint(f"{type(owner).__name__}.{f.name}", getattr(owner, f.name), *bounds[f.name])


@dataclass(frozen=True)
class ChainSettings:
    """The contract's immutables that the formulas read.

    margin: Δ, the liveness margin in seconds (a transaction sent is mined within it).
    bandwidth: β, the least peer-to-peer bandwidth assumed, in bytes per second.
    block_seconds: the longest time between blocks (for DRAW_DELAY blocks).
    max_interval_seconds: the most one interval's recompute, s·k·σ, may take.
    winner_share_bps: w in basis points (5000 today).
    """

    margin: int
    bandwidth: int
    block_seconds: int
    max_interval_seconds: int
    winner_share_bps: int

    def __post_init__(self) -> None:
        _check_fields(self, {"margin": (1, U32), "bandwidth": (1, U64), "block_seconds": (1, U32),
                             "max_interval_seconds": (1, U32), "winner_share_bps": (0, BPS - 1)})


@dataclass(frozen=True)
class GasFigures:
    """Gas of the transactions bonds pre-pay (section 8.5), at most what each uses."""

    list_base_steps: int      # postSteps without its entries
    list_base_nodes: int      # postNodes without its entries
    list_entry: int           # one posted hash: 32 calldata bytes, one keccak leaf, 32 bytes of the event's data
    post_evidence: int
    open_game: int
    pick_step: int
    pick_node: int
    resolve: int
    join: int
    call_witness: int
    attest: int
    appeal: int
    draw: int
    rule_appeal: int
    duel_base: int            # one side's duel moves but its reveals: commit, ruling, settleStepGame
    duel_level: int           # a duel's reveal, one per level of its trace tree

    def __post_init__(self) -> None:
        _check_fields(self, {f.name: (1, U32) for f in dataclasses.fields(self)})

    def duel(self, depth: int) -> int:
        """G_duel(depth): one side's gas in a duel whose trace tree has `depth` levels."""
        return self.duel_base + depth * self.duel_level

    def post_steps(self, interval_steps: int) -> int:
        """G_postSteps(k): the interval's k + 1 state hashes."""
        return self.list_base_steps + (interval_steps + 1) * self.list_entry

    def post_nodes(self, graph_nodes: int) -> int:
        """G_postNodes(N): N node-output hashes and the state after the step."""
        return self.list_base_nodes + (graph_nodes + 1) * self.list_entry

    @property
    def path(self) -> int:
        """G_path: the challengers' transactions on a winning path, and its resolution."""
        return self.open_game + self.pick_step + self.pick_node + self.resolve


# Section 13's figures: the game's moves as scripts/bench_settlement.py measured them on the embedded
# EVM, rounded up (a list ~104k + ~1,170 an entry; resolve = the node and step timeouts and resolveGame);
# a join of a game measured 143k; appeal 105k, a drawReferee that draws 141k (five referees registered,
# the first probe eligible), ruleAppeal 160k (overturning); callWitness + drawWitness 179k; a served
# attestServed with MAX_DRAWS − 1 refusers to charge, the job's first demand recorded for reimbursement,
# 262k. SettlementStorageV2 holds the same constants.
ESTIMATED_GAS = GasFigures(
    list_base_steps=110_000, list_base_nodes=110_000, list_entry=1_500, post_evidence=80_000, open_game=250_000,
    pick_step=240_000, pick_node=210_000, resolve=350_000, join=150_000, call_witness=200_000, attest=280_000,
    appeal=110_000, draw=150_000, rule_appeal=170_000, duel_base=2_300_000, duel_level=120_000)


@dataclass(frozen=True)
class EconomicTerms:
    """The fields of the on-chain `JobTerms` struct (section 4) that the formulas read.

    Times are milliseconds as declared by the client (σ = step_millis on the reference
    device, ρ = node_millis on one CPU core); sizes are bytes; money is wei.
    """

    steps: int                # T
    checkpoint_every: int     # k
    graph_nodes: int          # N
    step_millis: int          # σ
    node_millis: int          # ρ
    state_bytes: int          # X
    evidence_bytes: int       # Y
    providers_wanted: int     # n
    catch_bps: int            # p*
    accept_window: int        # seconds an offer stays open
    price: int                # P
    provider_stake: int       # S
    gas_price_cap: int        # γ
    referee_fee: int          # f_R
    witness_fee: int          # f_W
    client_referees: bool = True
    on_chain_step: bool = False  # the terms carry an elementSpecRoot: node claims may go to OneStepVerifier

    def __post_init__(self) -> None:
        _check_fields(self, {
            "steps": (1, U64), "checkpoint_every": (1, MAX_INTERVAL_STEPS), "graph_nodes": (1, MAX_LIST - 1),
            "step_millis": (1, U32), "node_millis": (1, U32), "state_bytes": (1, U64), "evidence_bytes": (1, U64),
            "providers_wanted": (1, U16), "catch_bps": (1, BPS), "accept_window": (1, U32), "price": (0, U128),
            "provider_stake": (0, U128), "gas_price_cap": (0, U64), "referee_fee": (0, U128),
            "witness_fee": (0, U128)})
        for flag in ("client_referees", "on_chain_step"):
            if type(getattr(self, flag)) is not bool:
                raise LocalProtocolError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if self.intervals + 1 > MAX_LIST:
            raise LocalProtocolError(f"{self.intervals} intervals need a trace of {self.intervals + 1} entries, "
                                     f"above {MAX_LIST}: use a larger checkpoint interval or split the job")

    @property
    def intervals(self) -> int:
        """C = ⌈T / k⌉."""
        return ceil_div(self.steps, self.checkpoint_every)

    @property
    def seat_pay(self) -> int:
        """p = ⌊P / n⌋."""
        return self.price // self.providers_wanted


@dataclass(frozen=True)
class Allowances:
    """Seconds each kind of turn is allowed (section 3), and the longest a demand and a game last."""

    train: int        # W_train = s·T·σ + Δ
    reveal: int       # W_reveal = Δ
    replay: int       # W_replay = s·T·σ + 2Δ
    list: int         # E_list = 2Δ
    interval: int     # E_interval = s·k·σ + 2Δ
    xfer_state: int   # E_xfer(X) = X/β + 2Δ
    xfer_evidence: int  # E_xfer(Y)
    rule: int         # E_rule = s·ρ + E_xfer(Y)
    draw: int         # E_draw = DRAW_DELAY blocks + Δ
    demand: int       # T_demand (section 7)
    game: int         # T_game (section 8.4), with the recompute queue C·⌈s·k·σ⌉ + 2Δ, the client's E_rule, the duels

    def __post_init__(self) -> None:
        _check_fields(self, {f.name: (1, U32) for f in dataclasses.fields(self)})


def _work_seconds(count: int, millis: int) -> int:
    """s·count·millis in whole seconds, rounded up."""
    return ceil_div(HARDWARE_SLACK * count * millis, MILLIS)


def transfer_allowance(size: int, settings: ChainSettings) -> int:
    """E_xfer(x) = ⌈x / β⌉ + 2Δ: moving x bytes peer to peer and confirming it on chain."""
    return ceil_div(size, settings.bandwidth) + 2 * settings.margin


def step_clock(rule: int, depth: int, margin: int) -> int:
    """Each side's clock in a duel of the fourth level: E_rule to trace the element, Δ for its commit
    and each of its `depth` reveals (GavelRefereesV2's openStepGame)."""
    return rule + (depth + 1) * margin


def step_game_allowance(rule: int, margin: int) -> int:
    """The longest a node claim's duels last after its evidenceBy: opened until 2Δ after it, each
    ending 2·clock + 2Δ after its opening at the deepest trace tree."""
    return 2 * margin + 2 * step_clock(rule, MAX_STEP_DEPTH, margin) + 2 * margin


def allowances(terms: EconomicTerms, settings: ChainSettings) -> Allowances:
    """`allowancesOf(terms)`; refuses terms whose interval recompute exceeds the chain's bound."""
    delta = settings.margin
    interval_work = _work_seconds(terms.checkpoint_every, terms.step_millis)
    if interval_work > settings.max_interval_seconds:
        raise LocalProtocolError(f"one interval takes s·k·σ = {interval_work} s, above the chain's bound of "
                                 f"{settings.max_interval_seconds} s: use a smaller checkpoint interval")
    job_work = _work_seconds(terms.steps, terms.step_millis)
    xfer_state = transfer_allowance(terms.state_bytes, settings)
    xfer_evidence = transfer_allowance(terms.evidence_bytes, settings)
    rule = _work_seconds(1, terms.node_millis) + xfer_evidence
    draw = DRAW_DELAY * settings.block_seconds + delta
    replay = job_work + 2 * delta
    interval = interval_work + 2 * delta
    list_turn = 2 * delta
    demand = xfer_state + delta + MAX_DRAWS * (draw + 2 * xfer_state)
    queue = terms.intervals * interval_work + 2 * delta
    ruling = 2 * MAX_DRAWS * (draw + rule) + rule + (rule if terms.client_referees else 0)
    if terms.on_chain_step:
        ruling = max(ruling, step_game_allowance(rule, delta))
    game = list_turn + 2 * interval + queue + xfer_evidence + ruling
    values = dict(train=job_work + delta, reveal=delta, replay=replay, list=list_turn, interval=interval,
                  xfer_state=xfer_state, xfer_evidence=xfer_evidence, rule=rule, draw=draw, demand=demand, game=game)
    too_long = [name for name, value in values.items() if value > U32]
    if too_long:
        raise LocalProtocolError(f"allowances {too_long} exceed a uint32 of seconds: the job is too long")
    return Allowances(**values)


@dataclass(frozen=True)
class JobDeadlines:
    """A job's absolute deadlines known at open (section 5): seconds of chain time."""

    accept_by: int
    final_by: int


def job_deadlines(opened_at: int, terms: EconomicTerms, allowed: Allowances) -> JobDeadlines:
    """acceptBy = open + acceptWindow;
    finalBy = acceptBy + W_train + W_reveal + W_replay + T_demand + E_interval + T_game."""
    _check_uint("opened_at", opened_at, 0, U64)
    accept_by = opened_at + terms.accept_window
    return JobDeadlines(accept_by, final_by(accept_by, allowed))


def final_by(accept_by: int, allowed: Allowances) -> int:
    """The time by which every coin of the job is back, whatever anyone does.

    A demand's end reopens its seat to games for E_interval (section 7), so a game may open as late
    as the last demand's end + E_interval: that interval is in the bound.
    """
    return (accept_by + allowed.train + allowed.reveal + allowed.replay + allowed.demand + allowed.interval
            + allowed.game)


def commit_by(filled_at: int, allowed: Allowances) -> int:
    """The last seat taken at `filled_at`: every seat commits before this."""
    return filled_at + allowed.train


def reveal_by(reveal_from: int, allowed: Allowances) -> int:
    """`reveal_from` is when the last seat committed, or commitBy if one never did."""
    return reveal_from + allowed.reveal


def challenge_by(revealed_at: int, allowed: Allowances) -> int:
    """Games on a seat's root open before this: a whole replay from that seat's own reveal."""
    return revealed_at + allowed.replay


def step_pick_deadline(now: int, busy_until: int, allowed: Allowances, settings: ChainSettings) -> tuple[int, int]:
    """The first step pick of a game: (nodesBy, the root's new busyUntil), section 8.4's recompute queue.

    nodesBy = max(now, busyUntil) + s·k·σ + 2Δ; busyUntil moves to nodesBy − 2Δ, so
    games on distinct intervals of one root recompute one after another.
    """
    nodes_by = max(now, busy_until) + allowed.interval
    return nodes_by, nodes_by - 2 * settings.margin


def later_step_pick_deadline(now: int, first_nodes_by: int, settings: ChainSettings) -> int:
    """A later step pick in the same game: the interval is recomputed once and kept."""
    return max(first_nodes_by, now + 2 * settings.margin)


@dataclass(frozen=True)
class Bonds:
    """Wei each move locks (sections 7, 8.5, 9)."""

    open_game: int    # B_open = n·γ·G_postSteps(k) + γ·G_resolve
    pick_step: int    # B_step = n·(γ·G_postNodes(N) + ⌈k·p / T⌉)
    pick_node: int    # B_node = f_R + n·γ·G_postEvidence
    referee: int      # P + ⌈w·S·n⌉
    demand: int       # D = f_W + γ·(G_callWitness + G_attest)
    appeal: int       # A = f_R + γ·(G_appeal + G_draw + G_ruleAppeal)


def interval_value(terms: EconomicTerms) -> int:
    """k·v = ⌈k·p / T⌉: what one seat's recompute of one interval is worth (one division)."""
    return ceil_div(terms.checkpoint_every * terms.seat_pay, terms.steps)


def referee_bond(terms: EconomicTerms, settings: ChainSettings) -> int:
    """P + w·S·n: more than a client gains from one false ruling against every seat."""
    return terms.price + ceil_div(settings.winner_share_bps * terms.provider_stake * terms.providers_wanted, BPS)


def bonds(terms: EconomicTerms, settings: ChainSettings, gas: GasFigures = ESTIMATED_GAS) -> Bonds:
    n, gamma = terms.providers_wanted, terms.gas_price_cap
    return Bonds(
        open_game=n * gamma * gas.post_steps(terms.checkpoint_every) + gamma * gas.resolve,
        pick_step=n * (gamma * gas.post_nodes(terms.graph_nodes) + interval_value(terms)),
        pick_node=terms.referee_fee + n * gamma * gas.post_evidence,
        referee=referee_bond(terms, settings),
        demand=terms.witness_fee + gamma * (gas.call_witness + gas.attest),
        appeal=terms.referee_fee + gamma * (gas.appeal + gas.draw + gas.rule_appeal),
    )


def min_stake(seat_pay: int, catch_bps: int, winner_share_bps: int) -> int:
    """The least S (wei) with S > S_min = p·(1 − p*) / (p*·(1 − w)), p* and w in basis points.

    In integers: S_min = p·(10⁴ − p*)·10⁴ / (p*·(10⁴ − w)); the result is ⌊that⌋ + 1, the
    smallest integer strictly above it.
    """
    _check_uint("seat_pay", seat_pay, 0, U128)
    _check_uint("catch_bps", catch_bps, 1, BPS)
    _check_uint("winner_share_bps", winner_share_bps, 0, BPS - 1)
    return seat_pay * (BPS - catch_bps) * BPS // (catch_bps * (BPS - winner_share_bps)) + 1


def job_min_stake(terms: EconomicTerms, settings: ChainSettings) -> int:
    """`minStake(terms)`."""
    return min_stake(terms.seat_pay, terms.catch_bps, settings.winner_share_bps)


def catch_target(terms: EconomicTerms) -> Fraction:
    """p* as an exact fraction."""
    return Fraction(terms.catch_bps, BPS)


def client_samples(terms: EconomicTerms) -> int:
    """m = min_samples(C, 1, p*): how many intervals of every seat the client replays itself."""
    return min_samples(terms.intervals, 1, catch_target(terms))


def finder_reward(stake: int, settings: ChainSettings) -> int:
    """w·S, rounded down: what the finders of one forfeited seat share."""
    return stake * settings.winner_share_bps // BPS


def finder_shares(stake: int, settings: ChainSettings) -> tuple[int, int, int]:
    """w·S split in three between the authors of the interval, step and node claims (each rounded down)."""
    third = finder_reward(stake, settings) // 3
    return third, third, third


def duel_bond(terms: EconomicTerms, settings: ChainSettings, depth: int, gas: GasFigures = ESTIMATED_GAS) -> int:
    """B_node + γ·G_duel(depth): what a challenger locks to open a duel (the defender's moves pre-paid)."""
    return bonds(terms, settings, gas).pick_node + terms.gas_price_cap * gas.duel(depth)


def stake_covers_reimbursements(terms: EconomicTerms, settings: ChainSettings, gas: GasFigures = ESTIMATED_GAS) -> bool:
    """S·(1 − w) ≥ γ·(G_path + MAX_JOINERS·G_join + G_duel(MAX_STEP_DEPTH)) + f_R + MAX_REIMBURSED_DEMANDS·D
    (sections 7, 8.5; the duel's part only on terms with the fourth level), in integers: scaled by 10⁴. A
    forfeited lock pays these back before the finders' w·S, which stays whole."""
    demand = terms.witness_fee + terms.gas_price_cap * (gas.call_witness + gas.attest)
    duel = gas.duel(MAX_STEP_DEPTH) if terms.on_chain_step else 0
    owed = (terms.gas_price_cap * (gas.path + MAX_JOINERS * gas.join + duel) + terms.referee_fee
            + MAX_REIMBURSED_DEMANDS * demand)
    return terms.provider_stake * (BPS - settings.winner_share_bps) >= owed * BPS


def accepts_step_cost(measured_step_millis: int, terms: EconomicTerms) -> bool:
    """A provider takes the job only if its measured step time is at most σ·s·0.8 (section 4)."""
    _check_uint("measured_step_millis", measured_step_millis, 0, U64)
    return 10 * measured_step_millis <= 8 * HARDWARE_SLACK * terms.step_millis


def check_open(terms: EconomicTerms, settings: ChainSettings, gas: GasFigures = ESTIMATED_GAS) -> Allowances:
    """What `openJob` refuses, in its order; returns the allowances it would store.

    Raises LocalProtocolError naming the first rule the terms break (the contract reverts).
    """
    allowed = allowances(terms, settings)  # the bounds of section 3
    least = job_min_stake(terms, settings)
    if terms.provider_stake < least:
        raise LocalProtocolError(f"a seat's stake {terms.provider_stake} is below the least {least} wei that "
                                 f"p* = {terms.catch_bps} bps asks for")
    if not stake_covers_reimbursements(terms, settings, gas):
        raise LocalProtocolError("a seat's stake less the finder's share does not cover a won game's reimbursements "
                                 "and the demands it may have served through a witness")
    return allowed
