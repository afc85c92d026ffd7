"""Judging a settlement-2 testnet run: who gained and who lost money, and why each cheat was or
was not caught (docs/economics.md §14.2 step 4). `report.py` is version 1's.

Money is the contract's: each party's net is `LedgerV2.nets` (its stake and credit read from
the contract, plus what its events say it withdrew, less what it sent in). Who cheated is the
plan's (the provider's strategy), and every revealed root is compared with the testnet's own
honest run of the job (`truth.honest_run`), never with what the nodes claim.

A cheat is a seat a cheating provider held. It was *caught* when the seat forfeited (its reason
is the contract's: NoReveal, Unavailable, LostGame, ...). A cheat not caught gets a reason:

  unavailable   the seat kept items from a sampler and no demand ended it
  sampled out   every sample of it (the client's, the auditors') checked: none held its fault
  no auditor    the network had no auditor and the client's own samples missed the fault
  chain error   a replay found it wrong, yet no game or demand on chain ended the seat, or the
                job never settled
  unfilled      the job never filled its seats and was refunded: the seat had nothing to cheat on

The run is *held* when no honest party (honest or slow provider, auditor, client) lost money
(a client's net counts the price of every result it checked as bought, not lost), every cheater
that played (a seat or the client of a filled job, a game's opener) ended with a negative net, and
the events agree with the contract's reads. Cheating clients and auditors (`adversaries`' referee
and challenger behaviours) are judged by their net alone; a cheat in the table is a provider's seat.
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from contracts.settlement_v2 import ForfeitReason, trace_root

from ..atomic_file import write_atomic
from .html import ETHER, STYLE, _e, _table
from .ledger_v2 import LedgerV2, SeatRecord
from .report import NodeInfo, Submission
from .truth import HonestRun

REPORT_FORMAT_V2 = "gavel-testnet-report-v2/1"
UNAVAILABLE, SAMPLED_OUT, NO_AUDITOR, CHAIN_ERROR = "unavailable", "sampled out", "no auditor", "chain error"
UNFILLED = "unfilled"
UNCAUGHT_KINDS = (UNAVAILABLE, SAMPLED_OUT, NO_AUDITOR, CHAIN_ERROR, UNFILLED)


def _client_seat(sub: Submission | None, account: str) -> dict:
    """The client's summary of one seat of its job (its samples, its outcome), if it recorded one."""
    providers = ((sub.result or {}).get("providers") or {}) if sub is not None else {}
    return next((p for p in providers.values() if str(p.get("account", "")).lower() == account.lower()), {})


def uncaught_reason(seat: SeatRecord, job: Any, ledger: LedgerV2, client_seat: dict,
                    audited: dict[int, bool] | None, auditors: int) -> str:
    """Why a cheating seat that did not forfeit was not caught (one of `UNCAUGHT_KINDS`, with detail)."""
    if not job.settled:
        return f"{CHAIN_ERROR}: the job is {job.status.name} on chain at the end of the run"
    if not _filled(job):
        return f"{UNFILLED}: {len(job.seats)} of {job.providers_wanted} seats taken, the price refunded"
    samples = client_seat.get("samples") or {}
    demands = [ledger.demands[d] for d in job.demands if ledger.demands[d].seat == seat.account]
    if any(d.outcome != "failed" for d in demands) or any(v is None for v in samples.values()):
        return f"{UNAVAILABLE}: it kept items from a sampler and no demand ended its seat"
    found = [c for c, ok in (audited or {}).items() if not ok] + [int(c) for c, v in samples.items() if v is False]
    if found:
        return f"{CHAIN_ERROR}: interval(s) {sorted(set(found))} replayed wrong, yet nothing on chain ended the seat"
    if auditors == 0:
        return f"{NO_AUDITOR}: the client's samples {sorted(int(c) for c in samples)} missed the fault"
    return f"{SAMPLED_OUT}: the samples of the client {sorted(int(c) for c in samples)} and the auditors " \
           f"{sorted(audited or {})} missed the fault"


