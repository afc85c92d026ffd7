"""The README's "A local network of processes", followed line by line.

The commands are read from the block marked ``<!-- walkthrough:local-network -->`` and run
as written, with what a reader fills in filled in: free ports for anvil's 8545 and p1's
4001, p1's address for ``<p1 address>``, a temporary directory for the data directories.
``npm install`` is skipped (anvil must be installed already), ``npx anvil`` runs the
binary npm installed, and ``gavel`` is this Python's ``-m node``. The submit must return
with a result, in order through its phases, within a generous multiple of the time the
README promises.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import time
from pathlib import Path

import pytest

from contracts import RpcChain, find_anvil

from .test_e2e_network import ENV, GAVEL, wait_until

ANVIL = find_anvil()
if ANVIL is None and os.environ.get("GAVEL_REQUIRE_ANVIL"):
    raise RuntimeError("GAVEL_REQUIRE_ANVIL is set but anvil is not installed (run `npm install`)")
pytestmark = [pytest.mark.e2e, pytest.mark.anvil, pytest.mark.slow,
              pytest.mark.skipif(ANVIL is None, reason="anvil not installed: run `npm install` at the repository root")]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
MINUTES = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
PHASES = ("submitted", "opened", "handed", "verifying", "verified", "disputed", "settling", "settled")


def walkthrough() -> tuple[list[str], float]:
    """The section's command lines (continuations joined, comments dropped) and the seconds
    it says ``--wait`` takes ("returns after about N minutes")."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A local network of processes"):]
    section = section[:section.index("\n## ", 1)]
    block = re.search(r"<!-- walkthrough:local-network -->\s*\n```bash\n(.*?)\n```", section, re.S)
    assert block, "README.md: the local-network walkthrough lost its marked block"
    lines = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line:
            lines.append(line)
    promise = re.search(r"returns after about (\w+) minutes", section)
    assert promise, "README.md: the walkthrough says how long --wait takes"
    minutes = MINUTES.get(promise.group(1)) or float(promise.group(1))
    return lines, 60.0 * minutes


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_readme_walkthrough_settles_a_job_within_the_time_it_promises(tmp_path):
    lines, promised = walkthrough()
    chain_port, p1_port = free_port(), free_port()
    p1_address = ""
    background: list[subprocess.Popen] = []
    submitted: subprocess.CompletedProcess | None = None

    def argv(command: str) -> list[str]:
        command = command.replace("8545", str(chain_port)).replace("/tcp/4001", f"/tcp/{p1_port}")
        command = command.replace("<p1 address>", p1_address).replace("scripts/jobs/", f"{REPO}/scripts/jobs/")
        words = shlex.split(command)
        if words[:2] == ["npx", "anvil"]:
            return [ANVIL, *words[2:]]
        assert words[0] == "gavel", command
        return [*GAVEL, *words[1:]]

    try:
        for line in lines:
            if line.startswith("npm "):
                continue  # installed already
            if line.endswith("&"):
                words = argv(line[:-1])
                log = open(tmp_path / f"{len(background)}.log", "w")
                # anvil logs every call on stdout, a node its start-up line (and its log on stderr)
                stdout = log if words[0] == ANVIL else subprocess.PIPE
                proc = subprocess.Popen(words, cwd=tmp_path, stdout=stdout, stderr=log, text=True, env=ENV)
                background.append(proc)
                if words[0] == ANVIL:
                    wait_until(lambda: _answers(f"http://127.0.0.1:{chain_port}"), timeout=30, what="anvil")
                else:
                    started = json.loads(proc.stdout.readline() or "{}")
                    assert started.get("event") == "started", (tmp_path / f"{len(background) - 1}.log").read_text()
                continue
            for command in line.split("&&"):
                words = argv(command)
                if words[len(GAVEL)] == "submit":
                    begun = time.monotonic()
                    submitted = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, env=ENV,
                                               timeout=2 * promised + 120)
                    took = time.monotonic() - begun
                elif words[len(GAVEL)] == "status":
                    p1_address = _address_once_running(words, tmp_path)
                else:
                    done = subprocess.run(words, cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=60)
                    assert done.returncode == 0, done.stderr

        assert submitted is not None, "the walkthrough submits a job"
        out = submitted.stdout
        print(f"--- gavel submit, {took:.0f} s (the README promises about {promised:.0f} s)\n{out}")
        assert submitted.returncode == 0, out + submitted.stderr
        phases = re.findall(r"^job [0-9a-f]{12}…: (\w+) — ", out, re.M)
        assert [PHASES.index(p) for p in phases] == sorted(PHASES.index(p) for p in phases), phases
        assert {"handed", "verified", "settled"} <= set(phases), phases
        assert re.search(r"window closes in \d+(m\d\ds|s) \(chain time \d\d:\d\d:\d\d UTC\)", out)
        assert re.search(r"^job [0-9a-f]{12}…: \w+, .*closes in ", out, re.M), "a countdown line while it waits"
        result_dir = Path(re.search(r"^result: (\S+) \(from provider ", out, re.M).group(1))
        assert (result_dir / "weights.safetensors").exists() and (result_dir / "result.json").exists()
        assert len(re.findall(r"^provider [0-9a-f]{16} \(0x[0-9a-fA-F]{40}\): paid$", out, re.M)) == 2

        # `gavel status` of the stopped client shows its job settled; of p1, its stake on the chain.
        client = subprocess.run([*GAVEL, "status", "--data-dir", str(tmp_path / "client"), "--json"],
                                capture_output=True, text=True, env=ENV, timeout=60)
        (job,) = json.loads(client.stdout)["jobs"]
        assert job["state"] == "settled" and job["phase"] == "settled" and "FINALIZED" in job["doing"]
        provider = json.loads(subprocess.run([*GAVEL, "status", "--data-dir", str(tmp_path / "p1"), "--json"],
                                             capture_output=True, text=True, env=ENV, timeout=60).stdout)
        assert provider["state"] == "running" and provider["chain"]["stake"] > 0, provider["chain"]
    finally:
        for proc in reversed(background):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
        if submitted is None or submitted.returncode:
            for log in sorted(tmp_path.glob("*.log")):
                print(f"--- {log.name}\n{log.read_text()[-4000:]}")
            if submitted is not None:
                print(f"--- submit stderr\n{submitted.stderr[-4000:]}")


def _answers(url: str) -> bool:
    try:
        chain = RpcChain(url, timeout=2)
    except Exception:
        return False
    chain.close()
    return True


def _address_once_running(words: list[str], cwd: Path) -> str:
    """What the reader does with `gavel status`: ask again until the node runs, read its address."""
    found: list[str] = []

    def running() -> bool:
        done = subprocess.run(words, cwd=cwd, capture_output=True, text=True, env=ENV, timeout=60)
        match = re.search(r"^  addrs: (\S+)", done.stdout, re.M)
        if done.returncode == 0 and done.stdout.startswith("running") and match:
            found.append(match.group(1))
        return bool(found)

    wait_until(running, timeout=60, what="p1 running", interval=1)
    assert "/p2p/" in found[0]
    return found[0]
