"""``gavel node init``, ``gavel node start`` and ``gavel status`` as real processes."""
from __future__ import annotations

import json
import os
import selectors
import signal
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
        assert report["roles"] == "provider,auditor" and report["ping_ms"] < 5000

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
