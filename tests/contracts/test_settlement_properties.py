"""Random sequences of moves by several accounts against a reference model of the contract.

Every rule sends one transaction. The model (plain Python, written from the contract's rules)
predicts whether it is refused and with which custom error, and what it does to stakes,
locks, credits and escrows. After every step the contract's native balance must equal the
model's liabilities (stakes + credits + escrows of unsettled jobs), and every withdrawal must
pay exactly what the model says the account is owed. At the end of each run the contract's
per-account records must equal the model's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import eth  # noqa: F401  (py-evm raises the recursion limit on import: let it happen before hypothesis runs)
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from contracts import ETHER, ContractRevert, EmbeddedChain, Outcome, Settlement

pytestmark = [pytest.mark.settlement, pytest.mark.slow]

UNBONDING_DELAY = 200
MIN_STAKE = ETHER
WINNER_SHARE_BPS = 3_333  # not a round share: integer division must agree
MAX_RULING_PERIOD = 365 * 24 * 3600
ZERO = "0x" + "00" * 20
PROVIDER, AUDITOR, CLIENT = 1, 2, 4
ROOTS = (b"\x01" * 32, b"\x02" * 32)

# Node statuses, job statuses, dispute statuses as the contract numbers them.
N_NONE, N_ACTIVE, N_UNBONDING = 0, 1, 2
J_NONE, J_OPEN, J_ACCEPTED, J_COMMITTED, J_DISPUTED, J_FINALIZED, J_REFUNDED = range(7)
D_NONE, D_OPEN, D_RULED, D_LAPSED = range(4)


class Refused(Exception):
    """The model's prediction that the contract reverts with this error name."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


@dataclass
class ModelNode:
    stake: int = 0
    locked: int = 0
    obligations: int = 0
    status: int = N_NONE
    since: int = 0
    roles: int = 0


@dataclass
class ModelSeat:
    accepted: bool = False
    committed: bool = False
    forfeited: bool = False
    root: bytes = b""


@dataclass
class ModelJob:
    client: str
    referee: str
    price: int
    provider_stake: int
    wanted: int
    accept_by: int
    commit_by: int
    challenge_by: int
    ruling_period: int
    status: int = J_OPEN
    providers: list[str] = field(default_factory=list)
    seats: dict[str, ModelSeat] = field(default_factory=dict)
    open_disputes: int = 0


@dataclass
class ModelDispute:
    job_id: bytes
    challenger: str
    respondent: str
    bond: int
    rule_by: int
    status: int = D_OPEN


