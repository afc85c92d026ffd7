// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

// Value types of the settlement contract, version 2 (docs/economics.md, sections 3 to 6).
//
//   Node: None --register--> Active --beginUnbonding--> Unbonding --completeUnbonding--> None
//                              ^------cancelUnbonding------'
//   Job:  None --openJob--> Open --accept (last seat)--> Running --settle--> Finalized (a seat paid)
//                                                                       '--> Refunded (none paid)
//         Open --settle, from acceptBy--> Refunded (seats never filled; locks returned)
//   Seat: None --accept--> Taken --commit--> Committed --reveal--> Revealed --settle--> Paid
//         Taken or Committed --closeSeat or settle, past its deadline--> forfeit NoCommit / NoReveal
//
// A forfeit is recorded beside the seat's progress (`Seat.forfeit`), so the later slices'
// reasons (a lost game, a silent defender, an unserved demand, an equivocation) can strike a
// seat at any progress and `settle` still knows how far it got.

/// @notice Life of a registered node (an account that staked and bound its Ed25519 key).
enum NodeStatus {
    None,
    Active,
    Unbonding
}

/// @notice Life of a job, from the client's escrow to the payout or the refund.
enum JobStatus {
    None,
    Open,
    Running,
    Finalized,
    Refunded
}

/// @notice How far a seat got.
enum SeatStatus {
    None,
    Taken,
    Committed,
    Revealed,
    Paid
}

/// @notice Why a seat lost its lock (None: it did not).
enum ForfeitReason {
    None,
    NoCommit,
    NoReveal,
    LostGame,
    SilentDefender,
    Unavailable,
    Equivocated
}

/// @notice A registered node. `locked` is the part of `stake` held by seats (and, later, bonds).
struct Node {
    bytes32 ed25519Key;
    uint256 stake;
    uint256 locked;
    uint64 unbondingSince;
    uint32 obligations;
    uint8 roles;
    NodeStatus status;
}

/// @notice A job's terms, as the client signed them in its offer (section 4).
/// termsHash = keccak256(abi.encode(terms)); jobId = keccak256(abi.encode(chainid, contract, client, nonce)).
struct JobTerms {
    uint64 nonce;
    bytes32 clientKey;
    bool clientReferees;
    bytes32 specHash;
    bytes32 initialState;
    uint64 steps;
    uint32 checkpointEvery;
    uint32 graphNodes;
    uint32 stepMillis;
    uint32 nodeMillis;
    uint64 stateBytes;
    uint64 evidenceBytes;
    uint16 providersWanted;
    uint16 catchBps;
    uint32 acceptWindow;
    uint128 price;
    uint128 providerStake;
    uint64 gasPriceCap;
    uint128 refereeFee;
    uint128 witnessFee;
    /// LibList root over the graph's N nodes of keccak(abi.encode(setup, inputNodes)) for node n's
    /// element spec (OneStepVerifier.Setup with every root and the element zeroed; a zero entry for a
    /// node with no element program). Zero: no on-chain fourth level for this job.
    bytes32 elementSpecRoot;
}

/// @notice Seconds each kind of turn is allowed (section 3), and the longest a demand and a game last.
struct Allowances {
    uint32 train;
    uint32 reveal;
    uint32 replay;
    uint32 list;
    uint32 interval;
    uint32 xferState;
    uint32 xferEvidence;
    uint32 rule;
    uint32 draw;
    uint32 demand;
    uint32 game;
}

/// @notice The allowances that depend on the terms, packed in one slot; reveal (Δ), list (2Δ)
/// and draw follow from the immutables alone.
struct JobAllowances {
    uint32 train;
    uint32 replay;
    uint32 interval;
    uint32 xferState;
    uint32 xferEvidence;
    uint32 rule;
    uint32 demand;
    uint32 game;
}

/// @notice A job as stored. `revealFrom` is zero until every seat committed; `challengeEnd` is
/// the latest `challengeBy` of its seats; `openItems` counts demands, games and appeals (later
/// slices) that `settle` waits for.
struct Job {
    address client;
    uint64 acceptBy;
    uint16 providersWanted;
    uint16 providersTaken;
    uint64 commitBy;
    uint64 revealFrom;
    uint64 challengeEnd;
    uint16 commitments;
    uint32 openItems;
    JobStatus status;
    bool clientReferees;
    uint64 finalBy;
    uint32 traceLength;
    uint128 price;
    uint128 providerStake;
    bytes32 termsHash;
    bytes32 initialState;
    JobAllowances allowed;
}

/// @notice One seat of a job: its commitment, then its revealed trace root and challenge window.
struct Seat {
    SeatStatus status;
    ForfeitReason forfeit;
    uint64 challengeBy;
    bytes32 commitment;
    bytes32 traceRoot;
}

/// @notice Every deadline of a job (unix seconds; zero where not yet fixed). `revealFrom` and
/// `revealBy` are provisional (from `commitBy`) until the last seat commits.
struct Deadlines {
    uint64 acceptBy;
    uint64 commitBy;
    uint64 revealFrom;
    uint64 revealBy;
    uint64 challengeEnd;
    uint64 finalBy;
}

/// @notice Where a demand of data stands (section 7).
///
///   Open --releaseDemand (the demander got it)--> Released
///   Open --callWitness (the seat, from serveBy for Δ)--> Drawing --drawWitness--> Witnessing
///   Witnessing --attestServed(true)--> Served
///   Witnessing --attestServed(false) or timeoutWitness, draws left--> Drawing
///   Witnessing --attestServed(false), MAX_DRAWS drawn--> Refused --failDemand--> Failed
///   Open (serveBy + Δ passed) or Drawing (drawBy passed) --failDemand--> Failed (the seat forfeits)
///   Drawing (a draw found nobody) or Witnessing (timeoutWitness), MAX_DRAWS drawn--> Void
enum DemandStage {
    None,
    Open,
    Drawing,
    Witnessing,
    Refused,
    Released,
    Served,
    Failed,
    Void
}

/// @notice A demand that a seat hand over one item: 0 the bundle, c + 1 checkpoint c (c = 0..C).
/// `deadline` is serveBy (Open), the draw's deadline (Drawing) or attestBy (Witnessing).
struct Demand {
    bytes32 jobId;
    address seat;
    uint32 item;
    DemandStage stage;
    uint8 draws;
    address demander;
    uint64 deadline;
    address witness;
    uint64 armedBlock;
    uint128 bond;
}
