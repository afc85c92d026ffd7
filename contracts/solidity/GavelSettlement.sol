// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Node, NodeStatus, Job, JobStatus, Seat, Dispute, DisputeStatus, Outcome} from "./SettlementTypes.sol";

/// @title GavelSettlement
/// @notice Escrow, stakes, commitments, disputes and payouts of gavel's training jobs.
/// @dev Theory of operation.
///  - Nodes register with a stake in the native currency, their Ed25519 key and role bits.
///    A provider takes a seat in a job by locking `providerStake` of its free stake; an
///    auditor that challenges a provider locks a bond of the same size.
///  - The client opens a job with the price as escrow and three deadlines: acceptBy (seats),
///    commitBy (trace roots), challengeBy (disputes). Disputes are played off-chain (the
///    bisection game with its chess clocks); on-chain there is one move, the referee's
///    verdict, due `rulingPeriod` seconds after the dispute opened. Without it the dispute
///    lapses and every lock stays as it was before the dispute.
///  - Slash split: a loser forfeits its whole lock (a provider's seat lock, an auditor's bond).
///    WINNER_SHARE_BPS of it is credited to the beneficiary and the rest is burned (sent to
///    BURN_ADDRESS, 0x…dEaD). The beneficiary is the winner of the dispute; for a provider that
///    never committed its trace root it is the client; when both parties lose there is none and
///    the whole lock is burned. No disputed stake ever goes to the referee, so ruling
///    "both lose" earns the referee nothing.
///  - Settlement after the challenge window: each provider that committed and never lost
///    gets an equal share of the price (the division remainder returns to the client) and its
///    lock back; with no such provider the client gets the whole price back.
///  - Every payment is a credit; accounts pull it with `withdraw`. State changes happen before
///    any transfer, and every state-changing entry point is guarded against re-entrancy.
contract GavelSettlement {
    // ------------------------------------------------------------------ constants

    /// @notice Role bit of a provider (sells compute, takes seats in jobs).
    uint8 public constant ROLE_PROVIDER = 1;
    /// @notice Role bit of an auditor (replays jobs, challenges providers).
    uint8 public constant ROLE_AUDITOR = 2;
    /// @notice Role bit of a client (submits jobs; registering binds its Ed25519 key).
    uint8 public constant ROLE_CLIENT = 4;
    /// @notice Most seats one job can have (bounds the settlement loop).
    uint16 public constant MAX_PROVIDERS = 16;
    /// @notice Denominator of basis-point shares.
    uint16 public constant BPS = 10_000;
    /// @notice Longest ruling period a job may set.
    uint64 public constant MAX_RULING_PERIOD = 365 days;
    /// @notice Where burned stake goes.
    address public constant BURN_ADDRESS = 0x000000000000000000000000000000000000dEaD;

    /// @notice Seconds between beginUnbonding and the earliest completeUnbonding.
    uint64 public immutable UNBONDING_DELAY;
    /// @notice Least stake of a node with the provider or auditor role.
    uint256 public immutable MIN_STAKE;
    /// @notice Share of a loser's forfeited lock credited to the winner, in basis points.
    uint16 public immutable WINNER_SHARE_BPS;

    // ------------------------------------------------------------------ state

    mapping(address account => Node) private _nodes;
    mapping(bytes32 jobId => Job) private _jobs;
    mapping(bytes32 jobId => address[]) private _providers;
    mapping(bytes32 jobId => mapping(address provider => Seat)) private _seats;
    mapping(uint256 disputeId => Dispute) private _disputes;
    mapping(bytes32 pairKey => bool) private _pairDisputed;
    mapping(address account => uint256) private _credits;
    uint256 private _disputeCount;
    bool private transient _entered;

    // ------------------------------------------------------------------ events

    /// @notice A node registered with its stake, Ed25519 key and roles.
    event NodeRegistered(address indexed account, bytes32 ed25519Key, uint8 roles, uint256 stake);
    /// @notice A node added to its stake.
    event StakeAdded(address indexed account, uint256 amount, uint256 stake);
    /// @notice A node began unbonding; its stake can leave from `availableAt` on.
    event UnbondingBegun(address indexed account, uint64 availableAt);
    /// @notice A node went back from unbonding to active.
    event UnbondingCancelled(address indexed account);
    /// @notice A node left; its whole stake was credited to it.
    event NodeExited(address indexed account, uint256 stakeCredited);
    /// @notice A client opened a job and escrowed its price.
    event JobOpened(
        bytes32 indexed jobId,
        address indexed client,
        address referee,
        uint256 price,
        uint256 providerStake,
        uint16 providersWanted,
        uint64 acceptBy,
        uint64 commitBy,
        uint64 challengeBy,
        uint64 rulingPeriod
    );
    /// @notice A job moved to a new status.
    event JobAdvanced(bytes32 indexed jobId, JobStatus status);
    /// @notice A provider took a seat and locked part of its stake.
    event ProviderAccepted(bytes32 indexed jobId, address indexed provider, uint256 locked);
    /// @notice A provider committed the trace root of its run.
    event TraceCommitted(bytes32 indexed jobId, address indexed provider, bytes32 traceRoot);
    /// @notice A dispute opened between a challenger and a committed provider.
    event DisputeOpened(
        uint256 indexed disputeId,
        bytes32 indexed jobId,
        address indexed challenger,
        address respondent,
        uint256 bond,
        uint64 ruleBy
    );
    /// @notice The referee ruled a dispute.
    event DisputeRuled(
        uint256 indexed disputeId, Outcome outcome, uint64 step, uint64 node, bytes32 transcriptHash
    );
    /// @notice A dispute reached its ruling deadline without a verdict.
    event DisputeLapsed(uint256 indexed disputeId);
    /// @notice A lock was forfeited: `toBeneficiary` credited, `burned` sent to BURN_ADDRESS.
    event StakeSlashed(
        bytes32 indexed jobId,
        address indexed loser,
        uint256 amount,
        address beneficiary,
        uint256 toBeneficiary,
        uint256 burned
    );
    /// @notice A lock went back to its node's free stake.
    event StakeUnlocked(bytes32 indexed jobId, address indexed account, uint256 amount);
    /// @notice A provider was credited its share of a job's price.
    event ProviderPaid(bytes32 indexed jobId, address indexed provider, uint256 amount);
    /// @notice The client was credited back (all of the price, or the division remainder).
    event ClientRefunded(bytes32 indexed jobId, address indexed client, uint256 amount);
    /// @notice An account pulled its credit.
    event Withdrawn(address indexed account, uint256 amount);

    // ------------------------------------------------------------------ errors

    /// @notice A state-changing call re-entered the contract.
    error SettlementReentrantCall();
    /// @notice The constructor's winner share is above 100%.
    error SettlementInvalidShare(uint16 winnerShareBps);

    /// @notice The account is already registered.
    error NodeAlreadyRegistered(address account);
    /// @notice The account is not registered.
    error NodeNotRegistered(address account);
    /// @notice The node is unbonding (or not active) and cannot take new obligations.
    error NodeNotActive(address account);
    /// @notice The node is not unbonding.
    error NodeNotUnbonding(address account);
    /// @notice The Ed25519 key is zero.
    error NodeZeroKey();
    /// @notice Role bits are empty or unknown.
    error NodeInvalidRoles(uint8 roles);
    /// @notice The node lacks the role the call needs.
    error NodeMissingRole(address account, uint8 role);
    /// @notice The stake sent is below MIN_STAKE for a provider or auditor.
    error NodeStakeBelowMinimum(uint256 sent, uint256 minimum);
    /// @notice Nothing was sent.
    error NodeZeroAmount();
    /// @notice Free (unlocked) stake does not cover the lock.
    error NodeInsufficientFreeStake(address account, uint256 free, uint256 needed);
    /// @notice The unbonding delay has not elapsed.
    error NodeUnbondingNotElapsed(uint64 availableAt);
    /// @notice The node still has seats or challenges open.
    error NodeObligationsOpen(uint32 obligations);

    /// @notice The job id is zero.
    error JobZeroId();
    /// @notice A job with this id exists.
    error JobExists(bytes32 jobId);
    /// @notice No job with this id.
    error JobNotFound(bytes32 jobId);
    /// @notice The job is in a status where this move is not allowed.
    error JobWrongStatus(bytes32 jobId, JobStatus status);
    /// @notice No price was escrowed.
    error JobZeroPrice();
    /// @notice The number of providers is zero or above MAX_PROVIDERS.
    error JobInvalidProviderCount(uint16 providersWanted);
    /// @notice The per-provider stake is zero.
    error JobZeroProviderStake();
    /// @notice Deadlines must satisfy now < acceptBy < commitBy < challengeBy.
    error JobDeadlinesOutOfOrder(uint64 acceptBy, uint64 commitBy, uint64 challengeBy);
    /// @notice The ruling period is zero or above MAX_RULING_PERIOD.
    error JobInvalidRulingPeriod(uint64 rulingPeriod);
    /// @notice The deadline for this move has passed.
    error JobDeadlinePassed(uint64 deadline);
    /// @notice The move is allowed only from `notBefore` on.
    error JobTooEarly(uint64 notBefore);
    /// @notice The client or the referee cannot be a party of its own job.
    error JobPartyIsReferee(address account);
    /// @notice The provider already holds a seat in this job.
    error JobAlreadyAccepted(address provider);
    /// @notice The account holds no seat in this job.
    error JobNotAProvider(address account);
    /// @notice The provider already committed.
    error JobAlreadyCommitted(address provider);
    /// @notice The trace root is zero.
    error JobZeroTraceRoot();
    /// @notice Disputes of this job are still open.
    error JobDisputesOpen(uint16 openDisputes);

    /// @notice No dispute with this id.
    error DisputeNotFound(uint256 disputeId);
    /// @notice The dispute is not open.
    error DisputeNotOpen(uint256 disputeId, DisputeStatus status);
    /// @notice A party cannot dispute itself.
    error DisputeSelf();
    /// @notice The party has not committed a trace root.
    error DisputeNotCommitted(address party);
    /// @notice The party already lost its lock in this job.
    error DisputeForfeited(address party);
    /// @notice Two providers with the same trace root have nothing to dispute.
    error DisputeRootsAgree(bytes32 traceRoot);
    /// @notice These two parties already had a dispute in this job.
    error DisputePairRepeated(address challenger, address respondent);
    /// @notice Only the job's referee may rule.
    error DisputeNotReferee(address caller);
    /// @notice The outcome is None.
    error DisputeInvalidOutcome();

    /// @notice The account has no credit.
    error WithdrawNothing(address account);
    /// @notice The transfer to the account failed.
    error WithdrawTransferFailed(address account, uint256 amount);

    // ------------------------------------------------------------------ modifiers

    modifier nonReentrant() {
        // One entry at a time (transient storage: cleared at the end of the transaction).
        if (_entered) revert SettlementReentrantCall();
        _entered = true;
        _;
        _entered = false;
    }

    /// @notice Fixes the unbonding delay, the minimum stake and the winner's share of a slash.
    constructor(uint64 unbondingDelay, uint256 minStake, uint16 winnerShareBps) {
        // A share above 100% would pay out more than was forfeited.
        if (winnerShareBps > BPS) revert SettlementInvalidShare(winnerShareBps);
        UNBONDING_DELAY = unbondingDelay;
        MIN_STAKE = minStake;
        WINNER_SHARE_BPS = winnerShareBps;
    }

    // ------------------------------------------------------------------ nodes

    /// @notice Registers the caller as a node; the value sent is its stake.
    function register(bytes32 ed25519Key, uint8 roles) external payable nonReentrant {
        Node storage node = _nodes[msg.sender];
        // One registration per account at a time.
        if (node.status != NodeStatus.None) revert NodeAlreadyRegistered(msg.sender);
        // The key is what binds this account to the node's protocol signatures.
        if (ed25519Key == bytes32(0)) revert NodeZeroKey();
        // At least one role, and only known ones.
        if (roles == 0 || roles & ~(ROLE_PROVIDER | ROLE_AUDITOR | ROLE_CLIENT) != 0) revert NodeInvalidRoles(roles);
        // Providers and auditors put stake at risk; a pure client need not.
        if (roles & (ROLE_PROVIDER | ROLE_AUDITOR) != 0 && msg.value < MIN_STAKE) {
            revert NodeStakeBelowMinimum(msg.value, MIN_STAKE);
        }
        node.ed25519Key = ed25519Key;
        node.stake = msg.value;
        node.roles = roles;
        node.status = NodeStatus.Active;
        emit NodeRegistered(msg.sender, ed25519Key, roles, msg.value);
    }

    /// @notice Adds the value sent to the caller's stake.
    function addStake() external payable nonReentrant {
        Node storage node = _activeNode(msg.sender);
        // A zero top-up is a mistake.
        if (msg.value == 0) revert NodeZeroAmount();
        node.stake += msg.value;
        emit StakeAdded(msg.sender, msg.value, node.stake);
    }

    /// @notice Starts the unbonding delay; the node takes no new seats or challenges meanwhile.
    function beginUnbonding() external nonReentrant {
        Node storage node = _activeNode(msg.sender);
        node.status = NodeStatus.Unbonding;
        node.unbondingSince = uint64(block.timestamp);
        emit UnbondingBegun(msg.sender, uint64(block.timestamp) + UNBONDING_DELAY);
    }

    /// @notice Returns an unbonding node to active.
    function cancelUnbonding() external nonReentrant {
        Node storage node = _nodes[msg.sender];
        // Only an unbonding node can cancel.
        if (node.status != NodeStatus.Unbonding) revert NodeNotUnbonding(msg.sender);
        node.status = NodeStatus.Active;
        node.unbondingSince = 0;
        emit UnbondingCancelled(msg.sender);
    }

    /// @notice Ends the registration after the delay and with no open obligation; credits the stake.
    function completeUnbonding() external nonReentrant {
        Node storage node = _nodes[msg.sender];
        // Only an unbonding node can leave.
        if (node.status != NodeStatus.Unbonding) revert NodeNotUnbonding(msg.sender);
        uint64 availableAt = node.unbondingSince + UNBONDING_DELAY;
        // The delay gives pending disputes time to surface.
        if (block.timestamp < availableAt) revert NodeUnbondingNotElapsed(availableAt);
        // A seat or a challenge still holds part of the stake.
        if (node.obligations != 0) revert NodeObligationsOpen(node.obligations);
        uint256 stake = node.stake;
        delete _nodes[msg.sender];
        _credits[msg.sender] += stake;
        emit NodeExited(msg.sender, stake);
    }

    // ------------------------------------------------------------------ jobs

    /// @notice Opens a job: the value sent is the price held in escrow. A zero referee means the caller.
    function openJob(
        bytes32 jobId,
        uint16 providersWanted,
        uint256 providerStake,
        uint64 acceptBy,
        uint64 commitBy,
        uint64 challengeBy,
        uint64 rulingPeriod,
        address referee
    ) external payable nonReentrant {
        // The job id is the hash of the signed job spec, never zero.
        if (jobId == bytes32(0)) revert JobZeroId();
        // Job ids are unique forever.
        if (_jobs[jobId].status != JobStatus.None) revert JobExists(jobId);
        // Providers work for the escrowed price.
        if (msg.value == 0) revert JobZeroPrice();
        // At least one seat; the settlement loop is bounded.
        if (providersWanted == 0 || providersWanted > MAX_PROVIDERS) revert JobInvalidProviderCount(providersWanted);
        // A seat must put stake at risk.
        if (providerStake == 0) revert JobZeroProviderStake();
        // Phases follow each other and all lie in the future.
        if (block.timestamp >= acceptBy || acceptBy >= commitBy || commitBy >= challengeBy) {
            revert JobDeadlinesOutOfOrder(acceptBy, commitBy, challengeBy);
        }
        // The referee needs some time to rule, and disputes must end some day.
        if (rulingPeriod == 0 || rulingPeriod > MAX_RULING_PERIOD) revert JobInvalidRulingPeriod(rulingPeriod);
        if (referee == address(0)) referee = msg.sender;

        Job storage job = _jobs[jobId];
        job.client = msg.sender;
        job.referee = referee;
        job.price = msg.value;
        job.providerStake = providerStake;
        job.providersWanted = providersWanted;
        job.acceptBy = acceptBy;
        job.commitBy = commitBy;
        job.challengeBy = challengeBy;
        job.rulingPeriod = rulingPeriod;
        job.status = JobStatus.Open;
        emit JobOpened(
            jobId, msg.sender, referee, msg.value, providerStake, providersWanted, acceptBy, commitBy, challengeBy, rulingPeriod
        );
    }

    /// @notice Takes a seat in an open job, locking `providerStake` of the caller's free stake.
    function accept(bytes32 jobId) external nonReentrant {
        Job storage job = _existingJob(jobId);
        // Seats are taken only while the job is open.
        if (job.status != JobStatus.Open) revert JobWrongStatus(jobId, job.status);
        // ... and before the acceptance deadline.
        if (block.timestamp >= job.acceptBy) revert JobDeadlinePassed(job.acceptBy);
        // The client and the referee judge the job, they do not run it.
        if (msg.sender == job.client || msg.sender == job.referee) revert JobPartyIsReferee(msg.sender);
        Seat storage seat = _seats[jobId][msg.sender];
        // One seat per provider.
        if (seat.accepted) revert JobAlreadyAccepted(msg.sender);
        Node storage node = _activeNode(msg.sender);
        // Only providers take seats.
        if (node.roles & ROLE_PROVIDER == 0) revert NodeMissingRole(msg.sender, ROLE_PROVIDER);
        _lock(node, msg.sender, job.providerStake);

        seat.accepted = true;
        _providers[jobId].push(msg.sender);
        job.providersAccepted += 1;
        emit ProviderAccepted(jobId, msg.sender, job.providerStake);
        if (job.providersAccepted == job.providersWanted) _advance(jobId, job, JobStatus.Accepted);
    }

    /// @notice Records the caller's trace root for the job (once, before the commit deadline).
    function commit(bytes32 jobId, bytes32 traceRoot) external nonReentrant {
        Job storage job = _existingJob(jobId);
        JobStatus status = job.status;
        // Commitments come after all seats are taken and before settlement.
        if (status != JobStatus.Accepted && status != JobStatus.Committed && status != JobStatus.Disputed) {
            revert JobWrongStatus(jobId, status);
        }
        // Late roots are not accepted.
        if (block.timestamp >= job.commitBy) revert JobDeadlinePassed(job.commitBy);
        Seat storage seat = _seats[jobId][msg.sender];
        // Only seated providers commit.
        if (!seat.accepted) revert JobNotAProvider(msg.sender);
        // One root per provider: a second one would be equivocation.
        if (seat.committed) revert JobAlreadyCommitted(msg.sender);
        // A zero root commits to nothing.
        if (traceRoot == bytes32(0)) revert JobZeroTraceRoot();

        seat.committed = true;
        seat.traceRoot = traceRoot;
        job.commitments += 1;
        emit TraceCommitted(jobId, msg.sender, traceRoot);
        if (status == JobStatus.Accepted) _advance(jobId, job, JobStatus.Committed);
    }

    /// @notice Opens a dispute against a committed provider. A provider of the job challenges with
    /// its seat lock at risk; anyone else must be an active auditor and locks a bond of `providerStake`.
    function openDispute(bytes32 jobId, address respondent) external nonReentrant returns (uint256 disputeId) {
        Job storage job = _existingJob(jobId);
        // Disputes need committed roots and an unsettled job.
        if (job.status != JobStatus.Committed && job.status != JobStatus.Disputed) revert JobWrongStatus(jobId, job.status);
        // ... and come before the challenge deadline.
        if (block.timestamp >= job.challengeBy) revert JobDeadlinePassed(job.challengeBy);
        // Nobody argues with itself.
        if (msg.sender == respondent) revert DisputeSelf();
        // The client and the referee judge; they are never a party.
        if (msg.sender == job.client || msg.sender == job.referee) revert JobPartyIsReferee(msg.sender);
        Seat storage theirs = _seats[jobId][respondent];
        // Only a committed root can be wrong.
        if (!theirs.committed) revert DisputeNotCommitted(respondent);
        // A provider that already lost has nothing left at stake here.
        if (theirs.forfeited) revert DisputeForfeited(respondent);
        bytes32 pairKey = _pairKey(jobId, msg.sender, respondent);
        // One dispute per pair of parties and job.
        if (_pairDisputed[pairKey]) revert DisputePairRepeated(msg.sender, respondent);

        uint256 bond;
        Seat storage mine = _seats[jobId][msg.sender];
        if (mine.accepted) {
            // A provider challenger must itself stand behind a root...
            if (!mine.committed) revert DisputeNotCommitted(msg.sender);
            // ... that it has not already lost ...
            if (mine.forfeited) revert DisputeForfeited(msg.sender);
            // ... and that differs from the respondent's.
            if (mine.traceRoot == theirs.traceRoot) revert DisputeRootsAgree(mine.traceRoot);
        } else {
            Node storage node = _activeNode(msg.sender);
            // Outsiders challenge only as auditors.
            if (node.roles & ROLE_AUDITOR == 0) revert NodeMissingRole(msg.sender, ROLE_AUDITOR);
            bond = job.providerStake;
            _lock(node, msg.sender, bond);
        }

        _pairDisputed[pairKey] = true;
        disputeId = ++_disputeCount;
        uint64 ruleBy = uint64(block.timestamp) + job.rulingPeriod;
        Dispute storage dispute = _disputes[disputeId];
        dispute.jobId = jobId;
        dispute.challenger = msg.sender;
        dispute.respondent = respondent;
        dispute.bond = bond;
        dispute.openedAt = uint64(block.timestamp);
        dispute.ruleBy = ruleBy;
        dispute.status = DisputeStatus.Open;
        job.openDisputes += 1;
        emit DisputeOpened(disputeId, jobId, msg.sender, respondent, bond, ruleBy);
        if (job.status == JobStatus.Committed) _advance(jobId, job, JobStatus.Disputed);
    }

    /// @notice The job's referee rules a dispute, once and before its deadline; losers are slashed.
    function rule(uint256 disputeId, Outcome outcome, uint64 step, uint64 node, bytes32 transcriptHash)
        external
        nonReentrant
    {
        Dispute storage dispute = _openDispute(disputeId);
        bytes32 jobId = dispute.jobId;
        Job storage job = _jobs[jobId];
        // Only the job's referee rules.
        if (msg.sender != job.referee) revert DisputeNotReferee(msg.sender);
        // A verdict after the deadline comes too late: the dispute lapses instead.
        if (block.timestamp >= dispute.ruleBy) revert JobDeadlinePassed(dispute.ruleBy);
        // A verdict names a result.
        if (outcome == Outcome.None) revert DisputeInvalidOutcome();

        dispute.status = DisputeStatus.Ruled;
        dispute.outcome = outcome;
        dispute.step = step;
        dispute.node = node;
        dispute.transcriptHash = transcriptHash;
        emit DisputeRuled(disputeId, outcome, step, node, transcriptHash);

        address challenger = dispute.challenger;
        address respondent = dispute.respondent;
        if (outcome == Outcome.ChallengerWins) {
            _releaseBond(jobId, dispute);
            _forfeitSeat(jobId, job, respondent, challenger);
        } else if (outcome == Outcome.RespondentWins) {
            _forfeitChallenger(jobId, job, dispute, respondent);
        } else {
            _forfeitChallenger(jobId, job, dispute, address(0));
            _forfeitSeat(jobId, job, respondent, address(0));
        }
        _closeDispute(jobId, job);
    }

    /// @notice Closes a dispute whose ruling deadline passed without a verdict; locks stay as before it.
    function lapse(uint256 disputeId) external nonReentrant {
        Dispute storage dispute = _openDispute(disputeId);
        // The referee keeps its chance until the deadline.
        if (block.timestamp < dispute.ruleBy) revert JobTooEarly(dispute.ruleBy);
        dispute.status = DisputeStatus.Lapsed;
        emit DisputeLapsed(disputeId);
        bytes32 jobId = dispute.jobId;
        _releaseBond(jobId, dispute);
        _closeDispute(jobId, _jobs[jobId]);
    }

    /// @notice Settles a job once no move is left: pays honest providers, slashes no-shows,
    /// refunds the client when no honest result arrived. Anyone may call it.
    function settle(bytes32 jobId) external nonReentrant {
        Job storage job = _existingJob(jobId);
        JobStatus status = job.status;
        if (status == JobStatus.Open) {
            // Seats may still be taken until the acceptance deadline.
            if (block.timestamp < job.acceptBy) revert JobTooEarly(job.acceptBy);
        } else if (status == JobStatus.Accepted) {
            // Roots may still arrive until the commit deadline.
            if (block.timestamp < job.commitBy) revert JobTooEarly(job.commitBy);
        } else if (status == JobStatus.Committed) {
            // Challenges may still come until the challenge deadline.
            if (block.timestamp < job.challengeBy) revert JobTooEarly(job.challengeBy);
        } else if (status == JobStatus.Disputed) {
            // Every dispute must be ruled or lapsed first.
            revert JobDisputesOpen(job.openDisputes);
        } else {
            // Settled jobs stay settled.
            revert JobWrongStatus(jobId, status);
        }

        address[] storage providers = _providers[jobId];
        uint256 count = providers.length;
        uint256 honest;
        for (uint256 i; i < count; ++i) {
            Seat storage seat = _seats[jobId][providers[i]];
            if (seat.committed && !seat.forfeited) honest += 1;
        }
        JobStatus final_ = honest == 0 ? JobStatus.Refunded : JobStatus.Finalized;
        _advance(jobId, job, final_);

        uint256 price = job.price;
        uint256 share = honest == 0 ? 0 : price / honest;
        for (uint256 i; i < count; ++i) {
            address provider = providers[i];
            Seat storage seat = _seats[jobId][provider];
            Node storage node = _nodes[provider];
            node.obligations -= 1;
            if (seat.forfeited) continue;
            if (seat.committed || status == JobStatus.Open) {
                // Honest providers, and seats of a job that never filled, get their lock back.
                node.locked -= job.providerStake;
                emit StakeUnlocked(jobId, provider, job.providerStake);
                if (seat.committed) {
                    _credits[provider] += share;
                    emit ProviderPaid(jobId, provider, share);
                }
            } else {
                // A seated provider that never committed failed the client.
                _forfeitSeat(jobId, job, provider, job.client);
            }
        }
        uint256 refund = price - share * honest;
        if (refund != 0) {
            _credits[job.client] += refund;
            emit ClientRefunded(jobId, job.client, refund);
        }
    }

    // ------------------------------------------------------------------ payments

    /// @notice Sends the caller all of its credit.
    function withdraw() external nonReentrant {
        uint256 amount = _credits[msg.sender];
        // Nothing owed, nothing sent.
        if (amount == 0) revert WithdrawNothing(msg.sender);
        _credits[msg.sender] = 0;
        emit Withdrawn(msg.sender, amount);
        (bool ok,) = payable(msg.sender).call{value: amount}("");
        // A refused transfer undoes the whole withdrawal; the credit stays.
        if (!ok) revert WithdrawTransferFailed(msg.sender, amount);
    }

    // ------------------------------------------------------------------ views

    /// @notice The node registered by `account` (all zero when none).
    function getNode(address account) external view returns (Node memory) {
        return _nodes[account];
    }

    /// @notice The job with this id (all zero when none).
    function getJob(bytes32 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice The providers seated in the job, in the order they accepted.
    function getProviders(bytes32 jobId) external view returns (address[] memory) {
        return _providers[jobId];
    }

    /// @notice The seat of `provider` in the job.
    function getSeat(bytes32 jobId, address provider) external view returns (Seat memory) {
        return _seats[jobId][provider];
    }

    /// @notice The dispute with this id (all zero when none).
    function getDispute(uint256 disputeId) external view returns (Dispute memory) {
        return _disputes[disputeId];
    }

    /// @notice How many disputes were ever opened (ids run from 1 to this number).
    function disputeCount() external view returns (uint256) {
        return _disputeCount;
    }

    /// @notice What `account` can withdraw now.
    function creditOf(address account) external view returns (uint256) {
        return _credits[account];
    }

    // ------------------------------------------------------------------ internals

    function _activeNode(address account) private view returns (Node storage node) {
        node = _nodes[account];
        // New obligations need a registered node...
        if (node.status == NodeStatus.None) revert NodeNotRegistered(account);
        // ... that is not on its way out.
        if (node.status != NodeStatus.Active) revert NodeNotActive(account);
    }

    function _existingJob(bytes32 jobId) private view returns (Job storage job) {
        job = _jobs[jobId];
        // Moves name a job that was opened.
        if (job.status == JobStatus.None) revert JobNotFound(jobId);
    }

    function _openDispute(uint256 disputeId) private view returns (Dispute storage dispute) {
        dispute = _disputes[disputeId];
        // The id must name a dispute...
        if (dispute.status == DisputeStatus.None) revert DisputeNotFound(disputeId);
        // ... that is still open: one verdict or one lapse, never both.
        if (dispute.status != DisputeStatus.Open) revert DisputeNotOpen(disputeId, dispute.status);
    }

    function _lock(Node storage node, address account, uint256 amount) private {
        uint256 free = node.stake - node.locked;
        // A lock needs that much stake not already locked.
        if (free < amount) revert NodeInsufficientFreeStake(account, free, amount);
        node.locked += amount;
        node.obligations += 1;
    }

    function _advance(bytes32 jobId, Job storage job, JobStatus status) private {
        job.status = status;
        emit JobAdvanced(jobId, status);
    }

    function _closeDispute(bytes32 jobId, Job storage job) private {
        job.openDisputes -= 1;
        if (job.openDisputes == 0) _advance(jobId, job, JobStatus.Committed);
    }

    function _releaseBond(bytes32 jobId, Dispute storage dispute) private {
        uint256 bond = dispute.bond;
        if (bond == 0) return;
        Node storage node = _nodes[dispute.challenger];
        node.locked -= bond;
        node.obligations -= 1;
        emit StakeUnlocked(jobId, dispute.challenger, bond);
    }

    function _forfeitChallenger(bytes32 jobId, Job storage job, Dispute storage dispute, address beneficiary) private {
        uint256 bond = dispute.bond;
        if (bond == 0) {
            // A provider challenger risks its seat lock.
            _forfeitSeat(jobId, job, dispute.challenger, beneficiary);
            return;
        }
        Node storage node = _nodes[dispute.challenger];
        node.locked -= bond;
        node.stake -= bond;
        node.obligations -= 1;
        _slash(jobId, dispute.challenger, bond, beneficiary);
    }

    function _forfeitSeat(bytes32 jobId, Job storage job, address provider, address beneficiary) private {
        Seat storage seat = _seats[jobId][provider];
        // A seat lock is lost at most once.
        if (seat.forfeited) return;
        seat.forfeited = true;
        uint256 amount = job.providerStake;
        Node storage node = _nodes[provider];
        node.locked -= amount;
        node.stake -= amount;
        _slash(jobId, provider, amount, beneficiary);
    }

    /// Splits a forfeited lock: WINNER_SHARE_BPS to the beneficiary (none: address(0)), the rest burned.
    function _slash(bytes32 jobId, address loser, uint256 amount, address beneficiary) private {
        uint256 toBeneficiary = beneficiary == address(0) ? 0 : amount * WINNER_SHARE_BPS / BPS;
        uint256 burned = amount - toBeneficiary;
        if (toBeneficiary != 0) _credits[beneficiary] += toBeneficiary;
        emit StakeSlashed(jobId, loser, amount, beneficiary, toBeneficiary, burned);
        if (burned != 0) {
            // BURN_ADDRESS has no code: the transfer cannot call back or fail.
            (bool ok,) = payable(BURN_ADDRESS).call{value: burned}("");
            if (!ok) revert WithdrawTransferFailed(BURN_ADDRESS, burned);
        }
    }

    function _pairKey(bytes32 jobId, address a, address b) private pure returns (bytes32) {
        (address low, address high) = a < b ? (a, b) : (b, a);
        return keccak256(abi.encode(jobId, low, high));
    }
}