def build_report_v2(*, nodes: list[NodeInfo], submissions: list[Submission], ledger: LedgerV2,
                    nets: dict[str, int], audited: dict[tuple[bytes, bytes], dict[int, bool]],
                    honest: dict[bytes, HonestRun], mismatches: list[str], config: dict[str, Any],
                    timings: dict[str, Any]) -> dict[str, Any]:
    by_account = {n.account: n for n in nodes}
    cheaters = {n.account for n in nodes if _cheater(n)}
    auditors = sum(1 for n in nodes if n.role == "auditor")
    sub_of = {s.job_id: s for s in submissions if s.job_id is not None}

    def name(account: str) -> str:
        node = by_account.get(account)
        return node.name if node is not None else account

    jobs, cheats, failures = [], [], []
    for job in ledger.jobs.values():
        run = honest.get(job.job_id)
        honest_root = trace_root(list(run.checkpoints)) if run is not None else None
        sub = sub_of.get(job.job_id)
        seats = []
        for seat in job.seats.values():
            node = by_account.get(seat.account)
            strategy = node.cheat if node is not None else ""
            entry = {"provider": name(seat.account), "account": seat.account, "strategy": strategy,
                     "cheater": seat.account in cheaters, "revealed_root": seat.root.hex() if seat.root else None,
                     "root_honest": None if seat.root is None or honest_root is None else seat.root == honest_root,
                     "forfeit": seat.forfeit.name if seat.forfeit != ForfeitReason.NONE else None, "paid": seat.paid}
            if seat.account in cheaters:
                caught = seat.forfeit != ForfeitReason.NONE
                entry["caught"] = caught
                entry["uncaught_reason"] = None if caught else uncaught_reason(
                    seat, job, ledger, _client_seat(sub, seat.account), audited.get((job.job_id, seat.root)) if seat.root
                    else None, auditors)
                cheats.append(entry | {"job_id": job.job_id.hex()})
            elif seat.forfeit != ForfeitReason.NONE:
                failures.append(f"honest {name(seat.account)} forfeited its seat in job {job.job_id.hex()[:12]} "
                                f"({seat.forfeit.name})")
            elif entry["root_honest"] is False:
                failures.append(f"honest {name(seat.account)} revealed a root that is not the job's in "
                                f"job {job.job_id.hex()[:12]}")
            seats.append(entry)
        jobs.append({"job_id": job.job_id.hex(), "client": name(job.client), "status": job.status.name,
                     "price": job.price, "provider_stake": job.provider_stake, "honest_root": _hex(honest_root),
                     "opened_at": job.opened_at, "settled_at": job.settled_at, "refunded": job.refunded,
                     "seats": seats, "demands": len(job.demands), "games": len(job.games),
                     "client_result": sub.result if sub is not None else None})
    # what each client paid for the results it holds: a job's price less its refund, where the client
    # checked a result of it; the rest of its net is what it gained or lost
    bought: dict[str, int] = {}
    for job in ledger.jobs.values():
        sub = sub_of.get(job.job_id)
        if sub is not None and (sub.result or {}).get("result_from"):
            bought[job.client] = bought.get(job.client, 0) + job.price - job.refunded
    parties = []
    for node in nodes:
        net = nets.get(node.account, 0)
        party = {"name": node.name, "role": node.role, "account": node.account, "strategy": node.cheat,
                 "cheater": node.account in cheaters, "net_wei": net, "net_ether": net / ETHER}
        if node.role == "client":
            paid = bought.get(node.account, 0)
            party |= {"paid_for_results_wei": paid, "net_beyond_results_wei": net + paid}
        parties.append(party)
    honest_lost = [p for p in parties if not p["cheater"] and p.get("net_beyond_results_wei", p["net_wei"]) < 0]
    # who had a part to play: the seats and clients of filled jobs, and the openers of games
    filled = [job for job in ledger.jobs.values() if _filled(job)]
    played = ({seat.account for job in filled for seat in job.seats.values()} | {job.client for job in filled}
              | {game.challenger for game in ledger.disputes.values()})
    cheaters_up = [p for p in parties if p["cheater"] and p.get("net_beyond_results_wei", p["net_wei"]) >= 0
                   and p["account"] in played]
    failures += [f"honest {p['name']} lost {-p.get('net_beyond_results_wei', p['net_wei']) / ETHER:g} ether"
                 + (" beyond the results it bought" if "paid_for_results_wei" in p else "") for p in honest_lost]
    failures += [f"cheater {p['name']} ({p['strategy']}) ended with {p['net_ether']:+g} ether" for p in cheaters_up]
    failures += [f"ledger and contract differ: {m}" for m in mismatches]
    failures += [f"job {s.index} failed: {s.error}" for s in submissions if s.error]
    kinds = [c["uncaught_reason"].split(":")[0] for c in cheats if c["uncaught_reason"]]
    summary = {
        "settlement": "2",
        "jobs": len(submissions), "jobs_settled": ledger.settled_jobs,
        "cheats": len(cheats), "cheats_caught": sum(bool(c["caught"]) for c in cheats),
        "caught_by": _count(c["forfeit"] for c in cheats if c["caught"]),
        "uncaught_reasons": {k: kinds.count(k) for k in UNCAUGHT_KINDS if kinds.count(k)},
        "honest_lost": len(honest_lost), "cheaters_not_down": len(cheaters_up),
        "cheaters_net_wei": sum(p["net_wei"] for p in parties if p["cheater"]),
        "honest_net_wei": sum(p["net_wei"] for p in parties if not p["cheater"]),
        "burned_wei": ledger.burned,
    }
    summary["ok"] = not failures
    summary["failures"] = failures
    return {"format": REPORT_FORMAT_V2, "config": config, "timings": timings, "summary": summary,
            "nodes": [asdict(n) for n in nodes], "parties": parties, "jobs": jobs, "cheats": cheats,
            "ledger_mismatches": mismatches}


