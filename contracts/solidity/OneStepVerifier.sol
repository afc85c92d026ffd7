// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.28;

import {Float64Step} from "./Float64Step.sol";
import {TensorChunk} from "./TensorChunk.sol";

/// @title OneStepVerifier
/// @notice The fourth level of a dispute and its one-step ruling, with nobody trusted (issue 18;
/// docs/onchain-step.md). Two parties disagree on one output element of one operator whose
/// inputs they agree on. Each commits the element's trace (the output value of every
/// instruction of the operator's element program, `protocol/step_trace.py`), both walk down
/// their trace trees to the first step where they differ, and `rule` executes that one step
/// with Float64Step on operands opened against the agreed earlier steps or the agreed input
/// tensors (BLAKE3 chunk proofs; an index read from the data, or the element's coordinates), and rules.
///
/// Trees: keccak, perfect, padded with the leaf of value 0. Trace leaf keccak(0x00 ‖ uint64
/// value), program leaf keccak(uint256 instruction), node keccak(left ‖ right). Side 0 is the
/// challenger, side 1 the defender. Each side has a chess clock: a move is charged the time
/// since its round began, and a side whose clock is spent loses by `timeout`.
contract OneStepVerifier {
    /// @notice A tensor hash and where its elements sit in the hashed message.
    struct Tensor {
        bytes32 root;
        uint64 header;
        uint64 size;
        uint64 item;
    }

    /// @notice What the game is about, agreed before it opens (the settlement takes it from the
    /// job's terms and the third level); only its hash is stored, callers pass it again.
    struct Setup {
        bytes32 programRoot;
        uint64 length; // instructions in the program
        uint64 element; // the output element the challenger named
        uint64[] outShape;
        Tensor[] inputs;
        uint64[] viewTensor; // per view: which input
        uint64[] viewStrides; // per view, one stride per output dimension
        Tensor[2] outputs; // each side's claimed output tensor
    }

    /// @notice One operand's opening: a trace value with its siblings, an input chunk with its
    /// siblings, or (a gathered element) both: the index's step value and trace proof, and the chunk.
    struct Opening {
        uint64 value;
        bytes chunk;
        bytes32[] siblings;
        bytes32[] stepSiblings;
    }

    enum Phase {
        None,
        Commit,
        Bisect,
        Located,
        Done
    }

    enum Outcome {
        None,
        ChallengerWon,
        DefenderWon,
        BothLost
    }

    struct Game {
        address[2] parties;
        bytes32 setupHash;
        Phase phase;
        Outcome outcome;
        uint8 depth;
        uint8 level;
        bool[2] moved;
        uint64 position;
        uint64 turnStart;
        uint64[2] clock;
        bytes32[2] roots;
        bytes32[2] nodes;
        bytes32[2] lefts;
        bytes32[2] rights;
        uint64[2] values;
    }

    bytes32 private constant ZERO_LEAF = keccak256(abi.encodePacked(bytes1(0), uint64(0)));
    uint256 private constant U64 = type(uint64).max;
    uint256 private constant OFFSET_BITS = 48;
    uint8 private constant NONE = 0;
    uint8 private constant STEP = 1;
    uint8 private constant INPUT = 2;
    uint8 private constant CONST = 3;
    uint8 private constant COORD = 4;
    uint8 private constant GATHER = 5;

    mapping(uint256 => Game) private _games;
    uint256 private _count;

    /// @notice A game began.
    event Opened(uint256 indexed id, address challenger, address defender, bytes32 setupHash);
    /// @notice A side committed its trace root and its claimed output value.
    event Committed(uint256 indexed id, uint8 side, bytes32 root, uint64 value);
    /// @notice Both sides revealed; the walk went one level down.
    event Descended(uint256 indexed id, uint8 level, uint64 position);
    /// @notice The walk reached the first step on which the traces differ.
    event Located(uint256 indexed id, uint64 index, uint64 challengerValue, uint64 defenderValue);
    /// @notice The game is decided.
    event Ruled(uint256 indexed id, Outcome outcome, uint64 index, uint64 expected);

    /// @notice The setup passed does not hash to the game's.
    error StepGameWrongSetup();
    /// @notice The move does not fit the game's phase.
    error StepGameWrongPhase();
    /// @notice The caller is not a party, or has moved in this round.
    error StepGameNotYourMove();
    /// @notice The side's clock is spent.
    error StepGameClockSpent();
    /// @notice A proof does not hold.
    error StepGameBadProof();
    /// @notice The program is empty or too long, or the setup's shapes do not fit.
    error StepGameBadSetup();
    /// @notice An operand refers to a later step, or to nothing that exists.
    error StepGameBadOperand();
    /// @notice Nobody's clock has run out.
    error StepGameNotOverdue();

    // --- opening and committing ---------------------------------------------------------------

    /// @notice Opens a game on `setup` between `challenger` and `defender`, each with `clock` seconds.
    function open(Setup calldata setup, address challenger, address defender, uint64 clock)
        external
        returns (uint256 id)
    {
        if (setup.length == 0 || setup.length > 1 << 40) revert StepGameBadSetup();
        if (setup.viewStrides.length != setup.viewTensor.length * setup.outShape.length) revert StepGameBadSetup();
        id = ++_count;
        Game storage g = _games[id];
        g.parties = [challenger, defender];
        g.setupHash = keccak256(abi.encode(setup));
        g.phase = Phase.Commit;
        g.depth = uint8(_depth(setup.length));
        g.turnStart = uint64(block.timestamp);
        g.clock = [clock, clock];
        emit Opened(id, challenger, defender, g.setupHash);
    }

    /// @notice Commits the caller's trace root: its value at the named element, opened in its
    /// output tensor, must be the trace's last leaf.
    function commit(
        uint256 id,
        Setup calldata setup,
        bytes32 root,
        bytes calldata chunk,
        bytes32[] calldata chunkSiblings,
        bytes32[] calldata lastSiblings
    ) external {
        Game storage g = _games[id];
        if (g.phase != Phase.Commit) revert StepGameWrongPhase();
        _checkSetup(g, setup);
        uint8 side = _charge(g);
        Tensor calldata out = setup.outputs[side];
        uint64 value = _element(out, setup.element, chunk, chunkSiblings);
        if (!_verify(root, _leaf(value), setup.length - 1, lastSiblings, g.depth)) revert StepGameBadProof();
        g.roots[side] = root;
        g.nodes[side] = root;
        g.values[side] = value;
        emit Committed(id, side, root, value);
        if (!_roundDone(g)) return;
        if (g.values[0] == g.values[1]) {
            // the challenger named an element on which the two outputs agree
            _decide(g, id, Outcome.DefenderWon, 0, 0);
        } else if (g.depth == 0) {
            _locate(g, id);
        } else {
            g.phase = Phase.Bisect;
        }
    }

    // --- the walk down both trace trees ---------------------------------------------------------

    /// @notice Reveals the two children of the caller's current node (at the last level, the
    /// two leaf values, as uint64 in the low bits).
    function reveal(uint256 id, bytes32 left, bytes32 right) external {
        Game storage g = _games[id];
        if (g.phase != Phase.Bisect) revert StepGameWrongPhase();
        uint8 side = _charge(g);
        bool leaves = g.level + 1 == g.depth;
        if (leaves && (uint256(left) > U64 || uint256(right) > U64)) revert StepGameBadProof();
        bytes32 l = leaves ? _leaf(uint64(uint256(left))) : left;
        bytes32 r = leaves ? _leaf(uint64(uint256(right))) : right;
        if (keccak256(abi.encodePacked(l, r)) != g.nodes[side]) revert StepGameBadProof();
        g.lefts[side] = left;
        g.rights[side] = right;
        if (!_roundDone(g)) return;
        bool goLeft = g.lefts[0] != g.lefts[1];
        g.position = g.position * 2 + (goLeft ? 0 : 1);
        g.level += 1;
        for (uint8 s; s < 2; ++s) {
            bytes32 child = goLeft ? g.lefts[s] : g.rights[s];
            if (leaves) g.values[s] = uint64(uint256(child));
            else g.nodes[s] = child;
        }
        emit Descended(id, g.level, g.position);
        if (leaves) _locate(g, id);
    }

    /// @notice Rules against every side whose clock ran out before its move of this round.
    function timeout(uint256 id) external {
        Game storage g = _games[id];
        if (g.phase != Phase.Commit && g.phase != Phase.Bisect) revert StepGameWrongPhase();
        bool[2] memory late;
        for (uint8 s; s < 2; ++s) {
            late[s] = !g.moved[s] && block.timestamp > uint256(g.turnStart) + g.clock[s];
        }
        if (!late[0] && !late[1]) revert StepGameNotOverdue();
        Outcome o = late[0] && late[1] ? Outcome.BothLost : (late[0] ? Outcome.DefenderWon : Outcome.ChallengerWon);
        _decide(g, id, o, 0, 0);
    }

    // --- the one step -------------------------------------------------------------------------

    /// @notice Executes the located step: `instr` proven in the program, its operands opened
    /// against the agreed trace prefix or the input tensors; the side whose value differs
    /// from the result loses. Anyone may call it.
    function rule(
        uint256 id,
        Setup calldata setup,
        uint256 instr,
        bytes32[] calldata programProof,
        Opening[3] calldata openings
    ) external {
        Game storage g = _games[id];
        if (g.phase != Phase.Located) revert StepGameWrongPhase();
        _checkSetup(g, setup);
        uint64 index = g.position;
        uint64 expected;
        if (index < setup.length) {
            if (!_verify(setup.programRoot, keccak256(abi.encode(instr)), index, programProof, g.depth)) {
                revert StepGameBadProof();
            }
            uint64[3] memory x;
            for (uint256 k; k < 3; ++k) {
                x[k] = _operand(g, setup, instr, k, openings[k], index);
            }
            expected = Float64Step.run(uint8(instr), x[0], x[1], x[2]);
        }
        bool ok0 = g.values[0] == expected;
        bool ok1 = g.values[1] == expected;
        Outcome o = ok0 ? Outcome.ChallengerWon : (ok1 ? Outcome.DefenderWon : Outcome.BothLost);
        _decide(g, id, o, index, expected);
    }

    /// @notice A game's phase, outcome, located step and the two sides' values there.
    function game(uint256 id)
        external
        view
        returns (Phase phase, Outcome outcome, uint8 depth, uint8 level, uint64 position, uint64[2] memory values)
    {
        Game storage g = _games[id];
        return (g.phase, g.outcome, g.depth, g.level, g.position, g.values);
    }

    /// @notice Each side's clock left, in seconds, and when the current round began.
    function clocks(uint256 id) external view returns (uint64[2] memory clock, uint64 turnStart, bool[2] memory moved) {
        Game storage g = _games[id];
        return (g.clock, g.turnStart, g.moved);
    }

    // --- internals ------------------------------------------------------------------------------

    function _checkSetup(Game storage g, Setup calldata setup) private view {
        if (keccak256(abi.encode(setup)) != g.setupHash) revert StepGameWrongSetup();
    }

    /// @dev The caller's side, its clock charged for this round; reverts if it may not move.
    function _charge(Game storage g) private returns (uint8 side) {
        if (msg.sender == g.parties[0] && !g.moved[0]) side = 0;
        else if (msg.sender == g.parties[1] && !g.moved[1]) side = 1;
        else revert StepGameNotYourMove();
        uint256 spent = block.timestamp - g.turnStart;
        if (spent > g.clock[side]) revert StepGameClockSpent();
        g.clock[side] -= uint64(spent);
        g.moved[side] = true;
    }

    /// @dev Whether both sides have moved; if so, a new round begins now.
    function _roundDone(Game storage g) private returns (bool) {
        if (!g.moved[0] || !g.moved[1]) return false;
        g.moved = [false, false];
        g.turnStart = uint64(block.timestamp);
        return true;
    }

    function _locate(Game storage g, uint256 id) private {
        g.phase = Phase.Located;
        emit Located(id, g.position, g.values[0], g.values[1]);
    }

    function _decide(Game storage g, uint256 id, Outcome o, uint64 index, uint64 expected) private {
        g.phase = Phase.Done;
        g.outcome = o;
        emit Ruled(id, o, index, expected);
    }

    function _depth(uint256 length) private pure returns (uint256 d) {
        while ((uint256(1) << d) < length) ++d;
    }

    function _leaf(uint64 value) private pure returns (bytes32) {
        return keccak256(abi.encodePacked(bytes1(0), value));
    }

    function _verify(bytes32 root, bytes32 leaf, uint256 index, bytes32[] calldata siblings, uint256 depth)
        private
        pure
        returns (bool)
    {
        if (siblings.length != depth || index >> depth != 0) return false;
        bytes32 node = leaf;
        for (uint256 d; d < depth; ++d) {
            node = (index >> d) & 1 == 1
                ? keccak256(abi.encodePacked(siblings[d], node))
                : keccak256(abi.encodePacked(node, siblings[d]));
        }
        return node == root;
    }

    /// @dev Element `index` of tensor `t`, read from `chunk` after checking it against the root.
    function _element(Tensor calldata t, uint256 index, bytes calldata chunk, bytes32[] calldata siblings)
        private
        pure
        returns (uint64 value)
    {
        uint256 offset = t.header + index * t.item;
        if (offset + t.item > t.size || t.item == 0 || t.item > 8) revert StepGameBadSetup();
        uint256 count = t.size == 0 ? 1 : (t.size + TensorChunk.CHUNK_SIZE - 1) / TensorChunk.CHUNK_SIZE;
        uint256 chunkIndex = offset / TensorChunk.CHUNK_SIZE;
        if (!TensorChunk.verifyBlake3(t.root, chunk, chunkIndex, count, siblings)) revert StepGameBadProof();
        uint256 within = offset % TensorChunk.CHUNK_SIZE;
        for (uint256 b; b < t.item; ++b) {
            value |= uint64(uint8(chunk[within + b])) << uint64(8 * b);
        }
    }

    /// @dev Operand k of `instr` at step `index`: a constant, an agreed earlier step or an input element.
    function _operand(
        Game storage g,
        Setup calldata setup,
        uint256 instr,
        uint256 k,
        Opening calldata opening,
        uint64 index
    ) private view returns (uint64) {
        uint8 kind = uint8(instr >> (8 + 8 * k));
        uint256 ref = (instr >> (32 + 64 * k)) & U64;
        if (kind == NONE) return 0;
        if (kind == CONST) return uint64(ref);
        if (kind == STEP) return _agreedStep(g, ref, opening.value, opening.siblings, index);
        if (kind == COORD) return uint64(_coordinate(setup, ref));
        if (kind != INPUT && kind != GATHER) revert StepGameBadOperand();
        uint256 view_ = ref >> OFFSET_BITS;
        if (view_ >= setup.viewTensor.length) revert StepGameBadOperand();
        uint256 tensor = setup.viewTensor[view_];
        if (tensor >= setup.inputs.length) revert StepGameBadOperand();
        uint256 low = ref & ((1 << OFFSET_BITS) - 1);
        // INPUT: a fixed offset; GATHER: the value of step `low`, an index read from the data
        uint256 offset = kind == INPUT ? low : _agreedStep(g, low, opening.value, opening.stepSiblings, index);
        uint256 element = _inputIndex(setup, view_, offset);
        return _element(setup.inputs[tensor], element, opening.chunk, opening.siblings);
    }

    /// @dev The value of step `step` left of the located one, proven in either side's trace tree
    /// (every leaf left of the located one is the same in both; their siblings are not).
    function _agreedStep(Game storage g, uint256 step, uint64 value, bytes32[] calldata siblings, uint64 index)
        private
        view
        returns (uint64)
    {
        if (step >= index) revert StepGameBadOperand();
        bytes32 leaf = _leaf(value);
        if (!_verify(g.roots[0], leaf, step, siblings, g.depth) && !_verify(g.roots[1], leaf, step, siblings, g.depth))
        {
            revert StepGameBadProof();
        }
        return value;
    }

    /// @dev Coordinate `dim` of the named output element.
    function _coordinate(Setup calldata setup, uint256 dim) private pure returns (uint256) {
        uint256 dims = setup.outShape.length;
        if (dim >= dims) revert StepGameBadOperand();
        uint256 rest = setup.element;
        for (uint256 d = dims - 1; d > dim; --d) {
            rest /= setup.outShape[d];
        }
        return rest % setup.outShape[dim];
    }

    /// @dev Σ coordinate_d · stride_d of the named output element, plus the offset.
    function _inputIndex(Setup calldata setup, uint256 view_, uint256 offset) private pure returns (uint256 index) {
        uint256 rest = setup.element;
        uint256 dims = setup.outShape.length;
        index = offset;
        for (uint256 d = dims; d > 0; --d) {
            uint256 n = setup.outShape[d - 1];
            if (n == 0) revert StepGameBadSetup();
            index += (rest % n) * setup.viewStrides[view_ * dims + d - 1];
            rest /= n;
        }
    }
}
