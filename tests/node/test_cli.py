"""``gavel node init``, ``gavel node start`` and ``gavel status`` as real processes."""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

pytestmark = pytest.mark.e2e


def gavel(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *args], capture_output=True, text=True, timeout=timeout)


def start(data_dir, *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "node", "node", "start", "--data-dir", str(data_dir), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=30):
            proc.kill()
            raise AssertionError(f"node did not start: {proc.stderr.read() if proc.poll() is not None else ''}")
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=10)
        raise AssertionError(f"node exited: {proc.stderr.read()}")
    event = json.loads(line)
    assert event["event"] == "started"
    return proc, event


def test_init_start_status_and_clean_shutdown(tmp_path):
    data_dir = tmp_path / "node"
    missing = gavel("status", "--data-dir", str(data_dir))
    assert missing.returncode == 1 and f"run: gavel node init --data-dir {data_dir}" in missing.stderr

    init = gavel("node", "init", "--data-dir", str(data_dir))
    assert init.returncode == 0, init.stderr
    peer_id = init.stdout.split("peer id: ")[1].split()[0]
    assert gavel("status", "--data-dir", str(data_dir)).returncode == 3

    proc, started = start(data_dir, "--role", "provider", "--role", "auditor", "--chain", "embedded")
    try:
        assert started["peer_id"] == peer_id
        api = json.loads((data_dir / "api").read_text())
        assert api["pid"] == proc.pid and api["roles"] == ["provider", "auditor"]

        status = gavel("status", "--data-dir", str(data_dir), "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["state"] == "running" and report["peer_id"] == peer_id
        assert report["roles"] == "provider,auditor" and isinstance(report["ping_ms"], float) and report["ping_ms"] > 0

        with urllib.request.urlopen(api["metrics"], timeout=5) as response:
            text = response.read().decode()
        assert "gavel_peers_connected" in text and "gavel_stream_bytes_in_total" in text

        second = gavel("node", "start", "--data-dir", str(data_dir))
        assert second.returncode == 1 and "in use by another gavel node" in second.stderr

        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == {"event": "stopped"}
        assert not (data_dir / "api").exists()
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_kill_9_leaves_a_stale_api_file_that_status_clears(tmp_path):
    data_dir = tmp_path / "node"
    assert gavel("node", "init", "--data-dir", str(data_dir)).returncode == 0
    proc, _ = start(data_dir)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (data_dir / "api").exists()
    status = gavel("status", "--data-dir", str(data_dir))
    assert status.returncode == 3 and "not running" in status.stdout and "stale api file" in status.stdout
    assert not (data_dir / "api").exists() and not (data_dir / "repo.lock").exists()
    # And the directory can be started again.
    proc, _ = start(data_dir)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 0


def _stored_client_job(data_dir, *, state: str, deadline_in: float) -> bytes:
    """A client's job row (and one dispute it referees), as the client role writes them."""
    import time

    from node.framing import pack
    from node.storage import Dispute, Job, Storage

    job_id = bytes(range(32))
    now = int(time.time())
    record = {"deadlines": {"accept_by": now - 100, "commit_by": now - 50, "challenge_by": now + int(deadline_in)},
              "options": {"providers": 1}, "seats": {"ab" * 32: {"report": {"x": 1}}}, "verdicts": [],
              "result_dir": str(data_dir / "results" / job_id.hex())}
    with Storage(data_dir / "gavel.db") as db:
        db.put_job(Job(job_id, pack(record), "client", state))
        db.put_dispute(Dispute(b"\x07" * 32, job_id, pack({"kind": "referee", "seq": 1}), "refereeing"))
    return job_id


def test_status_shows_jobs_disputes_and_the_chain_account_of_a_stopped_node(tmp_path):
    data_dir = tmp_path / "client"
    with socket.socket() as probe:  # a chain URL where nothing listens
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    assert gavel("node", "init", "--data-dir", str(data_dir), "--chain", url).returncode == 0
    job_id = _stored_client_job(data_dir, state="verified", deadline_in=100)

    status = gavel("status", "--data-dir", str(data_dir), "--json", "--timeout", "1")
    assert status.returncode == 3, status.stderr
    report = json.loads(status.stdout)
    assert report["state"] == "not running"
    (job,) = report["jobs"]
    assert job["job"] == job_id.hex() and job["role"] == "client" and job["state"] == "verified"
    assert job["phase"] == "disputed" and job["window"] == "challenge" and job["deadline"] > 0
    assert job["result_dir"].endswith(job_id.hex())
    (dispute,) = report["disputes"]
    assert dispute == {"dispute": "07" * 32, "job": job_id.hex(), "as": "referee", "status": "refereeing",
                       "updated": dispute["updated"]}
    chain = report["chain"]
    assert chain["url"] == url and chain["account"].startswith("0x") and "Connection refused" in chain["error"]

    text = gavel("status", "--data-dir", str(data_dir), "--timeout", "1")
    assert text.returncode == 3
    assert f"jobs: 1\n  {job_id.hex()[:12]}  client   verified" in text.stdout
    assert "refereeing 1 dispute(s)" in text.stdout and "challenge window closes in 1m" in text.stdout
    assert f"disputes: 1\n  {'07' * 6}  job {job_id.hex()[:12]}  as referee" in text.stdout
    assert f"chain: {url}, account 0x" in text.stdout and "not read: " in text.stdout


def test_status_of_a_fresh_node_lists_no_job(tmp_path):
    data_dir = tmp_path / "node"
    assert gavel("node", "init", "--data-dir", str(data_dir)).returncode == 0
    report = json.loads(gavel("status", "--data-dir", str(data_dir), "--json").stdout)
    assert report["jobs"] == [] and report["disputes"] == []
    assert report["chain"] == {"url": "embedded", "error": "the embedded chain lives in the node's own process"}
