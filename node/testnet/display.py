"""Live progress of a testnet: a rich table on a terminal, plain lines otherwise.

Everything shown comes from the contract's events (the launcher's `Ledger`) and the
launcher's own submissions, so both modes show the same thing: jobs submitted, opened
and settled; disputes open and settled; slashes; and per node its stake, lock,
earnings, jobs and state.
"""
from __future__ import annotations

import sys
import time
from decimal import Decimal
from typing import Any, TextIO

from contracts import ETHER

MAX_ROWS = 24  # nodes listed one per row; beyond that the table shows the busiest


def ether(wei: int) -> str:
    return f"{Decimal(wei) / ETHER:.2f}"


def counts(network: Any) -> dict[str, int]:
    ledger = network.ledger
    plan = network.plan
    staked = {n.name for n in plan.nodes if n.role != "client"}
    return {
        "nodes": len(plan.nodes),
        "registered": sum(1 for a in ledger.registered if network.names.get(a) in staked),
        "to_register": len(staked),
        "jobs": len(plan.jobs),
        "submitted": len(network.submissions),
        "opened": len(ledger.jobs),
        "settled": ledger.settled_jobs,
        "failed": sum(1 for s in network.submissions if s.error),
        "disputes_open": ledger.open_disputes,
        "disputes_settled": len(ledger.disputes) - ledger.open_disputes,
        "slashes": len(ledger.slashes),
    }


def status_line(network: Any) -> str:
    c = counts(network)
    return (f"[{network.now():6.1f} s] {network.phase}: nodes {c['registered']}/{c['to_register']} staked; "
            f"jobs {c['submitted']}/{c['jobs']} submitted, {c['opened']} opened, {c['settled']} settled"
            + (f", {c['failed']} failed" if c["failed"] else "")
            + f"; disputes {c['disputes_open']} open, {c['disputes_settled']} settled; slashes {c['slashes']}")


def node_rows(network: Any) -> list[tuple[str, ...]]:
    ledger = network.ledger
    accepted: dict[str, int] = {}
    committed: dict[str, int] = {}
    for job in ledger.jobs.values():
        for p in job.accepted:
            accepted[p] = accepted.get(p, 0) + 1
        for p in job.commits:
            committed[p] = committed.get(p, 0) + 1
    slashed: dict[str, int] = {}
    for s in ledger.slashes:
        slashed[s.loser] = slashed.get(s.loser, 0) + 1
    in_dispute = {a for d in ledger.disputes.values() if d.open for a in (d.challenger, d.respondent)}
    clients: dict[str, tuple[int, int]] = {}
    for sub in network.submissions:
        done, total = clients.get(sub.client, (0, 0))
        clients[sub.client] = (done + (sub.done_at is not None), total + 1)
    rows = []
    for info in network.infos.values():
        a = info.account
        book = ledger.accounts.get(a)
        if info.role == "client":
            done, total = clients.get(info.name, (0, 0))
            state = f"{done}/{total} jobs done"
            jobs = ""
        else:
            if a in in_dispute:
                state = "disputing"
            elif accepted.get(a, 0) > committed.get(a, 0):
                state = "training"
            elif a in ledger.registered:
                state = "ready"
            else:
                state = "starting"
            jobs = f"{committed.get(a, 0)}/{accepted.get(a, 0)}"
        rows.append((info.name, info.role, info.cheat or "", ether(book.stake) if book else "-",
                     ether(book.locked) if book else "-", ether(book.earned) if book else "-", jobs,
                     str(slashed.get(a, 0) or ""), state))
    return rows


class LiveDisplay:
    """``update(network)`` on every change; rendering is throttled. Use as a context manager."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None, interval: float = 0.5,
                 plain_interval: float = 5.0) -> None:
        self.stream = stream or sys.stdout
        self.live_mode = self.stream.isatty() if live is None else live
        self.interval = interval if self.live_mode else plain_interval
        self._live: Any = None
        self._last = 0.0
        self._last_line = ""

    def __enter__(self) -> "LiveDisplay":
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.stream), auto_refresh=False, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def update(self, network: Any, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        if self._live is not None:
            self._live.update(self.render(network), refresh=True)
            return
        line = status_line(network)
        if line.split("]", 1)[1] != self._last_line.split("]", 1)[-1] or force:
            print(line, file=self.stream, flush=True)
            self._last_line = line

    def render(self, network: Any) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=None, expand=False, pad_edge=False)
        for column, justify in (("node", "left"), ("role", "left"), ("cheat", "left"), ("stake", "right"),
                                ("locked", "right"), ("earned", "right"), ("jobs c/a", "right"),
                                ("slashed", "right"), ("state", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        rows = node_rows(network)
        if len(rows) > MAX_ROWS:
            busy = [r for r in rows if r[8] in ("disputing", "training") or r[7]]
            rows = (busy + [r for r in rows if r not in busy])[:MAX_ROWS]
        for row in rows:
            style = "red" if row[7] else ("yellow" if row[2] else None)
            table.add_row(*row, style=style)
        hidden = len(network.infos) - len(rows)
        caption = Text(f"... and {hidden} more nodes" if hidden > 0 else "")
        return Group(Text(status_line(network), style="bold"), table, caption)
