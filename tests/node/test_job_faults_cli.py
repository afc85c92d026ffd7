"""Issue 21: how a job ends, as ``gavel submit --wait`` tells it (its output, result.json, its
exit status), with the command's own code in this process's main thread and the other
nodes on a trio loop of their own thread, all on the one embedded chain of the process."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Awaitable, Callable

import pytest
import trio

from contracts import JobStatus
from node.cli.submit import EXIT_REFUNDED, EXIT_UNFILLED, submit_main
from node.roles.context import context_of

from .test_roles_support import advance_embedded_chain, role, start_node, write_job

Tick = Callable[[dict], Awaitable[None]]


class Background:
    """Nodes run on their own thread's trio loop while the test's main thread runs a command;
    ``tick(nodes)`` is awaited on that loop every 0.2 s (to move the chain's clock, say)."""

    def __init__(self, tmp_path: Path, nodes: dict[str, tuple[list[str], dict]], tick: Tick | None = None) -> None:
        self.tmp_path, self.specs, self.tick = tmp_path, nodes, tick
        self.nodes: dict = {}
        self.ready, self.stop = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Background":
        self.thread.start()
        assert self.ready.wait(120), f"the background nodes did not start: {self.error!r}"
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        self.thread.join(60)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # reported by __enter__ or the test's asserts
            self.error = error
            self.ready.set()

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            hub: list[str] = []
            for name, (roles, settings) in self.specs.items():
                node = await start_node(nursery, self.tmp_path / name, roles, bootstrap=hub, **settings)
                self.nodes[name] = node
                hub = hub or node.host.listen_addrs
            for name, (roles, _) in self.specs.items():
                for r in roles:
                    await role(self.nodes[name], r)
            self.ready.set()
            while not self.stop.is_set():
                if self.tick is not None:
                    await self.tick(self.nodes)
                await trio.sleep(0.2)
            nursery.cancel_scope.cancel()


def addr(node) -> str:
    return node.host.listen_addrs[0]


def submit_flags(tmp_path: Path, *extra: str) -> list[str]:
    return [str(write_job(tmp_path)), "--data-dir", str(tmp_path / "client"), "--chain", "embedded",
            "--json", *extra]


@pytest.mark.slow
def test_a_cheaters_result_is_not_handed_over_and_the_exit_status_says_refunded(tmp_path, capsys):
    moved = []

    async def close_windows_once_the_cheater_is_slashed(nodes: dict) -> None:
        # The cheater's seat slashed on chain (the auditor's dispute, refereed by the
        # client): nothing is left to wait for but the challenge window; close it.
        cheater = nodes["cheater"]
        if moved or not (jobs := cheater.storage.jobs(role="provider")):
            return
        chain = context_of(cheater).chain
        seat = await chain.run(chain.settlement.seat, jobs[0].job_id, chain.account)
        if seat.forfeited:
            moved.append(jobs[0].job_id)
            advance_embedded_chain(600)

    specs = {"auditor": (["auditor"], {}), "cheater": (["provider"], {"cheat": "perturb-weight"})}
    with Background(tmp_path, specs, close_windows_once_the_cheater_is_slashed) as background:
        code = submit_main(submit_flags(
            tmp_path, "--bootstrap", addr(background.nodes["auditor"]), "--provider", addr(background.nodes["cheater"]),
            "--accept-within", "30", "--commit-within", "60", "--challenge-within", "90", "--move-timeout", "20",
            "--clock", "60", "--wait"))
    out = capsys.readouterr().out
    assert background.error is None, background.error
    result = json.loads(out.strip().splitlines()[-1])
    assert moved == [bytes.fromhex(result["job"])]  # the cheater was slashed before the job ended
    assert code == EXIT_REFUNDED, out
    assert result["status"] == "REFUNDED" and result["ended"] == "refunded"
    assert "result_dir" not in result and "\nresult:" not in out and "no result: the job was refunded" in out
    (cheater,) = result["providers"].values()
    assert cheater["outcome"] == "slashed"
    # The client had fetched the cheater's weights before the auditor's dispute: withdrawn.
    results = tmp_path / "client" / "results" / result["job"]
    assert result["result_dropped"]["why"] == "the job was refunded on chain"
    assert not (results / "weights.safetensors").exists() and not (results / "trace.json").exists()
    assert json.loads((results / "result.json").read_text()) == result


@pytest.mark.slow
def test_an_unfilled_submit_exits_only_once_the_job_is_refunded_with_its_own_status(tmp_path, capsys):
    with Background(tmp_path, {"provider": (["provider"], {})}) as background:
        code = submit_main(submit_flags(tmp_path, "--provider", addr(background.nodes["provider"]), "--providers", "2",
                                        "--accept-within", "15"))
        provider = background.nodes["provider"]
    out = capsys.readouterr().out
    assert background.error is None, background.error
    result = json.loads(out.strip().splitlines()[-1])
    assert code == EXIT_UNFILLED, out
    # Read by the command on chain before it exited: refunded, not left open.
    assert result["status"] == "REFUNDED" and result["ended"] == "unfilled"
    assert "result_dir" not in result and "no result: too few providers took a seat" in out
    chain = context_of(provider).chain  # its loop is over: nobody else uses the chain now
    assert chain.settlement.job(bytes.fromhex(result["job"])).status == JobStatus.REFUNDED
    assert chain.settlement.node(chain.account).locked == 0  # the accepting provider's stake is free again
