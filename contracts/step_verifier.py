"""The Python client of OneStepVerifier.sol: the fourth level of a dispute and its one-step ruling.

Each method sends one transaction from the account it is bound to and returns its receipt
(gas included); a refused move raises ``ContractRevert`` with the custom error's name.
Arguments come from ``protocol.step_game`` (setups, commitments, openings), so the
contract and its Python twin are fed the same bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

from protocol.step_game import OUTCOME_CODES, Commitment, Opening, StepSetup
from protocol.step_trace import Instr

from .abi import ContractAbi
from .artifacts import load_artifact
from .chain import Chain, Receipt, RevertData

CONTRACT_NAME = "OneStepVerifier"
PHASES = ("None", "Commit", "Bisect", "Located", "Done")
OUTCOMES = {code: name for name, code in OUTCOME_CODES.items()}
GAS_LIMITS = {"deploy": 6_000_000, "open": 1_000_000, "commit": 3_000_000, "reveal": 300_000,
              "timeout": 200_000, "rule": 5_000_000}


@functools.cache
def _abi() -> ContractAbi:
    return ContractAbi(load_artifact(CONTRACT_NAME).abi)


@dataclass(frozen=True)
class GameView:
    phase: str
    outcome: str | None
    depth: int
    level: int
    position: int
    values: tuple[int, int]


@dataclass(frozen=True)
class ClockView:
    """`clocks(id)`: each side's time left, when the current round began, who moved in it."""

    clock: tuple[int, int]
    turn_start: int
    moved: tuple[bool, bool]


class StepVerifier:
    """A deployed OneStepVerifier, sending as `account`."""

    def __init__(self, chain: Chain, address: str, account: str) -> None:
        self.chain, self.address, self.account = chain, address, account

    @classmethod
    def deploy(cls, chain: Chain, account: str | None = None) -> "StepVerifier":
        account = account if account is not None else chain.accounts[0]
        receipt = chain.transact(account, None, load_artifact(CONTRACT_NAME).bytecode, gas=GAS_LIMITS["deploy"])
        assert receipt.contract_address is not None
        return cls(chain, receipt.contract_address, account)

    def connect(self, account: str) -> "StepVerifier":
        return StepVerifier(self.chain, self.address, account)

    def _transact(self, name: str, *args: Any) -> Receipt:
        data = _abi().encode_call(name, *args)
        try:
            return self.chain.transact(self.account, self.address, data, gas=GAS_LIMITS[name])
        except RevertData as reverted:
            raise _abi().revert(reverted.data) from None

    def _call(self, name: str, *args: Any) -> tuple[Any, ...]:
        data = _abi().encode_call(name, *args)
        try:
            return _abi().decode_result(name, self.chain.call(self.address, data, sender=self.account))
        except RevertData as reverted:
            raise _abi().revert(reverted.data) from None

    def open(self, setup: StepSetup, challenger: str, defender: str, clock: int) -> tuple[int, Receipt]:
        """Opens a game; returns its id (read from the Opened event) and the receipt."""
        receipt = self._transact("open", setup.as_abi(), challenger, defender, clock)
        for log in receipt.logs:
            decoded = _abi().decode_log(list(log.topics), log.data)
            if decoded and decoded[0] == "Opened":
                return decoded[1]["id"], receipt
        raise AssertionError("no Opened event")

    def commit(self, game_id: int, setup: StepSetup, c: Commitment) -> Receipt:
        return self._transact("commit", game_id, setup.as_abi(), c.root, c.chunk, list(c.chunk_siblings),
                              list(c.last_siblings))

    def reveal(self, game_id: int, left: bytes, right: bytes) -> Receipt:
        return self._transact("reveal", game_id, left, right)

    def timeout(self, game_id: int) -> Receipt:
        return self._transact("timeout", game_id)

    def rule(self, game_id: int, setup: StepSetup, instr: Instr, program_proof: Sequence[bytes],
             openings: Sequence[Opening]) -> Receipt:
        return self._transact("rule", game_id, setup.as_abi(), instr.word, list(program_proof),
                              [o.as_abi() for o in openings])

    def game(self, game_id: int) -> GameView:
        phase, outcome, depth, level, position, values = self._call("game", game_id)
        return GameView(PHASES[phase], OUTCOMES.get(outcome), depth, level, position, tuple(values))

    def clocks(self, game_id: int) -> ClockView:
        clock, turn_start, moved = self._call("clocks", game_id)
        return ClockView(tuple(clock), turn_start, tuple(moved))

    def events(self, receipt: Receipt) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for log in receipt.logs:
            decoded = _abi().decode_log(list(log.topics), log.data)
            if decoded:
                out.append(decoded)
        return out


@dataclass
class Transaction:
    """One transaction of a game: what it was, who sent it (0 challenger, 1 defender, None anyone), its gas."""

    name: str
    side: int | None
    gas: int


@dataclass
class PlayedGame:
    game_id: int
    outcome: str | None
    position: int
    rounds: int
    transactions: list[Transaction]

    @property
    def worst(self) -> Transaction:
        return max(self.transactions, key=lambda t: t.gas)

    @property
    def total_gas(self) -> int:
        return sum(t.gas for t in self.transactions)


def play(verifier: StepVerifier, setup: StepSetup, players: Sequence[Any], accounts: Sequence[str], *,
         clock: int = 3600, ruler: int | None = None, silent: Sequence[int] = (),
         game_id: int | None = None, rule: bool = True) -> PlayedGame:
    """Plays a whole fourth level on chain: open, both commits, the walk, then `rule` called by side
    `ruler`'s account (default: the first side not silent) with that side's openings. `players` are
    `protocol.step_game.StepPlayer`s (side 0 the challenger). A side in `silent` never moves; the other
    then calls `timeout` once its clock has run out. With `game_id`, the game was opened already (by
    the settlement's openStepGame, with that `clock`): play it from its commits. With `rule` False
    nobody rules: the game is left where the walk located the step."""
    txs = []
    if game_id is None:
        game_id, receipt = verifier.open(setup, accounts[0], accounts[1], clock)
        txs.append(Transaction("open", None, receipt.gas_used))
    active = [s for s in (0, 1) if s not in silent]
    ruler = active[0] if ruler is None and active else ruler

    def timed_out() -> PlayedGame:
        verifier.chain.advance_time(clock + 1)
        r = verifier.connect(accounts[active[0]] if active else verifier.account).timeout(game_id)
        txs.append(Transaction("timeout", None, r.gas_used))
        view = verifier.game(game_id)
        return PlayedGame(game_id, view.outcome, view.position, view.level, txs)

    for side in active:
        r = verifier.connect(accounts[side]).commit(game_id, setup, players[side].commitment())
        txs.append(Transaction("commit", side, r.gas_used))
    view = verifier.game(game_id)
    if silent and view.phase == "Commit":
        return timed_out()
    while view.phase == "Bisect":
        for side in active:
            left, right = players[side].children(view.level, view.position)
            r = verifier.connect(accounts[side]).reveal(game_id, left, right)
            txs.append(Transaction("reveal", side, r.gas_used))
        view = verifier.game(game_id)
        if silent and view.phase == "Bisect":
            return timed_out()
    if view.phase == "Located" and rule:
        instr, proof, openings = players[ruler].ruling_arguments(view.position)
        r = verifier.connect(accounts[ruler]).rule(game_id, setup, instr, proof, openings)
        txs.append(Transaction("rule", None, r.gas_used))
        view = verifier.game(game_id)
    return PlayedGame(game_id, view.outcome, view.position, view.level, txs)
