"""The claim game of docs/economics.md, section 8: one table for every claim of one game.

Theory of operation
-------------------
A game is about one interval c of one revealed trace root of one job. The root's
**defenders** (every seat that revealed it) answer; **challengers** (anyone) point; a
**referee** recomputes one operator. Everything that can happen is a *claim*, and the
claims of a game form a path of fixed depth:

    INTERVAL claim  "interval c of this root is wrong"      opened by openGame (the game itself)
      answer: each defender posts or endorses the interval's list of per-step state hashes
    STEP claim      "step s of this steps list is wrong"     opened by a pick on a steps list
      answer: each seat covering that list posts or endorses the step's node-output list
    NODE claim      "node n of this node list is wrong"      opened by a pick on a node list
      answer: each seat covering that list posts its evidence; then the referee rules,
      anyone may appeal, a drawn referee rules the appeal.

The same pick again, or openGame on an existing game, *joins* (no bond, recorded). A claim
ends FAILED, VOID or UPHELD; an upheld claim makes the claims above it upheld. Each claim
is in one state of `CLAIM_TRANSITIONS`; `ClaimGame.handle` turns an event (a frozen,
self-validating dataclass carrying the chain time `now`) into one table event by its
guards (sender, deadline, lists) and moves the claim along the table. Nothing else changes
a claim's state. A timeout is an event too: `Timeout(claim, now)`, allowed from the
deadline on (at the deadline, not one tick before); a move is allowed strictly before it.

The chess clock with extension, specialised to a fixed depth: each turn's deadline runs
from the move that forced it and is never shorter than the work it forces (economics
allowances): stepsBy = open + E_list; a pick window ends E_interval after the list
deadline; nodesBy comes from the root's recompute queue (`RecomputeQueue`, shared by the
games of one root); evidenceBy = pick + E_xfer(Y); ruleBy = the later of the referee's
arrival and the first evidence + E_rule; appealBy = ruling + E_rule.

Choices where the note leaves details open (one line each):
- the interval claim's id is the game id; gameId = keccak(abi.encode(jobId, root, uint64 c)),
  claimId = keccak(abi.encode(gameId, uint8 level, listRoot, uint64 index)).
- a claim whose defenders all stay silent past their deadline is UPHELD by default.
- a claim whose pick window closed with no upheld child and a VOID child is VOID (a referee's
  failure costs no challenger its bond); with only FAILED children, or none, it is FAILED.
- only the seats covering the picked list of an upheld NODE claim forfeit (`LostGame`); the
  claims above are upheld for bonds and rewards, so an honest co-defender with another node
  list is not slashed.
- the client referees a node claim if it referees the job and authored no claim of the game;
  otherwise, and after a referee timeout, a referee is drawn once the first evidence is in.
- a picked index is 1..k of a steps list (entry 0 is the proven checkpoint) and 0..N of a
  node list (entry N, the state after the step, is proven equal to the steps list's entry but
  not to what the outputs make, so it can be wrong alone).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from eth_abi import encode as abi_encode
from .keccak import keccak
from eth_utils import is_address, to_checksum_address

from .economics import MAX_DRAWS, MAX_JOINERS, Allowances, ChainSettings, later_step_pick_deadline, step_pick_deadline
from .errors import LocalProtocolError, RemoteProtocolError
from .game_state import CHALLENGER, DEFENDER, REFEREE

ANYONE = "anyone"
INTERVAL, STEP, NODE = 0, 1, 2   # claim levels
LEVEL_NAMES = {INTERVAL: "interval", STEP: "step", NODE: "node"}

# claim states
ANSWERING = "ANSWERING"          # the defenders owe their list (or evidence)
PICKING = "PICKING"              # a list is in: challengers may pick under it until the window closes
WAITING = "WAITING"              # the window closed with picks under it still open
DRAWING = "DRAWING"              # a node claim needs a referee drawn
RULING = "RULING"                # evidence in, the referee rules by ruleBy
APPEALABLE = "APPEALABLE"        # ruled; anyone may appeal until appealBy
APPEALED = "APPEALED"            # appealed; an appeal referee must be drawn
APPEAL_RULING = "APPEAL_RULING"  # the appeal referee rules by ruleBy
FAILED, VOID, UPHELD = "FAILED", "VOID", "UPHELD"
FINAL = frozenset({FAILED, VOID, UPHELD})

# table events (what a guarded event came to)
ANSWER, JOIN, PICK, EVIDENCE = "answer", "join", "pick", "evidence"
SILENT = "silent"                            # the answer deadline passed with no answer at all
SILENT_SOME = "silent-some"                  # it passed with some defenders answered: the others forfeit
UPHELD_BELOW = "upheld-below"                # a claim under this one was upheld
CLOSED, CLOSED_VOID, CLOSED_WAITING = "closed", "closed-void", "closed-waiting"
NEED_REFEREE = "need-referee"                # first evidence, no referee yet
REFEREE_READY = "referee-ready"              # first evidence, the client referees
DRAWN = "drawn"
RULED = "ruled"
REFEREE_SILENT, REFEREES_EXHAUSTED = "referee-silent", "referees-exhausted"
APPEAL = "appeal"
STANDS_UPHELD, STANDS_FAILED = "stands-upheld", "stands-failed"  # the ruling is final
APPEAL_UPHELD, APPEAL_FAILED = "appeal-upheld", "appeal-failed"

CLAIM_TRANSITIONS: dict[str, dict[str, str]] = {
    ANSWERING: {ANSWER: PICKING, REFEREE_READY: RULING, NEED_REFEREE: DRAWING,
                JOIN: ANSWERING, SILENT: UPHELD},
    PICKING: {ANSWER: PICKING, JOIN: PICKING, PICK: PICKING, SILENT_SOME: PICKING, UPHELD_BELOW: UPHELD, CLOSED: FAILED,
              CLOSED_VOID: VOID, CLOSED_WAITING: WAITING},
    WAITING: {JOIN: WAITING, UPHELD_BELOW: UPHELD, CLOSED: FAILED, CLOSED_VOID: VOID},
    DRAWING: {DRAWN: RULING, EVIDENCE: DRAWING, JOIN: DRAWING, SILENT_SOME: DRAWING},
    RULING: {RULED: APPEALABLE, EVIDENCE: RULING, JOIN: RULING, SILENT_SOME: RULING, REFEREE_SILENT: DRAWING,
             REFEREES_EXHAUSTED: VOID},
    APPEALABLE: {APPEAL: APPEALED, JOIN: APPEALABLE, EVIDENCE: APPEALABLE, SILENT_SOME: APPEALABLE,
                 STANDS_UPHELD: UPHELD, STANDS_FAILED: FAILED},
    APPEALED: {DRAWN: APPEAL_RULING, JOIN: APPEALED, EVIDENCE: APPEALED, SILENT_SOME: APPEALED},
    APPEAL_RULING: {APPEAL_UPHELD: UPHELD, APPEAL_FAILED: FAILED, REFEREE_SILENT: APPEALED, JOIN: APPEAL_RULING,
                    EVIDENCE: APPEAL_RULING, SILENT_SOME: APPEAL_RULING, STANDS_UPHELD: UPHELD, STANDS_FAILED: FAILED},
    FAILED: {}, VOID: {}, UPHELD: {},
}

# forfeit reasons
SILENT_DEFENDER, LOST_GAME = "SilentDefender", "LostGame"


def _account(owner: str, value: object) -> str:
    if not isinstance(value, str) or not is_address(value):
        raise LocalProtocolError(f"{owner} must be a 20-byte hex address, got {value!r}")
    return to_checksum_address(value)


def _hash(owner: str, value: object) -> None:
    if type(value) is not bytes or len(value) != 32:
        raise LocalProtocolError(f"{owner} must be 32 bytes")


def _time(owner: str, value: object) -> None:
    if type(value) is not int or value < 0:
        raise LocalProtocolError(f"{owner}.now must be a non-negative int of chain seconds, got {value!r}")


def game_id(job_id: bytes, root: bytes, interval: int) -> bytes:
    return keccak(abi_encode(["bytes32", "bytes32", "uint64"], [job_id, root, interval]))


def claim_id(game: bytes, level: int, list_root: bytes, index: int) -> bytes:
    return keccak(abi_encode(["bytes32", "uint8", "bytes32", "uint64"], [game, level, list_root, index]))


@dataclass(frozen=True)
class _Event:
    claim: bytes
    now: int

    def __post_init__(self) -> None:
        _hash(f"{type(self).__name__}.claim", self.claim)
        _time(type(self).__name__, self.now)
        for name in ("author", "seat", "referee"):
            if hasattr(self, name):
                object.__setattr__(self, name, _account(f"{type(self).__name__}.{name}", getattr(self, name)))
        for name in ("list_root", "evidence_hash", "transcript_hash"):
            if hasattr(self, name):
                _hash(f"{type(self).__name__}.{name}", getattr(self, name))


@dataclass(frozen=True)
class Join(_Event):
    """openGame on an open game, or the same pick again: no bond, recorded."""
    author: str


@dataclass(frozen=True)
class PostList(_Event):
    """postSteps / postNodes: the seat's own list answering the claim; covers the seat."""
    seat: str
    list_root: bytes


