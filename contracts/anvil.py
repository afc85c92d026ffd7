"""A local anvil chain as a child process: found under node_modules, started on a free loopback
port, stopped by its PID.

    with AnvilProcess() as anvil:               # or AnvilProcess(state_file="chain.json")
        chain = RpcChain(anvil.url)

Install once with ``npm ci`` at the repository root (package.json pins ``@foundry-rs/anvil``;
its platform package carries the prebuilt binary, which runs offline). ``GAVEL_ANVIL`` may
name another binary. With ``state_file`` anvil loads the file at start and writes the chain
state back on exit, which is how a multi-process network keeps its chain across restarts.
"""

from __future__ import annotations

import os
import platform
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import requests

from .errors import ChainError

_REPO_ROOT = Path(__file__).resolve().parent.parent
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_OS = {"Linux": "linux", "Darwin": "darwin", "Windows": "win32"}


def find_anvil() -> str | None:
    """Path of the anvil binary: $GAVEL_ANVIL, the npm platform package, or anvil on PATH."""
    named = os.environ.get("GAVEL_ANVIL")
    if named:
        return named if Path(named).is_file() else None
    system, arch = _OS.get(platform.system()), _ARCH.get(platform.machine().lower())
    if system and arch:
        exe = "anvil.exe" if system == "win32" else "anvil"
        for root in (_REPO_ROOT, Path.cwd()):
            candidate = root / "node_modules" / "@foundry-rs" / f"anvil-{system}-{arch}" / "bin" / exe
            if candidate.is_file():
                return str(candidate)
    return shutil.which("anvil")


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class AnvilProcess:
    """One anvil child process on 127.0.0.1; ``stop()`` (or leaving the ``with``) ends it by PID."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        state_file: str | os.PathLike[str] | None = None,
        chain_id: int = 31337,
        start_timeout: float = 15.0,
        port: int | None = None,
        block_time: int | None = None,
    ):
        self.binary = binary or find_anvil()
        if self.binary is None:
            raise ChainError("anvil not found: run `npm ci` at the repository root (or set GAVEL_ANVIL)")
        self.state_file = Path(state_file) if state_file is not None else None
        self.chain_id = chain_id
        self.start_timeout = start_timeout
        self._fixed_port = port  # a fresh chain at a known URL (a restarted dev chain); None: any free port
        # seconds between blocks made whether or not a transaction came (each transaction still gets its
        # own block at once): a chain on which time passes while nobody sends; None: blocks only on transactions
        self.block_time = block_time
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()

    @property
    def url(self) -> str:
        if self.port is None:
            raise ChainError("anvil is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> AnvilProcess:
        """Starts anvil on a free port and waits until it answers JSON-RPC."""
        for _attempt in range(3):  # a port found free can be taken before anvil binds it
            self.port = self._fixed_port or _free_loopback_port()
            command = [
                self.binary,
                "--host", "127.0.0.1",
                "--port", str(self.port),
                "--chain-id", str(self.chain_id),
            ]
            if self.state_file is not None:
                command += ["--state", str(self.state_file)]
            if self.block_time is not None:
                command += ["--block-time", str(self.block_time), "--mixed-mining"]
            self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if self._wait_ready():
                return self
            self.stop()
        self._log.seek(0)
        raise ChainError(f"anvil did not start: {self._log.read()[-2000:].decode(errors='replace')}")

    def _wait_ready(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout
        payload = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if requests.post(self.url, json=payload, timeout=1).ok:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.02)
        return False

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the PID (anvil writes its state file, if any, on the way out), then SIGKILL."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def output(self) -> str:
        """What anvil printed so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def __enter__(self) -> AnvilProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._log.close()