def _filled(job: Any) -> bool:
    """Whether the job took every seat it wanted (else it was refunded before anyone committed)."""
    return len(job.seats) >= job.providers_wanted


def _cheater(node: NodeInfo) -> bool:
    from ..roles.v2.adversaries import HONEST_BEHAVIOURS

    return bool(node.cheat) and node.cheat not in HONEST_BEHAVIOURS


def _count(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out


def _hex(value: bytes | None) -> str | None:
    return value.hex() if value is not None else None


def summary_line_v2(summary: dict[str, Any]) -> str:
    """The one line the CLI prints."""
    uncaught = ", ".join(f"{n} {k}" for k, n in summary["uncaught_reasons"].items())
    return (f"{'HELD' if summary['ok'] else 'NOT HELD'}: {summary['jobs']} jobs, {summary['cheats']} cheats, "
            f"{summary['cheats_caught']} caught ({', '.join(f'{n} {k}' for k, n in summary['caught_by'].items()) or '-'})"
            f"{'; uncaught: ' + uncaught if uncaught else ''}; {summary['honest_lost']} honest part(ies) lost money, "
            f"cheaters net {summary['cheaters_net_wei'] / ETHER:+g} ether, {summary['cheaters_not_down']} not down")


def render_html_v2(report: dict[str, Any]) -> str:
    summary = report["summary"]
    parts = [f"<!doctype html><meta charset='utf-8'><title>gavel testnet report (settlement 2)</title>"
             f"<style>{STYLE}</style>", "<h1>gavel testnet, settlement 2</h1>",
             f"<p class='{'ok' if summary['ok'] else 'fail'}'><b>{_e(summary_line_v2(summary))}</b></p>"]
    if summary["failures"]:
        parts.append("<ul class='fail'>" + "".join(f"<li>{_e(f)}</li>" for f in summary["failures"]) + "</ul>")
    parts.append("<p><code>" + _e(report["config"].get("command", "")) + "</code></p>")
    parts.append("<h2>Who gained and who lost</h2>")
    parts.append(_table(["party", "role", "strategy", "cheater", "net ether"],
                        [[p["name"], p["role"], p["strategy"], "yes" if p["cheater"] else "", f"{p['net_ether']:+.6f}"]
                         for p in report["parties"]], left=4))
    parts.append("<h2>Cheats</h2>")
    parts.append(_table(["job", "provider", "strategy", "caught by", "why not caught"],
                        [[c["job_id"][:12], c["provider"], c["strategy"], c["forfeit"] or "", c["uncaught_reason"] or ""]
                         for c in report["cheats"]], left=5))
    parts.append("<h2>Jobs</h2>")
    parts.append(_table(["job", "client", "status", "seats (forfeit)", "demands", "games", "refunded ether"],
                        [[j["job_id"][:12], j["client"], j["status"],
                          " ".join(f"{s['provider']}({s['forfeit'] or ('paid' if s['paid'] else '-')})"
                                   for s in j["seats"]), j["demands"], j["games"], j["refunded"] / ETHER]
                         for j in report["jobs"]], left=4))
    parts.append("<h2>Configuration</h2>")
    parts.append(_table(["setting", "value"], [[k, v] for k, v in report["config"].items()]))
    return "\n".join(parts)


def write_html_v2(report: dict[str, Any], out_dir: Path) -> Path:
    path = Path(out_dir) / "report.html"
    write_atomic(path, render_html_v2(report))
    return path


__all__ = ["UNCAUGHT_KINDS", "build_report_v2", "render_html_v2", "summary_line_v2", "uncaught_reason",
           "write_html_v2"]