@dataclass(frozen=True)
class Endorse(_Event):
    """endorse: cover the seat with a list another seat posted for this claim."""
    seat: str
    list_root: bytes


@dataclass(frozen=True)
class Pick(_Event):
    """pickStep / pickNode on a list posted for `claim`: entry `index` is wrong (bond B_step / B_node)."""
    author: str
    list_root: bytes
    index: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if type(self.index) is not int or self.index < 0:
            raise LocalProtocolError(f"Pick.index must be a non-negative int, got {self.index!r}")


@dataclass(frozen=True)
class PostEvidence(_Event):
    seat: str
    evidence_hash: bytes


@dataclass(frozen=True)
class DrawReferee(_Event):
    """drawReferee came to `referee` (the draw itself happens on chain)."""
    referee: str


@dataclass(frozen=True)
class Rule(_Event):
    """rule / ruleAppeal by the claim's current referee."""
    referee: str
    defender_right: bool
    transcript_hash: bytes

    def __post_init__(self) -> None:
        super().__post_init__()
        if type(self.defender_right) is not bool:
            raise LocalProtocolError(f"Rule.defender_right must be a bool, got {self.defender_right!r}")


@dataclass(frozen=True)
class Appeal(_Event):
    author: str


@dataclass(frozen=True)
class Timeout(_Event):
    """timeout(claim): anyone, from the claim's current deadline on."""