class SettlementModel:
    """The contract's rules in Python, check for check in the contract's order."""

    def __init__(self, now: int):
        self.now = now
        self.nodes: dict[str, ModelNode] = {}
        self.credits: dict[str, int] = {}
        self.jobs: dict[bytes, ModelJob] = {}
        self.disputes: dict[int, ModelDispute] = {}
        self.pairs: set[tuple[bytes, frozenset[str]]] = set()
        self.burned = 0
        self.deposited = 0
        self.withdrawn = 0

    # -- helpers
    def node(self, account: str) -> ModelNode:
        return self.nodes.setdefault(account, ModelNode())

    def active_node(self, account: str) -> ModelNode:
        node = self.node(account)
        if node.status == N_NONE:
            raise Refused("NodeNotRegistered")
        if node.status != N_ACTIVE:
            raise Refused("NodeNotActive")
        return node

    def existing_job(self, job_id: bytes) -> ModelJob:
        if job_id not in self.jobs:
            raise Refused("JobNotFound")
        return self.jobs[job_id]

    def open_dispute_of(self, dispute_id: int) -> ModelDispute:
        if dispute_id not in self.disputes:
            raise Refused("DisputeNotFound")
        dispute = self.disputes[dispute_id]
        if dispute.status != D_OPEN:
            raise Refused("DisputeNotOpen")
        return dispute

    @staticmethod
    def lock(node: ModelNode, amount: int) -> None:
        if node.stake - node.locked < amount:
            raise Refused("NodeInsufficientFreeStake")
        node.locked += amount
        node.obligations += 1

    def credit(self, account: str, amount: int) -> None:
        self.credits[account] = self.credits.get(account, 0) + amount

    def slash(self, amount: int, beneficiary: str | None) -> None:
        to_beneficiary = 0 if beneficiary is None else amount * WINNER_SHARE_BPS // 10_000
        if to_beneficiary:
            self.credit(beneficiary, to_beneficiary)
        self.burned += amount - to_beneficiary

    def forfeit_seat(self, job: ModelJob, provider: str, beneficiary: str | None) -> None:
        seat = job.seats[provider]
        if seat.forfeited:
            return
        seat.forfeited = True
        node = self.nodes[provider]
        node.locked -= job.provider_stake
        node.stake -= job.provider_stake
        self.slash(job.provider_stake, beneficiary)

    def release_bond(self, dispute: ModelDispute) -> None:
        if dispute.bond:
            node = self.nodes[dispute.challenger]
            node.locked -= dispute.bond
            node.obligations -= 1

    def close_dispute(self, job: ModelJob) -> None:
        job.open_disputes -= 1
        if job.open_disputes == 0:
            job.status = J_COMMITTED

    def liabilities(self) -> int:
        escrow = sum(j.price for j in self.jobs.values() if j.status not in (J_FINALIZED, J_REFUNDED))
        return sum(n.stake for n in self.nodes.values()) + sum(self.credits.values()) + escrow

    # -- moves (t: timestamp of the block the transaction lands in)
    def register(self, t, sender, roles, value):
        node = self.node(sender)
        if node.status != N_NONE:
            raise Refused("NodeAlreadyRegistered")
        if roles == 0 or roles & ~7:
            raise Refused("NodeInvalidRoles")
        if roles & (PROVIDER | AUDITOR) and value < MIN_STAKE:
            raise Refused("NodeStakeBelowMinimum")
        self.nodes[sender] = ModelNode(stake=value, status=N_ACTIVE, roles=roles)
        self.deposited += value

    def add_stake(self, t, sender, value):
        node = self.active_node(sender)
        if value == 0:
            raise Refused("NodeZeroAmount")
        node.stake += value
        self.deposited += value

    def begin_unbonding(self, t, sender):
        node = self.active_node(sender)
        node.status, node.since = N_UNBONDING, t

    def cancel_unbonding(self, t, sender):
        node = self.node(sender)
        if node.status != N_UNBONDING:
            raise Refused("NodeNotUnbonding")
        node.status, node.since = N_ACTIVE, 0

    def complete_unbonding(self, t, sender):
        node = self.node(sender)
        if node.status != N_UNBONDING:
            raise Refused("NodeNotUnbonding")
        if t < node.since + UNBONDING_DELAY:
            raise Refused("NodeUnbondingNotElapsed")
        if node.obligations:
            raise Refused("NodeObligationsOpen")
        self.credit(sender, node.stake)
        self.nodes[sender] = ModelNode()

    def open_job(self, t, sender, job_id, wanted, provider_stake, accept_by, commit_by, challenge_by, ruling, referee, value):
        if job_id in self.jobs:
            raise Refused("JobExists")
        if value == 0:
            raise Refused("JobZeroPrice")
        if wanted == 0 or wanted > 16:
            raise Refused("JobInvalidProviderCount")
        if provider_stake == 0:
            raise Refused("JobZeroProviderStake")
        if t >= accept_by or accept_by >= commit_by or commit_by >= challenge_by:
            raise Refused("JobDeadlinesOutOfOrder")
        if ruling == 0 or ruling > MAX_RULING_PERIOD:
            raise Refused("JobInvalidRulingPeriod")
        self.jobs[job_id] = ModelJob(sender, referee if referee != ZERO else sender, value, provider_stake, wanted,
                                     accept_by, commit_by, challenge_by, ruling)
        self.deposited += value

    def accept(self, t, sender, job_id):
        job = self.existing_job(job_id)
        if job.status != J_OPEN:
            raise Refused("JobWrongStatus")
        if t >= job.accept_by:
            raise Refused("JobDeadlinePassed")
        if sender in (job.client, job.referee):
            raise Refused("JobPartyIsReferee")
        seat = job.seats.get(sender, ModelSeat())
        if seat.accepted:
            raise Refused("JobAlreadyAccepted")
        node = self.active_node(sender)
        if not node.roles & PROVIDER:
            raise Refused("NodeMissingRole")
        self.lock(node, job.provider_stake)
        seat.accepted = True
        job.seats[sender] = seat
        job.providers.append(sender)
        if len(job.providers) == job.wanted:
            job.status = J_ACCEPTED

    def commit(self, t, sender, job_id, root):
        job = self.existing_job(job_id)
        if job.status not in (J_ACCEPTED, J_COMMITTED, J_DISPUTED):
            raise Refused("JobWrongStatus")
        if t >= job.commit_by:
            raise Refused("JobDeadlinePassed")
        seat = job.seats.get(sender)
        if seat is None or not seat.accepted:
            raise Refused("JobNotAProvider")
        if seat.committed:
            raise Refused("JobAlreadyCommitted")
        seat.committed, seat.root = True, root
        if job.status == J_ACCEPTED:
            job.status = J_COMMITTED

    def open_dispute(self, t, sender, job_id, respondent):
        job = self.existing_job(job_id)
        if job.status not in (J_COMMITTED, J_DISPUTED):
            raise Refused("JobWrongStatus")
        if t >= job.challenge_by:
            raise Refused("JobDeadlinePassed")
        if sender == respondent:
            raise Refused("DisputeSelf")
        if sender in (job.client, job.referee):
            raise Refused("JobPartyIsReferee")
        theirs = job.seats.get(respondent, ModelSeat())
        if not theirs.committed:
            raise Refused("DisputeNotCommitted")
        if theirs.forfeited:
            raise Refused("DisputeForfeited")
        pair = (job_id, frozenset((sender, respondent)))
        if pair in self.pairs:
            raise Refused("DisputePairRepeated")
        mine = job.seats.get(sender, ModelSeat())
        bond = 0
        if mine.accepted:
            if not mine.committed:
                raise Refused("DisputeNotCommitted")
            if mine.forfeited:
                raise Refused("DisputeForfeited")
            if mine.root == theirs.root:
                raise Refused("DisputeRootsAgree")
        else:
            node = self.active_node(sender)
            if not node.roles & AUDITOR:
                raise Refused("NodeMissingRole")
            bond = job.provider_stake
            self.lock(node, bond)
        self.pairs.add(pair)
        dispute_id = len(self.disputes) + 1
        self.disputes[dispute_id] = ModelDispute(job_id, sender, respondent, bond, t + job.ruling_period)
        job.open_disputes += 1
        if job.status == J_COMMITTED:
            job.status = J_DISPUTED

    def rule(self, t, sender, dispute_id, outcome):
        dispute = self.open_dispute_of(dispute_id)
        job = self.jobs[dispute.job_id]
        if sender != job.referee:
            raise Refused("DisputeNotReferee")
        if t >= dispute.rule_by:
            raise Refused("JobDeadlinePassed")
        if outcome == Outcome.NONE:
            raise Refused("DisputeInvalidOutcome")
        dispute.status = D_RULED
        challenger, respondent = dispute.challenger, dispute.respondent
        if outcome == Outcome.CHALLENGER_WINS:
            self.release_bond(dispute)
            self.forfeit_seat(job, respondent, challenger)
        elif outcome == Outcome.RESPONDENT_WINS:
            self.forfeit_challenger(job, dispute, respondent)
        else:
            self.forfeit_challenger(job, dispute, None)
            self.forfeit_seat(job, respondent, None)
        self.close_dispute(job)

    def forfeit_challenger(self, job, dispute, beneficiary):
        if dispute.bond == 0:
            self.forfeit_seat(job, dispute.challenger, beneficiary)
            return
        node = self.nodes[dispute.challenger]
        node.locked -= dispute.bond
        node.stake -= dispute.bond
        node.obligations -= 1
        self.slash(dispute.bond, beneficiary)

    def lapse(self, t, sender, dispute_id):
        dispute = self.open_dispute_of(dispute_id)
        if t < dispute.rule_by:
            raise Refused("JobTooEarly")
        dispute.status = D_LAPSED
        self.release_bond(dispute)
        self.close_dispute(self.jobs[dispute.job_id])

    def settle(self, t, sender, job_id):
        job = self.existing_job(job_id)
        status = job.status
        if status == J_OPEN:
            if t < job.accept_by:
                raise Refused("JobTooEarly")
        elif status == J_ACCEPTED:
            if t < job.commit_by:
                raise Refused("JobTooEarly")
        elif status == J_COMMITTED:
            if t < job.challenge_by:
                raise Refused("JobTooEarly")
        elif status == J_DISPUTED:
            raise Refused("JobDisputesOpen")
        else:
            raise Refused("JobWrongStatus")
        honest = sum(1 for p in job.providers if job.seats[p].committed and not job.seats[p].forfeited)
        job.status = J_FINALIZED if honest else J_REFUNDED
        share = job.price // honest if honest else 0
        for provider in job.providers:
            seat = job.seats[provider]
            node = self.nodes[provider]
            node.obligations -= 1
            if seat.forfeited:
                continue
            if seat.committed or status == J_OPEN:
                node.locked -= job.provider_stake
                if seat.committed:
                    self.credit(provider, share)
            else:
                self.forfeit_seat(job, provider, job.client)
        refund = job.price - share * honest
        if refund:
            self.credit(job.client, refund)

    def withdraw(self, t, sender):
        amount = self.credits.get(sender, 0)
        if amount == 0:
            raise Refused("WithdrawNothing")
        self.credits[sender] = 0
        self.withdrawn += amount
        return amount


