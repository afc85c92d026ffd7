// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {
    Allowances,
    Deadlines,
    ForfeitReason,
    Job,
    JobAllowances,
    JobStatus,
    JobTerms,
    Node,
    Seat,
    SeatStatus
} from "./SettlementTypesV2.sol";
import {GameParams} from "./GameTypesV2.sol";
import {GavelDemandsV2} from "./GavelDemandsV2.sol";
import {GavelRefereesV2} from "./GavelRefereesV2.sol";
import {LibList} from "./LibList.sol";
import {NodeRegistryV2} from "./NodeRegistryV2.sol";
import {SettlementStorageV2} from "./SettlementStorageV2.sol";

/// @title GavelSettlementV2
/// @notice A job's life on chain (docs/economics.md, sections 3 to 6 and 11): terms bound to the
/// client's account, derived deadlines, commit-reveal of whole traces, forfeits, payout.
/// @dev Theory of operation.
///  - The client opens a job with its signed terms as a struct and the spec they hash; the id
///    is keccak(chainid, this, client, nonce), so nobody else can open it. `openJob` checks
///    the client's registered key, the bounds of section 3 and `providerStake ≥ minStake`, and
///    stores the terms' hash and the allowances they imply (one slot).
///  - Providers take seats by locking `providerStake`; the last seat fixes
///    `commitBy = now + W_train`. Each seat commits keccak(jobId, seat, traceRoot, salt): a
///    commitment names its author, so a copy of it cannot be opened by the copier.
///  - Reveals open when the last seat commits (`revealFrom`), or at `commitBy` if one never
///    did, for W_reveal = Δ. A reveal carries the whole trace (C+1 state hashes) in calldata;
///    its `challengeBy` runs a whole replay from that reveal.
///  - Anyone closes a seat that missed its deadline (`closeSeat`): it forfeits its lock,
///    w·S to the client and the rest burned. `settle` (anyone, once no deadline is left and no
///    item is open) closes what is left, pays each revealed seat p = ⌊P/n⌋ and its lock, and
///    credits the client the rest of the price.
///  - The claim game of section 8 and equivocation (section 10) live in `GavelGamesV2`, rulings,
///    draws and appeals (section 9) in `GavelRefereesV2`: modules deployed before this contract,
///    named in its constructor and reached by delegatecall from `fallback` (EIP-170 caps one
///    contract's code at 24,576 bytes, EIP-3860 its creation code at twice that, so neither can
///    be created here). All inherit `SettlementStorageV2`, so a module moves this contract's
///    stakes and nobody else's: there is one contract holding the money. A game counts in `openItems`.
///  - A client that referees locks P + w·S·n of its stake at openJob, back at settle.
///  - Section 7's demands of data and their witnesses live in `GavelDemandsV2`, a third module; an
///    open demand counts in `openItems` and its end extends the seat's `challengeBy`.
contract GavelSettlementV2 is SettlementStorageV2, NodeRegistryV2 {
    // ------------------------------------------------------------------ constants

    /// @notice Most seats one job can have (bounds the settlement loop).
    uint16 public constant MAX_PROVIDERS = 16;
    /// @notice Longest checkpoint interval k, in steps.
    uint32 public constant MAX_INTERVAL_STEPS = 1024;
    /// @notice Most entries of one list: C+1 and N+1 are bounded by it.
    uint32 public constant MAX_LIST = 1024;
    /// @notice s: a seat gets this many times the declared cost of the work it must redo.
    uint256 public constant HARDWARE_SLACK = 2;

    /// @notice Δ: a transaction sent is mined within this many seconds.
    uint32 public immutable MARGIN;
    /// @notice β: least peer-to-peer bandwidth assumed, in bytes per second.
    uint64 public immutable BANDWIDTH;
    /// @notice Longest time between blocks, in seconds.
    uint32 public immutable BLOCK_SECONDS;
    /// @notice Most seconds one interval's recompute s·k·σ may take.
    uint32 public immutable MAX_INTERVAL_SECONDS;

    /// @notice The claim game module (sections 8 and 10), run by delegatecall on this contract's storage.
    address public immutable GAMES;
    /// @notice The referee module (section 9: rule, drawReferee, appeal, ruleAppeal, timeoutReferee, getRuling;
    /// the fourth level's openStepGame, getStepGame, getStepClaim).
    address public immutable REFEREES;
    /// @notice The availability module (section 7: demands of data and their witnesses).
    address public immutable DEMANDS;

    // ------------------------------------------------------------------ events

    /// @notice A client opened a job and escrowed its price; the terms and spec are all an auditor needs.
    event JobOpened(bytes32 indexed jobId, address indexed client, bytes32 termsHash, JobTerms terms, bytes spec);
    /// @notice A provider took a seat and locked part of its stake.
    event SeatTaken(bytes32 indexed jobId, address indexed seat, uint256 locked);
    /// @notice The last seat was taken; every seat commits before `commitBy`.
    event JobFilled(bytes32 indexed jobId, uint64 commitBy);
    /// @notice A seat committed to its trace root (hidden in the commitment).
    event TraceCommitted(bytes32 indexed jobId, address indexed seat, bytes32 commitment);
    /// @notice Every seat committed; reveals are due from `revealFrom` until `revealBy`.
    event RevealOpened(bytes32 indexed jobId, uint64 revealFrom, uint64 revealBy);
    /// @notice A seat revealed its trace (in the transaction's input); games on it open before `challengeBy`.
    /// `trace` is the trace itself: auditors read it here, whoever sent the call.
    event TraceRevealed(bytes32 indexed jobId, address indexed seat, bytes32 traceRoot, uint64 challengeBy, bytes32[] trace);
    /// @notice A seat lost its lock.
    event SeatForfeited(bytes32 indexed jobId, address indexed seat, ForfeitReason reason);
    /// @notice A revealed seat was credited its pay p.
    event ProviderPaid(bytes32 indexed jobId, address indexed provider, uint256 amount);
    /// @notice The client was credited what the seats were not paid.
    event ClientRefunded(bytes32 indexed jobId, address indexed client, uint256 amount);
    /// @notice A job ended: Finalized when some seat was paid, Refunded otherwise.
    event JobSettled(bytes32 indexed jobId, JobStatus status, uint16 paidSeats);

    // ------------------------------------------------------------------ errors

    /// @notice A constructor setting (Δ, β, block time, interval bound) is zero.
    error SettlementZeroSetting();
    /// @notice A module's settings (Δ, w, the node rules) are not this contract's.
    error SettlementModuleMismatch(address module);
    /// @notice A job with this id exists.
    error JobExists(bytes32 jobId);
    /// @notice No job with this id.
    error JobNotFound(bytes32 jobId);
    /// @notice The job is in a status where this move is not allowed.
    error JobWrongStatus(bytes32 jobId, JobStatus status);
    /// @notice The terms name a key that is not the client's registered Ed25519 key.
    error JobWrongClientKey(bytes32 clientKey);
    /// @notice The value sent is not the price.
    error JobWrongPayment(uint256 sent, uint256 price);
    /// @notice keccak256(spec) is not the terms' specHash.
    error JobWrongSpec(bytes32 specHash);
    /// @notice The number of seats is zero or above MAX_PROVIDERS.
    error JobInvalidProviderCount(uint16 providersWanted);
    /// @notice Steps, checkpoint interval or graph size outside the bounds of section 3.
    error JobInvalidShape(uint64 steps, uint32 checkpointEvery, uint32 graphNodes);
    /// @notice A declared cost (σ, ρ, checkpoint or evidence size) is zero.
    error JobZeroCost();
    /// @notice The offer stays open for no time.
    error JobZeroAcceptWindow();
    /// @notice p* is zero or above 100%.
    error JobInvalidCatchRate(uint16 catchBps);
    /// @notice One interval's recompute s·k·σ exceeds MAX_INTERVAL_SECONDS.
    error JobIntervalTooLong(uint256 seconds_, uint256 maximum);
    /// @notice An allowance does not fit 32 bits of seconds.
    error JobTooLong(uint256 seconds_);
    /// @notice The seat stake is not above S_min of section 11.
    error JobStakeBelowMinimum(uint256 stake, uint256 minimum);
    /// @notice S·(1 − w) is below γ·(G_path + MAX_JOINERS·G_join) + f_R + MAX_REIMBURSED_DEMANDS·D, what a
    /// won path and the demanders served through a witness are owed.
    error JobStakeBelowReimbursements(uint256 stake, uint256 owed);
    /// @notice The deadline for this move has passed.
    error JobDeadlinePassed(uint64 deadline);
    /// @notice The move is allowed only from `notBefore` on.
    error JobTooEarly(uint64 notBefore);
    /// @notice The client cannot take a seat in its own job.
    error JobClientCannotSit(address account);
    /// @notice The provider already holds a seat in this job.
    error JobAlreadySeated(address account);
    /// @notice The account holds no seat in this job.
    error JobNotASeat(address account);
    /// @notice The seat already committed.
    error JobAlreadyCommitted(address seat);
    /// @notice The commitment is zero.
    error JobZeroCommitment();
    /// @notice The seat has not committed.
    error JobNotCommitted(address seat);
    /// @notice The seat already revealed.
    error JobAlreadyRevealed(address seat);
    /// @notice The trace does not hold C+1 state hashes.
    error JobWrongTraceLength(uint256 length, uint256 expected);
    /// @notice The trace does not start from the terms' initial state.
    error JobWrongInitialState(bytes32 first);
    /// @notice keccak(jobId, caller, root, salt) is not the caller's commitment.
    error JobCommitmentMismatch(bytes32 computed);
    /// @notice The seat already forfeited.
    error JobSeatForfeited(address seat);
    /// @notice The seat revealed: nothing to close.
    error JobNothingToClose(address seat);
    /// @notice Demands, games or appeals of the job are still open.
    error JobItemsOpen(uint32 openItems);

    /// @notice Fixes the unbonding delay, the least node stake, w, and the chain's settings of section 3.
    constructor(
        uint64 unbondingDelay,
        uint256 minNodeStake,
        uint16 winnerShareBps,
        uint32 margin,
        uint64 bandwidth,
        uint32 blockSeconds,
        uint32 maxIntervalSeconds,
        address games,
        address referees,
        address demands
    ) SettlementStorageV2(unbondingDelay, minNodeStake, winnerShareBps) {
        // Every deadline derives from these; a zero would make some allowance zero or divide by it.
        if (margin == 0 || bandwidth == 0 || blockSeconds == 0 || maxIntervalSeconds == 0) revert SettlementZeroSetting();
        MARGIN = margin;
        BANDWIDTH = bandwidth;
        BLOCK_SECONDS = blockSeconds;
        MAX_INTERVAL_SECONDS = maxIntervalSeconds;
        // The modules compute with their own copies of the immutables: they must be these.
        _checkModule(games);
        _checkModule(referees);
        _checkModule(demands);
        // The witness's draw deadline reads the block time.
        if (GavelDemandsV2(demands).BLOCK_SECONDS() != blockSeconds) revert SettlementModuleMismatch(demands);
        // The fourth level's duels are opened on one verifier and settled from the same.
        if (GavelRefereesV2(games).STEP_VERIFIER() != GavelRefereesV2(referees).STEP_VERIFIER()) {
            revert SettlementModuleMismatch(games);
        }
        GAMES = games;
        REFEREES = referees;
        DEMANDS = demands;
    }

    /// @notice Runs the modules' calls on this contract's storage and money: section 9's by
    /// GavelRefereesV2, section 7's by GavelDemandsV2, every other selector by GavelGamesV2.
    fallback() external {
        bytes4 selector = msg.sig;
        address module = selector == GavelRefereesV2.rule.selector || selector == GavelRefereesV2.appeal.selector
            || selector == GavelRefereesV2.drawReferee.selector || selector == GavelRefereesV2.ruleAppeal.selector
            || selector == GavelRefereesV2.timeoutReferee.selector || selector == GavelRefereesV2.getRuling.selector
            || selector == GavelRefereesV2.openStepGame.selector || selector == GavelRefereesV2.getStepGame.selector
            || selector == GavelRefereesV2.getStepClaim.selector
            ? REFEREES
            : GAMES;
        if (
            selector == GavelDemandsV2.demandData.selector || selector == GavelDemandsV2.releaseDemand.selector
                || selector == GavelDemandsV2.callWitness.selector || selector == GavelDemandsV2.drawWitness.selector
                || selector == GavelDemandsV2.attestServed.selector || selector == GavelDemandsV2.failDemand.selector
                || selector == GavelDemandsV2.timeoutWitness.selector || selector == GavelDemandsV2.getDemand.selector
                || selector == GavelDemandsV2.refusersOf.selector || selector == GavelDemandsV2.demandBondOf.selector
        ) module = DEMANDS;
        assembly {
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), module, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            if iszero(ok) { revert(0, returndatasize()) }
            return(0, returndatasize())
        }
    }

    // ------------------------------------------------------------------ jobs

    /// @notice Opens a job on the caller's terms, escrowing the price (the value sent).
    function openJob(JobTerms calldata terms, bytes calldata spec)
        external
        payable
        nonReentrant
        returns (bytes32 jobId)
    {
        Node storage client = _activeNode(msg.sender);
        // Only clients open jobs.
        if (client.roles & ROLE_CLIENT == 0) revert NodeMissingRole(msg.sender, ROLE_CLIENT);
        // The offer's signer is the key this account registered.
        if (terms.clientKey != client.ed25519Key) revert JobWrongClientKey(terms.clientKey);
        jobId = jobIdOf(msg.sender, terms.nonce);
        Job storage job = _jobs[jobId];
        // One job per (client, nonce).
        if (job.status != JobStatus.None) revert JobExists(jobId);
        // The escrow is the price, exactly.
        if (msg.value != terms.price) revert JobWrongPayment(msg.value, terms.price);
        // The spec in the transaction is the one the terms name.
        if (keccak256(spec) != terms.specHash) revert JobWrongSpec(terms.specHash);
        uint32 traceLength = _checkShape(terms);
        Allowances memory a = _allowances(terms, traceLength - 1);
        uint256 least = _minStake(terms);
        // The stake makes a cheat the client's sampling misses lose money (section 11).
        if (terms.providerStake < least) revert JobStakeBelowMinimum(terms.providerStake, least);
        // A won duel's moves, at the verifier's deepest tree, when the terms offer the fourth level.
        uint256 duel = terms.elementSpecRoot != bytes32(0) ? GAS_DUEL_BASE + MAX_STEP_DEPTH * GAS_DUEL_LEVEL : 0;
        uint256 owed = uint256(terms.gasPriceCap) * (GAS_OPEN_GAME + GAS_PICK_STEP + GAS_PICK_NODE + GAS_RESOLVE
            + MAX_JOINERS * GAS_JOIN + MAX_REIMBURSED_DEMANDS * (GAS_CALL_WITNESS + GAS_ATTEST) + duel)
            + terms.refereeFee + MAX_REIMBURSED_DEMANDS * terms.witnessFee;
        // A lost seat's S·(1 − w) pays a won path's gas (a won duel's among it), the referee fee and the
        // D of the demanders it served through a witness (sections 7, 8.5): the finders' w·S stays whole.
        if (uint256(terms.providerStake) * (BPS - WINNER_SHARE_BPS) < owed * BPS) {
            revert JobStakeBelowReimbursements(terms.providerStake, owed);
        }

        job.client = msg.sender;
        job.status = JobStatus.Open;
        job.acceptBy = uint64(block.timestamp) + terms.acceptWindow;
        job.providersWanted = terms.providersWanted;
        job.clientReferees = terms.clientReferees;
        job.traceLength = traceLength;
        job.price = terms.price;
        job.providerStake = terms.providerStake;
        job.termsHash = keccak256(abi.encode(terms));
        job.initialState = terms.initialState;
        job.allowed = JobAllowances(a.train, a.replay, a.interval, a.xferState, a.xferEvidence, a.rule, a.demand, a.game);
        // A demand's end reopens its seat to games for E_interval (section 7): the bound counts it.
        job.finalBy = job.acceptBy + a.train + a.reveal + a.replay + a.demand + a.interval + a.game;
        _gameParams[jobId] = GameParams(terms.steps, terms.checkpointEvery, terms.graphNodes, terms.gasPriceCap, terms.refereeFee,
            terms.witnessFee, terms.elementSpecRoot);
        if (terms.clientReferees) {
            // P + w·S·n: more than a client gains from one false ruling against every seat (section 9).
            uint256 bond = _refereeBondOf(job);
            _lock(client, msg.sender, bond);
            _refereeBond[jobId] = bond;
        }
        emit JobOpened(jobId, msg.sender, job.termsHash, terms, spec);
    }

    /// @notice Takes a seat in an open job, locking `providerStake` of the caller's free stake.
    function accept(bytes32 jobId) external nonReentrant {
        Job storage job = _existingJob(jobId);
        // Seats are taken only while the job is open...
        if (job.status != JobStatus.Open) revert JobWrongStatus(jobId, job.status);
        // ... and before the acceptance deadline.
        if (block.timestamp >= job.acceptBy) revert JobDeadlinePassed(job.acceptBy);
        // The client pays for the work; it does not check its own purchase as a seat.
        if (msg.sender == job.client) revert JobClientCannotSit(msg.sender);
        Seat storage seat = _seats[jobId][msg.sender];
        // One seat per provider.
        if (seat.status != SeatStatus.None) revert JobAlreadySeated(msg.sender);
        Node storage node = _activeNode(msg.sender);
        // Only providers take seats.
        if (node.roles & ROLE_PROVIDER == 0) revert NodeMissingRole(msg.sender, ROLE_PROVIDER);
        _lock(node, msg.sender, job.providerStake);

        seat.status = SeatStatus.Taken;
        _seatsOf[jobId].push(msg.sender);
        job.providersTaken += 1;
        emit SeatTaken(jobId, msg.sender, job.providerStake);
        if (job.providersTaken == job.providersWanted) {
            job.status = JobStatus.Running;
            job.commitBy = uint64(block.timestamp) + job.allowed.train;
            emit JobFilled(jobId, job.commitBy);
        }
    }

    /// @notice Commits the caller's seat to keccak256(abi.encode(jobId, seat, traceRoot, salt)).
    function commit(bytes32 jobId, bytes32 commitment) external nonReentrant {
        Job storage job = _runningJob(jobId);
        // Commitments come before the commit deadline.
        if (block.timestamp >= job.commitBy) revert JobDeadlinePassed(job.commitBy);
        Seat storage seat = _seatOf(jobId, msg.sender);
        // One commitment per seat.
        if (seat.status != SeatStatus.Taken) revert JobAlreadyCommitted(msg.sender);
        // A zero commitment is no commitment.
        if (commitment == bytes32(0)) revert JobZeroCommitment();

        seat.status = SeatStatus.Committed;
        seat.commitment = commitment;
        job.commitments += 1;
        emit TraceCommitted(jobId, msg.sender, commitment);
        if (job.commitments == job.providersWanted) {
            job.revealFrom = uint64(block.timestamp);
            emit RevealOpened(jobId, job.revealFrom, job.revealFrom + MARGIN);
        }
    }

    /// @notice Reveals the caller's whole trace (C+1 state hashes) and the salt of its commitment.
    function reveal(bytes32 jobId, bytes32[] calldata trace, bytes32 salt) external nonReentrant {
        Job storage job = _runningJob(jobId);
        (uint64 revealFrom, uint64 revealBy) = _revealWindow(job);
        // No trace is public before every commitment is fixed (or the commit deadline passed).
        if (block.timestamp < revealFrom) revert JobTooEarly(revealFrom);
        // Reveals are due within W_reveal.
        if (block.timestamp >= revealBy) revert JobDeadlinePassed(revealBy);
        Seat storage seat = _seatOf(jobId, msg.sender);
        // Only a commitment can be opened.
        if (seat.status == SeatStatus.Taken) revert JobNotCommitted(msg.sender);
        // Once.
        if (seat.status != SeatStatus.Committed) revert JobAlreadyRevealed(msg.sender);
        // A trace holds one state hash per checkpoint, the initial one included.
        if (trace.length != job.traceLength) revert JobWrongTraceLength(trace.length, job.traceLength);
        // Every trace starts from the state the terms name.
        if (trace[0] != job.initialState) revert JobWrongInitialState(trace[0]);
        bytes32 traceRoot = LibList.root(trace);
        bytes32 computed = keccak256(abi.encode(jobId, msg.sender, traceRoot, salt));
        // The commitment names its author: a copied one does not open for the copier.
        if (computed != seat.commitment) revert JobCommitmentMismatch(computed);

        uint64 challengeBy = uint64(block.timestamp) + job.allowed.replay;
        seat.status = SeatStatus.Revealed;
        seat.traceRoot = traceRoot;
        seat.challengeBy = challengeBy;
        if (challengeBy > job.challengeEnd) job.challengeEnd = challengeBy;
        emit TraceRevealed(jobId, msg.sender, traceRoot, challengeBy, trace);
    }

    /// @notice Forfeits a seat that missed its commit (NoCommit) or reveal (NoReveal) deadline. Anyone may call it.
    function closeSeat(bytes32 jobId, address account) external nonReentrant {
        Job storage job = _runningJob(jobId);
        Seat storage seat = _seatOf(jobId, account);
        // A lock is lost once.
        if (seat.forfeit != ForfeitReason.None) revert JobSeatForfeited(account);
        // A revealed seat has met every deadline of this slice.
        if (seat.status == SeatStatus.Revealed) revert JobNothingToClose(account);
        if (seat.status == SeatStatus.Taken) {
            // The seat may commit until the commit deadline.
            if (block.timestamp < job.commitBy) revert JobTooEarly(job.commitBy);
            _forfeit(jobId, job, account, seat, ForfeitReason.NoCommit);
        } else {
            (, uint64 revealBy) = _revealWindow(job);
            // The seat may reveal until the reveal deadline.
            if (block.timestamp < revealBy) revert JobTooEarly(revealBy);
            _forfeit(jobId, job, account, seat, ForfeitReason.NoReveal);
        }
    }

    /// @notice Ends a job once no move is left: closes seats that missed a deadline, pays each
    /// revealed seat p and its lock, credits the client the rest. Anyone may call it.
    function settle(bytes32 jobId) external nonReentrant {
        Job storage job = _existingJob(jobId);
        JobStatus status = job.status;
        if (status == JobStatus.Open) {
            // Seats may still be taken until the acceptance deadline.
            if (block.timestamp < job.acceptBy) revert JobTooEarly(job.acceptBy);
        } else if (status == JobStatus.Running) {
            // Demands, games and appeals end first.
            if (job.openItems != 0) revert JobItemsOpen(job.openItems);
            (, uint64 revealBy) = _revealWindow(job);
            // Commitments and reveals may still arrive until the reveal deadline.
            if (block.timestamp < revealBy) revert JobTooEarly(revealBy);
            // Every revealed trace stays open to games for a whole replay.
            if (block.timestamp < job.challengeEnd) revert JobTooEarly(job.challengeEnd);
        } else {
            // Settled jobs stay settled.
            revert JobWrongStatus(jobId, status);
        }

        address[] storage seats = _seatsOf[jobId];
        uint256 pay = job.price / job.providersWanted;
        uint16 paid;
        for (uint256 i; i < seats.length; ++i) {
            address account = seats[i];
            Seat storage seat = _seats[jobId][account];
            if (seat.forfeit != ForfeitReason.None) continue;
            if (status == JobStatus.Open) {
                // A job that never filled returns every lock.
                _unlock(jobId, account, job.providerStake);
            } else if (seat.status == SeatStatus.Taken) {
                _forfeit(jobId, job, account, seat, ForfeitReason.NoCommit);
            } else if (seat.status == SeatStatus.Committed) {
                _forfeit(jobId, job, account, seat, ForfeitReason.NoReveal);
            } else {
                seat.status = SeatStatus.Paid;
                paid += 1;
                _unlock(jobId, account, job.providerStake);
                _credits[account] += pay;
                emit ProviderPaid(jobId, account, pay);
            }
        }
        uint256 refereeBond = _refereeBond[jobId];
        if (refereeBond != 0) {
            _refereeBond[jobId] = 0;
            _unlock(jobId, job.client, refereeBond);
        }
        uint256 refund = job.price - pay * paid;
        job.status = paid == 0 ? JobStatus.Refunded : JobStatus.Finalized;
        if (refund != 0) {
            _credits[job.client] += refund;
            emit ClientRefunded(jobId, job.client, refund);
        }
        emit JobSettled(jobId, job.status, paid);
    }

    // ------------------------------------------------------------------ views

    /// @notice The id `client` gets for `nonce` on this contract and chain.
    function jobIdOf(address client, uint64 nonce) public view returns (bytes32) {
        return keccak256(abi.encode(block.chainid, address(this), client, nonce));
    }

    /// @notice The job with this id (all zero when none).
    function getJob(bytes32 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice The seats of the job, in the order they were taken.
    function seatsOf(bytes32 jobId) external view returns (address[] memory) {
        return _seatsOf[jobId];
    }

    /// @notice The seat of `account` in the job (all zero when none).
    function getSeat(bytes32 jobId, address account) external view returns (Seat memory) {
        return _seats[jobId][account];
    }

    /// @notice Every deadline of the job; a seat's own `challengeBy` is in its seat.
    function deadlinesOf(bytes32 jobId) external view returns (Deadlines memory d) {
        Job storage job = _existingJob(jobId);
        d.acceptBy = job.acceptBy;
        d.commitBy = job.commitBy;
        if (job.commitBy != 0) (d.revealFrom, d.revealBy) = _revealWindow(job);
        d.challengeEnd = job.challengeEnd;
        d.finalBy = job.finalBy;
    }

    /// @notice The allowances of section 3 for these terms (reverts where openJob would refuse them).
    function allowancesOf(JobTerms calldata terms) external view returns (Allowances memory) {
        return _allowances(terms, _checkShape(terms) - 1);
    }

    /// @notice The least seat stake for these terms: the smallest integer above p·(1 − p*)/(p*·(1 − w)).
    function minStake(JobTerms calldata terms) external view returns (uint256) {
        return _minStake(terms);
    }

    // ------------------------------------------------------------------ internals

    function _checkModule(address module) private view {
        GavelRefereesV2 m = GavelRefereesV2(module);
        bool same = m.MARGIN() == MARGIN && m.WINNER_SHARE_BPS() == WINNER_SHARE_BPS
            && m.UNBONDING_DELAY() == UNBONDING_DELAY && m.MIN_STAKE() == MIN_STAKE;
        if (!same) revert SettlementModuleMismatch(module);
    }

    function _existingJob(bytes32 jobId) private view returns (Job storage job) {
        job = _jobs[jobId];
        // Moves name a job that was opened.
        if (job.status == JobStatus.None) revert JobNotFound(jobId);
    }

    function _runningJob(bytes32 jobId) private view returns (Job storage job) {
        job = _existingJob(jobId);
        // Seats commit, reveal and close only while every seat is taken and nothing is settled.
        if (job.status != JobStatus.Running) revert JobWrongStatus(jobId, job.status);
    }

    function _seatOf(bytes32 jobId, address account) private view returns (Seat storage seat) {
        seat = _seats[jobId][account];
        // Only seated providers move.
        if (seat.status == SeatStatus.None) revert JobNotASeat(account);
    }

    /// From the last commitment (or commitBy, if one never came) for Δ.
    function _revealWindow(Job storage job) private view returns (uint64 revealFrom, uint64 revealBy) {
        revealFrom = job.revealFrom != 0 ? job.revealFrom : job.commitBy;
        revealBy = revealFrom + MARGIN;
    }

    function _forfeit(bytes32 jobId, Job storage job, address account, Seat storage seat, ForfeitReason reason)
        private
    {
        seat.forfeit = reason;
        emit SeatForfeited(jobId, account, reason);
        // The client lost a seat's work: it gets w·S (and, at settle, the seat's pay).
        _slashLock(jobId, account, job.providerStake, job.client);
    }

    /// The bounds of section 3; returns the trace length C+1.
    function _checkShape(JobTerms calldata t) private pure returns (uint32) {
        uint64 steps = t.steps;
        uint32 k = t.checkpointEvery;
        uint32 n = t.graphNodes;
        // Lists of at most MAX_LIST entries bound k, C+1 and N+1.
        if (steps == 0 || k == 0 || k > MAX_INTERVAL_STEPS || n == 0 || n >= MAX_LIST) {
            revert JobInvalidShape(steps, k, n);
        }
        uint256 traceLength = (uint256(steps) + k - 1) / k + 1;
        if (traceLength > MAX_LIST) revert JobInvalidShape(steps, k, n);
        // Deadlines are derived from declared costs; a zero one would allow no time at all.
        if (t.stepMillis == 0 || t.nodeMillis == 0 || t.stateBytes == 0 || t.evidenceBytes == 0) revert JobZeroCost();
        // An offer that closes when it opens can take no seat.
        if (t.acceptWindow == 0) revert JobZeroAcceptWindow();
        return uint32(traceLength);
    }

    /// s·count·millis in whole seconds, rounded up.
    function _work(uint256 count, uint256 millis) private pure returns (uint256) {
        return (HARDWARE_SLACK * count * millis + 999) / 1000;
    }

    /// E_xfer(x) = ⌈x/β⌉ + 2Δ.
    function _xfer(uint256 size) private view returns (uint256) {
        return (size + BANDWIDTH - 1) / BANDWIDTH + 2 * uint256(MARGIN);
    }

    /// `intervals` is C = ⌈T/k⌉.
    function _allowances(JobTerms calldata t, uint256 intervals) private view returns (Allowances memory a) {
        uint256 delta = MARGIN;
        uint256 intervalWork = _work(t.checkpointEvery, t.stepMillis);
        // One answer never needs more than the chain's bound on an interval's recompute.
        if (intervalWork > MAX_INTERVAL_SECONDS) revert JobIntervalTooLong(intervalWork, MAX_INTERVAL_SECONDS);
        uint256 replay = _work(t.steps, t.stepMillis) + 2 * delta;
        uint256 xferState = _xfer(t.stateBytes);
        uint256 xferEvidence = _xfer(t.evidenceBytes);
        uint256 rule = _work(1, t.nodeMillis) + xferEvidence;
        uint256 draw = DRAW_DELAY * BLOCK_SECONDS + delta;
        uint256 demand = xferState + delta + MAX_DRAWS * (draw + 2 * xferState);
        // The root's recompute queue (section 8.4) holds up to C intervals, each rounded up on its own.
        uint256 queue = intervals * intervalWork + 2 * delta;
        uint256 ruling = 2 * MAX_DRAWS * (draw + rule) + rule;
        // A refereeing client's own E_rule comes before the MAX_DRAWS drawn first-level referees (section 9).
        if (t.clientReferees) ruling += rule;
        // The fourth level instead (docs/onchain-step.md): duels open until 2Δ after evidenceBy, each
        // ends 2·clock + 2Δ after it opened, a clock E_rule + Δ for the commit and each reveal.
        uint256 duel = 2 * delta + 2 * (rule + (MAX_STEP_DEPTH + 1) * delta) + 2 * delta;
        if (t.elementSpecRoot != bytes32(0) && duel > ruling) ruling = duel;
        uint256 game = 6 * delta + 2 * intervalWork + queue + xferEvidence + ruling;
        // The longest allowances (every other is below one of them) fit their 32 bits.
        if (demand > type(uint32).max) revert JobTooLong(demand);
        if (game > type(uint32).max) revert JobTooLong(game);
        a.train = uint32(replay - delta);
        a.reveal = uint32(delta);
        a.replay = uint32(replay);
        a.list = uint32(2 * delta);
        a.interval = uint32(intervalWork + 2 * delta);
        a.xferState = uint32(xferState);
        a.xferEvidence = uint32(xferEvidence);
        a.rule = uint32(rule);
        a.draw = uint32(draw);
        a.demand = uint32(demand);
        a.game = uint32(game);
    }

    function _minStake(JobTerms calldata t) private view returns (uint256) {
        // Between one seat and MAX_PROVIDERS (the settlement loop's bound).
        if (t.providersWanted == 0 || t.providersWanted > MAX_PROVIDERS) revert JobInvalidProviderCount(t.providersWanted);
        // p* is a probability above zero.
        if (t.catchBps == 0 || t.catchBps > BPS) revert JobInvalidCatchRate(t.catchBps);
        uint256 pay = t.price / t.providersWanted;
        return pay * (BPS - t.catchBps) * BPS / (uint256(t.catchBps) * (BPS - WINNER_SHARE_BPS)) + 1;
    }
}
