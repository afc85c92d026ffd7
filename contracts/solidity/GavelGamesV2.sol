// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {ForfeitReason, Job, JobStatus, Node, Seat, SeatStatus} from "./SettlementTypesV2.sol";
import {Claim, ClaimStatus, GameBonds, GameParams, Ruling, StepClaim, StepGameRef} from "./GameTypesV2.sol";
import {LibList} from "./LibList.sol";
import {OneStepVerifier} from "./OneStepVerifier.sol";
import {SeatStatementsV2} from "./SeatStatementsV2.sol";
import {SettlementStorageV2} from "./SettlementStorageV2.sol";

/// @title GavelGamesV2
/// @notice The claim game of docs/economics.md, section 8: GavelSettlementV2 runs this code by
/// delegatecall on its own storage and balance (EIP-170 leaves no room for it in one contract).
/// @dev Theory of operation.
///  - `openGame(jobId, root, c)` opens the interval claim "transition trace[c] -> trace[c+1] of
///    this root is wrong" (id = gameId) with bond B_open, or joins it. Every seat that revealed
///    the root owes a steps list by stepsBy = now + 2Δ (`postSteps`, or `endorse` of one posted).
///  - `pickStep(gameId, list, s)` opens a step claim (bond B_step, or joins it) until E_interval
///    after stepsBy; its nodesBy comes from the root's recompute queue (`_busyUntil`). The seats
///    covering the picked list owe the step's node list. `pickNode` (bond B_node) opens a node
///    claim; the seats covering the picked node list owe evidence by now + E_xfer(Y); the first
///    evidence starts the referee's E_rule. Rulings, draws and appeals are `GavelRefereesV2`'s
///    (section 9): it sets `ruled`, `defenderRight` and `ruleBy` (the appeal window, held while
///    an appeal runs) and records who ruled in `_rulings`.
///  - `timeout(claimId)` / `resolveGame(gameId)` end a claim once its deadlines passed, bottom up:
///    owing seats that did not answer forfeit `SilentDefender` (w·S to the claim's author, the rest
///    burned); a claim nobody answered is upheld; a node claim ends as finally ruled once `ruleBy`
///    passed, or void when its drawn referees ran out; a step or interval claim ends, once its pick
///    window closed and its children ended, upheld if a child was, else void if a child was, else failed.
///  - Money (8.5): failed, the bond goes to the seats covering the picked list (f_R of it to the
///    referee whose ruling stood, unless an appeal overturned it); void or upheld, the bond comes
///    back. An upheld node claim forfeits every seat covering the picked node list (`LostGame`):
///    from the first lock the path's gas and a drawn ruling referee's f_R; of each S, w·S split in
///    three between the authors of the interval, step and node claims (a share of the ruling
///    referee is burned instead), the rest burned; the client gets that seat's pay back at settle.
///  - Bonds are locks of the author's stake, so the contract's balance stays stakes + credits + escrow.
///  - A node claim played on OneStepVerifier (GavelRefereesV2's `openStepGame`: duels, each a claimant
///    against one covering seat) ends by the verifier's outcomes, never by a ruling: `settleStepGame`
///    settles each duel once the verifier decided it or its `stepBy` passed. ChallengerWon: the defender
///    forfeits (LostGame; the path's gas, w·S in thirds with the challenger as the node's finder), the
///    challenger's B_node back. DefenderWon: that B_node to the defender. BothLost: the defender forfeits
///    with nothing paid from its lock but the demanders, the B_node burned. Once every duel is settled and
///    none may open, `timeout` ends the claim: upheld if a challenger won a duel, else failed.
///  - Equivocation (section 10) is `SeatStatementsV2`'s, inherited here for the same storage.
contract GavelGamesV2 is SeatStatementsV2 {
    uint8 internal constant INTERVAL = 0;
    uint8 internal constant STEP = 1;
    uint8 internal constant NODE = 2;


    /// @notice Δ, as GavelSettlementV2's MARGIN.
    uint32 public immutable MARGIN;
    /// @notice The OneStepVerifier the fourth level is played on (GavelRefereesV2's, checked by the settlement).
    address public immutable STEP_VERIFIER;
    address private immutable SELF;

    /// @notice A game (its interval claim) was opened; the root's seats post steps lists before `stepsBy`.
    event GameOpened(bytes32 indexed gameId, bytes32 indexed jobId, bytes32 traceRoot, uint32 interval, address opener, uint64 stepsBy);
    /// @notice A step or node claim was picked; the seats covering `listRoot` answer before `answerBy`.
    event ClaimPicked(bytes32 indexed claimId, bytes32 indexed parent, address author, uint8 level, bytes32 listRoot, uint32 index, uint64 answerBy);
    /// @notice An account joined an existing claim (no bond).
    event ClaimJoined(bytes32 indexed claimId, address indexed account);
    /// @notice A seat posted a list (steps or nodes) answering a claim; it covers that list.
    /// `entries` is the list itself: challengers read it here, whoever sent the call (a seat posting through a
    /// contract of its own hides nothing).
    event ListPosted(bytes32 indexed claimId, address indexed seat, bytes32 listRoot, bytes32[] entries);
    /// @notice A seat covered a list another seat posted.
    event ListEndorsed(bytes32 indexed claimId, address indexed seat, bytes32 listRoot);
    /// @notice A seat sent its evidence to the referee (off chain); the referee rules before `ruleBy`.
    event EvidencePosted(bytes32 indexed claimId, address indexed seat, bytes32 evidenceHash, uint64 ruleBy);
    /// @notice A winning claim's author and first joiners were credited their gas at γ (`amount` in all).
    event PathReimbursed(bytes32 indexed claimId, uint256 amount);
    /// @notice A claim ended.
    event ClaimResolved(bytes32 indexed claimId, ClaimStatus outcome);
    /// @notice A duel of the fourth level was settled from OneStepVerifier's `outcome` (its Outcome: 1
    /// ChallengerWon, 2 DefenderWon, 3 BothLost).
    event StepGameSettled(bytes32 indexed claimId, uint256 id, uint8 outcome, address challenger, address defender);
    /// @notice A failed claim's bond was paid out: `toReferee` to the referee, `toEach` to each covering seat.
    event BondForfeited(bytes32 indexed claimId, address indexed author, uint256 bond, uint256 toReferee, uint256 toEach, uint16 seats, uint256 burned);
    /// @notice The module was called directly: its moves run only on GavelSettlementV2's storage.
    error GameDirectCall();
    /// @notice The job is not running.
    error GameJobNotRunning(bytes32 jobId);
    /// @notice No revealed seat of the job has this root.
    error GameUnknownRoot(bytes32 traceRoot);
    /// @notice The interval index is not below C.
    error GameInvalidInterval(uint32 interval);
    /// @notice No claim with this id.
    error GameClaimNotFound(bytes32 claimId);
    /// @notice The claim is at another level than the move needs.
    error GameWrongLevel(bytes32 claimId, uint8 level);
    /// @notice The claim ended.
    error GameClaimClosed(bytes32 claimId);
    /// @notice The deadline of this move has passed.
    error GameDeadlinePassed(uint64 deadline);
    /// @notice The move is allowed only from `notBefore` on.
    error GameTooEarly(uint64 notBefore);
    /// @notice The account opened, picked or already joined this claim.
    error GameAlreadyJoined(address account);
    /// @notice The caller owes no answer to this claim (not a seat of the root, or not covering the picked list).
    error GameNotADefender(address account);
    /// @notice The seat already answered this claim.
    error GameAlreadyAnswered(address seat);
    /// @notice The list has the wrong number of entries.
    error GameWrongListLength(uint256 length, uint256 expected);
    /// @notice A proof of the list's ends does not hold.
    error GameBadProof();
    /// @notice The list was not posted under this claim.
    error GameListNotPosted(bytes32 listRoot);
    /// @notice The picked index is outside the list's pickable entries.
    error GameInvalidIndex(uint32 index);
    /// @notice The evidence hash is zero.
    error GameZeroEvidence();
    /// @notice The node claim has no ruling and its referees have not run out (timeoutReferee or drawReferee first).
    error GameNoRuling(bytes32 claimId);
    /// @notice Claims under this one are still open.
    error GameChildrenOpen(uint32 openChildren);
    /// @notice Duels of the fourth level on this node claim are not settled yet (settleStepGame first).
    error GameStepGameOpen(bytes32 claimId);
    /// @notice The settlement opened no duel with this OneStepVerifier game id.
    error GameNoStepGame(uint256 id);
    /// @notice The duel was settled already.
    error GameStepGameSettled(uint256 id);

    constructor(uint64 unbondingDelay, uint256 minNodeStake, uint16 winnerShareBps, uint32 margin, address stepVerifier)
        SettlementStorageV2(unbondingDelay, minNodeStake, winnerShareBps)
    {
        MARGIN = margin;
        STEP_VERIFIER = stepVerifier;
        SELF = address(this);
    }

    modifier viaSettlement() {
        // Run on the module's own (empty) storage, a move would mean nothing.
        if (address(this) == SELF) revert GameDirectCall();
        _;
    }

    // ------------------------------------------------------------------ moves

    /// @notice Opens the game on interval `c` of `root` with bond B_open, or joins it.
    function openGame(bytes32 jobId, bytes32 root, uint32 c) external viaSettlement nonReentrant returns (bytes32 gameId) {
        Job storage job = _jobs[jobId];
        // Games are about seats whose pay is not settled.
        if (job.status != JobStatus.Running) revert GameJobNotRunning(jobId);
        // Interval c is the transition trace[c] -> trace[c+1].
        if (uint256(c) + 1 >= job.traceLength) revert GameInvalidInterval(c);
        uint64 challengeBy = _latestChallengeBy(jobId, root);
        // Only a revealed root can be wrong...
        if (challengeBy == 0) revert GameUnknownRoot(root);
        // ... and only within a whole replay of its reveal.
        if (block.timestamp >= challengeBy) revert GameDeadlinePassed(challengeBy);
        gameId = keccak256(abi.encode(jobId, root, uint64(c)));
        Claim storage game = _claims[gameId];
        if (game.status != ClaimStatus.None) {
            _join(gameId, game, gameId);
            return gameId;
        }
        uint256 bond = _bonds(jobId).openGame;
        _lock(_activeNode(msg.sender), msg.sender, bond);
        game.gameId = gameId;
        game.parent = jobId; // the interval claim's parent is its job
        game.listRoot = root;
        game.author = msg.sender;
        game.status = ClaimStatus.Open;
        game.index = c;
        game.answerBy = uint64(block.timestamp) + 2 * MARGIN;
        game.pickUntil = game.answerBy + job.allowed.interval;
        game.bond = uint128(bond);
        _party[gameId][msg.sender] = true;
        job.openItems += 1;
        emit GameOpened(gameId, jobId, root, c, msg.sender, game.answerBy);
    }

    /// @notice Posts the interval's per-step state hashes; its ends are proven against the root.
    function postSteps(bytes32 gameId, bytes32[] calldata steps, bytes32[] calldata proofFrom, bytes32[] calldata proofTo)
        external
        viaSettlement
        nonReentrant
    {
        Claim storage game = _answerable(gameId, INTERVAL);
        bytes32 jobId = game.parent;
        _mustOwe(jobId, game, msg.sender);
        uint256 expected = _stepsIn(jobId, game.index) + 1;
        // Entry 0 is trace[c], entry k_c is trace[c+1].
        if (steps.length != expected) revert GameWrongListLength(steps.length, expected);
        uint256 size = _jobs[jobId].traceLength;
        bool ends = LibList.verify(game.listRoot, steps[0], size, game.index, proofFrom)
            && LibList.verify(game.listRoot, steps[expected - 1], size, uint256(game.index) + 1, proofTo);
        // The list joins the two checkpoints the root commits to.
        if (!ends) revert GameBadProof();
        _post(gameId, steps);
    }

    /// @notice Posts step s's N node-output hashes and the state after it (entry N = steps[s], proven).
    function postNodes(bytes32 claimId, bytes32[] calldata nodes, bytes32[] calldata proof) external viaSettlement nonReentrant {
        Claim storage claim = _answerable(claimId, STEP);
        bytes32 jobId = _jobOf(claim);
        _mustOwe(jobId, claim, msg.sender);
        GameParams storage p = _gameParams[jobId];
        // N node outputs, then the state after the step.
        if (nodes.length != uint256(p.graphNodes) + 1) revert GameWrongListLength(nodes.length, uint256(p.graphNodes) + 1);
        uint256 size = _stepsIn(jobId, _claims[claim.gameId].index) + 1;
        // The last entry is the state hash the picked steps list holds at s.
        if (!LibList.verify(claim.listRoot, nodes[p.graphNodes], size, claim.index, proof)) revert GameBadProof();
        _post(claimId, nodes);
    }

    /// @notice Covers the caller with a list another seat posted under this claim (no calldata).
    function endorse(bytes32 claimId, bytes32 listRoot) external viaSettlement nonReentrant {
        Claim storage claim = _claims[claimId];
        // Lists answer interval and step claims; node claims are answered by evidence.
        if (claim.level == NODE) revert GameWrongLevel(claimId, claim.level);
        claim = _answerable(claimId, claim.level);
        _mustOwe(_jobOf(claim), claim, msg.sender);
        // Only a posted list can be endorsed.
        if (!_posted[claimId][listRoot]) revert GameListNotPosted(listRoot);
        _answer(claimId, listRoot, false);
    }

    /// @notice Claims "step s of this steps list is wrong" with bond B_step, or joins that claim.
    function pickStep(bytes32 gameId, bytes32 listRoot, uint32 s) external viaSettlement nonReentrant returns (bytes32 claimId) {
        Claim storage game = _pickable(gameId, INTERVAL, listRoot);
        bytes32 jobId = game.parent;
        // Entry 0 is the proven checkpoint; steps 1..k_c can be wrong.
        if (s == 0 || s > _stepsIn(jobId, game.index)) revert GameInvalidIndex(s);
        claimId = keccak256(abi.encode(gameId, STEP, listRoot, uint64(s)));
        Claim storage claim = _claims[claimId];
        if (claim.status != ClaimStatus.None) {
            _join(gameId, claim, claimId);
            return claimId;
        }
        uint64 nodesBy;
        uint64 now_ = uint64(block.timestamp);
        if (game.firstNodesBy == 0) {
            // The root's defenders recompute one interval at a time (section 8.4's queue).
            uint64 busy = _busyUntil[jobId][game.listRoot];
            nodesBy = (now_ > busy ? now_ : busy) + _jobs[jobId].allowed.interval;
            _busyUntil[jobId][game.listRoot] = nodesBy - 2 * MARGIN;
            game.firstNodesBy = nodesBy;
        } else {
            // The interval is recomputed once and kept.
            nodesBy = game.firstNodesBy > now_ + 2 * MARGIN ? game.firstNodesBy : now_ + 2 * MARGIN;
        }
        _newClaim(claim, gameId, gameId, listRoot, STEP, s, nodesBy, nodesBy + _jobs[jobId].allowed.interval, _bonds(jobId).pickStep);
        game.openChildren += 1;
        emit ClaimPicked(claimId, gameId, msg.sender, STEP, listRoot, s, nodesBy);
    }

    /// @notice Claims "node n of this node list is wrong" with bond B_node, or joins that claim.
    function pickNode(bytes32 stepClaimId, bytes32 nodeRoot, uint32 n) external viaSettlement nonReentrant returns (bytes32 claimId) {
        Claim storage step = _pickable(stepClaimId, STEP, nodeRoot);
        bytes32 gameId = step.gameId;
        bytes32 jobId = _jobOf(step);
        // Entries 0..N-1 are node outputs; entry N is the state after the step. Entry N is proven
        // equal to the steps list's entry, but not to what the outputs make: a cheat that keeps every
        // output and changes the state is wrong only there, so it can be picked (the referee rebuilds
        // the state from the listed outputs by the program's state-outputs entry).
        if (n > _gameParams[jobId].graphNodes) revert GameInvalidIndex(n);
        claimId = keccak256(abi.encode(gameId, NODE, nodeRoot, uint64(n)));
        Claim storage claim = _claims[claimId];
        if (claim.status != ClaimStatus.None) {
            _join(gameId, claim, claimId);
            return claimId;
        }
        uint64 evidenceBy = uint64(block.timestamp) + _jobs[jobId].allowed.xferEvidence;
        _newClaim(claim, gameId, stepClaimId, nodeRoot, NODE, n, evidenceBy, 0, _bonds(jobId).pickNode);
        step.openChildren += 1;
        emit ClaimPicked(claimId, stepClaimId, msg.sender, NODE, nodeRoot, n, evidenceBy);
    }

    /// @notice Records that the caller sent its evidence for this node claim to the referee.
    function postEvidence(bytes32 claimId, bytes32 evidenceHash) external viaSettlement nonReentrant {
        Claim storage claim = _answerable(claimId, NODE);
        bytes32 jobId = _jobOf(claim);
        _mustOwe(jobId, claim, msg.sender);
        // A zero hash would read as no answer.
        if (evidenceHash == bytes32(0)) revert GameZeroEvidence();
        _answers[claimId][msg.sender] = evidenceHash;
        // The referee's allowance runs from the first evidence.
        if (claim.ruleBy == 0) claim.ruleBy = uint64(block.timestamp) + _jobs[jobId].allowed.rule;
        emit EvidencePosted(claimId, msg.sender, evidenceHash, claim.ruleBy);
    }

    /// @notice Ends a step or node claim whose deadlines passed (anyone may call it).
    function timeout(bytes32 claimId) external viaSettlement nonReentrant {
        Claim storage claim = _openClaim(claimId);
        // The game itself ends with resolveGame.
        if (claim.level == INTERVAL) revert GameWrongLevel(claimId, INTERVAL);
        _resolve(claimId, claim);
    }

    /// @notice Settles a duel of the fourth level (anyone may call it) once OneStepVerifier decided it,
    /// or from its `stepBy` on: a game the clocks let nobody rule is then timed out on the verifier, and
    /// one located but not ruled is lost by both. The ruling is the contract's own execution: no appeal.
    function settleStepGame(uint256 id) external viaSettlement nonReentrant {
        StepGameRef storage duel = _stepGames[id];
        // Only games the settlement opened count...
        if (duel.claimId == bytes32(0)) revert GameNoStepGame(id);
        // ... once.
        if (duel.settled) revert GameStepGameSettled(id);
        OneStepVerifier.Outcome outcome = _stepOutcome(id, duel.stepBy);
        duel.settled = true;
        bytes32 claimId = duel.claimId;
        Claim storage claim = _claims[claimId];
        bytes32 jobId = _jobOf(claim);
        address challenger = duel.challenger;
        address defender = duel.defender;
        _stepClaims[claimId].open -= 1;
        uint256 bond = _duelBondOf(jobId, duel.depth);
        bool stands = _seats[jobId][defender].forfeit == ForfeitReason.None;
        if (outcome == OneStepVerifier.Outcome.ChallengerWon) {
            _stepClaims[claimId].upheld = true;
            _unlock(jobId, challenger, bond);
            if (stands) _defenderLost(jobId, claimId, claim, duel);
        } else {
            _take(challenger, bond);
            // The challenger's bond pays the defender that beat it (its moves at γ among it); nobody, when
            // both lost or it fell already.
            if (outcome == OneStepVerifier.Outcome.DefenderWon && stands) _credits[defender] += bond;
            else _burn(bond);
            if (outcome == OneStepVerifier.Outcome.BothLost && stands) _forfeitLost(jobId, claimId, claim, defender, address(0), 0);
        }
        emit StepGameSettled(claimId, id, uint8(outcome), challenger, defender);
    }

    /// @notice Ends a game (its interval claim) once its deadlines passed and its claims ended (anyone may call it).
    function resolveGame(bytes32 gameId) external viaSettlement nonReentrant {
        Claim storage game = _openClaim(gameId);
        if (game.level != INTERVAL) revert GameWrongLevel(gameId, game.level);
        _resolve(gameId, game);
    }

    // ------------------------------------------------------------------ views

    /// @notice The claim with this id (all zero when none).
    function getClaim(bytes32 claimId) external view returns (Claim memory) {
        return _claims[claimId];
    }

    /// @notice What `seat` answered to the claim: a list root or an evidence hash (zero: nothing).
    function answerOf(bytes32 claimId, address seat) external view returns (bytes32) {
        return _answers[claimId][seat];
    }

    /// @notice Until when the root's defenders are busy recomputing a picked interval.
    function busyUntil(bytes32 jobId, bytes32 root) external view returns (uint64) {
        return _busyUntil[jobId][root];
    }

    /// @notice What a duel on a setup of `length` steps locks: B_node + γ·(G_duelBase + depth·G_duelLevel).
    function stepGameBondOf(bytes32 jobId, uint256 length) external view returns (uint256) {
        return _duelBondOf(jobId, _depth(length));
    }

    /// @notice The bonds of the job's game moves and its referee bond (section 8.5).
    function bondsOf(bytes32 jobId) external view returns (GameBonds memory) {
        return _bonds(jobId);
    }

    // ------------------------------------------------------------------ internals

    /// The verifier's outcome of duel `id`; undecided, from `stepBy` on: both clocks are spent by then,
    /// so a game in its commit or walk is timed out on the verifier, and one located but not ruled
    /// (neither side handed in the step that would have won it) is lost by both.
    function _stepOutcome(uint256 id, uint64 stepBy) private returns (OneStepVerifier.Outcome outcome) {
        OneStepVerifier verifier = OneStepVerifier(STEP_VERIFIER);
        OneStepVerifier.Phase phase;
        (phase, outcome,,,,) = verifier.game(id);
        if (outcome != OneStepVerifier.Outcome.None) return outcome;
        // The players have until stepBy.
        if (block.timestamp < stepBy) revert GameTooEarly(stepBy);
        if (phase == OneStepVerifier.Phase.Located) return OneStepVerifier.Outcome.BothLost;
        verifier.timeout(id);
        (, outcome,,,,) = verifier.game(id);
    }

    function _newClaim(
        Claim storage claim,
        bytes32 gameId,
        bytes32 parent,
        bytes32 listRoot,
        uint8 level,
        uint32 index,
        uint64 answerBy,
        uint64 pickUntil,
        uint256 bond
    ) private {
        _lock(_activeNode(msg.sender), msg.sender, bond);
        claim.gameId = gameId;
        claim.parent = parent;
        claim.listRoot = listRoot;
        claim.author = msg.sender;
        claim.level = level;
        claim.status = ClaimStatus.Open;
        claim.index = index;
        claim.answerBy = answerBy;
        claim.pickUntil = pickUntil;
        claim.bond = uint128(bond);
        _party[gameId][msg.sender] = true;
    }

    function _join(bytes32 gameId, Claim storage claim, bytes32 claimId) private {
        // Joining needs the claim still open...
        if (claim.status != ClaimStatus.Open) revert GameClaimClosed(claimId);
        // ... and a registered node (joins are recorded for reimbursement).
        _activeNode(msg.sender);
        // Once per account, the author included.
        if (claim.author == msg.sender || _joined[claimId][msg.sender]) revert GameAlreadyJoined(msg.sender);
        _joined[claimId][msg.sender] = true;
        _party[gameId][msg.sender] = true;
        // The first MAX_JOINERS get their join gas back if the claim wins (8.3).
        if (_joiners[claimId].length < MAX_JOINERS) _joiners[claimId].push(msg.sender);
        emit ClaimJoined(claimId, msg.sender);
    }

    function _openClaim(bytes32 claimId) private view returns (Claim storage claim) {
        claim = _claims[claimId];
        // Moves name a claim that exists...
        if (claim.status == ClaimStatus.None) revert GameClaimNotFound(claimId);
        // ... and has not ended.
        if (claim.status != ClaimStatus.Open) revert GameClaimClosed(claimId);
    }

    /// An open claim of this level whose answer deadline has not passed.
    function _answerable(bytes32 claimId, uint8 level) private view returns (Claim storage claim) {
        claim = _openClaim(claimId);
        if (claim.level != level) revert GameWrongLevel(claimId, claim.level);
        // Answers come before the deadline the pick set.
        if (block.timestamp >= claim.answerBy) revert GameDeadlinePassed(claim.answerBy);
        // Once per seat.
        if (_answers[claimId][msg.sender] != 0) revert GameAlreadyAnswered(msg.sender);
    }

    /// An open claim of this level whose pick window is open, with `listRoot` posted under it.
    function _pickable(bytes32 claimId, uint8 level, bytes32 listRoot) private view returns (Claim storage claim) {
        claim = _openClaim(claimId);
        if (claim.level != level) revert GameWrongLevel(claimId, claim.level);
        // Picks close E_interval after the answer deadline.
        if (block.timestamp >= claim.pickUntil) revert GameDeadlinePassed(claim.pickUntil);
        // Only a posted list can be pointed at.
        if (!_posted[claimId][listRoot]) revert GameListNotPosted(listRoot);
    }

    function _answer(bytes32 claimId, bytes32 listRoot, bool posted) private {
        _answers[claimId][msg.sender] = listRoot;
        if (posted) {
            _posted[claimId][listRoot] = true;
        } else {
            emit ListEndorsed(claimId, msg.sender, listRoot);
        }
    }

    function _post(bytes32 claimId, bytes32[] calldata entries) private {
        bytes32 listRoot = LibList.root(entries);
        _answer(claimId, listRoot, true);
        emit ListPosted(claimId, msg.sender, listRoot, entries);
    }

    function _jobOf(Claim storage claim) private view returns (bytes32) {
        return claim.level == INTERVAL ? claim.parent : _claims[claim.gameId].parent;
    }

    /// Whether `account` owes an answer to `claim` (forfeited or not): a seat that revealed the
    /// game's root for the interval claim; a seat that answered the parent with the picked list below it.
    function _owes(bytes32 jobId, Claim storage claim, address account) private view returns (bool) {
        if (claim.level == INTERVAL) {
            Seat storage seat = _seats[jobId][account];
            return seat.traceRoot == claim.listRoot && seat.traceRoot != bytes32(0);
        }
        return _answers[claim.parent][account] == claim.listRoot;
    }

    function _mustOwe(bytes32 jobId, Claim storage claim, address account) private view {
        // Only the defenders of the picked list answer, while their seat stands.
        if (!_owes(jobId, claim, account) || _seats[jobId][account].forfeit != ForfeitReason.None) {
            revert GameNotADefender(account);
        }
    }

    function _latestChallengeBy(bytes32 jobId, bytes32 root) private view returns (uint64 latest) {
        address[] storage seats = _seatsOf[jobId];
        for (uint256 i; i < seats.length; ++i) {
            Seat storage seat = _seats[jobId][seats[i]];
            if (seat.status == SeatStatus.Revealed && seat.traceRoot == root && seat.challengeBy > latest) {
                latest = seat.challengeBy;
            }
        }
    }

    /// k_c: steps in interval c (the last interval may be shorter).
    function _stepsIn(bytes32 jobId, uint32 c) private view returns (uint256) {
        GameParams storage p = _gameParams[jobId];
        uint256 left = uint256(p.steps) - uint256(c) * p.checkpointEvery;
        return left < p.checkpointEvery ? left : p.checkpointEvery;
    }

    function _resolve(bytes32 claimId, Claim storage claim) private {
        bytes32 jobId = _jobOf(claim);
        // The owing seats have until answerBy.
        if (block.timestamp < claim.answerBy) revert GameTooEarly(claim.answerBy);
        StepClaim storage duels = _stepClaims[claimId];
        ClaimStatus outcome;
        if (duels.games != 0) {
            // Played on OneStepVerifier: every duel settled (each seat's fate is its own duel's, no
            // evidence is owed), and none may open any more.
            if (duels.open != 0) revert GameStepGameOpen(claimId);
            uint64 duelsBy = claim.answerBy + 2 * MARGIN;
            if (block.timestamp < duelsBy) revert GameTooEarly(duelsBy);
            outcome = duels.upheld ? ClaimStatus.Upheld : ClaimStatus.Failed;
        } else if (_strikeSilent(jobId, claimId, claim) == 0) {
            // Nobody defended the picked list.
            outcome = ClaimStatus.Upheld;
        } else if (claim.level == NODE) {
            // A ruling is final from ruleBy (its appeal window; held while an appeal runs).
            if (block.timestamp < claim.ruleBy) revert GameTooEarly(claim.ruleBy);
            // Unruled, the claim voids only once no referee is left to draw (section 9).
            if (!claim.ruled && !_rulings[claimId].refereesOut) revert GameNoRuling(claimId);
            outcome = !claim.ruled ? ClaimStatus.Void : claim.defenderRight ? ClaimStatus.Failed : ClaimStatus.Upheld;
        } else {
            // Picks under the answered lists are allowed until pickUntil...
            if (block.timestamp < claim.pickUntil) revert GameTooEarly(claim.pickUntil);
            // ... and every pick made ends first.
            if (claim.openChildren != 0) revert GameChildrenOpen(claim.openChildren);
            outcome = claim.upheldChild ? ClaimStatus.Upheld : claim.voidChild ? ClaimStatus.Void : ClaimStatus.Failed;
        }
        claim.status = outcome;
        if (claim.level == NODE) _releaseReferee(jobId, _rulings[claimId]);
        if (outcome == ClaimStatus.Failed) {
            _payBond(jobId, claimId, claim);
        } else {
            _unlock(jobId, claim.author, claim.bond);
            // A duel's loser forfeited when its duel was settled.
            if (outcome == ClaimStatus.Upheld && claim.level == NODE && duels.games == 0) _slashLosers(jobId, claimId, claim);
        }
        if (claim.level == INTERVAL) {
            _jobs[jobId].openItems -= 1;
        } else {
            Claim storage parent = _claims[claim.parent];
            parent.openChildren -= 1;
            if (outcome == ClaimStatus.Upheld) parent.upheldChild = true;
            if (outcome == ClaimStatus.Void) parent.voidChild = true;
        }
        emit ClaimResolved(claimId, outcome);
    }

    /// Forfeits (SilentDefender, w·S to the claim's author) every owing seat that did not answer;
    /// returns how many owing seats answered.
    function _strikeSilent(bytes32 jobId, bytes32 claimId, Claim storage claim) private returns (uint256 answered) {
        address[] storage seats = _seatsOf[jobId];
        for (uint256 i; i < seats.length; ++i) {
            address account = seats[i];
            if (!_owes(jobId, claim, account)) continue;
            if (_answers[claimId][account] != 0) {
                answered += 1;
                continue;
            }
            Seat storage seat = _seats[jobId][account];
            if (seat.forfeit != ForfeitReason.None) continue;
            seat.forfeit = ForfeitReason.SilentDefender;
            emit SeatForfeited(jobId, account, ForfeitReason.SilentDefender);
            _slashSeat(jobId, account, claim.author);
        }
    }

    /// A failed claim: its bond to the seats covering the picked list, f_R of it to the referee
    /// whose ruling stood (an overturned referee's fee stays with the seats).
    function _payBond(bytes32 jobId, bytes32 claimId, Claim storage claim) private {
        uint256 bond = claim.bond;
        _take(claim.author, bond);
        uint256 toReferee;
        address ruler = _feeTo(claimId);
        if (ruler != address(0)) {
            toReferee = _gameParams[jobId].refereeFee;
            if (toReferee > bond) toReferee = bond;
            _credits[ruler] += toReferee;
        }
        address[] storage seats = _seatsOf[jobId];
        uint256 covering;
        for (uint256 i; i < seats.length; ++i) {
            if (_standing(jobId, claim, seats[i])) covering += 1;
        }
        uint256 toEach = covering == 0 ? 0 : (bond - toReferee) / covering;
        for (uint256 i; i < seats.length; ++i) {
            if (_standing(jobId, claim, seats[i])) _credits[seats[i]] += toEach;
        }
        uint256 burned = bond - toReferee - toEach * covering;
        emit BondForfeited(claimId, claim.author, bond, toReferee, toEach, uint16(covering), burned);
        _burn(burned);
    }

    function _standing(bytes32 jobId, Claim storage claim, address account) private view returns (bool) {
        return _owes(jobId, claim, account) && _seats[jobId][account].forfeit == ForfeitReason.None;
    }

    /// An upheld node claim: each seat covering the node list forfeits S (LostGame, `_forfeitLost`),
    /// the path's reimbursements from the first lock.
    function _slashLosers(bytes32 jobId, bytes32 claimId, Claim storage claim) private {
        uint256 owed;
        bool costed;
        address[] storage seats = _seatsOf[jobId];
        for (uint256 i; i < seats.length; ++i) {
            address account = seats[i];
            if (!_standing(jobId, claim, account)) continue;
            if (!costed) {
                // Paid only where a lock pays for it (a second claim on a sunk list finds none).
                costed = true;
                owed = _pathCosts(jobId, claimId, claim);
            }
            owed = _forfeitLost(jobId, claimId, claim, account, claim.author, owed);
        }
    }

    /// `account` forfeits its lock S (LostGame). From it, in order: D to each demander it served only
    /// through a witness (section 7), up to `owed` of the path's reimbursements, w·S in thirds to the
    /// authors of the game and of the step claim and to `finder` (none to the party that ruled); the
    /// rest burned. No `finder` (a duel both sides lost): the demanders alone. Returns what is still owed.
    function _forfeitLost(bytes32 jobId, bytes32 claimId, Claim storage claim, address account, address finder, uint256 owed)
        private
        returns (uint256)
    {
        uint256 stake = _jobs[jobId].providerStake;
        _seats[jobId][account].forfeit = ForfeitReason.LostGame;
        emit SeatForfeited(jobId, account, ForfeitReason.LostGame);
        _take(account, stake);
        // Reimbursements first, the demanders it served through a witness, then the path's:
        // S·(1 − w) covers them (openJob checks it).
        uint256 paid = _reimburseDemanders(jobId, account);
        uint256 path = owed < stake - paid ? owed : stake - paid;
        owed -= path;
        paid += path;
        if (finder != address(0)) {
            address ruler = _rulings[claimId].ruler;
            uint256 third = stake * WINNER_SHARE_BPS / BPS / 3;
            address[3] memory finders = [_claims[claim.gameId].author, _claims[claim.parent].author, finder];
            for (uint256 j; j < 3; ++j) {
                if (finders[j] == ruler || paid + third > stake) continue;
                _credits[finders[j]] += third;
                paid += third;
            }
        }
        emit StakeSlashed(jobId, account, stake, finder, paid, stake - paid);
        _burn(stake - paid);
        return owed;
    }

    /// A standing defender lost a duel: its lock pays the path, and the duel's challenger its moves at γ
    /// (as the bond would have paid the defender's), then the finders.
    function _defenderLost(bytes32 jobId, bytes32 claimId, Claim storage claim, StepGameRef storage duel) private {
        uint256 gas = _duelGas(jobId, duel.depth);
        _credits[duel.challenger] += gas;
        _forfeitLost(jobId, claimId, claim, duel.defender, duel.challenger, _pathCosts(jobId, claimId, claim) + gas);
    }

    /// Credits the path's reimbursements and a drawn ruling referee's fee, once per node claim; returns their sum.
    function _pathCosts(bytes32 jobId, bytes32 claimId, Claim storage claim) private returns (uint256 owed) {
        // A second duel won on the claim finds them paid.
        if (claim.reimbursed) return 0;
        address ruler = _rulings[claimId].ruler;
        owed = _reimburse(jobId, claim.gameId, ruler) + _reimburse(jobId, claim.parent, ruler)
            + _reimburse(jobId, claimId, ruler);
        address feeTo = _feeTo(claimId);
        // The client that ruled gains nothing from a slash; a drawn referee earns its fee either way.
        if (feeTo != address(0) && feeTo != _jobs[jobId].client) {
            _credits[feeTo] += _gameParams[jobId].refereeFee;
            owed += _gameParams[jobId].refereeFee;
        }
    }

    /// Credits a winning claim's author its move's gas and each recorded joiner its join's, at γ,
    /// once per claim; returns the sum (to be taken from the forfeited locks). None to the ruler.
    function _reimburse(bytes32 jobId, bytes32 claimId, address ruler) private returns (uint256 total) {
        Claim storage claim = _claims[claimId];
        if (claim.reimbursed) return 0;
        claim.reimbursed = true;
        uint256 gamma = _gameParams[jobId].gasPriceCap;
        uint256 moveGas = claim.level == INTERVAL ? GAS_OPEN_GAME + GAS_RESOLVE
            : claim.level == STEP ? GAS_PICK_STEP : GAS_PICK_NODE;
        if (claim.author != ruler) {
            _credits[claim.author] += gamma * moveGas;
            total += gamma * moveGas;
        }
        address[] storage joiners = _joiners[claimId];
        for (uint256 i; i < joiners.length; ++i) {
            if (joiners[i] == ruler) continue;
            _credits[joiners[i]] += gamma * GAS_JOIN;
            total += gamma * GAS_JOIN;
        }
        emit PathReimbursed(claimId, total);
    }

    /// Who is owed the ruling's fee f_R: the referee whose ruling stood, unless an appeal
    /// overturned the first one (the appeal referee was paid from the overturned one's bond).
    function _feeTo(bytes32 claimId) private view returns (address) {
        Ruling storage r = _rulings[claimId];
        return r.overturned ? address(0) : r.ruler;
    }
}
