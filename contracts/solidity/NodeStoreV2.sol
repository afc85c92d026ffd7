// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Node, NodeStatus} from "./SettlementTypesV2.sol";

/// @title NodeStoreV2
/// @notice The nodes' stakes, locks, credits and referee registry of the settlement contract,
/// version 2, with the internals that move them: the base of `SettlementStorageV2`, so the
/// contract and its modules (reached by delegatecall) share them. The calls that register,
/// unbond and withdraw are `NodeRegistryV2`'s, in the contract only.
/// @dev Theory of operation.
///  - Every obligation (a seat, a bond, a drawn referee's bond) locks part of a node's stake and
///    counts in `obligations`; a node leaves only after `UNBONDING_DELAY` with none.
///  - A forfeited lock is split: WINNER_SHARE_BPS to a beneficiary credit, the rest burned
///    (sent to BURN_ADDRESS, which has no code).
///  - Nodes with ROLE_REFEREE are listed in `_referees` (the draws of section 9 probe it) from
///    `register` until `completeUnbonding`.
abstract contract NodeStoreV2 {
    /// @notice Role bit of a provider (sells compute, takes seats in jobs).
    uint8 public constant ROLE_PROVIDER = 1;
    /// @notice Role bit of an auditor (replays jobs, opens games).
    uint8 public constant ROLE_AUDITOR = 2;
    /// @notice Role bit of a client (opens jobs; its registered key signs the offers).
    uint8 public constant ROLE_CLIENT = 4;
    /// @notice Role bit of a referee (may be drawn to rule claims and appeals, section 9).
    uint8 public constant ROLE_REFEREE = 8;
    /// @notice Denominator of basis-point shares.
    uint16 public constant BPS = 10_000;
    /// @notice Where burned stake goes.
    address public constant BURN_ADDRESS = 0x000000000000000000000000000000000000dEaD;

    /// @notice Seconds between beginUnbonding and the earliest completeUnbonding.
    uint64 public immutable UNBONDING_DELAY;
    /// @notice Least stake of a node with the provider, auditor or referee role.
    uint256 public immutable MIN_STAKE;
    /// @notice w: share of a forfeited lock credited to its beneficiary, in basis points (below 100%).
    uint16 public immutable WINNER_SHARE_BPS;

    mapping(address account => Node) internal _nodes;
    mapping(address account => uint256) internal _credits;
    /// Registered nodes with ROLE_REFEREE, in no particular order.
    address[] internal _referees;
    /// One more than an account's index in `_referees` (zero: not listed).
    mapping(address account => uint256) internal _refereeSlot;
    bool private transient _entered;

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

    /// @notice A state-changing call re-entered the contract.
    error SettlementReentrantCall();
    /// @notice The constructor's winner share is not below 100%.
    error SettlementInvalidShare(uint16 winnerShareBps);
    /// @notice The account is not registered.
    error NodeNotRegistered(address account);
    /// @notice The node is unbonding and cannot take new obligations.
    error NodeNotActive(address account);
    /// @notice Free (unlocked) stake does not cover the lock.
    error NodeInsufficientFreeStake(address account, uint256 free, uint256 needed);
    /// @notice The transfer to the account failed.
    error WithdrawTransferFailed(address account, uint256 amount);

    modifier nonReentrant() {
        // One entry at a time (transient storage: cleared at the end of the transaction).
        if (_entered) revert SettlementReentrantCall();
        _entered = true;
        _;
        _entered = false;
    }

    constructor(uint64 unbondingDelay, uint256 minStake, uint16 winnerShareBps) {
        // The least stake divides by 1 − w: the winner's share stays below the whole lock.
        if (winnerShareBps >= BPS) revert SettlementInvalidShare(winnerShareBps);
        UNBONDING_DELAY = unbondingDelay;
        MIN_STAKE = minStake;
        WINNER_SHARE_BPS = winnerShareBps;
    }

    function _activeNode(address account) internal view returns (Node storage node) {
        node = _nodes[account];
        // New obligations need a registered node...
        if (node.status == NodeStatus.None) revert NodeNotRegistered(account);
        // ... that is not on its way out.
        if (node.status != NodeStatus.Active) revert NodeNotActive(account);
    }

    function _lock(Node storage node, address account, uint256 amount) internal {
        uint256 free = node.stake - node.locked;
        // A lock needs that much stake not already locked.
        if (free < amount) revert NodeInsufficientFreeStake(account, free, amount);
        node.locked += amount;
        node.obligations += 1;
    }

    function _unlock(bytes32 jobId, address account, uint256 amount) internal {
        Node storage node = _nodes[account];
        node.locked -= amount;
        node.obligations -= 1;
        emit StakeUnlocked(jobId, account, amount);
    }

    /// Takes a lock out of its node's stake (the caller pays it on).
    function _take(address account, uint256 amount) internal {
        Node storage node = _nodes[account];
        node.locked -= amount;
        node.stake -= amount;
        node.obligations -= 1;
    }

    /// Takes a lock from its node: WINNER_SHARE_BPS to `beneficiary`, the rest burned.
    function _slashLock(bytes32 jobId, address loser, uint256 amount, address beneficiary) internal {
        _take(loser, amount);
        uint256 toBeneficiary = amount * WINNER_SHARE_BPS / BPS;
        uint256 burned = amount - toBeneficiary;
        _credits[beneficiary] += toBeneficiary;
        emit StakeSlashed(jobId, loser, amount, beneficiary, toBeneficiary, burned);
        _burn(burned);
    }

    function _burn(uint256 amount) internal {
        if (amount == 0) return;
        // BURN_ADDRESS has no code: the transfer cannot call back or fail.
        (bool ok,) = payable(BURN_ADDRESS).call{value: amount}("");
        if (!ok) revert WithdrawTransferFailed(BURN_ADDRESS, amount);
    }
}
