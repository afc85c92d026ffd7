// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

/// @title ReentrantReceiver
/// @notice Test account for the settlement contract's payment guards: it forwards calls to the
/// settlement contract and, when paid, either accepts, calls back into it, or refuses the money.
contract ReentrantReceiver {
    /// @notice Accept payments quietly.
    uint8 public constant MODE_ACCEPT = 0;
    /// @notice On payment, call the settlement contract again with `reentryCalldata`.
    uint8 public constant MODE_REENTER = 1;
    /// @notice Revert on payment.
    uint8 public constant MODE_REFUSE = 2;

    /// @notice The settlement contract this receiver talks to.
    address public immutable SETTLEMENT;
    /// @notice What happens when value arrives.
    uint8 public mode;
    /// @notice Calldata used by MODE_REENTER.
    bytes public reentryCalldata;
    /// @notice Re-entry calls attempted.
    uint256 public reentryAttempts;
    /// @notice Re-entry calls that succeeded.
    uint256 public reentrySuccesses;
    /// @notice Revert data of the last failed re-entry.
    bytes public lastReentryError;
    /// @notice Value received in total.
    uint256 public received;

    /// @notice A forwarded call reverted.
    error ReceiverCallFailed(bytes revertData);
    /// @notice The receiver refused a payment.
    error ReceiverRefused(uint256 amount);

    /// @notice Binds the receiver to one settlement contract.
    constructor(address settlement) {
        SETTLEMENT = settlement;
    }

    /// @notice Chooses what happens on payment, and the re-entry calldata.
    function configure(uint8 newMode, bytes calldata newReentryCalldata) external {
        mode = newMode;
        reentryCalldata = newReentryCalldata;
    }

    /// @notice Calls the settlement contract with `data` and the value sent; bubbles up reverts.
    function forward(bytes calldata data) external payable returns (bytes memory result) {
        bool ok;
        (ok, result) = SETTLEMENT.call{value: msg.value}(data);
        if (!ok) {
            assembly {
                revert(add(result, 32), mload(result))
            }
        }
    }

    /// @notice Accepts, re-enters or refuses, as configured.
    receive() external payable {
        received += msg.value;
        if (mode == MODE_REENTER) {
            reentryAttempts += 1;
            (bool ok, bytes memory ret) = SETTLEMENT.call(reentryCalldata);
            if (ok) reentrySuccesses += 1;
            else lastReentryError = ret;
        } else if (mode == MODE_REFUSE) {
            revert ReceiverRefused(msg.value);
        }
    }
}
