// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

// Value types of the claim game (docs/economics.md, section 8).
//
//   Claim: None --openGame / pickStep / pickNode--> Open --timeout / resolveGame--> Failed | Void | Upheld
//
// Levels: 0 the interval (the game itself, id = gameId), 1 a step of a steps list, 2 a node of a node list.

/// @notice How a claim ended (Open while it has not).
enum ClaimStatus {
    None,
    Open,
    Failed,
    Void,
    Upheld
}

/// @notice One claim. `answerBy` is stepsBy, nodesBy or evidenceBy by level; `pickUntil` closes
/// the window for picks under the lists answered to it (levels 0 and 1); `ruleBy` runs from the
/// first evidence (level 2). `firstNodesBy` (level 0) is the nodesBy of the game's first step pick.
struct Claim {
    bytes32 gameId;
    bytes32 parent;
    bytes32 listRoot;
    address author;
    uint8 level;
    ClaimStatus status;
    bool upheldChild;
    bool voidChild;
    bool ruled;
    bool defenderRight;
    bool reimbursed;
    uint32 index;
    uint32 openChildren;
    uint64 answerBy;
    uint64 pickUntil;
    uint64 ruleBy;
    uint64 firstNodesBy;
    uint128 bond;
}

/// @notice The terms a game reads, fixed at openJob.
struct GameParams {
    uint64 steps;
    uint32 checkpointEvery;
    uint32 graphNodes;
    uint64 gasPriceCap;
    uint128 refereeFee;
    uint128 witnessFee;
    bytes32 elementSpecRoot;
}

/// @notice Wei each move locks (section 8.5): protocol.economics.bonds computes the same.
struct GameBonds {
    uint256 openGame;
    uint256 pickStep;
    uint256 pickNode;
    uint256 referee;
    uint256 appeal;
}

/// @notice Where an appeal of a node claim's ruling stands (section 9).
enum AppealStage {
    None,
    Open,
    Ended
}

/// @notice The referees of one node claim (section 9): GavelRefereesV2 writes it, GavelGamesV2
/// reads who ruled. The client rules first when it may (its bond intact, no party to the game);
/// otherwise a drawn `referee` holds the claim. After a ruling, anyone but its `ruler` may appeal
/// before `appealBy`; a drawn `appealReferee` rules it before `appealRuleBy`.
///
///   draw: armed at a block b (`armedBlock`), made from b + DRAW_DELAY + 1 to b + 255, re-armed later;
///         `draws` counts the draws of the current level (first, then appeal), MAX_DRAWS at most.
///   first level: no ruling and MAX_DRAWS drawn referees spent -> `refereesOut`: the claim voids.
///   appeal: None --appeal--> Open --ruleAppeal, or MAX_DRAWS referees spent--> Ended.
struct Ruling {
    address referee;
    uint64 armedBlock;
    uint8 draws;
    bool refereesOut;
    bool overturned;
    AppealStage appeal;
    address ruler;
    uint64 appealBy;
    address appellant;
    uint64 appealRuleBy;
    address appealReferee;
}

/// @notice A seat's signed word on one of its lists (docs/economics.md, section 10; EIP-712 type
/// `SeatStatement`, protocol/statements.py). kind 0 TRACE: index 0, value the trace root;
/// 1 STEPS: index c, the interval's steps-list root; 2 NODES: index s (a global step), the node-list root.
struct SeatStatement {
    bytes32 jobId;
    address seat;
    uint8 kind;
    uint64 index;
    bytes32 value;
}

/// @notice One duel of the fourth level (docs/onchain-step.md), OneStepVerifier's game `id` (the key):
/// a claimant of node claim `claimId` (its author or a joiner) against one standing seat covering its
/// node list. The outcome binds those two alone. `stepBy` is the latest the game may end: its two
/// clocks and 2Δ for the ruling after them.
struct StepGameRef {
    bytes32 claimId;
    address challenger;
    uint64 stepBy;
    address defender;
    bool settled;
    /// Levels of the duel's trace tree: its bond is B_node + γ·(G_duelBase + depth·G_duelLevel).
    uint8 depth;
}

/// @notice A node claim's duels: how many were opened, how many are not settled yet, and whether a
/// challenger won one (the claim is then upheld).
struct StepClaim {
    uint32 games;
    uint32 open;
    bool upheld;
}

/// @notice What openStepGame proves: the node list entries holding the node's inputs
/// (`inputNodes`, each with its LibList proof), the defender's output (entry n), and the node's
/// element spec against the job's elementSpecRoot.
struct StepGameProofs {
    uint32[] inputNodes;
    bytes32[][] inputProofs;
    bytes32[] outputProof;
    bytes32[] specProof;
}
