// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Node, NodeStatus} from "./SettlementTypesV2.sol";
import {NodeStoreV2} from "./NodeStoreV2.sol";

/// @title NodeRegistryV2
/// @notice The nodes' own calls on the settlement contract, version 2: register, add stake,
/// unbond, withdraw. Inherited by `GavelSettlementV2` only (its modules share the store,
/// `NodeStoreV2`, not these calls). Registration works as in version 1, with one more role:
/// ROLE_REFEREE lists the node among those the draws of section 9 probe.
abstract contract NodeRegistryV2 is NodeStoreV2 {
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
    /// @notice An account pulled its credit.
    event Withdrawn(address indexed account, uint256 amount);

    /// @notice The account is already registered.
    error NodeAlreadyRegistered(address account);
    /// @notice The node is not unbonding.
    error NodeNotUnbonding(address account);
    /// @notice The Ed25519 key is zero.
    error NodeZeroKey();
    /// @notice Role bits are empty or unknown.
    error NodeInvalidRoles(uint8 roles);
    /// @notice The node lacks the role the call needs.
    error NodeMissingRole(address account, uint8 role);
    /// @notice The stake sent is below MIN_STAKE for a provider, auditor or referee.
    error NodeStakeBelowMinimum(uint256 sent, uint256 minimum);
    /// @notice Nothing was sent.
    error NodeZeroAmount();
    /// @notice The unbonding delay has not elapsed.
    error NodeUnbondingNotElapsed(uint64 availableAt);
    /// @notice The node still holds locks.
    error NodeObligationsOpen(uint32 obligations);
    /// @notice The account has no credit.
    error WithdrawNothing(address account);

    /// @notice Registers the caller as a node; the value sent is its stake.
    function register(bytes32 ed25519Key, uint8 roles) external payable nonReentrant {
        Node storage node = _nodes[msg.sender];
        // One registration per account at a time.
        if (node.status != NodeStatus.None) revert NodeAlreadyRegistered(msg.sender);
        // The key is what binds this account to the node's protocol signatures.
        if (ed25519Key == bytes32(0)) revert NodeZeroKey();
        // At least one role, and only known ones.
        if (roles == 0 || roles & ~(ROLE_PROVIDER | ROLE_AUDITOR | ROLE_CLIENT | ROLE_REFEREE) != 0) {
            revert NodeInvalidRoles(roles);
        }
        // Providers, auditors and referees put stake at risk; a pure client need not.
        if (roles & (ROLE_PROVIDER | ROLE_AUDITOR | ROLE_REFEREE) != 0 && msg.value < MIN_STAKE) {
            revert NodeStakeBelowMinimum(msg.value, MIN_STAKE);
        }
        node.ed25519Key = ed25519Key;
        node.stake = msg.value;
        node.roles = roles;
        node.status = NodeStatus.Active;
        if (roles & ROLE_REFEREE != 0) {
            _referees.push(msg.sender);
            _refereeSlot[msg.sender] = _referees.length;
        }
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
        uint256 slot = _refereeSlot[msg.sender];
        if (slot != 0) {
            // The last listed referee takes the leaver's place.
            address last = _referees[_referees.length - 1];
            _referees[slot - 1] = last;
            _refereeSlot[last] = slot;
            _referees.pop();
            delete _refereeSlot[msg.sender];
        }
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

    /// @notice The registered referees (ROLE_REFEREE), in the order the draws index them.
    function referees() external view returns (address[] memory) {
        return _referees;
    }
}
