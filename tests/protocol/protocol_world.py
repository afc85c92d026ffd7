"""Synthetic jobs for the protocol tests: a tiny step program of test operators, run honestly or not.

A `World` runs T steps of a fixed program over a small int64 state and records
everything a `TraceOracle` must answer: state hashes, every node's output and its
hash. A cheating world is the same run with `tamper` hooks that change one value
(an operator's output, a leaf, a batch, the state after a step, the initial
state); the cheater's records are then consistent with its own wrong computation.

`play` runs a referee and two party machines against each other with a simulated
clock, delivering every message as bytes and asserting that each receiver decodes
exactly the envelope its sender sealed.
"""
from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from protocol import (
    CHALLENGER, DEFENDER, DisputeParty, DisputeRules, Envelope, GameOver, Identity, JobTerms, NodeSpec, Program,
    Referee, Send, SignedJobTerms, state_root,
)
from repops_cupy import registry
from repops_cupy.errors import OpError
from repops_cupy.hashing import hash_tensor
from repops_cupy.registry import Attr

MASK = 0xFFFF


def _mix(a, b, *, salt):
    """(31 a + b + salt) mod 2^16: changing either input by one changes the output."""
    return (a * 31 + b + salt) & MASK


def _scale(a, *, factor):
    return (a * factor) & MASK


def _explode(a):
    raise OpError("ptest.explode fails on every input")


def register_test_ops() -> None:
    """Register the synthetic operators (at import: module-level worlds use them);
    the fixtures in tests/conftest.py keep them out of every non-protocol test."""
    if "ptest.mix" not in registry.names():
        registry.register("ptest.mix", _mix, arity=2, attrs={"salt": Attr(int, 0)})
        registry.register("ptest.scale", _scale, arity=1, attrs={"factor": Attr(int, 3)})
        registry.register("ptest.explode", _explode, arity=1)


register_test_ops()

SHAPE = (3,)
STATE_NAMES = ("v", "w")


def random_program(rng: random.Random, n_ops: int) -> Program:
    """Leaves w, v (state) and x (batch), then `n_ops` random operators; the last two give w and v."""
    nodes = [NodeSpec("leaf", {"name": "w", "role": "state"}, ()),
             NodeSpec("leaf", {"name": "v", "role": "state"}, ()),
             NodeSpec("leaf", {"name": "x", "role": "batch"}, ())]
    for _ in range(max(2, n_ops)):
        i = len(nodes)
        if rng.random() < 0.7:
            nodes.append(NodeSpec("ptest.mix", {"salt": rng.randrange(100)}, (rng.randrange(i), rng.randrange(i))))
        else:
            nodes.append(NodeSpec("ptest.scale", {"factor": rng.choice((3, 5, 7))}, (rng.randrange(i),)))
    n = len(nodes)
    return Program(nodes, {"w": n - 1, "v": n - 2})


def chain_program(n_ops: int, last_op: str = "") -> Program:
    """A chain in which every operator feeds the next: any change reaches the state.

    `last_op` appends one more (unary) operator at the end of the chain.
    """
    nodes = [NodeSpec("leaf", {"name": "w", "role": "state"}, ()),
             NodeSpec("leaf", {"name": "v", "role": "state"}, ()),
             NodeSpec("leaf", {"name": "x", "role": "batch"}, ())]
    for k in range(n_ops):
        i = len(nodes)
        nodes.append(NodeSpec("ptest.mix", {"salt": k}, (i - 1, k % i)))
    if last_op:
        nodes.append(NodeSpec(last_op, {}, (len(nodes) - 1,)))
    n = len(nodes)
    return Program(nodes, {"w": n - 1, "v": n - 2})


def batch_for(seed: int, step: int) -> dict[str, np.ndarray]:
    return {"x": (np.arange(3, dtype=np.int64) * (step + 1) + seed) & MASK}


def batch_hashes_for(seed: int) -> Callable[[int], dict[str, bytes]]:
    return lambda step: {k: hash_tensor(v) for k, v in batch_for(seed, step).items()}


def initial_state(seed: int) -> dict[str, np.ndarray]:
    return {"w": np.array([seed, 1, 2], dtype=np.int64), "v": np.array([7, seed + 3, 5], dtype=np.int64)}


def named_hashes(state: dict[str, np.ndarray]) -> dict[str, bytes]:
    return {k: hash_tensor(v) for k, v in state.items()}


def _bump(value: np.ndarray, amount: int = 1) -> np.ndarray:
    out = np.array(value, copy=True)
    if out.dtype.kind == "f":
        out.flat[0] = out.flat[0] + amount
    else:
        out.flat[0] = (out.flat[0] + amount) & MASK
    return out


@dataclass
class Tamper:
    """Where a cheater's computation goes wrong. kind: "node" (output of node n at step s),
    "state" (the state after step s, not as its nodes gave it), "initial" (state 0)."""

    kind: str
    step: int = 0
    node: int = 0
    amount: int = 1


