"""The claim game's world for the version 2 tests: a job whose seats revealed an honest or a cheated
trace, the per-step states and node lists each side holds, and the moves that post them with proofs.

The truth of the job: step i (1..T) turns state i−1 into state i through N nodes. A cheater
follows the truth up to its first wrong step j, where node m (and the state after it) differ,
and differs from then on. Checkpoints are every k steps, so the cheated root's first wrong
interval is c = (j − 1) // k.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_abi import encode as abi_encode
from eth_utils import keccak

from contracts import Role
from contracts.settlement_v2_games import ClaimPicked, GameOpened
from contracts.settlement_v2_referees import RefereeDrawn
from protocol.listtree import ListTree, list_root

from .settlement_world import NODE_STAKE, ed25519_key
from .settlement_world_v2 import INITIAL_STATE, WorldV2

STEPS, EVERY, NODES = 10, 2, 4  # T, k (C = 5 intervals, a trace of 6 hashes), N
WRONG_STEP, WRONG_NODE = 4, 2   # the cheater's first wrong step (interval 1, its step 2) and node
REFEREE_FEE = 10**15
DRAW_DELAY, DRAW_WINDOW, PROBES, SCAN = 2, 255, 8, 24  # GavelRefereesV2's draw (section 9)


@dataclass(frozen=True)
class Computation:
    """What one side computed: every state hash and every step's node outputs."""

    label: str
    wrong_from: int | None  # first wrong step, None for the truth

    def wrong(self, step: int) -> bool:
        return self.wrong_from is not None and step >= self.wrong_from

    def state(self, step: int) -> bytes:
        if step == 0:
            return INITIAL_STATE
        return keccak(f"{'cheat' if self.wrong(step) else 'true'} state {step}".encode())

    def trace(self) -> list[bytes]:
        return [self.state(c * EVERY) for c in range(STEPS // EVERY + 1)]

    def steps(self, c: int) -> list[bytes]:
        return [self.state(i) for i in range(c * EVERY, c * EVERY + EVERY + 1)]

    def nodes(self, step: int) -> list[bytes]:
        outs = [keccak(f"true node {step} {n}".encode()) for n in range(NODES)]
        if self.wrong(step):
            first = WRONG_NODE if step == self.wrong_from else 0
            outs[first:] = [keccak(f"cheat node {step} {n}".encode()) for n in range(first, NODES)]
        return outs + [self.state(step)]


TRUTH = Computation("truth", None)
CHEAT = Computation("cheat", WRONG_STEP)


def probe(seed_hash: bytes, claim_id: bytes, draws: int, registry: tuple[str, ...], eligible, *,
          scan: int = SCAN) -> str | None:
    """The draw's twin: seed = keccak(blockhash(b + DRAW_DELAY), claimId, draws); the first eligible
    of up to PROBES registry entries keccak(seed, i) mod |registry|, then of up to `scan` entries on
    from keccak(seed, PROBES) mod |registry|; None when all miss."""
    if not registry:
        return None
    seed = keccak(abi_encode(["bytes32", "bytes32", "uint8"], [seed_hash, claim_id, draws]))

    def index(i: int) -> int:
        return int.from_bytes(keccak(abi_encode(["bytes32", "uint256"], [seed, i])), "big") % len(registry)

    start = index(PROBES)
    order = [index(i) for i in range(PROBES)] + [(start + i) % len(registry) for i in range(min(scan, len(registry)))]
    return next((registry[i] for i in order if eligible(registry[i])), None)


class GameTable:
    """A job with one seat per computation, revealed, and helpers for the game's moves. A computation
    has `trace()`, `steps(c)` and `nodes(step)` (`Computation`'s; the shape T, k, N of another job
    comes with `steps`, `every` and `nodes`)."""

    def __init__(self, w: WorldV2, computations: tuple, *, steps: int = STEPS, every: int = EVERY,
                 nodes: int = NODES, **terms):
        self.w = w
        self.every = every
        self.parties: set[str] = set()  # accounts that opened, picked or joined in this job's games
        self.drawn: dict[bytes, set[str]] = {}  # referees drawn per claim
        self.by_seat = dict(zip(w.providers, computations))
        terms.setdefault("referee_fee", REFEREE_FEE)
        self.jid = w.seated_job(len(computations), steps=steps, checkpoint_every=every, graph_nodes=nodes, **terms)
        for seat, comp in self.by_seat.items():
            w.commit(self.jid, seat, comp.trace())
        for seat, comp in self.by_seat.items():
            w.reveal(self.jid, seat, comp.trace())
        self.seats = list(self.by_seat)

    def _booked(self, result):
        """Every coin accounted for after the move (section 8's money tests check it after every step)."""
        self.w.assert_every_coin_accounted()
        return result

    def root(self, seat: str) -> bytes:
        return list_root(self.by_seat[seat].trace())

    def open_game(self, by: str, seat: str, c: int) -> bytes:
        self.parties.add(by)
        return self._booked(self.w.as_(by).open_game(self.jid, self.root(seat), c)).one(GameOpened).game_id

    def post_steps(self, seat: str, game: bytes, c: int, comp: Computation | None = None):
        comp = comp or self.by_seat[seat]
        tree = ListTree(self.by_seat[seat].trace())
        return self._booked(
            self.w.as_(seat).post_steps(game, comp.steps(c), tree.proof(c).siblings, tree.proof(c + 1).siblings))

    def steps_root(self, seat: str, c: int) -> bytes:
        return list_root(self.by_seat[seat].steps(c))

    def pick_step(self, by: str, game: bytes, seat: str, c: int, s: int) -> bytes:
        self.parties.add(by)
        return self._booked(self.w.as_(by).pick_step(game, self.steps_root(seat, c), s)).one(ClaimPicked).claim_id

    def post_nodes(self, seat: str, claim: bytes, c: int, s: int):
        comp = self.by_seat[seat]
        proof = ListTree(comp.steps(c)).proof(s).siblings
        return self._booked(self.w.as_(seat).post_nodes(claim, comp.nodes(c * self.every + s), proof))

    def nodes_root(self, seat: str, step: int) -> bytes:
        return list_root(self.by_seat[seat].nodes(step))

    def pick_node(self, by: str, step_claim: bytes, seat: str, step: int, n: int) -> bytes:
        self.parties.add(by)
        picked = self.w.as_(by).pick_node(step_claim, self.nodes_root(seat, step), n)
        return self._booked(picked).one(ClaimPicked).claim_id

    def post_evidence(self, seat: str, claim: bytes):
        return self._booked(self.w.as_(seat).post_evidence(claim, keccak(b"evidence of " + seat.encode() + claim)))

    def covering(self, seat: str) -> list[str]:
        """`seat` and every other seat with its root (they cover the same lists)."""
        return [seat] + [x for x in self.seats if x != seat and self.root(x) == self.root(seat)]

    def path_to_evidence(self, by: str, seat: str, c: int, s: int, n: int) -> tuple[bytes, bytes, bytes]:
        """`path_to_node`, then every seat with that root posts evidence. Returns (game, step claim, node claim)."""
        game, step, node = self.path_to_node(by, seat, c, s, n)
        for defender in self.covering(seat):
            self.post_evidence(defender, node)
        return game, step, node

    def path_to_node(self, by: str, seat: str, c: int, s: int, n: int) -> tuple[bytes, bytes, bytes]:
        """`by` opens the game on interval c of `seat`'s root, picks step s and node n; every seat with
        that root covers each list (`seat` posts, the others endorse). Returns (game, step claim, node claim)."""
        others = self.covering(seat)[1:]
        step_no = c * self.every + s
        game = self.open_game(by, seat, c)
        self.post_steps(seat, game, c)
        for other in others:
            self._booked(self.w.as_(other).endorse(game, self.steps_root(seat, c)))
        step = self.pick_step(by, game, seat, c, s)
        self.post_nodes(seat, step, c, s)
        for other in others:
            self._booked(self.w.as_(other).endorse(step, self.nodes_root(seat, step_no)))
        node = self.pick_node(by, step, seat, step_no, n)
        return game, step, node

    def eligible(self, claim: bytes):
        """Section 9's eligibility, as the tests model it: active, free stake ≥ the referee bond, not
        the client, a seat, a party to the games, the appellant or an earlier referee of the claim."""
        s = self.w.settlement
        bond = s.bonds_of(self.jid).referee
        appellant = s.ruling(claim).appellant
        excluded = {self.w.client, appellant, *self.seats, *self.parties, *self.drawn.get(claim, ())}

        def check(account: str) -> bool:
            node = s.node(account)
            return node.status == 1 and node.stake - node.locked >= bond and account not in excluded
        return check

    def draw(self, claim: bytes, want=None, by: str | None = None) -> str | None:
        """Arms the claim's draw if needed, mines up to its seed block b + DRAW_DELAY (choosing that
        block's time until `want(seed block hash)` holds, as a block maker could), draws, and checks
        the contract drew whom the twin `probe` says. Returns the referee drawn, or None."""
        w, s = self.w, self.w.settlement
        caller = w.as_(by or w.keeper)
        r = s.ruling(claim)
        if r.armed_block == 0 or w.chain.block_number() >= r.armed_block + DRAW_WINDOW:
            self._booked(caller.draw_referee(claim))
            r = s.ruling(claim)
        seed_block = r.armed_block + DRAW_DELAY
        while w.chain.block_number() < seed_block - 1:
            w.chain.mine()
        registry, eligible = s.referees(), self.eligible(claim)
        fixed = w.chain.block_number() >= seed_block
        for offset in range(1, 400):
            mark = w.chain.snapshot()
            if not fixed:
                w.chain.mine(w.chain.now() + offset)
            seed_hash = self.block_hash(seed_block)
            expected = probe(seed_hash, claim, r.draws, registry, eligible)
            if want is None or want(seed_hash) or fixed:
                break
            w.chain.revert(mark)
        result = self._booked(caller.draw_referee(claim))
        drawn = [e.referee for e in result.events if isinstance(e, RefereeDrawn)]
        assert drawn == ([expected] if expected else []), (drawn, expected)
        if expected:
            self.drawn.setdefault(claim, set()).add(expected)
        assert want is None or want(seed_hash), "the seed block was mined before the draw could choose it"
        return expected

    def block_hash(self, number: int) -> bytes:
        raw = self.w.chain.tester.get_block_by_number(number)["hash"]
        return bytes.fromhex(raw[2:]) if isinstance(raw, str) else bytes(raw)

    def close(self, claim: bytes):
        """Waits out the claim's deadlines and ends it (timeout, or resolveGame for a game); its status."""
        s = self.w.settlement
        info = s.claim(claim)
        self.after(max(info.answer_by, info.pick_until, info.rule_by))
        (self.w.as_(self.w.keeper).resolve_game if info.level == 0 else self.w.as_(self.w.keeper).timeout)(claim)
        self.w.assert_every_coin_accounted()
        return s.claim(claim).status

    def settle(self) -> None:
        """Settles the job once its reveals and challenge windows are over."""
        d = self.w.settlement.deadlines(self.jid)
        self.after(max(d.reveal_by, d.challenge_end))
        self.w.as_(self.w.keeper).settle(self.jid)
        self.w.assert_every_coin_accounted()

    def after(self, deadline: int) -> None:
        """Mines up to `deadline`: the next transaction lands after it."""
        if deadline > self.w.chain.now():
            self.w.mine_at(deadline)


def register_referees(w: WorldV2, count: int = 3, stake: int = 10 * NODE_STAKE) -> list[str]:
    """`count` fresh accounts registered as referees with `stake` each (counted in the world's books)."""
    referees = []
    for i in range(count):
        account = w.chain.new_account(stake + 10**18)
        w.others.append(account)
        w.as_(account).register(ed25519_key(f"referee {len(w.others)}"), Role.REFEREE, stake=stake)
        referees.append(account)
    return referees


def register_auditors(w: WorldV2) -> tuple[str, str]:
    """The keeper and the outsider as staked auditors (challengers)."""
    for i, account in enumerate((w.keeper, w.outsider)):
        w.as_(account).register(ed25519_key(f"auditor {i}"), Role.AUDITOR, stake=NODE_STAKE)
    return w.keeper, w.outsider


def holdings(w: WorldV2, account: str) -> int:
    """What the account has in the contract: its stake (locked or not) and its credit."""
    return w.settlement.node(account).stake + w.settlement.credit_of(account)
