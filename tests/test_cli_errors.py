"""Bad input to `gavel`: one line on stderr, a non-zero status, never a traceback (issue 14).

Every case runs the real command in a child process (``python -m node ...``) and checks
its exit status, the message on stderr and that no traceback got out. A usage error
(status 2 from argparse) is the command's one-line usage and then the error; every other
error is one line. The trained runs the checkpoint cases damage are copies of one short
run of scripts/jobs/mlp.toml.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "scripts" / "jobs" / "mlp.toml"
STEPS, INTERVAL = 40, 20  # the shared run: checkpoints at steps 0, 20, 40
SAFETY = 300  # seconds: only a hung command waits this long


def gavel(*args: object, timeout: float = SAFETY, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, **kwargs)


def assert_error(proc: subprocess.CompletedProcess, status: int, fragment: str, *, usage: bool = False) -> str:
    """`proc` exited with `status`, saying `fragment` on its one line of stderr (after the usage line for a usage
    error), without a traceback; returns that line."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    if usage:
        assert len(lines) == 2 and lines[0].startswith("usage: gavel"), proc.stderr
    else:
        assert len(lines) == 1, proc.stderr
    assert fragment in lines[-1], proc.stderr
    return lines[-1]


def mlp_text(**job: object) -> str:
    """scripts/jobs/mlp.toml with some [job] keys changed (or added)."""
    lines = MLP.read_text().splitlines()
    start = lines.index("[job]") + 1
    for key, value in job.items():
        text = f"{key} = {json.dumps(value)}"
        at = next((i for i in range(start, len(lines)) if lines[i].split("=")[0].strip() == key), None)
        if at is None:
            lines.insert(start, text)
        else:
            lines[at] = text
    return "\n".join(lines) + "\n"


def set_sigint_default() -> None:
    """A child started from a shell's background job inherits an ignored SIGINT; Ctrl-C must reach it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# --- job files ------------------------------------------------------------------------------------

BAD_JOBS = {
    # name: (file contents, or None for no file; a directory for "dir"), message
    "missing": (None, "no such job file"),
    "malformed": ("[job\nname = 'x'\n", "not valid TOML"),
    "wrong-type": (mlp_text(steps="many"), "job.steps: must be an integer, got 'many'"),
    "unknown-key": (mlp_text(colour="blue"), "job.colour: unknown field"),
    "directory": ("dir", "Is a directory"),
    "binary": (b"\xff\xfe[job]\n", "not a text (UTF-8) file"),
}


def bad_job(tmp_path: Path, case: str) -> Path:
    contents, _ = BAD_JOBS[case]
    path = tmp_path / f"{case}.toml"
    if contents == "dir":
        path.mkdir()
    elif isinstance(contents, bytes):
        path.write_bytes(contents)
    elif contents is not None:
        path.write_text(contents)
    return path


@pytest.mark.parametrize("case", list(BAD_JOBS))
def test_train_refuses_a_bad_job_file(tmp_path, case):
    proc = gavel("train", bad_job(tmp_path, case), "--out", tmp_path / "run")
    assert_error(proc, 2, BAD_JOBS[case][1])
    assert not (tmp_path / "run").exists()  # nothing made for a job that cannot run


@pytest.mark.parametrize("case", ["missing", "wrong-type", "directory"])
def test_replay_refuses_a_bad_job_file(tmp_path, case):
    proc = gavel("replay", bad_job(tmp_path, case), "--from", tmp_path, "--checkpoint", 0)
    assert_error(proc, 2, BAD_JOBS[case][1])


@pytest.mark.parametrize("case", ["missing", "unknown-key", "binary"])
def test_dispute_sim_refuses_a_bad_job_file(tmp_path, case):
    proc = gavel("dispute-sim", bad_job(tmp_path, case), "--cheat", "stall")
    assert_error(proc, 2, BAD_JOBS[case][1])


def test_a_bad_option_value_is_a_usage_error(tmp_path):
    assert_error(gavel("train", MLP, "--out", tmp_path / "run", "--steps", "x"), 2,
                 "argument --steps: invalid int value: 'x'", usage=True)
    assert_error(gavel("train", MLP, "--out", tmp_path / "run", "--steps", 0), 2, "job.steps: must be a positive integer")
    assert_error(gavel("train", MLP), 2, "the following arguments are required: --out", usage=True)
    assert_error(gavel("dispute-sim", MLP, "--cheat", "bribe-the-referee"), 2, "argument --cheat: invalid choice",
                 usage=True)
    assert_error(gavel("selfcheck", "--jobs", "x"), 2, "argument --jobs: invalid int value: 'x'", usage=True)


# --- gavel train --out -------------------------------------------------------------------------------


def test_train_out_naming_a_file(tmp_path):
    (tmp_path / "afile").write_text("not a directory\n")
    assert_error(gavel("train", MLP, "--out", tmp_path / "afile", "--steps", 2), 2,
                 f"--out {tmp_path / 'afile'} is a file, not a directory")
    assert_error(gavel("train", MLP, "--out", tmp_path / "afile" / "run", "--steps", 2), 2,
                 "cannot create the directory (Not a directory)")
    # a rounding-log job goes its own way, past the same check
    roundlog = ROOT / "scripts" / "jobs" / "cnn-roundlog.toml"
    assert_error(gavel("train", roundlog, "--out", tmp_path / "afile", "--steps", 1), 2, "is a file, not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_train_out_in_a_read_only_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert_error(gavel("train", MLP, "--out", locked / "run", "--steps", 2), 2,
                 "cannot create the directory (Permission denied)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One finished run of mlp.toml: --steps 40, checkpoints at steps 0, 20 and 40."""
    out = tmp_path_factory.mktemp("trained") / "run"
    proc = gavel("train", MLP, "--out", out, "--steps", STEPS)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def checkpoint(run: Path, step: int) -> Path:
    return run / f"step-{step:08d}.safetensors"


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 1  # in the last tensor's bytes: the file still parses, its hash no longer matches
    path.write_bytes(bytes(data))