_CHAIN: dict[str, object] = {}


def _stage():
    """One embedded chain for all runs: the contract deployed and chain time moved far past the
    wall clock, so every block is exactly one second after its parent; each run starts from there."""
    if not _CHAIN:
        chain = EmbeddedChain()
        settlement = Settlement.deploy(
            chain, unbonding_delay=UNBONDING_DELAY, min_stake=MIN_STAKE, winner_share_bps=WINNER_SHARE_BPS
        )
        chain.mine(chain.now() + 10**7)
        _CHAIN.update(chain=chain, settlement=settlement, mark=chain.snapshot())
    chain = _CHAIN["chain"]
    chain.revert(_CHAIN["mark"])
    return chain, _CHAIN["settlement"]


actors = st.integers(0, 5)
picks = st.integers(0, 10**6)

MOVE_ARGUMENTS = {
    "register": dict(who=actors, roles=st.sampled_from([PROVIDER, AUDITOR, PROVIDER | AUDITOR, CLIENT, 0, 8]),
                     stake=st.sampled_from([0, ETHER - 1, ETHER, 2 * ETHER])),
    "add_stake": dict(who=actors, amount=st.sampled_from([0, 1, ETHER])),
    "unbonding": dict(who=actors, which=st.sampled_from(["begin", "cancel", "complete", "complete"])),
    "open_job": dict(
        who=st.integers(0, 1) | actors,
        wanted=st.integers(1, 3),
        provider_stake=st.sampled_from([ETHER + 7, ETHER // 2 + 1]),
        price=st.sampled_from([1, 7, 3 * ETHER + 1]),
        windows=st.sampled_from([(20, 50, 90)] * 8 + [(0, 40, 80), (60, 60, 90)]),
        ruling=st.sampled_from([15, 40] * 4 + [0]),
        referee=st.none() | st.none() | actors,
        reuse=st.integers(0, 9),
    ),
    "accept": dict(who=actors, job=picks),
    "commit": dict(who=actors, job=picks, root=st.sampled_from(ROOTS)),
    "open_dispute": dict(who=actors, job=picks, respondent=actors),
    "rule_dispute": dict(dispute=picks, who=actors, outcome=st.sampled_from(
        [Outcome.CHALLENGER_WINS, Outcome.RESPONDENT_WINS, Outcome.BOTH_LOSE] * 3 + [Outcome.NONE])),
    "lapse": dict(who=actors, dispute=picks),
    "settle": dict(who=actors, job=picks),
    "withdraw": dict(who=actors),
    "advance_time": dict(seconds=st.sampled_from([3, 10, 25, 45])),
}
MOVE_WEIGHTS = {
    "register": 1, "add_stake": 1, "unbonding": 2, "open_job": 2, "accept": 5, "commit": 5, "open_dispute": 4,
    "rule_dispute": 4, "lapse": 2, "settle": 3, "withdraw": 3, "advance_time": 3,
}


class SettlementMachine(RuleBasedStateMachine):
    """Six accounts (two mostly clients, four nodes) making moves.

    Nine moves in ten are aimed: their kind is drawn among the kinds the model says have an
    allowed move right now, and their arguments among the allowed ones. The tenth is drawn at
    random and is mostly refused (its error name is still checked). Random sequences alone
    rarely get a job as far as a verdict.
    """

    def __init__(self):
        super().__init__()
        self.chain, self.settlement = _stage()
        self.accounts = self.chain.accounts[1:7]
        self.model = SettlementModel(self.chain.now())
        self.job_ids: list[bytes] = []
        self.aimed = True

    # -- plumbing
    def _move(self, account: str, model_move, contract_move, *args):
        """Predicts with the model, sends with the contract, compares the two."""
        t = self.model.now + 1
        try:
            predicted = model_move(t, account, *args)
            refused = None
        except Refused as prediction:
            predicted, refused = None, prediction.name
        try:
            result = contract_move()
        except ContractRevert as revert:
            assert refused is not None, f"contract refused with {revert}, model expected success"
            assert revert.name == refused, f"contract refused with {revert}, model expected {refused}"
            result = None
        else:
            assert refused is None, f"contract accepted, model expected {refused}"
        event(f"{model_move.__name__}: {refused or 'done'}")
        self.model.now = t
        return predicted, result

    def _as(self, account: str) -> Settlement:
        return self.settlement.connect(account)

    @staticmethod
    def _pick(candidates: list, pick: int, fallback):
        return candidates[pick % len(candidates)] if candidates else fallback

    def _node(self, account: str) -> ModelNode:
        return self.model.node(account)

    # -- what the model allows now (t: the next block's timestamp)
    def _acceptable(self) -> list[tuple[bytes, str]]:
        t, found = self.model.now + 1, []
        for job_id in self.job_ids:
            j = self.model.jobs[job_id]
            if j.status != J_OPEN or t >= j.accept_by:
                continue
            for a in self.accounts:
                node = self._node(a)
                if (a not in (j.client, j.referee) and a not in j.seats and node.status == N_ACTIVE
                        and node.roles & PROVIDER and node.stake - node.locked >= j.provider_stake):
                    found.append((job_id, a))
        return found

    def _committable(self) -> list[tuple[bytes, str]]:
        t = self.model.now + 1
        return [(job_id, a) for job_id in self.job_ids
                for j in [self.model.jobs[job_id]]
                if j.status in (J_ACCEPTED, J_COMMITTED, J_DISPUTED) and t < j.commit_by
                for a, seat in j.seats.items() if not seat.committed]

    def _disputable(self) -> list[tuple[bytes, str, str]]:
        t, found = self.model.now + 1, []
        for job_id in self.job_ids:
            j = self.model.jobs[job_id]
            if j.status not in (J_COMMITTED, J_DISPUTED) or t >= j.challenge_by:
                continue
            for target, theirs in j.seats.items():
                if not theirs.committed or theirs.forfeited:
                    continue
                for a in self.accounts:
                    if a in (target, j.client, j.referee) or (job_id, frozenset((a, target))) in self.model.pairs:
                        continue
                    mine, node = j.seats.get(a), self._node(a)
                    if mine is not None:
                        if mine.committed and not mine.forfeited and mine.root != theirs.root:
                            found.append((job_id, a, target))
                    elif (node.status == N_ACTIVE and node.roles & AUDITOR
                          and node.stake - node.locked >= j.provider_stake):
                        found.append((job_id, a, target))
        return found

    def _ruleable(self) -> list[int]:
        t = self.model.now + 1
        return [i for i, d in self.model.disputes.items() if d.status == D_OPEN and t < d.rule_by]

    def _lapsable(self) -> list[int]:
        t = self.model.now + 1
        return [i for i, d in self.model.disputes.items() if d.status == D_OPEN and t >= d.rule_by]

    def _settleable(self) -> list[bytes]:
        t = self.model.now + 1
        return [job_id for job_id in self.job_ids for j in [self.model.jobs[job_id]]
                if (j.status == J_OPEN and t >= j.accept_by) or (j.status == J_ACCEPTED and t >= j.commit_by)
                or (j.status == J_COMMITTED and t >= j.challenge_by)]

    def _owed(self) -> list[str]:
        return [a for a in self.accounts if self.model.credits.get(a, 0)]

    def _available(self, name: str) -> bool:
        probe = {"accept": self._acceptable, "commit": self._committable, "open_dispute": self._disputable,
                 "rule_dispute": self._ruleable, "lapse": self._lapsable, "settle": self._settleable,
                 "withdraw": self._owed}.get(name)
        return probe is None or bool(probe())

    # -- set-up
    @initialize(
        stakes=st.lists(st.sampled_from([2 * ETHER + 3, 3 * ETHER]), min_size=4, max_size=4),
        jobs=st.lists(st.tuples(st.integers(1, 2), st.none() | actors), min_size=1, max_size=2),
    )
    def start(self, stakes, jobs):
        """Four nodes registered and one or two jobs opened."""
        roles = (PROVIDER, PROVIDER, PROVIDER | AUDITOR, AUDITOR)
        for i, (role, stake) in enumerate(zip(roles, stakes)):
            account = self.accounts[i + 2]
            self._move(account, self.model.register,
                       lambda a=account, r=role, s=stake, k=i: self._as(a).register(bytes([k + 3]) * 32, r, stake=s),
                       role, stake)
        for client, (wanted, referee) in enumerate(jobs):
            self.open_job(client, wanted, ETHER + 7, 3 * ETHER + 1, (25, 60, 100), 30, referee, reuse=1)

    @rule(data=st.data())
    def move(self, data):
        """One move: its kind drawn by weight among the available kinds (nine times in ten) or all kinds."""
        self.aimed = data.draw(st.integers(0, 9), label="aim") < 9
        kinds = [name for name in MOVE_WEIGHTS if not self.aimed or self._available(name)]
        name = data.draw(st.sampled_from([k for k in kinds for _ in range(MOVE_WEIGHTS[k])]), label="move")
        arguments = {key: data.draw(strategy, label=key) for key, strategy in MOVE_ARGUMENTS[name].items()}
        getattr(self, name)(**arguments)

    # -- moves
    def register(self, who, roles, stake):
        account = self.accounts[who]
        self._move(account, self.model.register,
                   lambda: self._as(account).register(bytes([who + 1]) * 32, roles, stake=stake), roles, stake)

    def add_stake(self, who, amount):
        account = self.accounts[who]
        self._move(account, self.model.add_stake, lambda: self._as(account).add_stake(amount), amount)

    def unbonding(self, who, which):
        account = self.accounts[who]
        if self.aimed and which == "complete":
            ready = [a for a in self.accounts if self._node(a).status == N_UNBONDING
                     and self.model.now + 1 >= self._node(a).since + UNBONDING_DELAY]
            account = self._pick(ready, who, account)
        model_move = {"begin": self.model.begin_unbonding, "cancel": self.model.cancel_unbonding,
                      "complete": self.model.complete_unbonding}[which]
        contract = self._as(account)
        contract_move = {"begin": contract.begin_unbonding, "cancel": contract.cancel_unbonding,
                         "complete": contract.complete_unbonding}[which]
        self._move(account, model_move, contract_move)

    def open_job(self, who, wanted, provider_stake, price, windows, ruling, referee, reuse):
        fresh = hashlib.sha256(b"job %d" % len(self.job_ids)).digest()
        job_id = self.job_ids[0] if reuse == 0 and self.job_ids else fresh
        now = self.model.now
        deadlines = (now + windows[0], now + windows[1], now + windows[2])
        referee_account = self.accounts[referee] if referee is not None else ZERO
        client = self.accounts[who]
        _, result = self._move(
            client, self.model.open_job,
            lambda: self._as(client).open_job(
                job_id, price=price, providers_wanted=wanted, provider_stake=provider_stake,
                accept_by=deadlines[0], commit_by=deadlines[1], challenge_by=deadlines[2],
                ruling_period=ruling, referee=referee_account if referee is not None else None),
            job_id, wanted, provider_stake, *deadlines, ruling, referee_account, price,
        )
        if result is not None:
            self.job_ids.append(job_id)

    def _job(self, pick: int) -> bytes:
        return self._pick(self.job_ids, pick, b"\x09" * 32)

    def _dispute(self, pick: int) -> int:
        return pick % len(self.model.disputes) + 1 if self.model.disputes else 1

    def accept(self, who, job):
        job_id, account = self._job(job), self.accounts[who]
        if self.aimed:
            job_id, account = self._pick(self._acceptable(), job, (job_id, account))
        self._move(account, self.model.accept, lambda: self._as(account).accept(job_id), job_id)

    def commit(self, who, job, root):
        job_id, account = self._job(job), self.accounts[who]
        if self.aimed:
            job_id, account = self._pick(self._committable(), job, (job_id, account))
        self._move(account, self.model.commit, lambda: self._as(account).commit(job_id, root), job_id, root)

    def open_dispute(self, who, job, respondent):
        job_id, account, target = self._job(job), self.accounts[who], self.accounts[respondent]
        if self.aimed:
            job_id, account, target = self._pick(self._disputable(), job, (job_id, account, target))
        self._move(account, self.model.open_dispute, lambda: self._as(account).open_dispute(job_id, target),
                   job_id, target)

    def rule_dispute(self, dispute, who, outcome):
        dispute_id, sender = self._dispute(dispute), self.accounts[who]
        if self.aimed:
            dispute_id = self._pick(self._ruleable(), dispute, dispute_id)
            sender = self.model.jobs[self.model.disputes[dispute_id].job_id].referee
        self._move(sender, self.model.rule,
                   lambda: self._as(sender).rule(dispute_id, outcome, step=dispute % 1000, node=who,
                                                 transcript_hash=b"\x07" * 32),
                   dispute_id, outcome)

    def lapse(self, who, dispute):
        dispute_id = self._dispute(dispute)
        if self.aimed:
            dispute_id = self._pick(self._lapsable(), dispute, dispute_id)
        account = self.accounts[who]
        self._move(account, self.model.lapse, lambda: self._as(account).lapse(dispute_id), dispute_id)

    def settle(self, who, job):
        job_id = self._job(job)
        if self.aimed:
            job_id = self._pick(self._settleable(), job, job_id)
        account = self.accounts[who]
        self._move(account, self.model.settle, lambda: self._as(account).settle(job_id), job_id)

    def withdraw(self, who):
        account = self.accounts[who]
        if self.aimed:
            account = self._pick(self._owed(), who, account)
        before = self.chain.balance(account)
        owed, result = self._move(account, self.model.withdraw, lambda: self._as(account).withdraw())
        if result is not None:
            # Exactly what it was owed: not a wei more (and not less).
            assert self.chain.balance(account) == before + owed - result.fee

    def advance_time(self, seconds):
        self.chain.advance_time(seconds)
        self.model.now += seconds

    # -- invariants
    @invariant()
    def balance_equals_liabilities(self):
        balance = self.settlement.balance()
        assert balance == self.model.liabilities()
        assert balance == self.model.deposited - self.model.withdrawn - self.model.burned

    def teardown(self):
        assert self.chain.now() == self.model.now
        for account in self.accounts:
            node = self.settlement.node(account)
            expected = self.model.node(account)
            assert (node.stake, node.locked, node.obligations, int(node.status)) == (
                expected.stake, expected.locked, expected.obligations, expected.status), account
            assert self.settlement.credit_of(account) == self.model.credits.get(account, 0), account


SettlementMachine.TestCase.settings = settings(
    max_examples=8,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_settlement_state_machine = SettlementMachine.TestCase
