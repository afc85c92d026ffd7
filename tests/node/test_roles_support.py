"""Shared pieces of the role tests: a tiny job, nodes from data directories, waits."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import trio

from node.cheats import ROUNDLOG_STRATEGIES, STRATEGIES
from node.datadir import init_datadir, load_seed
from node.framing import unpack
from node.roles.client import SubmitOptions
from node.roles.context import context_of
from node.runtime import Node

# Small enough to train in well under a second; 3 checkpoint intervals.
TINY_JOB = """\
[job]
name = "tiny"
seed = 3
steps = 6
batch_size = 8
checkpoint_interval = 2

[data]
kind = "synthetic"
n_samples = 64
n_features = 4
n_classes = 2

[model]
kind = "mlp"
hidden = [8]
activation = "relu"

[optimizer]
kind = "sgd"
lr = 0.1
"""


def write_job(directory: Path, text: str = TINY_JOB, name: str = "tiny.toml") -> Path:
    path = Path(directory) / name
    path.write_text(text)
    return path


async def start_node(nursery: trio.Nursery, directory: Path, roles: list[str], **settings) -> Node:
    values = {"roles": roles, "metrics_listen": "", "advert_interval": 0.5, **settings}
    config = init_datadir(directory, values)
    cheats = {**STRATEGIES, **ROUNDLOG_STRATEGIES} if settings.get("cheat") else None
    node = Node(config, load_seed(config), cheats=cheats)
    node.record_interval = 0.2  # the peers table is kept through inbound-only peers too
    await nursery.start(node.run)
    return node


async def role(node: Node, name: str, *, timeout: float = 60.0):
    """The node's role object once its chain binding is up."""
    with trio.fail_after(timeout):
        while (ctx := context_of(node)) is None or name not in ctx.roles:
            await trio.sleep(0.05)
        await ctx.wait_chain()
        return ctx.roles[name]


async def wait_for(predicate, *, timeout: float, interval: float = 0.1) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(interval)


async def submitted_with_a_cheater(nursery: trio.Nursery, tmp_path: Path, job_file: Path, cheat: str):
    """A client, an honest provider, a provider cheating with ``cheat`` and an auditor on one
    network, and the job submitted for two seats. Returns (client_role, honest, cheater,
    auditor, job_id, client_job)."""
    client = await start_node(nursery, tmp_path / "client", ["client"])
    hub = client.host.listen_addrs
    honest = await start_node(nursery, tmp_path / "honest", ["provider"], bootstrap=hub)
    cheater = await start_node(nursery, tmp_path / "cheater", ["provider"], bootstrap=hub, cheat=cheat)
    auditor = await start_node(nursery, tmp_path / "auditor", ["auditor"], bootstrap=hub)
    client_role = await role(client, "client")
    for node, name in ((honest, "provider"), (cheater, "provider"), (auditor, "auditor")):
        await role(node, name)
    options = SubmitOptions(providers=2, accept_within=90, commit_within=90, challenge_within=60,
                            move_timeout=30, clock=120)
    job_id = await client_role.submit(job_file, options)
    return client_role, honest, cheater, auditor, job_id, client_role.jobs[job_id]


def audits_of(auditor: Node, job_id: bytes) -> dict | None:
    """The auditor's audits of the job, once its row says it audited it."""
    row = auditor.storage.get_job(job_id)
    return unpack(row.spec)["audits"] if row is not None and row.state == "audited" else None


def advance_embedded_chain(seconds: int) -> None:
    """Move this process's embedded chain (shared by every in-process node) ``seconds`` ahead."""
    from node.roles import chain

    shared = chain._embedded_chain()
    with shared.lock:
        shared.chain.advance_time(seconds)


def seed() -> bytes:
    return os.urandom(32)


def in_a_thread(fn):
    """``fn()`` in a fresh thread, like the node's worker threads; its result or exception."""
    out = {}

    def main():
        try:
            out["value"] = fn()
        except BaseException as error:  # handed back to the test
            out["error"] = error

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]
