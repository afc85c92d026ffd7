"""``gavel submit``: the job's windows, its phases as the user sees them, ``--wait verified``,
usage errors and a chain that does not answer."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from node.roles.client_job import SubmitOptions, default_windows, estimate_step_seconds, phase_of
from protocol.settings import DEFAULT_JOB_SETTINGS, WINDOW_FLOOR, WINDOW_MARGIN

ACCEPT_WITHIN = DEFAULT_JOB_SETTINGS.accept_within
from node.roles.jobfiles import load_training
from node.cli.common import format_duration
from node.cli.submit import Progress

from .conftest import trio_test
from .test_roles_support import advance_embedded_chain, role, start_node, write_job

REPO = Path(__file__).resolve().parents[2]


# -- windows ------------------------------------------------------------------------------


def test_default_windows_follow_the_job_with_a_floor(tmp_path):
    tiny = load_training(write_job(tmp_path))
    assert default_windows(tiny) == {"accept_within": ACCEPT_WITHIN, "commit_within": WINDOW_FLOOR,
                                     "challenge_within": WINDOW_FLOOR}
    mlp = load_training(REPO / "scripts" / "jobs" / "mlp.toml")
    per_step = estimate_step_seconds(mlp.graph)
    windows = default_windows(mlp)
    assert windows["commit_within"] == windows["challenge_within"] >= WINDOW_MARGIN + mlp.spec.steps * per_step
    # The README's walkthrough promises about three minutes for this job.
    assert sum(windows.values()) <= 200
    # Ten times the steps: a longer commit window, and no floor in it.
    long = SimpleNamespace(spec=SimpleNamespace(steps=10 * mlp.spec.steps), graph=mlp.graph)
    assert default_windows(long)["commit_within"] > 5 * windows["commit_within"] - 5 * WINDOW_MARGIN


def test_a_bigger_step_costs_more():
    def graph(width: int):
        leaf = SimpleNamespace(op="leaf", shape=(64, width), inputs=(), attrs={})
        weight = SimpleNamespace(op="leaf", shape=(width, width), inputs=(), attrs={})
        product = SimpleNamespace(op="matmul", shape=(64, width), inputs=(0, 1), attrs={})
        return SimpleNamespace(nodes=[leaf, weight, product])

    assert estimate_step_seconds(graph(1024)) > 10 * estimate_step_seconds(graph(64))


# -- phases -------------------------------------------------------------------------------


def _record(reports: int = 0, seats: int = 2) -> dict:
    return {"deadlines": {"accept_by": 1000, "commit_by": 1100, "challenge_by": 1200},
            "options": {"providers": 2},
            "seats": {f"k{i}": {"report": {"x": 1} if i < reports else None} for i in range(seats)}}


def test_each_state_names_the_window_that_bounds_it():
    seen = [phase_of("submitted", _record(seats=0), 900), phase_of("opened", _record(seats=1), 950),
            phase_of("handed", _record(reports=1), 1050), phase_of("verifying", _record(reports=2), 1101),
            phase_of("verified", _record(reports=2), 1150), phase_of("verified", _record(reports=2), 1201)]
    assert [p.name for p in seen] == ["submitted", "opened", "handed", "verifying", "verified", "settling"]
    assert [(p.window, p.deadline) for p in seen] == [("accept", 1000), ("accept", 1000), ("commit", 1100),
                                                      ("challenge", 1200), ("challenge", 1200), ("", 0)]
    assert "1 of 2 taken" in seen[1].doing and "1 of 2 results in" in seen[2].doing
    disputed = phase_of("verified", _record(reports=2), 1150, disputes_running=1)
    assert disputed.name == "disputed" and "refereeing 1 dispute" in disputed.doing
    done = phase_of("settled", {**_record(reports=2), "result": {"status": "FINALIZED"}}, 1300)
    assert done.name == "settled" and "FINALIZED" in done.doing and not done.deadline


def test_durations_read_like_a_countdown():
    assert [format_duration(s) for s in (0, 9.6, 60, 100, 3725)] == ["0s", "10s", "1m00s", "1m40s", "1h02m"]


def test_a_progress_line_gives_the_deadline_in_chain_time_and_the_time_left():
    progress = Progress(chain=None, tty=False)
    progress.lead = 0.0
    now = time.time()
    cj = SimpleNamespace(job_id=bytes.fromhex("ab12" * 16))
    phase = phase_of("verified", {**_record(reports=2), "deadlines": {"challenge_by": int(now) + 100}}, now)
    line = progress.line(cj, phase)
    assert line.startswith("job ab12ab12ab12…: verified — result in hand")
    assert "challenge window closes in 1m" in line
    assert time.strftime("(chain time %H:%M:%S UTC)", time.gmtime(int(now) + 100)) in line
    assert "window closed" in progress.line(cj, phase_of("handed", _record(), now))


# -- the client role: windows on chain, phases, waiting until verified --------------------


@trio_test(timeout=240)
async def test_wait_until_verified_returns_the_checked_result_before_settlement(tmp_path):
    from contracts import JobStatus

    job_file = write_job(tmp_path)
    async with trio.open_nursery() as nursery:
        provider = await start_node(nursery, tmp_path / "provider", ["provider"])
        client = await start_node(nursery, tmp_path / "client", ["client"], bootstrap=provider.host.listen_addrs)
        client_role = await role(client, "client")
        await role(provider, "provider")
        phases: list[str] = []

        async def watch(cj) -> None:
            while True:
                name = cj.phase(time.time()).name
                if not phases or phases[-1] != name:
                    phases.append(name)
                with trio.move_on_after(0.2):
                    await cj.changed.wait()

        async with trio.open_nursery() as watchers:
            # No windows given: they come from the job, and reach the contract.
            job_id = await client_role.submit(job_file, SubmitOptions(providers=1, move_timeout=20, clock=60),
                                              on_open=lambda cj: watchers.start_soon(watch, cj))
            cj = client_role.jobs[job_id]
            summary = await client_role.wait(job_id, "verified")
            assert summary["state"] == "verified" and summary["result_dir"]
            assert (Path(summary["result_dir"]) / "weights.safetensors").exists()
            # trace.json is the client's, from the hashes it checked: the signed root's, the last the weights'.
            from repops_cupy.checkpoint import load_checkpoint
            from repops_cupy.train import Trace

            trace = Trace.load(Path(summary["result_dir"]) / "trace.json")
            assert trace.root.hex() == summary["trace_root"] and trace.losses == []
            assert bytes.fromhex(trace.checkpoints[-1]["state_hash"]) == load_checkpoint(
                Path(summary["result_dir"]) / trace.checkpoints[-1]["file"])[2]
            assert [c["step"] for c in trace.checkpoints] == [0, 2, 4, 6]
            assert cj.state == "verified" and not cj.done.is_set()  # the job goes on
            deadlines = cj.record["deadlines"]
            info = await client_role.ctx.chain.run(client_role.ctx.chain.settlement.job, job_id)
            assert (info.accept_by, info.commit_by, info.challenge_by) == (
                deadlines["accept_by"], deadlines["commit_by"], deadlines["challenge_by"])
            assert deadlines["commit_by"] - deadlines["accept_by"] == WINDOW_FLOOR
            assert deadlines["challenge_by"] - deadlines["commit_by"] == WINDOW_FLOOR
            assert cj.record["options"]["accept_within"] == ACCEPT_WITHIN
            advance_embedded_chain(300)
            result = await client_role.wait(job_id)
            assert result["status"] == JobStatus.FINALIZED.name and result["ended"] == "finalized"
            assert result["result_dir"] == summary["result_dir"]  # its root stood: the result stays
            assert json.loads((Path(result["result_dir"]) / "result.json").read_text()) == result
            await trio.sleep(0.5)
            watchers.cancel_scope.cancel()
        order = ["submitted", "opened", "handed", "verifying", "verified", "settling", "settled"]
        assert phases[0] in ("submitted", "opened") and phases[-1] == "settled"
        assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases)
        with pytest.raises(ValueError):
            await client_role.wait(job_id, "handed")
        nursery.cancel_scope.cancel()


# -- the command --------------------------------------------------------------------------


def submit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", "submit", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.e2e
@pytest.mark.parametrize("flags", [["--price", "-1"], ["--stake", "x"], ["--commit-within", "0"],
                                   ["--providers", "0"], ["--wait", "forever"]])
def test_usage_errors_exit_2_with_one_line(tmp_path, flags):
    job = write_job(tmp_path)
    done = submit(str(job), "--data-dir", str(tmp_path / "client"), *flags)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: gavel submit") and lines[1].startswith("gavel submit: error:")
    assert not (tmp_path / "client").exists()


@pytest.mark.e2e
def test_no_chain_answering_ends_a_one_shot_submit_in_seconds(tmp_path):
    with socket.socket() as probe:  # a loopback port where nothing listens
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    job = write_job(tmp_path)
    # the cause is the bound the command names; the subprocess timeout only catches a hang
    done = submit(str(job), "--data-dir", str(tmp_path / "client"), "--chain", url, "--chain-timeout", "2", "--wait",
                  timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"gavel submit: no chain answers at {url} (Connection refused)"), line


@trio_test(timeout=20)
async def test_on_a_terminal_the_countdown_is_one_line_kept_up_to_date(monkeypatch, capsys):
    class Chain:
        chain = SimpleNamespace(now=lambda: int(time.time()) + 30)  # the chain's clock runs ahead

        async def run(self, fn):
            return fn()

    now = int(time.time())
    cj = SimpleNamespace(job_id=bytes(32), state="handed", record=_record(), changed=trio.Event(), done=trio.Event())
    cj.record["deadlines"] = {"accept_by": now, "commit_by": now + 600, "challenge_by": now + 700}
    cj.phase = lambda at: phase_of(cj.state, cj.record, at)
    progress = Progress(Chain(), tty=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(progress.follow, cj)
        await trio.sleep(2.5)
        cj.state = "verified"
        await trio.sleep(1.5)
        nursery.cancel_scope.cancel()
    progress.clear()
    out = capsys.readouterr().out
    assert 29 <= progress.lead <= 31
    lines = out.split("\n")
    assert lines[0].startswith("job 000000000000…: handed — ")
    left = re.search(r"commit window closes in 9m(\d\d)s", lines[0])
    assert left and 25 <= int(left.group(1)) <= 31, lines[0]  # 10 minutes, less the chain's lead
    assert out.count("\r\x1b[K") >= 3  # the status line, rewritten every second
    assert "job 000000000000…: verified — " in out and out.endswith("\r\x1b[K")


def test_with_wait_verified_the_json_stays_the_last_line(capsys):
    from node.cli.submit import _print_result

    result = {"job": "ab" * 32, "state": "verified", "result_dir": "/r", "result_from": "cd" * 32,
              "trace_root": "ef" * 32, "providers": {}, "verdicts": []}
    assert _print_result(result, True, note="the job is not settled: ...") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"job {'ab' * 32}: verified" and lines[-2].startswith("the job is not settled")
    assert json.loads(lines[-1]) == result


@pytest.mark.e2e
@pytest.mark.slow
def test_an_interrupted_submit_exits_130_and_says_how_to_follow_its_job(tmp_path):
    import signal

    job = write_job(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "node", "submit", str(job), "--data-dir", str(tmp_path / "client"),
                             "--chain", "embedded", "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        seen = []
        while not any(": opened — waiting for providers" in line for line in seen):  # nobody will take it
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            seen.append(line)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "accept window closes in " in "".join(seen)
    (line,) = err.strip().splitlines()
    assert line.startswith("gavel submit: interrupted; job ") and " stays open on chain (opened); to follow it: " \
        f"gavel node start --data-dir {tmp_path / 'client'} --role client --chain embedded" in line