class World:
    """One run of the job; also the `TraceOracle` of the party that ran it."""

    def __init__(self, program: Program, steps: int, every: int, seed: int = 1, tamper: Tamper | None = None,
                 ops: dict[str, Callable] | None = None, init: Callable = None, batch: Callable = None):
        """`ops` replaces registered operators by name in this party's own computation.

        `init(seed)` gives the initial state and `batch(seed, step)` the batch of a step
        (by default the small int64 tensors of the synthetic program).
        """
        self._program = program
        self.steps, self.every, self.seed, self.tamper = steps, every, seed, tamper
        init, batch_of = init or initial_state, batch or batch_for
        state = dict(init(seed))
        if tamper and tamper.kind == "initial":
            state["w"] = _bump(state["w"], tamper.amount)
        self.states = [state]
        self.state_hashes = [state_root(named_hashes(state))]
        self.node_values: list[list[np.ndarray]] = [[]]
        self.node_hashes: list[list[bytes]] = [[]]
        for s in range(1, steps + 1):
            values = []
            batch = batch_of(seed, s)
            for n, node in enumerate(program.nodes):
                if node.is_leaf:
                    source = self.states[s - 1] if node.leaf_role == "state" else batch
                    value = source[node.leaf_name]
                elif ops and node.op in ops:
                    value = ops[node.op](*[values[m] for m in node.inputs], **node.attrs)
                else:
                    value = registry.run(node.op, [values[m] for m in node.inputs], node.attrs)
                if tamper and tamper.kind == "node" and (tamper.step, tamper.node) == (s, n):
                    value = _bump(value, tamper.amount)
                values.append(value)
            state = {name: values[m] for name, m in program.outputs.as_dict().items()}
            if tamper and tamper.kind == "state" and tamper.step == s:
                state = {**state, "v": _bump(state["v"], tamper.amount)}
            self.node_values.append(values)
            self.node_hashes.append([hash_tensor(v) for v in values])
            self.states.append(state)
            self.state_hashes.append(state_root(named_hashes(state)))

    # --- TraceOracle ---
    def program(self) -> Program:
        return self._program

    def _checkpoint_step(self, c: int) -> int:
        return min(c * self.every, self.steps)

    def checkpoint_states(self) -> list[bytes]:
        count = -(-self.steps // self.every)
        return [self.state_hashes[self._checkpoint_step(c)] for c in range(count + 1)]

    def step_states(self, checkpoint: int) -> list[bytes]:
        first, last = self._checkpoint_step(checkpoint), self._checkpoint_step(checkpoint + 1)
        return self.state_hashes[first:last + 1]

    def node_outputs(self, step: int) -> list[bytes]:
        return self.node_hashes[step]

    def state_tensor_hashes(self, step: int) -> dict[str, bytes]:
        return named_hashes(self.states[step])

    def node_inputs(self, step: int, node: int) -> list[np.ndarray]:
        return [self.node_values[step][m] for m in self._program.nodes[node].inputs]


def live_nodes(program: Program) -> list[int]:
    """Nodes some state output depends on: changing one of them can change the state."""
    live = set(program.outputs.nodes)
    for n in range(len(program.nodes) - 1, -1, -1):
        if n in live:
            live.update(program.nodes[n].inputs)
    return sorted(live)


def first_difference(a: list[bytes], b: list[bytes]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def expected_location(honest: World, cheat: World) -> tuple[int, int, int, int] | None:
    """(depth, first differing checkpoint, step, node) by brute force; None when the traces agree."""
    i = first_difference(honest.checkpoint_states(), cheat.checkpoint_states())
    if i is None:
        return None
    if i == 0:
        return (1, 0, 0, 0)
    c = i - 1
    j = first_difference(honest.step_states(c), cheat.step_states(c))
    s = honest._checkpoint_step(c) + j
    n = first_difference(honest.node_hashes[s] + [honest.state_hashes[s]], cheat.node_hashes[s] + [cheat.state_hashes[s]])
    return (3, i, s, n)


# --- jobs and parties -------------------------------------------------------------------------

CLIENT = Identity(bytes([1]) * 32)
ALICE = Identity(bytes([2]) * 32)   # the challenger in most tests
BOB = Identity(bytes([3]) * 32)     # the defender in most tests
RULES = DisputeRules(move_timeout_ms=10_000, clock_ms=60_000)


def make_terms(program: Program, steps: int, every: int, seed: int = 1, rules: DisputeRules = RULES,
               client: Identity = CLIENT, init: Callable = initial_state) -> SignedJobTerms:
    terms = JobTerms(
        client=client.node_id, config_hash=bytes(32), program_root=program.root, program_size=program.size,
        data_root=bytes([9]) * 32, initial_state=state_root(named_hashes(init(seed))), steps=steps,
        checkpoint_every=every, payment=1000, stake=500, deadline=10**12, nonce=seed, rules=rules,
    )
    return SignedJobTerms.sign(client, terms)


@dataclass
class Game:
    terms: SignedJobTerms
    referee: Referee
    challenger: Any
    defender: Any
    honest: World
    cheat: World | None = None


def make_game(program: Program, steps: int, every: int, *, challenger_world: World, defender_world: World,
              seed: int = 1, rules: DisputeRules = RULES, batch: bool = True, init: Callable = initial_state,
              batch_of: Callable = batch_for) -> Game:
    terms = make_terms(program, steps, every, seed, rules, init=init)
    batch_hashes = (lambda step: named_hashes(batch_of(seed, step))) if batch else None
    referee = Referee(identity=CLIENT, terms=terms, batch_hashes=batch_hashes)
    ch = DisputeParty(identity=ALICE, terms=terms, oracle=challenger_world, role="auditor", side=CHALLENGER)
    de = DisputeParty(identity=BOB, terms=terms, oracle=defender_world, role="provider", side=DEFENDER)
    return Game(terms, referee, ch, de, challenger_world)


# --- adversaries that rewrite their own messages ------------------------------------------------


def resign(envelope: Envelope, body: Any, identity: Identity) -> Envelope:
    return Envelope.seal(body, identity=identity, job_id=envelope.job_id, seq=envelope.seq, deadline=envelope.deadline)


@dataclass
class Adversary:
    """Wraps a party machine; `rewrite(envelope, move_index)` returns the envelope to send, or None to stay silent.

    `delay` is how long (ms) the wrapped party takes for each move.
    """

    party: DisputeParty
    rewrite: Callable[[Envelope, int], Envelope | None] = lambda env, i: env
    delay: int = 1
    moves: int = 0

    @property
    def identity(self) -> Identity:
        return self.party.identity

    def open_dispute(self, root, *, now):
        return self.party.open_dispute(root, now=now)

    def receive_bytes(self, data, *, now):
        received = self.party.receive_bytes(data, now=now)
        actions = []
        for action in received.actions:
            if isinstance(action, Send):
                out = self.rewrite(action.envelope, self.moves)
                self.moves += 1
                if out is not None:
                    actions.append(Send(action.to, out))
            else:
                actions.append(action)
        return type(received)(received.envelope, actions)

    def __getattr__(self, name):
        return getattr(self.party, name)


@dataclass
class Outcome:
    verdict: Any
    verdict_envelope: Envelope
    party_verdicts: dict[bytes, Any]
    delivered: int
    log: list[tuple[int, bytes, Envelope]] = field(default_factory=list)


def play(game: Game, *, start: int = 1_000, latency: int = 2, defender_root: Any = None) -> Outcome:
    """Run the dispute to its verdict; every message is delivered as bytes and checked on arrival.

    The challenger opens against `defender_root` (by default the defender's own trace root).
    """
    referee, ch, de = game.referee, game.challenger, game.defender
    machines = {CLIENT.node_id: referee, ch.identity.node_id: ch, de.identity.node_id: de}
    delay = {CLIENT.node_id: 0, ch.identity.node_id: getattr(ch, "delay", 1), de.identity.node_id: getattr(de, "delay", 1)}
    queue: list[tuple[int, int, bytes, Envelope]] = []
    counter = itertools.count()
    party_verdicts: dict[bytes, Any] = {}
    log: list[tuple[int, bytes, Envelope]] = []

    def dispatch(sender: bytes, actions: list, now: int) -> None:
        for action in actions:
            if isinstance(action, Send):
                heapq.heappush(queue, (now + delay[sender] + latency, next(counter), action.to, action.envelope))
            elif isinstance(action, GameOver) and sender != CLIENT.node_id:
                party_verdicts[sender] = action.verdict

    now = start
    opening = ch.open_dispute(defender_root or de.trace_root, now=now)
    dispatch(ch.identity.node_id, [opening], now)
    delivered = 0
    while queue or referee.state != "DONE":
        if not queue:
            deadline = referee.next_deadline
            assert deadline is not None, "the game is stuck: nothing in flight and no deadline pending"
            now = max(now, deadline + 1)
            actions = referee.tick(now=now)
            assert actions, f"a deadline passed at {deadline} and the referee did nothing"
            dispatch(CLIENT.node_id, actions, now)
            continue
        at, _, to, envelope = heapq.heappop(queue)
        now = max(now, at)
        machine = machines[to]
        if to != CLIENT.node_id and machine.state == "DONE":
            continue
        if to == CLIENT.node_id and referee.state == "DONE":
            continue  # the verdict is out; late moves are moot
        received = machine.receive_bytes(envelope.encode(), now=now)
        assert received.envelope == envelope, "the receiver decoded something other than what was sent"
        assert received.envelope.encode() == envelope.encode()
        delivered += 1
        log.append((now, to, envelope))
        dispatch(to, received.actions, now)
    return Outcome(referee.verdict, referee.verdict_envelope, party_verdicts, delivered, log)
