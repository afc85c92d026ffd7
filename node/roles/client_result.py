"""A client's result: only what checks is handed over.

What the client hands its user (``result_dir`` in the job's record, then in
``result.json`` and on ``gavel submit``'s ``result:`` line) is only ever the final
weights of a provider

- whose trace report hashes to the root it signed and committed on chain (checked when
  the report came, `ClientRole._take_report`, and again here against the seat on chain),
- whose first checkpoint is the terms' initial state and whose last is the state hash of
  the weights received (checked here, on the bytes),
- and, once the job is over on chain, whose root stood: the job FINALIZED and the seat
  committed and never slashed. A result whose root fell is removed (and one that stood
  fetched instead); a refunded job has none.

``trace.json`` is written from the checked state hashes (`jobfiles.verified_trace`),
never copied from the provider; ``job.toml`` is the client's own job file.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import trio
from libp2p.peer.id import ID

from ..errors import LocalError, PeerError, is_transient
from .client_job import ENDED_FINALIZED, ENDED_REFUNDED, ENDED_UNFILLED
from .jobfiles import JOB_FILE, job_dir, verified_trace
from .job_protocols import TraceReport

log = logging.getLogger(__name__)

WEIGHTS_FILE, TRACE_FILE, JOB_COPY, SUMMARY_FILE = "weights.safetensors", "trace.json", "job.toml", "result.json"
RESULT_FILES = (WEIGHTS_FILE, TRACE_FILE, JOB_COPY)
# A result fetch cut off by the network is tried again (after 2, 4, 8 s); a wrong result is not.
RESULT_ATTEMPTS = 4
RESULT_RETRY_DELAY = 2.0
RESULT_KEYS = ("result_from", "result_dir", "trace_root")


def result_dir(ctx: Any, cj: Any) -> Path:
    return Path(cj.record["options"].get("out") or ctx.config.data_dir / "results" / cj.job_id.hex())


def signed_root(report: TraceReport) -> bytes:
    from protocol import decode_envelope

    return decode_envelope(report.commitment).body.root.root


async def standing_reports(ctx: Any, cj: Any) -> dict[str, TraceReport]:
    """The reports of seats whose signed root is the one committed on chain and not slashed (yet)."""
    chain = ctx.chain
    out = {}
    for key, seat in cj.record["seats"].items():
        if seat.get("report") is None:
            continue
        report = TraceReport.from_wire(seat["report"], None)
        info = await chain.run(chain.settlement.seat, cj.job_id, seat["account"])
        if info.committed and not info.forfeited and info.trace_root == signed_root(report):
            out[key] = report
    return out


async def fetch_result(ctx: Any, cj: Any, candidates: dict[str, TraceReport]) -> bool:
    """Fetch, check and write the final weights of one of ``candidates``; True when one checked."""
    from repops_cupy.checkpoint import CheckpointError, load_checkpoint

    out = result_dir(ctx, cj)
    initial = cj.terms.terms.initial_state
    candidates = {k: r for k, r in candidates.items() if r.trace and r.trace[0] == initial}
    for attempt in range(RESULT_ATTEMPTS):
        if attempt:
            await trio.sleep(RESULT_RETRY_DELAY * 2 ** (attempt - 1))
        for key, report in list(candidates.items()):
            seat = cj.record["seats"][key]
            peer = ID.from_base58(seat["peer"])
            try:
                await ctx.reach(peer, seat["addrs"])
                weights = await ctx.blobs.fetch(peer, report.checkpoints[-1])
                _, _, digest = await trio.to_thread.run_sync(load_checkpoint, weights)
            except (PeerError, LocalError, CheckpointError) as error:
                log.info("job %s: fetching the result from %s: %s", cj.job_id.hex()[:12], key[:8], error)
                if not is_transient(error):
                    del candidates[key]
                continue
            if digest != report.trace[-1]:
                log.warning("job %s: %s's final weights are not its committed final state", cj.job_id.hex()[:12], key[:8])
                del candidates[key]
                continue
            trace_text = verified_trace(cj.training, report.trace, WEIGHTS_FILE)
            await trio.to_thread.run_sync(_write_result, out, weights, trace_text,
                                          job_dir(ctx.config.data_dir, cj.job_id) / JOB_FILE)
            cj.record.update(result_from=key, result_dir=str(out), trace_root=signed_root(report).hex())
            log.info("job %s: result from %s checked against its commitment, in %s", cj.job_id.hex()[:12], key[:8], out)
            return True
        if not candidates:
            break
    log.warning("job %s: no provider delivered a result that checks", cj.job_id.hex()[:12])
    return False


async def settle_result(ctx: Any, cj: Any, finalized: bool) -> None:
    """Once the job is over on chain: keep the result only if its root stood; else drop it
    and, in a finalized job, fetch one whose root did."""
    held = cj.record.get("result_from")
    standing = await standing_reports(ctx, cj) if finalized else {}
    if held is not None and held in standing and cj.record.get("trace_root") == signed_root(standing[held]).hex():
        return
    if held is not None:
        why = "its root did not stand on chain" if finalized else "the job was refunded on chain"
        await trio.to_thread.run_sync(_remove_result, Path(cj.record["result_dir"]))
        for name in RESULT_KEYS:
            cj.record.pop(name, None)
        cj.record["result_dropped"] = {"from": held, "why": why}
        log.warning("job %s: the result from %s is withdrawn: %s", cj.job_id.hex()[:12], held[:8], why)
    if standing:
        await fetch_result(ctx, cj, standing)


async def job_summary(ctx: Any, cj: Any, info: Any) -> dict:
    """The summary of a job over on chain (``info``, its final status): how it ended, each
    provider's outcome from its seat, the verdicts, and the result only if it stood."""
    from contracts import JobStatus

    chain = ctx.chain
    providers = {}
    for key, seat in cj.record["seats"].items():
        on_chain = await chain.run(chain.settlement.seat, cj.job_id, seat["account"])
        providers[key] = {
            "peer": seat["peer"], "account": seat["account"],
            "trace_root": on_chain.trace_root.hex() if on_chain.committed else None,
            "outcome": "slashed" if on_chain.forfeited else ("paid" if on_chain.committed else "no result"),
        }
    unfilled = info.providers_accepted < info.providers_wanted  # the chain's word: our row may be older
    how = ENDED_FINALIZED if info.status == JobStatus.FINALIZED else ENDED_UNFILLED if unfilled else ENDED_REFUNDED
    summary = {"job": cj.job_id.hex(), "status": info.status.name, "ended": how, "providers": providers,
               "verdicts": cj.record["verdicts"]}
    if cj.record.get("result_dir"):  # only a result whose root stood (settle_result)
        summary.update({k: cj.record[k] for k in RESULT_KEYS})
    if cj.record.get("result_dropped"):
        summary["result_dropped"] = cj.record["result_dropped"]
    return summary


async def write_summary(ctx: Any, cj: Any, summary: dict) -> None:
    out = result_dir(ctx, cj)

    def write() -> None:
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / f".{SUMMARY_FILE}.tmp"
        tmp.write_text(json.dumps(summary, indent=1) + "\n")
        os.replace(tmp, out / SUMMARY_FILE)

    await trio.to_thread.run_sync(write)


def _write_result(out: Path, weights: Path, trace_text: str, job_file: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in RESULT_FILES:
        tmp = out / f".{name}.tmp"
        if name == TRACE_FILE:
            tmp.write_text(trace_text)
        else:
            shutil.copyfile(weights if name == WEIGHTS_FILE else job_file, tmp)
        os.replace(tmp, out / name)


def _remove_result(out: Path) -> None:
    for name in RESULT_FILES:
        (out / name).unlink(missing_ok=True)


__all__ = ["fetch_result", "job_summary", "result_dir", "settle_result", "standing_reports", "write_summary"]