def test_train_into_a_finished_run_without_resume(run_copy):
    assert_error(gavel("train", MLP, "--out", run_copy, "--steps", STEPS), 2,
                 f"{run_copy} already holds a trace: pass --resume to continue it")


@pytest.mark.parametrize("damage, message", [
    (lambda run: truncate(checkpoint(run, STEPS)), "not a readable safetensors file"),
    (lambda run: flip_a_bit(checkpoint(run, STEPS)), "tensors hash to"),
    (lambda run: (run / "trace.json").write_text('{"format": 3'), "cannot read the trace"),
], ids=["truncated-checkpoint", "corrupted-checkpoint", "corrupted-trace"])
def test_train_resume_from_a_damaged_run(run_copy, damage, message):
    damage(run_copy)
    assert_error(gavel("train", MLP, "--out", run_copy, "--steps", STEPS + INTERVAL, "--resume"), 1, message)


def test_train_resume_with_another_job(run_copy, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(mlp_text(seed=8))
    assert_error(gavel("train", other, "--out", run_copy, "--steps", STEPS, "--resume"), 1, "holds a different job")


# --- gavel replay --------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage, start, message", [
    (lambda run: truncate(checkpoint(run, INTERVAL)), 1, "not a readable safetensors file"),
    (lambda run: flip_a_bit(checkpoint(run, INTERVAL)), 1, "tensors hash to"),
    (lambda run: (run / "trace.json").write_text("{}"), 0, "not a gavel-trace/1 file"),
    (lambda run: (run / "trace.json").unlink(), 0, "cannot read the trace"),
], ids=["truncated-checkpoint", "corrupted-checkpoint", "wrong-trace", "no-trace"])
def test_replay_of_a_damaged_run(run_copy, damage, start, message):
    damage(run_copy)
    assert_error(gavel("replay", MLP, "--from", run_copy, "--checkpoint", start), 1, message)


def test_replay_usage_errors(trained, tmp_path):
    assert_error(gavel("replay", MLP, "--from", tmp_path / "nothing", "--checkpoint", 0), 2,
                 f"--from {tmp_path / 'nothing'}: no such directory")
    assert_error(gavel("replay", MLP, "--from", trained, "--checkpoint", 9), 2,
                 "--checkpoint must lie in [0, 1] for this trace, got 9")


# --- Ctrl-C and a closed pipe ----------------------------------------------------------------------------


def saved_steps(run: Path) -> list[int]:
    try:
        return [c["step"] for c in json.loads((run / "trace.json").read_text())["checkpoints"]]
    except (OSError, ValueError):
        return []