ClaimEvent = Union[Join, PostList, Endorse, Pick, PostEvidence, DrawReferee, Rule, Appeal, Timeout]
SENDER = {Join: CHALLENGER, Pick: CHALLENGER, PostList: DEFENDER, Endorse: DEFENDER, PostEvidence: DEFENDER,
          Rule: REFEREE, DrawReferee: ANYONE, Appeal: ANYONE, Timeout: ANYONE}


@dataclass
class RecomputeQueue:
    """busyUntil of one (job, root): the games on its intervals recompute one after another."""
    busy_until: int = 0


@dataclass
class Claim:
    id: bytes
    level: int
    author: str
    parent: bytes | None
    opened_at: int
    defenders: set[str]                  # seats that must answer it (live: a late endorser counts)
    answer_by: int
    state: str = ANSWERING
    pick_by: int | None = None
    lists: dict[bytes, set[str]] = field(default_factory=dict)   # answers posted: list root -> covering seats
    evidence: dict[str, bytes] = field(default_factory=dict)
    children: list[bytes] = field(default_factory=list)
    joiners: list[str] = field(default_factory=list)
    referee: str | None = None
    referees: list[str] = field(default_factory=list)           # every referee of it, in order
    draws: int = 0
    appeal_draws: int = 0
    swept: bool = False                  # the answer deadline's silent defenders have forfeited
    first_evidence_at: int | None = None
    rule_by: int | None = None
    ruling: bool | None = None           # defender_right of the ruling that stands so far
    appeal_by: int | None = None
    appellant: str | None = None

    @property
    def covered(self) -> set[str]:
        return set().union(*self.lists.values()) if self.lists else set()

    @property
    def answered(self) -> set[str]:
        """Defenders that gave their answer: a list for interval and step claims, evidence for node claims."""
        return set(self.evidence) if self.level == NODE else self.covered

    @property
    def sweep_due(self) -> bool:
        """Past ANSWERING, some defender still owes its answer: the answer deadline will make it forfeit."""
        return self.state not in FINAL and self.state != ANSWERING and not self.swept \
            and bool(self.defenders - self.answered)

    @property
    def reimbursed_joiners(self) -> list[str]:
        return self.joiners[:MAX_JOINERS]

    def deadline(self) -> int | None:
        """The time from which `Timeout` applies now (None: nothing to time out)."""
        if self.state == ANSWERING or self.sweep_due:
            return self.answer_by
        return self.state_deadline()

    def state_deadline(self) -> int | None:
        if self.state == PICKING:
            return self.pick_by
        if self.state in (RULING, APPEAL_RULING):
            return self.rule_by
        if self.state == APPEALABLE:
            return self.appeal_by
        return None


