// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Job, JobStatus, Seat, SeatStatus} from "./SettlementTypesV2.sol";
import {Claim, GameParams} from "./GameTypesV2.sol";
import {NodeRegistryV2} from "./NodeRegistryV2.sol";

/// @title SettlementStorageV2
/// @notice Every storage variable of the settlement contract, version 2, declared once: the
/// contract (`GavelSettlementV2`) and its game module (`GavelGamesV2`, reached by delegatecall)
/// both inherit it, so both read and write the same slots of the one contract that holds the money.
/// @dev Append new variables at the end only: the module and the contract must agree on every slot.
abstract contract SettlementStorageV2 is NodeRegistryV2 {
    /// @notice Joiners of a claim whose join gas is reimbursed when it wins (8.3).
    uint256 public constant MAX_JOINERS = 8;
    /// @notice Gas figures the bonds and reimbursements pay at γ (section 13, measured by
    /// scripts/bench_settlement.py and rounded up; protocol.economics.ESTIMATED_GAS holds the same).
    /// A list's fixed part:
    uint256 public constant GAS_LIST_BASE = 110_000;
    /// @notice Gas of one posted list entry (32 calldata bytes and a keccak leaf).
    uint256 public constant GAS_LIST_ENTRY = 1_200;
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

    constructor(uint64 unbondingDelay, uint256 minNodeStake, uint16 winnerShareBps)
        NodeRegistryV2(unbondingDelay, minNodeStake, winnerShareBps)
    {}
}
