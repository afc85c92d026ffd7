"""How a settlement-2 provider misbehaves on purpose: the strategies of docs/economics.md §12
as node behaviours, chosen by the provider's ``cheat`` setting (tests and testnets only).

`ProviderRoleV2` asks its `Adversary` at each point where a seat can deviate: whether and
how it trains (`run_cheat`, `trains`, `pace`), whether it reveals and when (`reveals`,
`reveal_at`), and whether it serves its items and defends its root afterwards (`serves`:
a seat that does not is never put in ``ctx.trained``, which the data service and the
defender read). The honest adversary answers as an honest seat does.

  silent-seat      commits to a junk trace, never reveals (forfeits NoReveal at revealBy)
  garbage-commit   commits and reveals a junk trace that starts at the initial state (the
                   reveal checks trace[0]); computes nothing, so it serves nothing
  stonewall        trains and reveals honestly, then serves nobody and defends nothing
  late-reveal      a computational cheat (`LATE_REVEAL_CHEAT`) revealed as late as the window
                   allows, to shorten its audits (it cannot: each seat's challenge window runs
                   from its own reveal)
  slow             honest, on a slow device: its training takes σ·1.6 a step, the slowest the
                   provider's acceptance check (σ·s·0.8) lets take a seat (the windows allow s·σ = 2σ)
  copy-root        trains nothing: commits another seat's commitment as soon as it is on chain and,
                   once that seat revealed, reveals its trace and salt as its own (refused: a
                   commitment binds the account that made it), so it forfeits NoReveal
  equivocate       trains, reveals and defends honestly, and tells samplers different steps lists
                   of one interval: the first to ask gets its true list, each later one a list with
                   one entry changed, every one signed (§10: two signed lists for one slot slash it)
  NAME of node.cheats   a computational cheat: the run deviates (`node.roles.runner.JobRun`)

The computational strategies come from the table the node was started with (``cheats``,
`node.cheats.STRATEGIES`); honest node code never imports it.

A client or an auditor node misbehaves by the same setting, with the behaviours of its role:

  colluding-referee  (client) rules every node claim it holds against the defender, whatever the
                     evidence says and with no transcript behind it (§9: appealed and overturned,
                     its referee bond burned)
  stalling-referee   (client) never rules (§8.4: the keepers' timeoutReferee burns its bond and a
                     referee is drawn)
  false-challenger   (auditor) opens a game on every root it audits, right or not, and picks an entry
                     of every list posted under it whether or not it differs from its replay (a
                     precomputing or Sybil challenger: §8.3, §12; it loses every bond it locks)
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

import trio

from protocol.economics import HARDWARE_SLACK

LATE_REVEAL_CHEAT = "perturb-weight"  # what a late revealer hides: a wrong trace
LATE_BY = 3  # seconds before revealBy a late revealer sends its reveal: one block and some slack
# A slow honest provider's training time, in declared step costs σ per step: the slowest a provider may
# measure and still take the job (`protocol.economics.accepts_step_cost`, σ·s·0.8). At 1.8 (a provider
# the check would have turned away) it left 0.2·T·σ + Δ of W_train for the bundle's fetch and the commit,
# and the loaded full v2 testnet's slow provider overran it (forfeited NO_COMMIT).
SLOW_PACE = 8 * HARDWARE_SLACK / 10  # accepts_step_cost's bound: 1.6


@dataclass(frozen=True)
class Adversary:
    """A provider's behaviour; the defaults are an honest seat's."""

    name: str = ""
    run_cheat: str = ""     # the node.cheats strategy its run follows ("": the job's own computation)
    trains: bool = True     # False: commits a junk trace and computes nothing
    reveals: bool = True
    serves: bool = True     # its items served and its root defended after the reveal
    reveal_late: bool = False
    pace: float = 0.0       # > 0: training takes pace·σ a step, however fast the machine is
    equivocates: bool = False  # tells later samplers of an interval a steps list other than the first's
    copies: bool = False    # commits another seat's commitment and reveals that seat's trace and salt

    @property
    def honest(self) -> bool:
        """Whether the seat does its job (a slow seat does, within the allowance)."""
        return not self.name or self.name in HONEST_BEHAVIOURS

    def junk_trace(self, initial_state: bytes, length: int) -> list[bytes]:
        """A trace that is no computation: the job's initial state (checked at reveal), then noise."""
        return [initial_state] + [os.urandom(32) for _ in range(length - 1)]

    def steps_told(self, steps: list[bytes], asker: int) -> list[bytes]:
        """The steps list told to the ``asker``-th sampler of the interval (0: the first)."""
        if not self.equivocates or asker == 0:
            return steps
        told = list(steps)
        told[len(told) // 2] = os.urandom(32)  # the middle entry: the ends still match its trace
        return told

    def reveal_at(self, reveal_by: int) -> int:
        """The chain time from which this seat sends its reveal (0: as soon as the window opens)."""
        return reveal_by - LATE_BY if self.reveal_late else 0

    async def pace_training(self, steps: int, step_millis: int, trained_seconds: float) -> None:
        """Hold the run until it took ``pace``·σ a step (a slow device: what the windows must allow)."""
        if self.pace > 0:
            await trio.sleep(max(0.0, self.pace * steps * step_millis / 1000 - trained_seconds))


@dataclass(frozen=True)
class RefereeBehaviour:
    """How a client node rules the node claims it holds; the defaults are an honest referee's."""

    name: str = ""
    rules: bool = True              # False: holds its claims and never rules them
    against_defender: bool = False  # rules every claim against the defender


@dataclass(frozen=True)
class ChallengerBehaviour:
    """How an auditor node challenges; the defaults are an honest auditor's."""

    name: str = ""
    lies: bool = False  # challenges every audited root and picks in every list, differing or not


HONEST = Adversary()
BEHAVIOURS: dict[str, Adversary] = {a.name: a for a in (
    Adversary("silent-seat", trains=False, reveals=False, serves=False),
    Adversary("garbage-commit", trains=False, serves=False),
    Adversary("stonewall", serves=False),
    Adversary("copy-root", trains=False, serves=False, copies=True),
    Adversary("late-reveal", run_cheat=LATE_REVEAL_CHEAT, reveal_late=True),
    Adversary("slow", pace=SLOW_PACE),
    Adversary("equivocate", equivocates=True),
)}
HONEST_BEHAVIOURS = ("slow",)
REFEREE_BEHAVIOURS: dict[str, RefereeBehaviour] = {b.name: b for b in (
    RefereeBehaviour("colluding-referee", against_defender=True),
    RefereeBehaviour("stalling-referee", rules=False),
)}
CHALLENGER_BEHAVIOURS: dict[str, ChallengerBehaviour] = {b.name: b for b in (
    ChallengerBehaviour("false-challenger", lies=True),
)}


def referee_behaviour(cheat: str) -> RefereeBehaviour:
    """A client node's referee behaviour by its ``cheat`` setting (any other setting: an honest one's)."""
    return REFEREE_BEHAVIOURS.get(cheat, RefereeBehaviour())


def challenger_behaviour(cheat: str) -> ChallengerBehaviour:
    """An auditor node's behaviour by its ``cheat`` setting (any other setting: an honest one's)."""
    return CHALLENGER_BEHAVIOURS.get(cheat, ChallengerBehaviour())


def strategy_names(cheats: Mapping[str, Any]) -> list[str]:
    """Every cheating strategy a settlement-2 provider can play with the table ``cheats``, each once (a
    behaviour of this module takes its name over a strategy of the table: `adversary_of`)."""
    names = [n for n in BEHAVIOURS if n not in HONEST_BEHAVIOURS] + [n for n in cheats if n != "honest"]
    return list(dict.fromkeys(names))


def adversary_of(cheat: str, cheats: Mapping[str, Any] | None) -> Adversary:
    """The behaviour the ``cheat`` setting names; ValueError naming the known ones otherwise."""
    if not cheat:
        return HONEST
    table = cheats or {}
    found = BEHAVIOURS.get(cheat) or (Adversary(cheat, run_cheat=cheat) if cheat in table else None)
    if found is None:
        known = sorted(BEHAVIOURS) + sorted(table)
        raise ValueError(f"unknown cheat {cheat!r} for settlement 2 (known: {', '.join(known)}"
                         f"{'' if table else '; the node was started without node.cheats'})")
    if found.run_cheat and found.run_cheat not in table:
        raise ValueError(f"cheat {cheat!r} runs {found.run_cheat!r} of node.cheats, which this node was not given")
    return found


__all__ = ["Adversary", "BEHAVIOURS", "CHALLENGER_BEHAVIOURS", "ChallengerBehaviour", "HONEST", "HONEST_BEHAVIOURS",
           "LATE_REVEAL_CHEAT", "REFEREE_BEHAVIOURS", "RefereeBehaviour", "adversary_of", "challenger_behaviour",
           "referee_behaviour", "strategy_names"]
