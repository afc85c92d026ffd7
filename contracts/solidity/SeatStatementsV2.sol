// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {ForfeitReason, JobStatus, Seat, SeatStatus} from "./SettlementTypesV2.sol";
import {SeatStatement} from "./GameTypesV2.sol";
import {SettlementStorageV2} from "./SettlementStorageV2.sol";

/// @title SeatStatementsV2
/// @notice Equivocation (docs/economics.md, section 10): a seat that signed two different lists
/// for one (job, kind, index), or a list the chain contradicts, forfeits its lock (`Equivocated`):
/// D back to each demander it served only through a witness (section 7), w·S to the reporter, the
/// rest burned, and the client keeps the seat's pay at settle.
/// @dev Statements are EIP-712 typed data, domain ("gavel", "2", chainid, the settlement):
/// under delegatecall `address(this)` is GavelSettlementV2, so the domain is the one signed.
abstract contract SeatStatementsV2 is SettlementStorageV2 {
    uint8 internal constant KIND_TRACE = 0;
    uint8 internal constant KIND_STEPS = 1;
    uint8 internal constant KIND_NODES = 2;
    bytes32 private constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 private constant STATEMENT_TYPEHASH =
        keccak256("SeatStatement(bytes32 jobId,address seat,uint8 kind,uint64 index,bytes32 value)");

    /// @notice A seat lost its lock (same event as GavelSettlementV2's).
    event SeatForfeited(bytes32 indexed jobId, address indexed seat, ForfeitReason reason);
    /// @notice A seat was proven to have signed what cannot be true; `reporter` was credited w·S.
    event EquivocationSlashed(bytes32 indexed jobId, address indexed seat, address reporter, uint8 kind, uint64 index);

    /// @notice A signature is not 65 bytes with v 27 or 28, or does not recover to the statement's seat.
    error StatementBadSignature();
    /// @notice The two statements are not about the same list, or say the same.
    error StatementNotEquivocal();
    /// @notice The statement agrees with the chain, or the chain holds nothing to compare it with.
    error StatementNoContradiction();
    /// @notice The statement's kind is not TRACE, STEPS or NODES.
    error StatementInvalidKind(uint8 kind);
    /// @notice The seat holds no lock in a running job (not a seat, forfeited, or the job settled).
    error StatementNothingToSlash(address seat);

    /// @notice Slashes a seat that signed two different values for one (job, kind, index).
    function slashEquivocation(
        SeatStatement calldata a,
        bytes calldata sigA,
        SeatStatement calldata b,
        bytes calldata sigB
    ) external nonReentrant {
        // Same seat, job, kind and index, and different values: both cannot be its list.
        bool sameSlot = a.jobId == b.jobId && a.seat == b.seat && a.kind == b.kind && a.index == b.index;
        if (!sameSlot || a.value == b.value) revert StatementNotEquivocal();
        _checkSigned(a, sigA);
        _checkSigned(b, sigB);
        _slashEquivocated(a);
    }

    /// @notice Slashes a seat whose signed statement names a list other than the one the chain holds
    /// for it: its revealed trace root (TRACE), or the list it posted or endorsed in a game (STEPS, NODES).
    function slashContradiction(SeatStatement calldata a, bytes calldata sig) external nonReentrant {
        _checkSigned(a, sig);
        bytes32 onChain = _chainValue(a);
        // Nothing on chain to compare with, or the same list: no contradiction.
        if (onChain == bytes32(0) || onChain == a.value) revert StatementNoContradiction();
        _slashEquivocated(a);
    }

    /// @notice The EIP-712 digest a seat signs for `statement` (protocol.statements.digest).
    function statementDigest(SeatStatement calldata statement) public view returns (bytes32) {
        bytes32 domain = keccak256(
            abi.encode(DOMAIN_TYPEHASH, keccak256("gavel"), keccak256("2"), block.chainid, address(this))
        );
        bytes32 structHash = keccak256(
            abi.encode(STATEMENT_TYPEHASH, statement.jobId, statement.seat, statement.kind, statement.index, statement.value)
        );
        return keccak256(abi.encodePacked("\x19\x01", domain, structHash));
    }

    function _checkSigned(SeatStatement calldata statement, bytes calldata sig) private view {
        // Kinds are the three lists a seat hands out.
        if (statement.kind > KIND_NODES) revert StatementInvalidKind(statement.kind);
        if (sig.length != 65) revert StatementBadSignature();
        bytes32 r = bytes32(sig[0:32]);
        bytes32 s = bytes32(sig[32:64]);
        uint8 v = uint8(sig[64]);
        // ecrecover takes v 27 or 28; a zero result is no signer.
        if (v != 27 && v != 28) revert StatementBadSignature();
        address signer = ecrecover(statementDigest(statement), v, r, s);
        if (signer == address(0) || signer != statement.seat) revert StatementBadSignature();
    }

    /// What the chain holds for the statement's slot (zero: nothing yet).
    function _chainValue(SeatStatement calldata a) private view returns (bytes32) {
        Seat storage seat = _seats[a.jobId][a.seat];
        if (a.kind == KIND_TRACE) return a.index == 0 ? seat.traceRoot : bytes32(0);
        uint256 k = _gameParams[a.jobId].checkpointEvery;
        if (seat.traceRoot == bytes32(0) || k == 0) return bytes32(0);
        // STEPS index c: the steps list the seat answered in game (job, root, c).
        uint256 c = a.kind == KIND_STEPS ? a.index : (uint256(a.index) - 1) / k;
        if (a.kind == KIND_NODES && a.index == 0) return bytes32(0);
        bytes32 gameId = keccak256(abi.encode(a.jobId, seat.traceRoot, uint64(c)));
        bytes32 steps = _answers[gameId][a.seat];
        if (a.kind == KIND_STEPS || steps == bytes32(0)) return steps;
        // NODES index s (global): the node list it answered to the step claim on its steps list at s − c·k.
        bytes32 claimId = keccak256(abi.encode(gameId, KIND_STEPS, steps, uint64(a.index - c * k)));
        return _answers[claimId][a.seat];
    }

    function _slashEquivocated(SeatStatement calldata a) private {
        Seat storage seat = _seats[a.jobId][a.seat];
        // The lock is held while the job runs and the seat has not lost it already.
        if (_jobs[a.jobId].status != JobStatus.Running || seat.status == SeatStatus.None || seat.forfeit != ForfeitReason.None) {
            revert StatementNothingToSlash(a.seat);
        }
        seat.forfeit = ForfeitReason.Equivocated;
        emit SeatForfeited(a.jobId, a.seat, ForfeitReason.Equivocated);
        emit EquivocationSlashed(a.jobId, a.seat, msg.sender, a.kind, a.index);
        _slashSeat(a.jobId, a.seat, msg.sender);
    }
}