class ClaimGame:
    """Every claim of one game (job, root, interval), and the forfeits it caused."""

    def __init__(self, *, job_id: bytes, root: bytes, interval: int, defenders: tuple[str, ...], opener: str,
                 opened_at: int, interval_steps: int, graph_nodes: int, allowed: Allowances,
                 settings: ChainSettings, client: str | None = None, queue: RecomputeQueue | None = None) -> None:
        _hash("job_id", job_id)
        _hash("root", root)
        _time("ClaimGame", opened_at)
        for name, value in (("interval", interval), ("interval_steps", interval_steps), ("graph_nodes", graph_nodes)):
            if type(value) is not int or value < (0 if name == "interval" else 1):
                raise LocalProtocolError(f"{name} must be an int in range, got {value!r}")
        if not defenders:
            raise LocalProtocolError("a game needs the seats that revealed its root")
        self.defenders = frozenset(_account("defender", d) for d in defenders)
        self.client = None if client is None else _account("client", client)
        self.interval_steps, self.graph_nodes = interval_steps, graph_nodes
        self.allowed, self.settings = allowed, settings
        self.queue = queue if queue is not None else RecomputeQueue()
        self.first_nodes_by: int | None = None   # the first step pick's nodesBy: later picks reuse it
        self.now = opened_at
        self.forfeits: dict[str, str] = {}       # seat -> SilentDefender | LostGame
        self.burned_referees: set[str] = set()   # timed out: they rule nothing more in this game
        self.id = game_id(job_id, root, interval)
        opener = _account("opener", opener)
        self.claims: dict[bytes, Claim] = {self.id: Claim(
            self.id, INTERVAL, opener, None, opened_at, set(self.defenders), opened_at + allowed.list)}

    # --- reading -------------------------------------------------------------------------
    @property
    def root_claim(self) -> Claim:
        return self.claims[self.id]

    @property
    def resolved(self) -> bool:
        """resolveGame may be called: every claim is final."""
        return all(c.state in FINAL for c in self.claims.values())

    @property
    def authors(self) -> set[str]:
        return {c.author for c in self.claims.values()}

    def duties(self, account: str, role: str) -> list[tuple[bytes, str, int | None]]:
        """(claim, what `account` may or must do now in `role`, by when): each side's view of the game."""
        account = _account("account", account)
        owed = []
        for c in self.claims.values():
            if role == DEFENDER and c.state not in FINAL and account in c.defenders - c.answered \
                    and self.now < c.answer_by:
                owed.append((c.id, "post evidence" if c.level == NODE else "post or endorse a list", c.answer_by))
            elif role == CHALLENGER and c.state == PICKING and c.level < NODE:
                owed.append((c.id, f"pick a {LEVEL_NAMES[c.level + 1]}", c.pick_by))
            elif role == REFEREE and c.state in (RULING, APPEAL_RULING) and c.referee == account:
                owed.append((c.id, "rule", c.rule_by))
        return owed

    # --- moving --------------------------------------------------------------------------
    def handle(self, event: ClaimEvent) -> str:
        """Apply one event; returns the claim's new state. RemoteProtocolError for a move the game refuses."""
        if type(event) not in SENDER:
            raise LocalProtocolError(f"not a claim event: {type(event).__name__}")
        if event.now < self.now:
            raise LocalProtocolError(f"time runs backwards: {event.now} after {self.now}")
        claim = self.claims.get(event.claim)
        if claim is None:
            raise RemoteProtocolError("no such claim in this game")
        handler = getattr(self, f"_on_{type(event).__name__.lower()}")
        before, self.now = self.now, event.now
        try:
            return handler(claim, event)
        except RemoteProtocolError:
            self.now = before  # a refused move changes nothing, the clock included (guards run before any change)
            raise

    def _fire(self, claim: Claim, table_event: str) -> str:
        try:
            claim.state = CLAIM_TRANSITIONS[claim.state][table_event]
        except KeyError:
            raise RemoteProtocolError(
                f"{LEVEL_NAMES[claim.level]} claim in state {claim.state} cannot take {table_event!r}") from None
        if claim.state == UPHELD:
            self._on_upheld(claim)
        elif claim.state in FINAL and claim.parent is not None:
            self._child_settled(self.claims[claim.parent])
        return claim.state

    def _allowed(self, claim: Claim, table_event: str) -> None:
        if table_event not in CLAIM_TRANSITIONS[claim.state]:
            raise RemoteProtocolError(
                f"{LEVEL_NAMES[claim.level]} claim in state {claim.state} cannot take {table_event!r}")

    def _before(self, deadline: int | None, what: str) -> None:
        if deadline is None or self.now >= deadline:
            raise RemoteProtocolError(f"too late to {what}: the deadline was {deadline}, now is {self.now}")

    def _on_join(self, claim: Claim, event: Join) -> str:
        self._allowed(claim, JOIN)  # joining forces no work: any open claim may be joined
        if event.author != claim.author and event.author not in claim.joiners:
            claim.joiners.append(event.author)
        return self._fire(claim, JOIN)

    def _answer_guard(self, claim: Claim, seat: str) -> None:
        if claim.level == NODE:
            raise RemoteProtocolError("a node claim is answered with evidence, not a list")
        if seat not in claim.defenders:
            raise RemoteProtocolError(f"{seat} does not cover the list this claim picked")
        if seat in claim.covered:
            raise RemoteProtocolError(f"{seat} already covers a list of this claim")
        self._allowed(claim, ANSWER)
        self._before(claim.answer_by, "answer")

    def _on_postlist(self, claim: Claim, event: PostList) -> str:
        self._answer_guard(claim, event.seat)
        claim.lists.setdefault(event.list_root, set()).add(event.seat)
        return self._answer(claim)

    def _on_endorse(self, claim: Claim, event: Endorse) -> str:
        self._answer_guard(claim, event.seat)
        if event.list_root not in claim.lists:
            raise RemoteProtocolError("only a list already posted for this claim can be endorsed")
        claim.lists[event.list_root].add(event.seat)
        return self._answer(claim)

    def _answer(self, claim: Claim) -> str:
        if claim.state == ANSWERING:
            # the pick window runs from the list deadline: a last-second list leaves challengers their whole turn
            claim.pick_by = claim.answer_by + self.allowed.interval
        return self._fire(claim, ANSWER)

    def _on_pick(self, parent: Claim, event: Pick) -> str:
        self._allowed(parent, PICK)
        self._before(parent.pick_by, "pick")
        if event.list_root not in parent.lists:
            raise RemoteProtocolError("a pick names a list posted for the claim it picks under")
        level = parent.level + 1
        # a node list's entry N (the state after the step) is pickable: see node_list in claim_lists
        valid = range(1, self.interval_steps + 1) if level == STEP else range(self.graph_nodes + 1)
        if event.index not in valid:
            raise RemoteProtocolError(f"{LEVEL_NAMES[level]} {event.index} is outside {valid.start}..{valid.stop - 1}")
        child_id = claim_id(self.id, level, event.list_root, event.index)
        if child_id in self.claims:  # the same pick again joins the claim
            return self._on_join(self.claims[child_id], Join(child_id, self.now, event.author))
        if level == STEP and self.first_nodes_by is None:
            answer_by, self.queue.busy_until = step_pick_deadline(self.now, self.queue.busy_until, self.allowed,
                                                                  self.settings)
            self.first_nodes_by = answer_by
        elif level == STEP:
            answer_by = later_step_pick_deadline(self.now, self.first_nodes_by, self.settings)
        else:
            answer_by = self.now + self.allowed.xfer_evidence
        self.claims[child_id] = Claim(child_id, level, event.author, parent.id, self.now,
                                      parent.lists[event.list_root], answer_by)
        parent.children.append(child_id)
        return self._fire(parent, PICK)

    def _on_postevidence(self, claim: Claim, event: PostEvidence) -> str:
        if claim.level != NODE:
            raise RemoteProtocolError("evidence answers a node claim only")
        if event.seat not in claim.defenders or event.seat in claim.evidence:
            raise RemoteProtocolError(f"{event.seat} owes no evidence for this claim")
        first = claim.first_evidence_at is None
        client_rules = self.client is not None and self.client not in self.authors | self.burned_referees
        table_event = EVIDENCE if not first else REFEREE_READY if client_rules else NEED_REFEREE
        self._allowed(claim, table_event)
        self._before(claim.answer_by, "post evidence")
        claim.evidence[event.seat] = event.evidence_hash
        if first:
            claim.first_evidence_at = self.now
            if client_rules:
                self._seat_referee(claim, self.client)
        return self._fire(claim, table_event)

    def _seat_referee(self, claim: Claim, referee: str) -> None:
        claim.referee = referee
        claim.referees.append(referee)
        claim.rule_by = max(self.now, claim.first_evidence_at or self.now) + self.allowed.rule

    def _on_drawreferee(self, claim: Claim, event: DrawReferee) -> str:
        self._allowed(claim, DRAWN)
        banned = self.defenders | self.authors | set(claim.referees) | self.burned_referees \
            | ({self.client} if self.client else set()) | ({claim.appellant} if claim.appellant else set())
        if event.referee in banned:
            raise RemoteProtocolError(f"{event.referee} may not referee this claim")
        if claim.state == DRAWING:
            claim.draws += 1
        else:
            claim.appeal_draws += 1
        self._seat_referee(claim, event.referee)
        return self._fire(claim, DRAWN)

    def _on_rule(self, claim: Claim, event: Rule) -> str:
        appeal = claim.state == APPEAL_RULING
        self._allowed(claim, (APPEAL_FAILED if event.defender_right else APPEAL_UPHELD) if appeal else RULED)
        if event.referee != claim.referee:
            raise RemoteProtocolError("only the claim's referee rules it")
        self._before(claim.rule_by, "rule")
        if appeal:
            return self._fire(claim, APPEAL_FAILED if event.defender_right else APPEAL_UPHELD)
        claim.ruling = event.defender_right
        claim.appeal_by = self.now + self.allowed.rule
        return self._fire(claim, RULED)

    def _on_appeal(self, claim: Claim, event: Appeal) -> str:
        self._allowed(claim, APPEAL)
        if event.author == claim.referee:
            raise RemoteProtocolError("the ruling referee cannot appeal its own ruling")
        self._before(claim.appeal_by, "appeal")
        claim.appellant = event.author
        return self._fire(claim, APPEAL)

    def _on_timeout(self, claim: Claim, event: Timeout) -> str:
        deadline = claim.deadline()
        if deadline is None:
            raise RemoteProtocolError(f"a claim in state {claim.state} has no deadline to time out")
        if self.now < deadline:
            raise RemoteProtocolError(f"too early: the deadline is {deadline}, now is {self.now}")
        if claim.state == ANSWERING:  # nobody answered: every defender forfeits, the claim stands by default
            self._silent_defenders(claim)
            return self._fire(claim, SILENT)
        if claim.sweep_due:
            self._silent_defenders(claim)
            state_deadline = claim.state_deadline()
            if state_deadline is None or self.now < state_deadline:
                return self._fire(claim, SILENT_SOME)
        if claim.state == PICKING:
            return self._fire(claim, self._closing_event(claim))
        if claim.state in (RULING, APPEAL_RULING):
            self.burned_referees.add(claim.referee)
            claim.referee = None
        if claim.state == RULING:
            return self._fire(claim, REFEREE_SILENT if claim.draws < MAX_DRAWS else REFEREES_EXHAUSTED)
        if claim.state == APPEAL_RULING and claim.appeal_draws < MAX_DRAWS:
            return self._fire(claim, REFEREE_SILENT)
        # appealBy passed with no appeal, or the appeal referees are exhausted: the first ruling stands
        return self._fire(claim, STANDS_FAILED if claim.ruling else STANDS_UPHELD)

    def _silent_defenders(self, claim: Claim) -> None:
        claim.swept = True
        for seat in sorted(claim.defenders - claim.answered):
            self.forfeits.setdefault(seat, SILENT_DEFENDER)

    def _closing_event(self, claim: Claim) -> str:
        states = [self.claims[c].state for c in claim.children]
        if any(s not in FINAL for s in states):
            return CLOSED_WAITING
        return CLOSED_VOID if VOID in states else CLOSED

    def _child_settled(self, parent: Claim) -> None:
        # a final child may close a parent whose pick window already passed
        if parent.state == WAITING and all(self.claims[c].state in FINAL for c in parent.children):
            self._fire(parent, self._closing_event(parent))

    def _on_upheld(self, claim: Claim) -> None:
        if claim.level == NODE:  # silent ones forfeited already, as SilentDefender
            for seat in sorted(claim.defenders):
                self.forfeits.setdefault(seat, LOST_GAME)
        if claim.parent is not None:
            parent = self.claims[claim.parent]
            if parent.state not in FINAL:
                self._fire(parent, UPHELD_BELOW)
