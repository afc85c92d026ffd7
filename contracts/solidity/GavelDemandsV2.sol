// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Demand, DemandStage, ForfeitReason, Job, JobStatus, Seat, SeatStatus} from "./SettlementTypesV2.sol";
import {SettlementStorageV2} from "./SettlementStorageV2.sol";

/// @title GavelDemandsV2
/// @notice The availability duty of docs/economics.md, section 7: demands of data and the drawn
/// witnesses that settle them. GavelSettlementV2 runs this code by delegatecall on its own storage
/// and balance, beside the game and referee modules.
/// @dev Theory of operation.
///  - A revealed seat owes, until its challenge window closes, the job's bundle (item 0) and each
///    checkpoint c (item c + 1) to whoever asks. Any registered node but the seat demands an item
///    by locking D = f_W + γ·(G_callWitness + G_attest); the seat serves it peer to peer by
///    `serveBy` = now + E_xfer(X). One demand per (seat, item) is open at a time; each counts in
///    the job's `openItems`, so `settle` waits for it.
///  - The demander that got the item releases the demand: D back. Otherwise the seat, from serveBy
///    for Δ, calls a witness: drawn from the referee registry by section 9's draw, it locks D too,
///    fetches the item from the seat and relays it, and attests within 2·E_xfer(X).
///  - Served: D goes, γ·G_callWitness to the seat, f_W + γ·G_attest to the witness.
///    Not served: another witness is drawn (a seat is only found unavailable when every one of
///    MAX_DRAWS witnesses says so); a refuser later contradicted pays the seat the redraw it cost
///    (γ·G_callWitness) from its bond and earns nothing. A silent witness's bond is burned and
///    another drawn. Draws spent without an attestation: the demand voids, D back.
///  - `failDemand` (anyone): no witness called by serveBy + Δ, no draw made in E_draw, or MAX_DRAWS
///    refusals. The seat forfeits S (`Unavailable`, no pay: the client gets p back at settle):
///    f_W + γ·G_attest to each refuser, w·S to the demander, the rest burned; D back.
///  - A seat served only through a witness owes that demander D back from its lock if it forfeits
///    in the job for any reason (`_witnessed`, the job's first MAX_REIMBURSED_DEMANDS such demands;
///    paid before anything else the lock pays).
///  - A demand's end (but a failure) keeps the seat open to games for E_interval more, so the
///    demander can act on what it got; demands themselves open only in the seat's first window.
///  - Every bond is a lock of stake: the balance stays stakes + credits + escrow.
contract GavelDemandsV2 is SettlementStorageV2 {
    /// @notice Δ, as GavelSettlementV2's MARGIN (checked by its constructor).
    uint32 public immutable MARGIN;
    /// @notice Longest time between blocks, as GavelSettlementV2's (checked by its constructor).
    uint32 public immutable BLOCK_SECONDS;
    address private immutable SELF;

    /// @notice `demander` demanded item `item` of `seat` (0 the bundle, c + 1 checkpoint c), locking `bond`.
    event DataDemanded(bytes32 indexed demandId, bytes32 indexed jobId, address indexed seat, address demander,
        uint32 item, uint256 bond, uint64 serveBy);
    /// @notice The demander confirmed it got the item: its bond is back.
    event DemandReleased(bytes32 indexed demandId);
    /// @notice A witness's draw was armed at `drawBlock` (`draws` made so far); it is made before `drawBy`.
    event WitnessCalled(bytes32 indexed demandId, uint64 drawBlock, uint8 draws, uint64 drawBy);
    /// @notice A witness was drawn and locked its bond; it attests before `attestBy`.
    event WitnessDrawn(bytes32 indexed demandId, address indexed witness, uint64 attestBy);
    /// @notice The witness attested whether the seat served it the item.
    event DemandAttested(bytes32 indexed demandId, address indexed witness, bool served);
    /// @notice A witness let its allowance pass: its bond was burned.
    event WitnessTimedOut(bytes32 indexed demandId, address indexed witness, uint256 burned);
    /// @notice The seat did not serve the item: it forfeited its lock.
    event DemandFailed(bytes32 indexed demandId, address indexed seat);
    /// @notice The demand ended with nobody at fault found (no witness, or the seat already forfeited): bonds back.
    event DemandVoided(bytes32 indexed demandId);
    /// @notice A seat lost its lock (GavelSettlementV2's event, emitted from here).
    event SeatForfeited(bytes32 indexed jobId, address indexed seat, ForfeitReason reason);

    /// @notice The module was called directly: its calls run only on GavelSettlementV2's storage.
    error DemandDirectCall();
    /// @notice The job is not running: no data is owed in it.
    error DemandJobNotRunning(bytes32 jobId);
    /// @notice The account holds no revealed, unforfeited seat in the job.
    error DemandSeatNotStanding(address seat);
    /// @notice A seat does not demand of itself.
    error DemandOwnSeat(address seat);
    /// @notice Items are 0 (the bundle) to C + 1 (the last checkpoint).
    error DemandNoSuchItem(uint32 item);
    /// @notice The deadline of this move has passed.
    error DemandDeadlinePassed(uint64 deadline);
    /// @notice The move is allowed only from `notBefore` on.
    error DemandTooEarly(uint64 notBefore);
    /// @notice This (seat, item) has an open demand.
    error DemandAlreadyOpen(bytes32 demandId);
    /// @notice No demand with this id.
    error DemandNotFound(bytes32 demandId);
    /// @notice The demand is at a stage where this move is not allowed.
    error DemandWrongStage(bytes32 demandId, DemandStage stage);
    /// @notice Only the demander releases its demand.
    error DemandNotTheDemander(address account);
    /// @notice Only the seat calls a witness.
    error DemandNotTheSeat(address account);
    /// @notice Only the drawn witness attests.
    error DemandNotTheWitness(address account);
    /// @notice The draw's seed block is not mined yet: draw from block `fromBlock`.
    error DemandDrawTooEarly(uint64 fromBlock);

    constructor(uint64 unbondingDelay, uint256 minNodeStake, uint16 winnerShareBps, uint32 margin, uint32 blockSeconds)
        SettlementStorageV2(unbondingDelay, minNodeStake, winnerShareBps)
    {
        MARGIN = margin;
        BLOCK_SECONDS = blockSeconds;
        SELF = address(this);
    }

    modifier viaSettlement() {
        // Run on the module's own (empty) storage, a call would mean nothing.
        if (address(this) == SELF) revert DemandDirectCall();
        _;
    }

    // ------------------------------------------------------------------ moves

    /// @notice Demands item `item` of `seat` (0 the bundle, c + 1 checkpoint c), locking D of the caller's stake.
    function demandData(bytes32 jobId, address seat, uint32 item)
        external
        viaSettlement
        nonReentrant
        returns (bytes32 demandId)
    {
        Job storage job = _jobs[jobId];
        // Data is owed while the job runs...
        if (job.status != JobStatus.Running) revert DemandJobNotRunning(jobId);
        Seat storage s = _seats[jobId][seat];
        // ... by a seat that revealed and holds its lock...
        if (s.status != SeatStatus.Revealed || s.forfeit != ForfeitReason.None) revert DemandSeatNotStanding(seat);
        // ... to anyone but itself...
        if (msg.sender == seat) revert DemandOwnSeat(seat);
        // ... one of C + 2 items: the bundle and the C + 1 checkpoints...
        if (item > job.traceLength) revert DemandNoSuchItem(item);
        uint64 closes = _demandsClose[jobId][seat];
        if (closes == 0) closes = s.challengeBy;
        // ... within the seat's challenge window as its reveal set it (extensions are for games).
        if (block.timestamp >= closes) revert DemandDeadlinePassed(closes);
        bytes32 slot = keccak256(abi.encode(jobId, seat, item));
        // One open demand per (seat, item): the next demander waits for this one's end.
        if (_openDemand[slot] != 0) revert DemandAlreadyOpen(_openDemand[slot]);
        uint256 bond = _demandBondOf(jobId);
        _lock(_activeNode(msg.sender), msg.sender, bond);

        demandId = keccak256(abi.encode(slot, ++_demandCount));
        _openDemand[slot] = demandId;
        uint64 serveBy = uint64(block.timestamp) + job.allowed.xferState;
        _demands[demandId] =
            Demand(jobId, seat, item, DemandStage.Open, 0, msg.sender, serveBy, address(0), 0, uint128(bond));
        job.openItems += 1;
        emit DataDemanded(demandId, jobId, seat, msg.sender, item, bond, serveBy);
    }

    /// @notice The demander got the item (it hashes to what the chain holds): its bond comes back.
    function releaseDemand(bytes32 demandId) external viaSettlement nonReentrant {
        Demand storage d = _demandAt(demandId, DemandStage.Open);
        // Only the demander knows it got the item.
        if (msg.sender != d.demander) revert DemandNotTheDemander(msg.sender);
        _unlock(d.jobId, msg.sender, d.bond);
        emit DemandReleased(demandId);
        _end(d, DemandStage.Released);
    }

    /// @notice The seat says it served and the demander did not confirm: arms a witness's draw.
    function callWitness(bytes32 demandId) external viaSettlement nonReentrant {
        Demand storage d = _demandAt(demandId, DemandStage.Open);
        // Only the seat calls a witness...
        if (msg.sender != d.seat) revert DemandNotTheSeat(msg.sender);
        uint64 serveBy = d.deadline;
        // ... once the demander's time to confirm is over...
        if (block.timestamp < serveBy) revert DemandTooEarly(serveBy);
        // ... and within Δ of it.
        if (block.timestamp >= serveBy + MARGIN) revert DemandDeadlinePassed(serveBy + MARGIN);
        _armWitness(demandId, d);
    }

    /// @notice Draws the demand's witness from the referee registry (anyone; the seat wants it), or re-arms a stale draw.
    function drawWitness(bytes32 demandId) external viaSettlement nonReentrant {
        Demand storage d = _demandAt(demandId, DemandStage.Drawing);
        uint256 b = d.armedBlock;
        if (block.number > b + DRAW_WINDOW) {
            // The seed block's hash is out of reach: arm again here (the draw's deadline stays).
            d.armedBlock = uint64(block.number);
            emit WitnessCalled(demandId, uint64(block.number), d.draws, d.deadline);
            return;
        }
        // The seed is the hash of block b + DRAW_DELAY, unknown when the draw was armed.
        if (block.number <= b + DRAW_DELAY) revert DemandDrawTooEarly(uint64(b + DRAW_DELAY + 1));
        uint256 bond = d.bond;
        address drawn = _drawFrom(b, demandId, d.draws, d.jobId, bytes32(0), bond, d.demander);
        d.draws += 1;
        if (drawn == address(0)) {
            _nextWitness(demandId, d);
            return;
        }
        _lock(_nodes[drawn], drawn, bond);
        _refereed[demandId][drawn] = true;
        uint64 attestBy = uint64(block.timestamp) + 2 * _jobs[d.jobId].allowed.xferState;
        d.stage = DemandStage.Witnessing;
        d.witness = drawn;
        d.deadline = attestBy;
        emit WitnessDrawn(demandId, drawn, attestBy);
    }

    /// @notice The witness's word: whether the seat served it the item (it relays it to the demander).
    function attestServed(bytes32 demandId, bool served) external viaSettlement nonReentrant {
        Demand storage d = _demandAt(demandId, DemandStage.Witnessing);
        // Only the drawn witness attests...
        if (msg.sender != d.witness) revert DemandNotTheWitness(msg.sender);
        // ... within its allowance.
        if (block.timestamp >= d.deadline) revert DemandDeadlinePassed(d.deadline);
        emit DemandAttested(demandId, msg.sender, served);
        if (served) {
            _served(demandId, d);
            return;
        }
        // Its bond waits: a later witness served may show the refusal false.
        _refusers[demandId].push(msg.sender);
        d.witness = address(0);
        if (d.draws < MAX_DRAWS) _armWitness(demandId, d);
        else d.stage = DemandStage.Refused;
    }

    /// @notice Forfeits a seat that did not serve (anyone): no witness called by serveBy + Δ, no draw
    /// made in time, or every drawn witness refused.
    function failDemand(bytes32 demandId) external viaSettlement nonReentrant {
        Demand storage d = _demandOf(demandId);
        DemandStage stage = d.stage;
        uint64 notBefore;
        if (stage == DemandStage.Open) {
            notBefore = d.deadline + MARGIN;
        } else if (stage == DemandStage.Drawing) {
            notBefore = d.deadline;
        } else if (stage != DemandStage.Refused) {
            // A witness is out fetching, or the demand ended.
            revert DemandWrongStage(demandId, stage);
        }
        // The seat's time to serve (or to bring a witness) is over.
        if (block.timestamp < notBefore) revert DemandTooEarly(notBefore);
        bytes32 jobId = d.jobId;
        address seat = d.seat;
        Seat storage s = _seats[jobId][seat];
        if (s.forfeit != ForfeitReason.None) {
            // Its lock is gone already (a game, equivocation): nothing left to take.
            _void(demandId, d);
            return;
        }
        s.forfeit = ForfeitReason.Unavailable;
        emit SeatForfeited(jobId, seat, ForfeitReason.Unavailable);
        emit DemandFailed(demandId, seat);
        uint256 stake = _jobs[jobId].providerStake;
        _take(seat, stake);
        // From the lock: D to each demander it served only through a witness, each witness that fetched
        // in vain its fee and gas, then w·S to the demander, the rest burned.
        uint256 fee = _gameParams[jobId].witnessFee + uint256(_gameParams[jobId].gasPriceCap) * GAS_ATTEST;
        uint256 paid = _reimburseDemanders(jobId, seat);
        paid += _releaseRefusers(demandId, d, fee, stake - paid);
        uint256 toDemander = stake * WINNER_SHARE_BPS / BPS;
        if (toDemander > stake - paid) toDemander = stake - paid;
        _credits[d.demander] += toDemander;
        paid += toDemander;
        _unlock(jobId, d.demander, d.bond);
        emit StakeSlashed(jobId, seat, stake, d.demander, paid, stake - paid);
        _burn(stake - paid);
        _end(d, DemandStage.Failed);
    }

    /// @notice Burns the bond of a witness past its allowance and draws another (anyone).
    function timeoutWitness(bytes32 demandId) external viaSettlement nonReentrant {
        Demand storage d = _demandAt(demandId, DemandStage.Witnessing);
        // The witness may attest until attestBy.
        if (block.timestamp < d.deadline) revert DemandTooEarly(d.deadline);
        address silent = d.witness;
        uint256 bond = d.bond;
        d.witness = address(0);
        _take(silent, bond);
        emit WitnessTimedOut(demandId, silent, bond);
        _burn(bond);
        _nextWitness(demandId, d);
    }

    // ------------------------------------------------------------------ views

    /// @notice The demand with this id (stage None when unknown).
    function getDemand(bytes32 demandId) external view returns (Demand memory) {
        return _demands[demandId];
    }

    /// @notice The witnesses of the demand that attested "not served", in order.
    function refusersOf(bytes32 demandId) external view returns (address[] memory) {
        return _refusers[demandId];
    }

    /// @notice D, what a demand of this job (and its witness) locks; protocol.economics.bonds computes the same.
    function demandBondOf(bytes32 jobId) external view returns (uint256) {
        return _demandBondOf(jobId);
    }

    // ------------------------------------------------------------------ internals

    function _demandOf(bytes32 demandId) private view returns (Demand storage d) {
        d = _demands[demandId];
        // Moves name a demand that was made.
        if (d.stage == DemandStage.None) revert DemandNotFound(demandId);
    }

    function _demandAt(bytes32 demandId, DemandStage stage) private view returns (Demand storage d) {
        d = _demandOf(demandId);
        // Each move has its stage.
        if (d.stage != stage) revert DemandWrongStage(demandId, d.stage);
    }

    /// Arms a witness's draw at this block; it must be made within E_draw = DRAW_DELAY·block time + Δ.
    function _armWitness(bytes32 demandId, Demand storage d) private {
        uint64 drawBy = uint64(block.timestamp + DRAW_DELAY * BLOCK_SECONDS + MARGIN);
        d.stage = DemandStage.Drawing;
        d.armedBlock = uint64(block.number);
        d.deadline = drawBy;
        emit WitnessCalled(demandId, uint64(block.number), d.draws, drawBy);
    }

    /// After a draw that found nobody or a silent witness: the next draw, or with MAX_DRAWS spent the demand voids.
    function _nextWitness(bytes32 demandId, Demand storage d) private {
        if (d.draws < MAX_DRAWS) _armWitness(demandId, d);
        else _void(demandId, d);
    }

    /// The witness got the item: D pays γ·G_callWitness to the seat and f_W + γ·G_attest to the
    /// witness; each earlier refuser pays the seat the redraw it cost from its bond.
    function _served(bytes32 demandId, Demand storage d) private {
        bytes32 jobId = d.jobId;
        uint256 bond = d.bond;
        uint256 calls = uint256(_gameParams[jobId].gasPriceCap) * GAS_CALL_WITNESS;
        // D = f_W + γ·(G_callWitness + G_attest): the seat's calls, the rest the witness's fee and its gas.
        _take(d.demander, bond);
        // The demander gets D back from the seat's lock if the seat forfeits in this job after all.
        bytes32[] storage witnessed = _witnessed[jobId];
        if (witnessed.length < MAX_REIMBURSED_DEMANDS) witnessed.push(demandId);
        _credits[d.seat] += calls;
        _credits[msg.sender] += bond - calls;
        _unlock(jobId, msg.sender, bond);
        address[] storage refusers = _refusers[demandId];
        for (uint256 i; i < refusers.length; ++i) {
            _take(refusers[i], bond);
            _credits[d.seat] += calls;
            _credits[refusers[i]] += bond - calls;
        }
        _end(d, DemandStage.Served);
    }

    /// Gives the refusers their bonds back and each up to `fee` of `available`; returns what it paid.
    function _releaseRefusers(bytes32 demandId, Demand storage d, uint256 fee, uint256 available)
        private
        returns (uint256 paid)
    {
        address[] storage refusers = _refusers[demandId];
        for (uint256 i; i < refusers.length; ++i) {
            _unlock(d.jobId, refusers[i], d.bond);
            uint256 pay = fee < available - paid ? fee : available - paid;
            _credits[refusers[i]] += pay;
            paid += pay;
        }
    }

    /// Nobody found at fault: D back, the refusers' bonds back.
    function _void(bytes32 demandId, Demand storage d) private {
        _unlock(d.jobId, d.demander, d.bond);
        _releaseRefusers(demandId, d, 0, 0);
        emit DemandVoided(demandId);
        _end(d, DemandStage.Void);
    }

    /// Closes the demand; a seat that still stands stays open to games for E_interval more.
    function _end(Demand storage d, DemandStage stage) private {
        d.stage = stage;
        bytes32 jobId = d.jobId;
        address seat = d.seat;
        delete _openDemand[keccak256(abi.encode(jobId, seat, d.item))];
        Job storage job = _jobs[jobId];
        job.openItems -= 1;
        Seat storage s = _seats[jobId][seat];
        if (s.forfeit != ForfeitReason.None) return;
        if (_demandsClose[jobId][seat] == 0) _demandsClose[jobId][seat] = s.challengeBy;
        uint64 until = uint64(block.timestamp) + job.allowed.interval;
        if (s.challengeBy < until) s.challengeBy = until;
        if (job.challengeEnd < until) job.challengeEnd = until;
    }
}
