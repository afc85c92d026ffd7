// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Node, NodeStatus} from "./SettlementTypesV2.sol";

/// @title NodeRegistryV2
/// @notice Stakes, locks, slashes and pull payments of the settlement contract, version 2: the
/// store under `GavelSettlementV2`'s job logic. Registration works as in version 1.
/// @dev Theory of operation.
///  - A node registers with a stake in the native currency, its Ed25519 key and role bits.
///    Every obligation (a seat now; a bond or a demand in later slices) locks part of the
///    stake and counts in `obligations`; a node leaves only after `UNBONDING_DELAY` with none.
///  - A forfeited lock is split: WINNER_SHARE_BPS to a beneficiary credit, the rest burned
///    (sent to BURN_ADDRESS, which has no code).
///  - Every payment is a credit that its owner pulls with `withdraw`, which zeroes it before
///    the transfer; every state-changing entry point shares one re-entrancy guard.
abstract contract NodeRegistryV2 {
    /// @notice Role bit of a provider (sells compute, takes seats in jobs).
    uint8 public constant ROLE_PROVIDER = 1;
    /// @notice Role bit of an auditor (replays jobs, opens games).
    uint8 public constant ROLE_AUDITOR = 2;
    /// @notice Role bit of a client (opens jobs; its registered key signs the offers).
    uint8 public constant ROLE_CLIENT = 4;
    /// @notice Denominator of basis-point shares.
    uint16 public constant BPS = 10_000;
    /// @notice Where burned stake goes.
    address public constant BURN_ADDRESS = 0x000000000000000000000000000000000000dEaD;

    /// @notice Seconds between beginUnbonding and the earliest completeUnbonding.
    uint64 public immutable UNBONDING_DELAY;
    /// @notice Least stake of a node with the provider or auditor role.
    uint256 public immutable MIN_STAKE;
    /// @notice w: share of a forfeited lock credited to its beneficiary, in basis points (below 100%).
    uint16 public immutable WINNER_SHARE_BPS;

    mapping(address account => Node) internal _nodes;
    mapping(address account => uint256) internal _credits;
    bool private transient _entered;

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
    /// @notice An account pulled its credit.
    event Withdrawn(address indexed account, uint256 amount);

    /// @notice A state-changing call re-entered the contract.
    error SettlementReentrantCall();
    /// @notice The constructor's winner share is not below 100%.
    error SettlementInvalidShare(uint16 winnerShareBps);
    /// @notice The account is already registered.
    error NodeAlreadyRegistered(address account);
    /// @notice The account is not registered.
    error NodeNotRegistered(address account);
    /// @notice The node is unbonding and cannot take new obligations.
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
    /// @notice The node still holds locks.
    error NodeObligationsOpen(uint32 obligations);
    /// @notice The account has no credit.
    error WithdrawNothing(address account);
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

    /// @notice Starts the unbonding delay; the node takes no new obligations meanwhile.
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

    /// @notice Ends the registration after the delay and with no lock left; credits the stake.
    function completeUnbonding() external nonReentrant {
        Node storage node = _nodes[msg.sender];
        // Only an unbonding node can leave.
        if (node.status != NodeStatus.Unbonding) revert NodeNotUnbonding(msg.sender);
        uint64 availableAt = node.unbondingSince + UNBONDING_DELAY;
        // The delay gives pending claims time to surface.
        if (block.timestamp < availableAt) revert NodeUnbondingNotElapsed(availableAt);
        // A seat still holds part of the stake.
        if (node.obligations != 0) revert NodeObligationsOpen(node.obligations);
        uint256 stake = node.stake;
        delete _nodes[msg.sender];
        _credits[msg.sender] += stake;
        emit NodeExited(msg.sender, stake);
    }

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

    /// @notice The node registered by `account` (all zero when none).
    function getNode(address account) external view returns (Node memory) {
        return _nodes[account];
    }

    /// @notice What `account` can withdraw now.
    function creditOf(address account) external view returns (uint256) {
        return _credits[account];
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

    /// Takes a lock from its node: WINNER_SHARE_BPS to `beneficiary`, the rest burned.
    function _slashLock(bytes32 jobId, address loser, uint256 amount, address beneficiary) internal {
        Node storage node = _nodes[loser];
        node.locked -= amount;
        node.stake -= amount;
        node.obligations -= 1;
        uint256 toBeneficiary = amount * WINNER_SHARE_BPS / BPS;
        uint256 burned = amount - toBeneficiary;
        _credits[beneficiary] += toBeneficiary;
        emit StakeSlashed(jobId, loser, amount, beneficiary, toBeneficiary, burned);
        if (burned != 0) {
            // BURN_ADDRESS has no code: the transfer cannot call back or fail.
            (bool ok,) = payable(BURN_ADDRESS).call{value: burned}("");
            if (!ok) revert WithdrawTransferFailed(BURN_ADDRESS, burned);
        }
    }
}
