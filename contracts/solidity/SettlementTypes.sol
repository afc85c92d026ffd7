// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

// Value types of the gavel settlement contract. Every status is an explicit state machine:
//
//   Node:    None --register--> Active --beginUnbonding--> Unbonding --completeUnbonding--> None
//                                  ^------cancelUnbonding------'
//   Job:     None --openJob--> Open --accept (last seat)--> Accepted --commit (first)--> Committed
//            Committed --openDispute--> Disputed --last dispute ruled or lapsed--> Committed
//            Committed --settle after the challenge window--> Finalized (some honest provider paid)
//                                                           | Refunded (no honest provider)
//            Open --settle after the acceptance deadline--> Refunded (seats were not all taken)
//            Accepted --settle after the commit deadline--> Refunded (nobody committed)
//   Dispute: None --openDispute--> Open --rule (referee, before ruleBy)--> Ruled
//                                       '--lapse (anyone, from ruleBy on)--> Lapsed

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
    Accepted,
    Committed,
    Disputed,
    Finalized,
    Refunded
}

/// @notice Life of one dispute between two parties of a job.
enum DisputeStatus {
    None,
    Open,
    Ruled,
    Lapsed
}

/// @notice The referee's verdict on a dispute.
enum Outcome {
    None,
    ChallengerWins,
    RespondentWins,
    BothLose
}

/// @notice A registered node. `locked` is the part of `stake` held by jobs and challenge bonds.
struct Node {
    bytes32 ed25519Key;
    uint256 stake;
    uint256 locked;
    uint64 unbondingSince;
    uint32 obligations;
    uint8 roles;
    NodeStatus status;
}

/// @notice A job: the client's escrow, the seats wanted and the deadlines (unix seconds).
struct Job {
    address client;
    uint64 acceptBy;
    uint16 providersWanted;
    uint16 providersAccepted;
    address referee;
    uint64 commitBy;
    uint16 commitments;
    uint16 openDisputes;
    uint64 challengeBy;
    uint64 rulingPeriod;
    JobStatus status;
    uint256 price;
    uint256 providerStake;
}

/// @notice One provider's seat in a job: its trace root and whether it lost its lock.
struct Seat {
    bytes32 traceRoot;
    bool accepted;
    bool committed;
    bool forfeited;
}

/// @notice A dispute between a challenger and a respondent (always a committed provider).
/// `bond` is the auditor's locked bond; zero when the challenger is a provider of the job,
/// whose job lock is what it risks.
struct Dispute {
    bytes32 jobId;
    address challenger;
    uint64 openedAt;
    DisputeStatus status;
    Outcome outcome;
    address respondent;
    uint64 ruleBy;
    uint256 bond;
    uint64 step;
    uint64 node;
    bytes32 transcriptHash;
}