@pytest.mark.slow
def test_ctrl_c_in_train_says_how_to_resume_and_the_resumed_run_completes(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "node", "train", str(MLP), "--out", str(out), "--steps", "1000000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=set_sigint_default)
    try:
        assert proc.stdout.readline().startswith("job mlp:")
        for _ in range(SAFETY * 20):  # until the checkpoint after step 0 is in the trace
            if len(saved_steps(out)) >= 2 or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(saved_steps(out)) >= 2, f"exited with {proc.poll()}, or hung"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=SAFETY)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    said = [line for line in err.splitlines() if "interrupted" in line]
    assert len(said) == 1 and said[0] == err.strip().splitlines()[-1], err
    saved = saved_steps(out)[-1]
    assert said[0] == (f"gavel train: interrupted; checkpoints up to step {saved} are kept; "
                       f"resume with: gavel train {MLP} --out {out} --steps 1000000 --resume")

    # resume (to a total two intervals past the last checkpoint): it continues, and ends where a run
    # never interrupted ends
    first = checkpoint(out, 0).stat().st_ino
    total = saved + 2 * INTERVAL
    resumed = gavel("train", MLP, "--out", out, "--steps", total, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert checkpoint(out, 0).stat().st_ino == first  # not started over
    fresh = gavel("train", MLP, "--out", tmp_path / "fresh", "--steps", total)
    assert fresh.returncode == 0, fresh.stderr
    assert resumed.stdout.strip().splitlines()[-1] == fresh.stdout.strip().splitlines()[-1]
    assert saved_steps(out) == saved_steps(tmp_path / "fresh")


def test_a_reader_that_goes_away_is_no_traceback(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "node", "train", str(MLP), "--out", str(tmp_path / "run"),
                             "--steps", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    proc.stdout.readline()
    proc.stdout.close()  # as `gavel train ... | head -1` does
    err = proc.stderr.read()
    proc.wait(timeout=SAFETY)
    assert "Traceback" not in err and proc.returncode in (0, 141), err


# --- gavel node ------------------------------------------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path) -> Path:
    path = tmp_path / "node"
    assert gavel("node", "init", "--data-dir", path).returncode == 0
    return path


PEER = "12D3KooWPiMDC5HMKRJCMv7RZiTuHQQZBMMCBqvMBbXu9P1n7jGc"


@pytest.mark.parametrize("command", ["init", "start"])
@pytest.mark.parametrize("flag, value, message", [
    ("--bootstrap", "garbage", "--bootstrap: 'garbage' is not a multiaddr"),
    ("--bootstrap", "/ip4/127.0.0.1/tcp/4001", "--bootstrap: '/ip4/127.0.0.1/tcp/4001' does not end in /p2p/<peer id>"),
    ("--bootstrap", "/ip4/127.0.0.1/tcp/4001/p2p/xyz", "--bootstrap: '/ip4/127.0.0.1/tcp/4001/p2p/xyz' is not a multiaddr"),
    ("--listen", "garbage", "--listen: 'garbage' is not a multiaddr"),
], ids=["garbage", "no-peer-id", "bad-peer-id", "listen"])
def test_node_garbage_addresses(tmp_path, command, flag, value, message):
    path = tmp_path / "node"
    if command == "start":
        assert gavel("node", "init", "--data-dir", path).returncode == 0
    assert_error(gavel("node", command, "--data-dir", path, flag, value), 2, message, usage=True)
    if command == "init":
        assert not path.exists()


def test_node_start_with_a_garbage_address_in_its_config(data_dir):
    config = data_dir / "config.toml"
    config.write_text("\n".join('listen = "garbage"' if line.startswith("listen") else line
                                for line in config.read_text().splitlines()) + "\n")
    assert_error(gavel("node", "start", "--data-dir", data_dir), 1, "config.toml: listen: 'garbage' is not a multiaddr")


def test_node_start_on_an_uninitialised_data_dir(tmp_path):
    assert_error(gavel("node", "start", "--data-dir", tmp_path / "none"), 1,
                 f"run: gavel node init --data-dir {tmp_path / 'none'}")


def test_node_init_twice_and_on_a_file(data_dir, tmp_path):
    assert_error(gavel("node", "init", "--data-dir", data_dir), 1, "is already initialised")
    (tmp_path / "afile").write_text("")
    assert_error(gavel("node", "init", "--data-dir", tmp_path / "afile"), 1, f"{tmp_path / 'afile'}: File exists")


def test_node_start_on_a_busy_data_dir(data_dir):
    from node.datadir import DataDirLock, open_datadir

    with DataDirLock(open_datadir(data_dir)):  # what a running node holds
        assert_error(gavel("node", "start", "--data-dir", data_dir), 1, "is in use by another gavel node")


def test_node_start_on_a_port_in_use(data_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert_error(gavel("node", "start", "--data-dir", data_dir, "--listen", f"/ip4/127.0.0.1/tcp/{port}"), 1,
                     f"cannot listen on /ip4/127.0.0.1/tcp/{port}: Address already in use")


# --- gavel testnet, gavel submit -------------------------------------------------------------------------


def test_testnet_out_not_empty_or_a_file(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    assert_error(gavel("testnet", "--out", tmp_path), 2,
                 f"--out {tmp_path} is not empty and holds no earlier testnet: choose another --out", usage=True)
    assert_error(gavel("testnet", "--out", tmp_path / "notes.txt"), 2, "is a file, not a directory", usage=True)


@pytest.mark.parametrize("price, message", [
    ("-1", "--price: '-1' is not a non-negative amount of ether"),
    ("0", "--price and --stake must be positive"),
    ("abc", "--price: 'abc' is not an amount of ether"),
])
def test_submit_price_must_be_a_positive_amount(tmp_path, price, message):
    proc = gavel("submit", MLP, "--data-dir", tmp_path / "client", "--price", price)
    assert_error(proc, 2, message, usage=True)
    assert not (tmp_path / "client").exists()
