// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Demand, Job, JobStatus, Node, NodeStatus, Seat, SeatStatus} from "./SettlementTypesV2.sol";
import {Claim, GameBonds, GameParams, Ruling, StepClaim, StepGameRef} from "./GameTypesV2.sol";
import {NodeStoreV2} from "./NodeStoreV2.sol";

/// @title SettlementStorageV2
/// @notice Every storage variable of the settlement contract, version 2, declared once: the
/// contract (`GavelSettlementV2`) and its modules (`GavelGamesV2`, `GavelRefereesV2`, reached by
/// delegatecall) all inherit it, so all read and write the same slots of the one contract that
/// holds the money; with the few internals both modules need.
/// @dev Append new variables at the end only: the modules and the contract must agree on every slot.
abstract contract SettlementStorageV2 is NodeStoreV2 {
    /// @notice Referees or witnesses drawn for one item (one level of a claim) before it gives up.
    uint256 public constant MAX_DRAWS = 3;
    /// @notice Blocks between arming a draw and the block whose hash seeds it.
    uint256 public constant DRAW_DELAY = 2;
    /// @notice Random indices of the referee registry one draw probes.
    uint256 public constant PROBES = 8;
    /// @notice Consecutive registry entries a draw then walks when every probe missed: a registry of
    /// at most SCAN nodes is read whole, so a draw there finds nobody only when nobody is eligible.
    uint256 public constant SCAN = 24;
    /// @notice Blocks whose hash `blockhash` still returns: a draw armed longer ago re-arms.
    uint256 public constant DRAW_WINDOW = 255;
    /// @notice Levels of the deepest trace tree of the fourth level: OneStepVerifier opens programs of
    /// at most 2^40 instructions (a duel's clock and T_game count a reveal per level).
    uint256 public constant MAX_STEP_DEPTH = 40;
    /// @notice Joiners of a claim whose join gas is reimbursed when it wins (8.3).
    uint256 public constant MAX_JOINERS = 8;
    /// @notice Demands of a job served only through a witness whose demander the seat's forfeited lock
    /// pays back (section 7): bounds the loop of every forfeit, whatever the number of seats.
    uint256 public constant MAX_REIMBURSED_DEMANDS = 8;
    /// @notice Gas figures the bonds and reimbursements pay at γ (section 13, measured by
    /// scripts/bench_settlement.py and rounded up; protocol.economics.ESTIMATED_GAS holds the same).
    /// A list's fixed part:
    uint256 public constant GAS_LIST_BASE = 110_000;
    /// @notice Gas of one posted list entry (32 calldata bytes, a keccak leaf, 32 bytes of ListPosted's data).
    uint256 public constant GAS_LIST_ENTRY = 1_500;
    /// @notice Gas of one postEvidence.
    uint256 public constant GAS_POST_EVIDENCE = 80_000;
    /// @notice Gas of ending a path: the node and step timeouts and resolveGame.
    uint256 public constant GAS_RESOLVE = 350_000;
    /// @notice Gas of openGame, pickStep, pickNode (a new claim) and of a join.
    uint256 public constant GAS_OPEN_GAME = 250_000;
    /// @notice See GAS_OPEN_GAME.
    uint256 public constant GAS_PICK_STEP = 240_000;
    /// @notice See GAS_OPEN_GAME.
    uint256 public constant GAS_PICK_NODE = 210_000;
    /// @notice See GAS_OPEN_GAME.
    uint256 public constant GAS_JOIN = 150_000;
    /// @notice Gas of appeal, of a drawReferee that draws, and of ruleAppeal (the appeal bond pre-pays
    /// them; measured 105k, 141k with five referees registered, 160k when it overturns).
    uint256 public constant GAS_APPEAL = 110_000;
    /// @notice See GAS_APPEAL.
    uint256 public constant GAS_DRAW = 150_000;
    /// @notice See GAS_APPEAL.
    uint256 public constant GAS_RULE_APPEAL = 170_000;
    /// @notice Gas of the seat's two calls that bring a witness (callWitness and a drawWitness that
    /// draws), and of the witness's attestServed: the demand bond D pre-pays them (section 7).
    uint256 public constant GAS_CALL_WITNESS = 200_000;
    /// @notice See GAS_CALL_WITNESS.
    uint256 public constant GAS_ATTEST = 280_000;
    /// @notice Gas of one side's moves in a duel of the fourth level (the duel's bond pre-pays the
    /// defender's, a won duel's challenger gets its own from the lost lock): its commit (at most 0.72M
    /// measured), the ruling (1.29M with two input chunks opened) and settleStepGame (0.21M)...
    uint256 public constant GAS_DUEL_BASE = 2_300_000;
    /// @notice ... and a reveal per level of the trace tree (at most 117k measured).
    uint256 public constant GAS_DUEL_LEVEL = 120_000;

    mapping(bytes32 jobId => Job) internal _jobs;
    mapping(bytes32 jobId => address[]) internal _seatsOf;
    mapping(bytes32 jobId => mapping(address account => Seat)) internal _seats;
    /// The terms the game's bonds and list sizes derive from, fixed at openJob.
    mapping(bytes32 jobId => GameParams) internal _gameParams;
    /// The client's locked referee bond P + w·S·n (zero when it does not referee, or after it was burned).
    mapping(bytes32 jobId => uint256) internal _refereeBond;
    /// Section 8.4's recompute queue: when the root's defenders are free to recompute another interval.
    mapping(bytes32 jobId => mapping(bytes32 traceRoot => uint64)) internal _busyUntil;
    /// Claims by id; the interval claim's id is its game's id.
    mapping(bytes32 claimId => Claim) internal _claims;
    /// What each seat answered to a claim: a list root (interval and step claims) or an evidence hash (node claims).
    mapping(bytes32 claimId => mapping(address seat => bytes32)) internal _answers;
    /// Lists posted under a claim (the ones that may be endorsed and picked).
    mapping(bytes32 claimId => mapping(bytes32 listRoot => bool)) internal _posted;
    /// Accounts that opened, picked or joined a claim of a game (they may not referee it).
    mapping(bytes32 gameId => mapping(address account => bool)) internal _party;
    /// Joiners of a claim.
    mapping(bytes32 claimId => mapping(address account => bool)) internal _joined;
    /// Its first MAX_JOINERS joiners, in order (reimbursed when it wins).
    mapping(bytes32 claimId => address[]) internal _joiners;

    /// The referees of each node claim (section 9).
    mapping(bytes32 claimId => Ruling) internal _rulings;
    /// Accounts drawn to referee a claim, at either level (they are not drawn for it again).
    /// Accounts drawn for an item: a claim's referees at either level, a demand's witnesses (not drawn for it again).
    mapping(bytes32 itemId => mapping(address account => bool)) internal _refereed;

    /// Demands of data (section 7), by id.
    mapping(bytes32 demandId => Demand) internal _demands;
    /// The open demand of each (job, seat, item), keyed keccak(jobId, seat, item); zero when none.
    mapping(bytes32 slot => bytes32 demandId) internal _openDemand;
    /// Witnesses of a demand that attested "not served", in order (their bonds wait for its end).
    mapping(bytes32 demandId => address[]) internal _refusers;
    /// A seat's first challengeBy, kept when a demand extends it: demands open only before it.
    mapping(bytes32 jobId => mapping(address seat => uint64)) internal _demandsClose;
    /// Demands made so far (part of each demand's id).
    uint256 internal _demandCount;
    /// The job's first MAX_REIMBURSED_DEMANDS demands served only through a witness, in order: each
    /// demander gets D back from the seat's lock if that seat forfeits in the job (section 7).
    mapping(bytes32 jobId => bytes32[] demandIds) internal _witnessed;
    /// The fourth level's duels, by OneStepVerifier's game id (games the settlement did not open: zero).
    mapping(uint256 id => StepGameRef) internal _stepGames;
    /// Each node claim's duels (none: the claim is the referees').
    mapping(bytes32 claimId => StepClaim) internal _stepClaims;
    /// Whether a claimant opened a duel against a defender on a node claim, keyed keccak(claimId, challenger, defender).
    mapping(bytes32 duel => bool) internal _dueled;

    /// @notice A forfeited seat's lock paid back D (`amount`) to a demander the seat had served only
    /// through a witness (GavelGamesV2's and GavelDemandsV2's event).
    event DemandReimbursed(bytes32 indexed jobId, address indexed seat, address indexed demander, uint256 amount);

    constructor(uint64 unbondingDelay, uint256 minNodeStake, uint16 winnerShareBps)
        NodeStoreV2(unbondingDelay, minNodeStake, winnerShareBps)
    {}

    /// The bonds of a job's moves (sections 8.5 and 9); protocol.economics.bonds computes the same.
    function _bonds(bytes32 jobId) internal view returns (GameBonds memory b) {
        Job storage job = _jobs[jobId];
        GameParams storage p = _gameParams[jobId];
        uint256 n = job.providersWanted;
        uint256 gamma = p.gasPriceCap;
        uint256 pay = job.price / n;
        uint256 intervalValue = (uint256(p.checkpointEvery) * pay + p.steps - 1) / p.steps;
        b.openGame = n * gamma * (GAS_LIST_BASE + (uint256(p.checkpointEvery) + 1) * GAS_LIST_ENTRY) + gamma * GAS_RESOLVE;
        b.pickStep = n * (gamma * (GAS_LIST_BASE + (uint256(p.graphNodes) + 1) * GAS_LIST_ENTRY) + intervalValue);
        b.pickNode = p.refereeFee + n * gamma * GAS_POST_EVIDENCE;
        b.referee = _refereeBondOf(job);
        b.appeal = _appealBondOf(jobId);
    }

    /// γ·(G_duelBase + depth·G_duelLevel): one side's gas in a duel whose trace tree has `depth` levels.
    function _duelGas(bytes32 jobId, uint256 depth) internal view returns (uint256) {
        return uint256(_gameParams[jobId].gasPriceCap) * (GAS_DUEL_BASE + depth * GAS_DUEL_LEVEL);
    }

    /// Levels of the trace tree over a program of `length` steps: ⌈log2 length⌉.
    function _depth(uint256 length) internal pure returns (uint256 d) {
        while ((uint256(1) << d) < length) ++d;
    }

    /// B_node + the defender's gas: what a challenger locks to open a duel of `depth` levels (section 8.5).
    function _duelBondOf(bytes32 jobId, uint256 depth) internal view returns (uint256) {
        return _bonds(jobId).pickNode + _duelGas(jobId, depth);
    }

    /// D = f_W + γ·(G_callWitness + G_attest): what a demander and a drawn witness lock (section 7).
    function _demandBondOf(bytes32 jobId) internal view returns (uint256) {
        GameParams storage p = _gameParams[jobId];
        return p.witnessFee + uint256(p.gasPriceCap) * (GAS_CALL_WITNESS + GAS_ATTEST);
    }

    /// Section 9's draw, for a claim's referee or a demand's witness (`itemId`): seed =
    /// keccak(blockhash(armedBlock + DRAW_DELAY), itemId, draws), then up to PROBES indices
    /// keccak(seed, i) mod |registry|, then up to SCAN entries on from index keccak(seed, PROBES) mod
    /// |registry|; the first node that is active, has free stake ≥ `bond`, and is not the client, a
    /// seat of the job, a party to `gameId`, `excluded`, or drawn for this item before. Zero when all
    /// miss. The random probes pick every eligible node alike; the walk only keeps a small registry
    /// (a new network's) from missing its last eligible node, as PROBES looks alone did with odds
    /// (1 − eligible share)^PROBES.
    function _drawFrom(
        uint256 armedBlock,
        bytes32 itemId,
        uint8 draws,
        bytes32 jobId,
        bytes32 gameId,
        uint256 bond,
        address excluded
    ) internal view returns (address) {
        bytes32 seed = keccak256(abi.encode(blockhash(armedBlock + DRAW_DELAY), itemId, draws));
        uint256 count = _referees.length;
        address client = _jobs[jobId].client;
        if (count == 0) return address(0);
        for (uint256 i; i < PROBES; ++i) {
            address c = _referees[uint256(keccak256(abi.encode(seed, i))) % count];
            if (_drawable(c, itemId, jobId, gameId, bond, client, excluded)) return c;
        }
        uint256 start = uint256(keccak256(abi.encode(seed, PROBES))) % count;
        uint256 walk = count < SCAN ? count : SCAN;
        for (uint256 i; i < walk; ++i) {
            address c = _referees[(start + i) % count];
            if (_drawable(c, itemId, jobId, gameId, bond, client, excluded)) return c;
        }
        return address(0);
    }

    /// Active, able to lock the bond, and no party to the job, the game or this item.
    function _drawable(
        address c,
        bytes32 itemId,
        bytes32 jobId,
        bytes32 gameId,
        uint256 bond,
        address client,
        address excluded
    ) private view returns (bool) {
        Node storage node = _nodes[c];
        return node.status == NodeStatus.Active && node.stake - node.locked >= bond && c != client
            && c != excluded && _seats[jobId][c].status == SeatStatus.None && !_party[gameId][c]
            && !_refereed[itemId][c];
    }

    /// A = f_R + γ·(G_appeal + G_draw + G_ruleAppeal): what an appellant locks (section 9).
    function _appealBondOf(bytes32 jobId) internal view returns (uint256) {
        GameParams storage p = _gameParams[jobId];
        return p.refereeFee + uint256(p.gasPriceCap) * (GAS_APPEAL + GAS_DRAW + GAS_RULE_APPEAL);
    }

    /// P + ⌈w·S·n⌉: what a referee (the client, or a drawn node) locks to rule one job's claims.
    function _refereeBondOf(Job storage job) internal view returns (uint256) {
        return job.price + (uint256(WINNER_SHARE_BPS) * job.providerStake * job.providersWanted + BPS - 1) / BPS;
    }

    /// Section 7: a forfeited lock first pays back D to each demander its seat served only through a
    /// witness (they paid the witness's fee and the seat's calls); returns the sum. openJob keeps
    /// MAX_REIMBURSED_DEMANDS·D, with a won path's reimbursements, within S·(1 − w).
    function _reimburseDemanders(bytes32 jobId, address seat) internal returns (uint256 paid) {
        bytes32[] storage witnessed = _witnessed[jobId];
        uint256 count = witnessed.length;
        if (count == 0) return 0;
        uint256 bond = _demandBondOf(jobId);
        for (uint256 i; i < count; ++i) {
            Demand storage d = _demands[witnessed[i]];
            if (d.seat != seat) continue;
            address demander = d.demander;
            _credits[demander] += bond;
            paid += bond;
            emit DemandReimbursed(jobId, seat, demander, bond);
        }
    }

    /// A seat's lock forfeited to `beneficiary` (a silent defender's, an equivocator's): the demanders it
    /// served only through a witness first, then w·S to `beneficiary`, the rest burned.
    function _slashSeat(bytes32 jobId, address seat, address beneficiary) internal {
        uint256 stake = _jobs[jobId].providerStake;
        _take(seat, stake);
        uint256 share = stake * WINNER_SHARE_BPS / BPS;
        _credits[beneficiary] += share;
        uint256 paid = _reimburseDemanders(jobId, seat) + share;
        emit StakeSlashed(jobId, seat, stake, beneficiary, paid, stake - paid);
        _burn(stake - paid);
    }

    /// Gives a claim's drawn first-level referee its bond back, if one still holds it.
    function _releaseReferee(bytes32 jobId, Ruling storage r) internal {
        address referee = r.referee;
        if (referee == address(0)) return;
        r.referee = address(0);
        _unlock(jobId, referee, _refereeBondOf(_jobs[jobId]));
    }
}
