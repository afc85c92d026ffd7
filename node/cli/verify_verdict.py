"""gavel verify-verdict: does a referee's ruling on a node claim hold? (docs/economics.md section 9)

    gavel verify-verdict TRANSCRIPT JOB.toml [--chain URL --contract ADDRESS]

TRANSCRIPT is the msgpack file a referee published (`protocol.claim_evidence.Transcript`):
the game's references, both lists, the evidence and the ruling. JOB.toml is the job (its
data is found as training finds it): it gives the program the evidence is proven against
and the batches a batch leaf is judged by. The command recomputes the node from the
transcript's own lists and evidence and says whether the recorded ruling is the one the
evidence calls for. With --chain, it first checks that the transcript is the chain's: the
node claim exists under the step claim its lists name, a seat posted this evidence's hash,
and a ruling (or appeal ruling) on chain carries this transcript's hash and ruling.

Exit status: 0 the ruling holds, 1 it does not (appeal it), 2 it could not be checked (bad
usage, an unreadable transcript, one that is not this job's or not the chain's).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import describe_os_error

EXIT_HOLDS, EXIT_OVERTURN, EXIT_UNCHECKED = 0, 1, 2


class VerdictError(Exception):
    """The transcript cannot be checked against this job or chain: said in one line."""


@dataclass
class VerdictCheck:
    """The outcome: `holds` when the recorded ruling is the recomputed one; `lines` say what was checked."""

    holds: bool
    recomputed: Any  # protocol.claim_evidence.Judgement
    lines: list[str] = field(default_factory=list)


def verify_verdict(transcript: Any, training: Any, *, settlement: Any = None) -> VerdictCheck:
    """Check `transcript` (a `Transcript`) against the job `training` and, if given, a `SettlementV2`."""
    from node.training_oracle import batch_hashes, protocol_program, schedule_of
    from protocol.claim_evidence import check_transcript, transcript_hash
    from protocol.errors import ProtocolError

    program, schedule = protocol_program(training), schedule_of(training)
    c = transcript.interval
    if transcript.program_root != program.root:
        raise VerdictError("the transcript's program root is not this job's program")
    if c >= schedule.intervals or len(transcript.steps) != len(schedule.interval_steps(c)) + 1:
        raise VerdictError(f"the transcript's interval {c} with {len(transcript.steps)} steps entries "
                           f"is not one of this job's")
    lines = [f"transcript {transcript_hash(transcript).hex()}"]
    try:
        claim_id = transcript.node_claim_id
        if settlement is not None:
            lines += _check_chain(transcript, settlement, claim_id)
        recomputed = check_transcript(transcript, first_step=schedule.checkpoint_step(c), program_size=program.size,
                                      batch_hashes=batch_hashes(training))
    except ProtocolError as exc:
        raise VerdictError(f"the transcript does not hold together: {exc}") from None
    ruled = transcript.judgement
    holds = recomputed.defender_right == ruled.defender_right
    lines += [
        f"claim {claim_id.hex()}: interval {c}, step {schedule.checkpoint_step(c) + transcript.step_index}",
        f"ruled:      defender {'right' if ruled.defender_right else 'wrong'} ({ruled.reason})",
        f"recomputed: defender {'right' if recomputed.defender_right else 'wrong'} ({recomputed.reason})",
    ]
    return VerdictCheck(holds, recomputed, lines)


def _check_chain(transcript: Any, settlement: Any, claim_id: bytes) -> list[str]:
    from contracts.settlement_v2_referees import AppealRuled, ClaimRuled
    from protocol.claim_evidence import transcript_hash

    claim = settlement.claim(claim_id)
    if claim.game_id != transcript.game_id:
        raise VerdictError(f"the chain holds no node claim {claim_id.hex()} (the transcript's game, lists and node)")
    if claim.parent != transcript.step_claim_id:
        raise VerdictError("the node claim does not hang under the step claim of the transcript's steps list")
    seats = settlement.seats(transcript.job_id)
    if not any(settlement.answer_of(claim_id, seat) == transcript.evidence_hash for seat in seats):
        raise VerdictError("no seat posted this evidence's hash for the claim")
    ours = transcript_hash(transcript)
    rulings = [e.event for e in settlement.events() if isinstance(e.event, (ClaimRuled, AppealRuled))
               and e.event.claim_id == claim_id and e.event.transcript_hash == ours]
    if not rulings:
        raise VerdictError("no ruling on chain carries this transcript's hash")
    if any(r.defender_right != transcript.judgement.defender_right for r in rulings):
        raise VerdictError("the chain's ruling with this transcript's hash is not the transcript's ruling")
    kind = "appeal ruling" if isinstance(rulings[-1], AppealRuled) else "ruling"
    return [f"on chain: node claim under its step claim, evidence posted, {kind} by {rulings[-1].referee}"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gavel verify-verdict",
                                description="recompute a node claim's ruling from its transcript; exit 0 if it holds")
    p.add_argument("transcript", help="the transcript file the referee published (msgpack)")
    p.add_argument("job", help="the job's TOML file (its data found as training finds it)")
    p.add_argument("--chain", help="JSON-RPC URL of the chain: check the transcript is the ruling's there")
    p.add_argument("--contract", help="address of GavelSettlementV2 on --chain")
    return p


def verify_verdict_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    prog = "gavel verify-verdict"
    if (args.chain is None) != (args.contract is None):
        print(f"{prog}: --chain and --contract go together", file=sys.stderr)
        return EXIT_UNCHECKED
    from contracts.errors import SettlementError
    from protocol.claim_evidence import Transcript
    from protocol.errors import RemoteProtocolError

    from .train import UsageError, load_training

    try:
        transcript = Transcript.decode(Path(args.transcript).read_bytes())
        training = load_training(args.job)
        settlement = _bind(args.chain, args.contract) if args.chain else None
        check = verify_verdict(transcript, training, settlement=settlement)
    except OSError as exc:
        print(f"{prog}: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_UNCHECKED
    except RemoteProtocolError as exc:
        print(f"{prog}: {args.transcript}: not a transcript: {exc}", file=sys.stderr)
        return EXIT_UNCHECKED
    except (UsageError, VerdictError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_UNCHECKED
    except SettlementError as exc:  # the chain did not answer, or no such contract there
        print(f"{prog}: --chain {args.chain}: {exc}", file=sys.stderr)
        return EXIT_UNCHECKED
    print("\n".join(check.lines))
    if check.holds:
        print("the ruling holds")
        return EXIT_HOLDS
    print(f"the ruling does NOT hold: appeal it with appeal(0x{transcript.node_claim_id.hex()}) before its appealBy")
    return EXIT_OVERTURN


def _bind(url: str, address: str) -> Any:
    from contracts.chain import RpcChain
    from contracts.settlement_v2 import SettlementV2

    return SettlementV2(RpcChain(url), address)
