// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {ForfeitReason} from "./SettlementTypesV2.sol";
import {AppealStage, Claim, ClaimStatus, Ruling, StepClaim, StepGameProofs, StepGameRef} from "./GameTypesV2.sol";
import {LibList} from "./LibList.sol";
import {OneStepVerifier} from "./OneStepVerifier.sol";
import {SettlementStorageV2} from "./SettlementStorageV2.sol";

/// @title GavelRefereesV2
/// @notice Rulings, drawn referees and appeals of docs/economics.md, section 9: GavelSettlementV2
/// runs this code by delegatecall on its own storage and balance, beside the game module.
/// @dev Theory of operation.
///  - A node claim is ruled first by the client when it may (it locked P + w·S·n at openJob,
///    that bond is intact, and it opened, picked or joined nothing in the game); otherwise by a
///    referee drawn from the nodes with ROLE_REFEREE. `rule` fixes the verdict and opens an
///    appeal window of E_rule (`claim.ruleBy` becomes `appealBy`: the game module ends the
///    claim from then on).
///  - A draw is armed at a block b and made by anyone from b + DRAW_DELAY + 1 to b + 255 (later,
///    the call re-arms it): seed = keccak(blockhash(b + DRAW_DELAY), claimId, draws), up to PROBES
///    random indices of `_referees`, then a walk of up to SCAN entries; the first eligible node
///    (active, free stake ≥ the job's referee bond, not the client, a seat, a party to the game,
///    the appellant or an earlier referee of the claim) locks that bond and rules within E_rule.
///    A draw that finds nobody counts as one.
///  - `timeoutReferee`: a referee (the client, a drawn one, an appeal's) past its allowance loses
///    its bond, burned, and a new draw is armed; after MAX_DRAWS draws at the first level the
///    claim voids (`refereesOut`), at the appeal the first ruling stands.
///  - `appeal` (any active node but the ruling referee, before appealBy) locks A = f_R +
///    γ·(G_appeal + G_draw + G_ruleAppeal) and arms the draw of an appeal referee; the game waits
///    (`claim.ruleBy` = max) until `ruleAppeal` or the draws run out.
///  - Money. Upheld: f_R of A to the appeal referee, the rest to the side the ruling favoured
///    (the seats covering the node list, or the claim's author). Overturned: A back; from the
///    first referee's bond the appellant's gas at γ, then f_R to the appeal referee, the rest
///    burned; the first referee's fee is forfeited (`overturned`). Every bond is a lock of
///    stake: the balance stays stakes + credits + escrow.
///  - The fourth level (docs/onchain-step.md): on a job with an `elementSpecRoot`, a claimant of a
///    node claim (its author or a joiner) may `openStepGame`, a duel against one standing seat
///    covering the node list on OneStepVerifier: the node's element spec is proven against that
///    root, the inputs' and the defender's output tensor hashes against the node list. The outcome
///    of a duel binds its two players alone (a seat could throw a game for its co-defenders, a
///    front-running author for the joiners): each claimant may duel each defender, with B_node of
///    its own stake at risk. The first duel comes before evidenceBy and before any ruling; from then
///    on no referee moves on the claim, and duels open until 2Δ after evidenceBy (a switch at the
///    last second leaves every claimant 2Δ). GavelGamesV2's `settleStepGame` settles each duel.
contract GavelRefereesV2 is SettlementStorageV2 {
    uint8 internal constant NODE = 2;

    /// @notice Δ, as GavelSettlementV2's MARGIN (checked by its constructor).
    uint32 public immutable MARGIN;
    /// @notice The OneStepVerifier the fourth level is played on.
    address public immutable STEP_VERIFIER;
    address private immutable SELF;

    /// @notice The referee ruled a node claim; anyone but it may appeal before `appealBy`.
    event ClaimRuled(bytes32 indexed claimId, address indexed referee, bool defenderRight, bytes32 transcriptHash, uint64 appealBy);
    /// @notice A draw was armed: it reads the hash of block `drawBlock` + DRAW_DELAY (`draws` made so far at this level).
    event RefereeDrawArmed(bytes32 indexed claimId, uint64 drawBlock, uint8 draws);
    /// @notice A referee was drawn and locked its bond; it rules before `ruleBy` (zero: E_rule from the evidence).
    event RefereeDrawn(bytes32 indexed claimId, address indexed referee, bool appeal, uint64 ruleBy);
    /// @notice A referee let its allowance pass: its bond was burned.
    event RefereeTimedOut(bytes32 indexed claimId, address indexed referee, uint256 burned);
    /// @notice MAX_DRAWS draws at this level gave no ruling: a first-level claim voids, an appeal leaves the first ruling standing.
    event RefereesExhausted(bytes32 indexed claimId, bool appeal);
    /// @notice A ruling was appealed; the appellant locked `bond`; the appeal referee's draw is armed at `drawBlock`.
    event AppealOpened(bytes32 indexed claimId, address indexed appellant, uint256 bond, uint64 drawBlock);
    /// @notice The appeal referee ruled; `overturned` when it reversed the first ruling.
    event AppealRuled(bytes32 indexed claimId, address indexed referee, bool defenderRight, bytes32 transcriptHash, bool overturned);
    /// @notice The appeal's money: `loser` (the appellant when upheld, the first referee when overturned)
    /// gave up `amount`: to the appellant, the appeal referee, the side the ruling favoured, and burned.
    event AppealSettled(bytes32 indexed claimId, address indexed loser, uint256 amount, uint256 toAppellant,
        uint256 toReferee, uint256 toFavoured, uint256 burned);
    /// @notice A claimant opened a duel of the fourth level on OneStepVerifier (game `id`): each side's
    /// clock is `clock` seconds, and the game ends by `stepBy` (settleStepGame from then on at the latest).
    /// `setup` is the game's setup as opened (the element, the inputs, both sides' outputs): the defender
    /// builds its trace from it even when the claimant called through a contract of its own.
    event StepGameOpened(bytes32 indexed claimId, uint256 id, address challenger, address defender, uint64 clock,
        uint64 stepBy, OneStepVerifier.Setup setup);

    /// @notice The module was called directly: its calls run only on GavelSettlementV2's storage.
    error RefereeDirectCall();
    /// @notice No node claim with this id.
    error RefereeNotANodeClaim(bytes32 claimId);
    /// @notice The claim ended.
    error RefereeClaimClosed(bytes32 claimId);
    /// @notice No evidence yet: nothing to rule on, no allowance running.
    error RefereeNoEvidence(bytes32 claimId);
    /// @notice The deadline of this move has passed.
    error RefereeDeadlinePassed(uint64 deadline);
    /// @notice The move is allowed only from `notBefore` on.
    error RefereeTooEarly(uint64 notBefore);
    /// @notice The client took part in this game: it may not rule it.
    error RefereeIsParty(address account);
    /// @notice The caller is not the referee holding this claim (or its appeal).
    error RefereeNotTheReferee(address account);
    /// @notice The claim was ruled already.
    error RefereeAlreadyRuled(bytes32 claimId);
    /// @notice The claim has no ruling to appeal.
    error RefereeNotRuled(bytes32 claimId);
    /// @notice The ruling was appealed already (one appeal a claim).
    error RefereeAlreadyAppealed(bytes32 claimId);
    /// @notice The ruling referee cannot appeal its own ruling.
    error RefereeAppellantIsRuler(address account);
    /// @notice A referee holds the claim (or its appeal), or it needs none.
    error RefereeNotNeeded(bytes32 claimId);
    /// @notice The draw's seed block is not mined yet: draw from block `fromBlock`.
    error RefereeDrawTooEarly(uint64 fromBlock);
    /// @notice No referee holds the claim: nobody to time out.
    error RefereeNoneHolds(bytes32 claimId);
    /// @notice No appeal of this claim is open.
    error RefereeNoAppeal(bytes32 claimId);
    /// @notice The claim is played on OneStepVerifier: no referee moves on it.
    error RefereeStepGame(bytes32 claimId);
    /// @notice The job's terms have no elementSpecRoot: its disputes have no on-chain fourth level.
    error StepGameNotOffered(bytes32 jobId);
    /// @notice Only the claim's author and its joiners open duels on it.
    error StepGameNotAClaimant(address account);
    /// @notice The defender named is not a standing seat covering the claim's node list.
    error StepGameNotADefender(address account);
    /// @notice This claimant already opened a duel against this defender on the claim.
    error StepGameAlreadyOpen(address challenger, address defender);
    /// @notice The node claimed is the state entry (N), which has no element program.
    error StepGameNotAnOperator(uint32 node);
    /// @notice An input is not an earlier entry of the node list, or its hash is not that entry.
    error StepGameBadInput(uint256 input);
    /// @notice The defender's output hash is not the node list's entry for the node.
    error StepGameBadOutput();
    /// @notice The element spec is not the job's elementSpecRoot entry for the node.
    error StepGameBadSpecProof();
    /// @notice The element named is not in the defender's output tensor (nobody could commit to it).
    error StepGameBadElement(uint64 element);

    constructor(uint64 unbondingDelay, uint256 minNodeStake, uint16 winnerShareBps, uint32 margin, address stepVerifier)
        SettlementStorageV2(unbondingDelay, minNodeStake, winnerShareBps)
    {
        MARGIN = margin;
        STEP_VERIFIER = stepVerifier;
        SELF = address(this);
    }

    modifier viaSettlement() {
        // Run on the module's own (empty) storage, a call would mean nothing.
        if (address(this) == SELF) revert RefereeDirectCall();
        _;
    }

    // ------------------------------------------------------------------ rulings

    /// @notice The first verdict on a node claim, by the referee holding it: whether the defenders' output is right.
    function rule(bytes32 claimId, bool defenderRight, bytes32 transcriptHash) external viaSettlement nonReentrant {
        (Claim storage claim, bytes32 jobId) = _refereeClaim(claimId);
        // One first ruling a claim; only an appeal changes it.
        if (claim.ruled) revert RefereeAlreadyRuled(claimId);
        // The referee recomputes from the evidence...
        if (claim.ruleBy == 0) revert RefereeNoEvidence(claimId);
        // ... within its allowance.
        if (block.timestamp >= claim.ruleBy) revert RefereeDeadlinePassed(claim.ruleBy);
        address client = _jobs[jobId].client;
        // Nobody judges their own case.
        if (msg.sender == client && _party[claim.gameId][client]) revert RefereeIsParty(client);
        Ruling storage r = _rulings[claimId];
        if (msg.sender != _holder(jobId, claim, r)) revert RefereeNotTheReferee(msg.sender);
        uint64 appealBy = uint64(block.timestamp) + _jobs[jobId].allowed.rule;
        claim.ruled = true;
        claim.defenderRight = defenderRight;
        claim.ruleBy = appealBy;
        r.ruler = msg.sender;
        r.appealBy = appealBy;
        emit ClaimRuled(claimId, msg.sender, defenderRight, transcriptHash, appealBy);
    }

    /// @notice Appeals the claim's ruling, locking A; the appeal referee's draw is armed at this block.
    function appeal(bytes32 claimId) external viaSettlement nonReentrant {
        (Claim storage claim, bytes32 jobId) = _refereeClaim(claimId);
        Ruling storage r = _rulings[claimId];
        // Only a ruling can be appealed...
        if (!claim.ruled) revert RefereeNotRuled(claimId);
        // ... once...
        if (r.appeal != AppealStage.None) revert RefereeAlreadyAppealed(claimId);
        // ... within its window...
        if (block.timestamp >= r.appealBy) revert RefereeDeadlinePassed(r.appealBy);
        // ... and not by the referee that made it.
        if (msg.sender == r.ruler) revert RefereeAppellantIsRuler(msg.sender);
        uint256 bond = _appealBondOf(jobId);
        _lock(_activeNode(msg.sender), msg.sender, bond);
        r.appeal = AppealStage.Open;
        r.appellant = msg.sender;
        r.draws = 0;
        r.armedBlock = uint64(block.number);
        // The claim waits for the appeal.
        claim.ruleBy = type(uint64).max;
        emit AppealOpened(claimId, msg.sender, bond, uint64(block.number));
    }

    /// @notice Draws the referee a claim (or its appeal) lacks, or arms the draw (anyone may call it).
    function drawReferee(bytes32 claimId) external viaSettlement nonReentrant {
        (Claim storage claim, bytes32 jobId) = _refereeClaim(claimId);
        Ruling storage r = _rulings[claimId];
        bool appealing = r.appeal == AppealStage.Open;
        bool needed = appealing
            ? r.appealReferee == address(0)
            : !claim.ruled && !r.refereesOut && _holder(jobId, claim, r) == address(0);
        // A draw fills an empty chair: the appeal's, or the first level's when the client may not rule.
        if (!needed) revert RefereeNotNeeded(claimId);
        uint256 b = r.armedBlock;
        if (b == 0 || block.number > b + DRAW_WINDOW) {
            // Not armed, or the seed block's hash is out of reach: arm it here.
            _arm(claimId, r);
            return;
        }
        // The seed is the hash of block b + DRAW_DELAY, unknown when the draw was armed.
        if (block.number <= b + DRAW_DELAY) revert RefereeDrawTooEarly(uint64(b + DRAW_DELAY + 1));
        uint256 bond = _refereeBondOf(_jobs[jobId]);
        address drawn = _drawFrom(b, claimId, r.draws, jobId, claim.gameId, bond, r.appellant);
        r.draws += 1;
        r.armedBlock = 0;
        if (drawn == address(0)) {
            _afterDraw(claimId, claim, r, jobId);
            return;
        }
        _lock(_nodes[drawn], drawn, bond);
        _refereed[claimId][drawn] = true;
        uint64 ruleBy = uint64(block.timestamp) + _jobs[jobId].allowed.rule;
        if (appealing) {
            r.appealReferee = drawn;
            r.appealRuleBy = ruleBy;
        } else {
            r.referee = drawn;
            // Its allowance runs from the later of the draw and the evidence.
            if (claim.ruleBy != 0) claim.ruleBy = ruleBy;
            else ruleBy = 0;
        }
        emit RefereeDrawn(claimId, drawn, appealing, ruleBy);
    }

    /// @notice The appeal referee's verdict, final: upholds or overturns the first ruling and settles the appeal's money.
    function ruleAppeal(bytes32 claimId, bool defenderRight, bytes32 transcriptHash) external viaSettlement nonReentrant {
        (Claim storage claim, bytes32 jobId) = _refereeClaim(claimId);
        Ruling storage r = _rulings[claimId];
        // Only an open appeal is ruled...
        if (r.appeal != AppealStage.Open) revert RefereeNoAppeal(claimId);
        // ... by the referee drawn for it...
        if (msg.sender != r.appealReferee || msg.sender == address(0)) revert RefereeNotTheReferee(msg.sender);
        // ... within its allowance.
        if (block.timestamp >= r.appealRuleBy) revert RefereeDeadlinePassed(r.appealRuleBy);
        bool overturned = defenderRight != claim.defenderRight;
        if (overturned) {
            _overturn(claimId, r, jobId);
            claim.defenderRight = defenderRight;
            r.overturned = true;
            r.ruler = msg.sender;
        } else {
            _uphold(claimId, claim, r, jobId);
        }
        _unlock(jobId, msg.sender, _refereeBondOf(_jobs[jobId]));
        r.appeal = AppealStage.Ended;
        claim.ruleBy = uint64(block.timestamp);
        emit AppealRuled(claimId, msg.sender, defenderRight, transcriptHash, overturned);
    }

    /// @notice Burns the bond of a referee (the client, a drawn one, an appeal's) whose allowance
    /// passed without a ruling and arms the next draw (anyone may call it).
    function timeoutReferee(bytes32 claimId) external viaSettlement nonReentrant {
        (Claim storage claim, bytes32 jobId) = _refereeClaim(claimId);
        Ruling storage r = _rulings[claimId];
        bool appealing = r.appeal == AppealStage.Open;
        address silent;
        uint64 deadline;
        if (appealing) {
            (silent, deadline) = (r.appealReferee, r.appealRuleBy);
        } else if (!claim.ruled) {
            (silent, deadline) = (_holder(jobId, claim, r), claim.ruleBy);
        }
        // Someone holds the claim (a ruled claim waits only for an appeal)...
        if (silent == address(0)) revert RefereeNoneHolds(claimId);
        // ... its allowance started with the evidence...
        if (deadline == 0) revert RefereeNoEvidence(claimId);
        // ... and ran out.
        if (block.timestamp < deadline) revert RefereeTooEarly(deadline);
        uint256 bond;
        if (appealing) {
            r.appealReferee = address(0);
            bond = _refereeBondOf(_jobs[jobId]);
        } else if (silent == r.referee) {
            r.referee = address(0);
            bond = _refereeBondOf(_jobs[jobId]);
        } else {
            // The client: its one bond for the job; it rules nothing more in it.
            bond = _refereeBond[jobId];
            _refereeBond[jobId] = 0;
        }
        _take(silent, bond);
        emit RefereeTimedOut(claimId, silent, bond);
        _burn(bond);
        _afterDraw(claimId, claim, r, jobId);
    }

    // ------------------------------------------------------------------ the fourth level

    /// @notice Opens a duel of the fourth level on node claim `claimId`: the caller (its author or a
    /// joiner) against `defender`, a standing seat covering the node list, played on OneStepVerifier.
    /// `setup` names the element and carries the inputs' tensor hashes (entries `proofs.inputNodes` of
    /// the node list), the caller's claimed output (outputs[0]) and the defender's (the list's entry for
    /// the node); with those roots and the element zeroed it is the job's element spec of the node,
    /// proven against elementSpecRoot. Locks B_node of the caller's stake. Returns the game's id.
    function openStepGame(
        bytes32 claimId,
        OneStepVerifier.Setup calldata setup,
        StepGameProofs calldata proofs,
        address defender
    ) external viaSettlement nonReentrant returns (uint256 id) {
        bytes32 jobId = _checkStepGame(claimId, setup, proofs, defender);
        uint256 depth = _depth(setup.length);
        // The bond pre-pays the defender's moves at γ: a false duel costs the honest seat nothing.
        _lock(_activeNode(msg.sender), msg.sender, _duelBondOf(jobId, depth));
        // Each side's clock: E_rule to trace the element, then Δ for its commit and each reveal.
        uint64 clock = uint64(_jobs[jobId].allowed.rule) + uint64(depth + 1) * MARGIN;
        // Both clocks bound the game; the ruling comes within 2Δ after them.
        uint64 stepBy = uint64(block.timestamp) + 2 * clock + 2 * MARGIN;
        id = OneStepVerifier(STEP_VERIFIER).open(setup, msg.sender, defender, clock);
        _recordStepGame(claimId, id, defender, stepBy, depth);
        emit StepGameOpened(claimId, id, msg.sender, defender, clock, stepBy, setup);
    }

    /// The duel may open: an open node claim of an operator node, a defender that may duel on it, the
    /// setup's tensors in the claim's list and its program the job's element spec of the node. The job's id.
    function _checkStepGame(
        bytes32 claimId,
        OneStepVerifier.Setup calldata setup,
        StepGameProofs calldata proofs,
        address defender
    ) private view returns (bytes32 jobId) {
        Claim storage claim;
        (claim, jobId) = _openNodeClaim(claimId);
        _checkDuel(claimId, claim, jobId, defender);
        uint32 graphNodes = _gameParams[jobId].graphNodes;
        // Entry N is the state after the step: no operator, no element program.
        if (claim.index >= graphNodes) revert StepGameNotAnOperator(claim.index);
        _checkTensors(claim.listRoot, graphNodes + 1, claim.index, setup, proofs);
        _checkSpec(_gameParams[jobId].elementSpecRoot, graphNodes, claim.index, setup, proofs.inputNodes, proofs.specProof);
    }

    function _recordStepGame(bytes32 claimId, uint256 id, address defender, uint64 stepBy, uint256 depth) private {
        _dueled[keccak256(abi.encode(claimId, msg.sender, defender))] = true;
        _stepGames[id] = StepGameRef(claimId, msg.sender, stepBy, defender, false, uint8(depth));
        StepClaim storage duels = _stepClaims[claimId];
        duels.games += 1;
        duels.open += 1;
    }

    // ------------------------------------------------------------------ views

    /// @notice A duel of the fourth level, by OneStepVerifier's game id (all zero when the settlement did not open it).
    function getStepGame(uint256 id) external view returns (StepGameRef memory) {
        return _stepGames[id];
    }

    /// @notice A node claim's duels (all zero when it has none).
    function getStepClaim(bytes32 claimId) external view returns (StepClaim memory) {
        return _stepClaims[claimId];
    }

    /// @notice The referees of a node claim (all zero before any ruling or draw).
    function getRuling(bytes32 claimId) external view returns (Ruling memory) {
        return _rulings[claimId];
    }

    // ------------------------------------------------------------------ internals

    function _openNodeClaim(bytes32 claimId) private view returns (Claim storage claim, bytes32 jobId) {
        claim = _claims[claimId];
        // Referees rule node claims...
        if (claim.status == ClaimStatus.None || claim.level != NODE) revert RefereeNotANodeClaim(claimId);
        // ... that have not ended.
        if (claim.status != ClaimStatus.Open) revert RefereeClaimClosed(claimId);
        jobId = _claims[claim.gameId].parent;
    }

    /// An open node claim that referees may still move on.
    function _refereeClaim(bytes32 claimId) private view returns (Claim storage claim, bytes32 jobId) {
        (claim, jobId) = _openNodeClaim(claimId);
        // The fourth level's ruling is the verifier's execution: nobody rules over it.
        if (_stepClaims[claimId].games != 0) revert RefereeStepGame(claimId);
    }

    /// Whether the caller may open a duel against `defender` on the claim now.
    function _checkDuel(bytes32 claimId, Claim storage claim, bytes32 jobId, address defender) private view {
        // The terms offer the fourth level...
        if (_gameParams[jobId].elementSpecRoot == bytes32(0)) revert StepGameNotOffered(jobId);
        // ... to the claim's own claimants...
        if (msg.sender != claim.author && !_joined[claimId][msg.sender]) revert StepGameNotAClaimant(msg.sender);
        // ... against a seat standing behind the picked node list, one duel a pair.
        if (!_defends(jobId, claim, defender)) revert StepGameNotADefender(defender);
        if (_dueled[keccak256(abi.encode(claimId, msg.sender, defender))]) revert StepGameAlreadyOpen(msg.sender, defender);
        uint64 closes = claim.answerBy + 2 * MARGIN;
        if (_stepClaims[claimId].games == 0) {
            // A ruled claim keeps its appeal path...
            if (claim.ruled) revert RefereeAlreadyRuled(claimId);
            // ... and the switch comes while the defenders may still answer, so 2Δ are left to every claimant.
            closes = claim.answerBy;
        }
        if (block.timestamp >= closes) revert RefereeDeadlinePassed(closes);
    }

    /// The inputs' and the defender's output tensor hashes are entries of the picked node list: the
    /// inputs earlier entries (what the defender itself holds before node n), the output entry n; and
    /// the element is one that output holds (else neither side could commit, and both would lose).
    function _checkTensors(
        bytes32 listRoot,
        uint256 size,
        uint32 n,
        OneStepVerifier.Setup calldata setup,
        StepGameProofs calldata proofs
    ) private pure {
        uint256 count = setup.inputs.length;
        if (proofs.inputNodes.length != count || proofs.inputProofs.length != count) revert StepGameBadInput(count);
        for (uint256 i; i < count; ++i) {
            uint32 m = proofs.inputNodes[i];
            if (m >= n || !LibList.verify(listRoot, setup.inputs[i].root, size, m, proofs.inputProofs[i])) {
                revert StepGameBadInput(i);
            }
        }
        OneStepVerifier.Tensor calldata out = setup.outputs[1];
        if (!LibList.verify(listRoot, out.root, size, n, proofs.outputProof)) revert StepGameBadOutput();
        if (out.item == 0 || uint256(out.header) + (uint256(setup.element) + 1) * out.item > out.size) {
            revert StepGameBadElement(setup.element);
        }
    }

    /// The setup less its roots and element is entry n of the job's element specs: what every party
    /// derived from the committed graph at openJob (program, shapes, views, the tensors' layouts, the
    /// node list entries the inputs are).
    function _checkSpec(
        bytes32 specRoot,
        uint32 graphNodes,
        uint32 n,
        OneStepVerifier.Setup calldata setup,
        uint32[] calldata inputNodes,
        bytes32[] calldata specProof
    ) private pure {
        OneStepVerifier.Setup memory spec = setup;
        spec.element = 0;
        for (uint256 i; i < spec.inputs.length; ++i) {
            spec.inputs[i].root = 0;
        }
        spec.outputs[0].root = 0;
        spec.outputs[1].root = 0;
        bytes32 leaf = keccak256(abi.encode(spec, inputNodes));
        if (!LibList.verify(specRoot, leaf, graphNodes, n, specProof)) revert StepGameBadSpecProof();
    }

    /// Who may rule the claim at the first level now: its drawn referee, else the client while it may.
    function _holder(bytes32 jobId, Claim storage claim, Ruling storage r) private view returns (address) {
        if (r.referee != address(0)) return r.referee;
        address client = _jobs[jobId].client;
        return _refereeBond[jobId] != 0 && !_party[claim.gameId][client] ? client : address(0);
    }

    function _arm(bytes32 claimId, Ruling storage r) private {
        r.armedBlock = uint64(block.number);
        emit RefereeDrawArmed(claimId, uint64(block.number), r.draws);
    }

    /// After a draw that found nobody or a referee that stayed silent: the next draw, or, with
    /// MAX_DRAWS spent, the end of this level (the claim voids; an appeal leaves the first ruling).
    function _afterDraw(bytes32 claimId, Claim storage claim, Ruling storage r, bytes32 jobId) private {
        if (r.draws < MAX_DRAWS) {
            _arm(claimId, r);
            return;
        }
        bool appealing = r.appeal == AppealStage.Open;
        if (appealing) {
            // The appellant's bond comes back; the first ruling is final.
            _unlock(jobId, r.appellant, _appealBondOf(jobId));
            _releaseReferee(jobId, r);
            r.appeal = AppealStage.Ended;
            claim.ruleBy = uint64(block.timestamp);
        } else {
            r.refereesOut = true;
        }
        emit RefereesExhausted(claimId, appealing);
    }

    /// The first ruling stands: A pays f_R to the appeal referee, the rest to the side it favoured.
    function _uphold(bytes32 claimId, Claim storage claim, Ruling storage r, bytes32 jobId) private {
        uint256 bond = _appealBondOf(jobId);
        _take(r.appellant, bond);
        uint256 toReferee = _fee(jobId, bond);
        _credits[msg.sender] += toReferee;
        uint256 rest = bond - toReferee;
        uint256 burned = rest;
        if (!claim.defenderRight) {
            _credits[claim.author] += rest;
            burned = 0;
        } else {
            address[] storage seats = _seatsOf[jobId];
            uint256 covering;
            for (uint256 i; i < seats.length; ++i) {
                if (_defends(jobId, claim, seats[i])) covering += 1;
            }
            uint256 each = covering == 0 ? 0 : rest / covering;
            for (uint256 i; i < seats.length; ++i) {
                if (_defends(jobId, claim, seats[i])) _credits[seats[i]] += each;
            }
            burned = rest - each * covering;
        }
        _releaseReferee(jobId, r);
        emit AppealSettled(claimId, r.appellant, bond, 0, toReferee, rest - burned, burned);
        _burn(burned);
    }

    /// The first ruling falls: A back; the first referee's bond pays the appellant's gas at γ and
    /// f_R to the appeal referee, the rest burned.
    function _overturn(bytes32 claimId, Ruling storage r, bytes32 jobId) private {
        _unlock(jobId, r.appellant, _appealBondOf(jobId));
        address first = r.referee;
        uint256 bond;
        if (first != address(0)) {
            r.referee = address(0);
            bond = _refereeBondOf(_jobs[jobId]);
        } else {
            // The client ruled: its one bond for the job (zero if an earlier appeal took it).
            first = _jobs[jobId].client;
            bond = _refereeBond[jobId];
            _refereeBond[jobId] = 0;
        }
        if (bond != 0) _take(first, bond);
        uint256 toAppellant = _gameParams[jobId].gasPriceCap * (GAS_APPEAL + GAS_DRAW);
        if (toAppellant > bond) toAppellant = bond;
        _credits[r.appellant] += toAppellant;
        uint256 toReferee = _fee(jobId, bond - toAppellant);
        _credits[msg.sender] += toReferee;
        uint256 burned = bond - toAppellant - toReferee;
        emit AppealSettled(claimId, first, bond, toAppellant, toReferee, 0, burned);
        _burn(burned);
    }

    /// f_R, or all of `available` if less.
    function _fee(bytes32 jobId, uint256 available) private view returns (uint256) {
        uint256 fee = _gameParams[jobId].refereeFee;
        return fee < available ? fee : available;
    }

    /// Whether `account` is a standing seat covering the claim's node list.
    function _defends(bytes32 jobId, Claim storage claim, address account) private view returns (bool) {
        return _answers[claim.parent][account] == claim.listRoot && _seats[jobId][account].forfeit == ForfeitReason.None;
    }
}
