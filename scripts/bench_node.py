"""Benchmarks of the node on loopback: dial, request round trip, blob transfer; a whole job.

    python scripts/bench_node.py              # 64 MiB blob, best of 3; tiny-GPT, 20 steps
    python scripts/bench_node.py --quick      # 8 MiB, 4 steps, for a smoke run
    python scripts/bench_node.py --job-only --job-steps 40

Blob transfer (libp2p: Noise + Yamux, 256 KiB chunks each verified against its hash and
written to disk) is compared with a plain TCP copy of the same bytes between two trio
sockets, measured in the same run, so the ratio means something on a noisy machine.

A whole job: the time from `gavel submit` to a verified result (a client and one provider
node in this process, real libp2p hosts on loopback, the embedded EVM) against the time of
training the same job alone (`repops_cupy.train.train`: the step program built, every
step run, checkpoints written). The difference is what the network costs a job: the
client's and the provider's own program builds (the client needs the step program to sign
the terms, the provider to check them), escrow and seat transactions, the bundle and
result transfers, checkpoint hashing into the blob store, the commitment, and the checks.
Both are measured after a warm-up run of two steps, so neither pays the first import of
the operator libraries or their kernels' first compilation; training alone is timed
before and after the network run, and the better of the two reported.

Training speed (issue 14): steps per second of `gavel train`'s path (a fresh process that
builds the job and runs `repops_cupy.train.train` in its main thread, after a two-step
warm-up) and of a provider node's training of the same job (a client and a provider in
this process; the provider's own count of the steps and seconds of its run), in rounds
that alternate the two, so both meet the same load. The ratio node / train should be
at least 0.9. On a machine whose cores are busy, `gavel train` (all cores, spinning
kernel threads) can fall far behind the node (one core fewer): the ratio then says
more about the load than about the node, so each round is printed.

    python scripts/bench_node.py --speed-only                 # MLP, 200 steps, 3 rounds
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from node.blobs import BlobService, BlobStore
from node.host import open_host
from node.logs import configure_logging

ECHO = "/gavel-bench/echo/1"
ROOT = Path(__file__).resolve().parent.parent


def report(name: str, value: float, unit: str, detail: str = "") -> None:
    print(f"{name:<44} {value:>12,.2f} {unit:<8} {detail}", flush=True)


async def _echo(peer, request: bytes) -> bytes:
    await trio.lowlevel.checkpoint()
    return request


async def bench_dial_and_requests(dials: int, requests: int) -> None:
    async with open_host(os.urandom(32)) as a, open_host(os.urandom(32)) as b:
        a.handle_requests(ECHO, _echo)
        times = []
        for _ in range(dials):
            start = time.perf_counter()
            await b.connect(a.listen_addrs[0])
            times.append(time.perf_counter() - start)
            await b.disconnect(a.peer_id)
            with trio.fail_after(5):
                while b.is_connected(a.peer_id) or a.is_connected(b.peer_id):
                    await trio.sleep(0.01)
        report("dial (TCP + Noise + Yamux), median", statistics.median(times) * 1e3, "ms", f"of {dials}, max {max(times) * 1e3:.1f} ms")
        await b.connect(a.listen_addrs[0])

        times = []
        for i in range(requests // 4):
            start = time.perf_counter()
            await b.request(a.peer_id, ECHO, b"x" * 64)
            times.append(time.perf_counter() - start)
        report("request, new stream each, median", statistics.median(times) * 1e3, "ms", f"of {len(times)}")

        times = []
        async with await b.open_channel(a.peer_id, ECHO) as channel:
            for i in range(requests):
                start = time.perf_counter()
                await channel.request(b"x" * 64)
                times.append(time.perf_counter() - start)
        report("request, kept stream, median", statistics.median(times) * 1e3, "ms", f"of {len(times)}")


async def raw_tcp_copy(data: bytes) -> float:
    """Seconds to move ``data`` over one loopback TCP connection between trio sockets."""
    done = trio.Event()
    received = 0

    async def server(stream: trio.SocketStream) -> None:
        nonlocal received
        async with stream:
            while received < len(data):
                chunk = await stream.receive_some(256 * 1024)
                if not chunk:
                    break
                received += len(chunk)
        done.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, server, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        view = memoryview(data)
        start = time.perf_counter()
        async with await trio.open_tcp_stream("127.0.0.1", port) as client:
            for i in range(0, len(data), 256 * 1024):
                await client.send_all(view[i : i + 256 * 1024])
            with trio.fail_after(60):
                await done.wait()
        seconds = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    assert received == len(data)
    return seconds


BULK = "/gavel-bench/bulk/1"


async def libp2p_stream_copy(a, b, data: bytes) -> float:
    """Seconds to move ``data`` over one libp2p stream, no framing, hashing or disk:
    the ceiling the blob protocol runs under."""
    done = trio.Event()

    async def sink(stream) -> None:
        got = 0
        try:
            while got < len(data):
                got += len(await stream.read(1 << 20))
        finally:
            done.set()
            await stream.close()

    a.libp2p.set_stream_handler(BULK, sink)
    stream = await b.libp2p.new_stream(a.peer_id, [BULK])
    view = memoryview(data)
    start = time.perf_counter()
    for i in range(0, len(data), 256 * 1024):
        await stream.write(bytes(view[i : i + 256 * 1024]))
    with trio.fail_after(60):
        await done.wait()
    seconds = time.perf_counter() - start
    await stream.close()
    return seconds


async def bench_blob(size: int, rounds: int) -> None:
    data = os.urandom(size)
    with tempfile.TemporaryDirectory() as tmp:
        async with open_host(os.urandom(32)) as a, open_host(os.urandom(32)) as b:
            server = BlobService(BlobStore(Path(tmp) / "server"), a)
            blob_id = await server.store.put(data)
            await b.connect(a.listen_addrs[0])
            blob_times, tcp_times, stream_times = [], [], []
            for r in range(rounds):
                client = BlobService(BlobStore(Path(tmp) / f"client{r}"), b)
                start = time.perf_counter()
                path = await client.fetch(a.peer_id, blob_id)
                blob_times.append(time.perf_counter() - start)
                assert path.stat().st_size == size
                tcp_times.append(await raw_tcp_copy(data))
                stream_times.append(await libp2p_stream_copy(a, b, data))
    mib = size / 2**20
    blob_rate = size / min(blob_times) / 1e6
    tcp_rate = size / min(tcp_times) / 1e6
    stream_rate = size / min(stream_times) / 1e6
    report("blob fetch, verified, to disk", blob_rate, "MB/s", f"{mib:.0f} MiB, best of {rounds}")
    report("raw TCP copy, trio sockets, same bytes", tcp_rate, "MB/s", f"{mib:.0f} MiB, best of {rounds}")
    report("libp2p stream copy (Noise+Yamux), no checks", stream_rate, "MB/s", f"{mib:.0f} MiB, best of {rounds}")
    report("blob fetch / raw TCP", blob_rate / tcp_rate * 100, "%")
    report("blob fetch / libp2p stream copy", blob_rate / stream_rate * 100, "%")


def _job_file(directory: Path, source: Path, steps: int, every: int) -> Path:
    import dataclasses

    from node.roles.jobfiles import spec_toml
    from repops_cupy.jobspec import load_job

    spec = dataclasses.replace(load_job(source), steps=steps, checkpoint_interval=every)
    path = directory / f"job-{steps}.toml"
    path.write_text(spec_toml(spec))
    return path


def train_alone(job_file: Path, out_dir: Path) -> tuple[float, str]:
    """Seconds to build the job's step program and train it into ``out_dir``; its trace root."""
    from repops_cupy.jobspec import load_job
    from repops_cupy.train import TrainingProgram, train

    start = time.perf_counter()
    spec = load_job(job_file)
    trace = train(spec, out_dir, program=TrainingProgram(spec))
    return time.perf_counter() - start, trace.root.hex()


async def submit_to_verified(job_file: Path, directory: Path) -> dict[str, float | str]:
    """Seconds from submission to a checked result, with a client and a provider node here."""
    from node.roles.client import SubmitOptions
    from node.roles.context import context_of

    async with trio.open_nursery() as nursery:
        provider, client_node = await _provider_and_client(nursery, directory)
        client = context_of(client_node).roles["client"]
        options = SubmitOptions(providers=1, accept_within=600, commit_within=3600, challenge_within=60)
        seen: dict[str, float] = {}  # the provider's job states, when first seen

        async def watch_provider() -> None:
            while True:
                for row in await provider.storage.run(provider.storage.jobs):
                    seen.setdefault(row.state, time.perf_counter())
                await trio.sleep(0.02)

        nursery.start_soon(watch_provider)
        started = time.perf_counter()
        job_id = await client.submit(job_file, options)
        handed = time.perf_counter()
        job = client.jobs[job_id]
        while job.state != "verified":
            await job.changed.wait()
        verified = time.perf_counter()
        nursery.cancel_scope.cancel()
    return {"total": verified - started, "hand_over": handed - started, "training": seen["trained"] - seen["accepted"],
            "after_training": verified - seen["trained"], "trace_root": job.record["trace_root"]}


async def bench_job(source: Path, steps: int, every: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        job_file = _job_file(tmp_path, source, steps, every)
        # Warm-up: imports, and the kernels compiled on their first call (a step, not just a trace).
        await trio.to_thread.run_sync(train_alone, _job_file(tmp_path, job_file, 2, 1), tmp_path / "warm-up")
        # Alone before and after the network run, best of the two: this machine's load drifts.
        first, root = await trio.to_thread.run_sync(train_alone, job_file, tmp_path / "alone1")
        network = await submit_to_verified(job_file, tmp_path)
        second, _ = await trio.to_thread.run_sync(train_alone, job_file, tmp_path / "alone2")
    if network["trace_root"] != root:
        raise SystemExit(f"the network's trace root {network['trace_root']} is not the job's {root}")
    alone = min(first, second)
    detail = f"{source.stem}, {steps} steps, checkpoint every {every}"
    report("job: training alone (build + train)", alone, "s", f"{detail}; best of {first:.1f} s, {second:.1f} s")
    report("job: submit -> verified result", network["total"], "s", "client + 1 provider, embedded EVM")
    report("  submit -> handed over", network["hand_over"], "s", "bundle, terms, escrow; provider builds, checks, seats")
    report("  training at the provider", network["training"], "s", "worker thread of the provider node")
    report("  trained -> verified", network["after_training"], "s", "checkpoints stored, commit, deliver, fetch, check")
    report("job: submit -> verified / training alone", network["total"] / alone, "x")


# `gavel train`'s path in a fresh process, after a warm-up: prints its steps per second.
_TRAIN_RATE = """
import sys, time
from repops_cupy.jobspec import load_job
from repops_cupy.train import TrainingProgram, train
spec = load_job(sys.argv[1])
warm = spec.with_steps(2)
train(warm, sys.argv[2] + "-warm-up", program=TrainingProgram(warm))
program = TrainingProgram(spec)
program.graph
start = time.perf_counter()
train(spec, sys.argv[2], program=program)
print(spec.steps / (time.perf_counter() - start))
"""


def gavel_train_rate(job_file: Path, out_dir: Path) -> float:
    """Steps per second of `gavel train`'s loop on ``job_file``, in a process of its own."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _TRAIN_RATE, str(job_file), str(out_dir)], check=True,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})
    return float(done.stdout.split()[-1])


async def bench_training_speed(source: Path, steps: int, every: int, rounds: int) -> None:
    """Steps per second of `gavel train` and of a provider node on one job, rounds alternating."""
    from node.roles.client import SubmitOptions
    from node.roles.context import context_of

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        job_file = _job_file(tmp_path, source, steps, every)
        await trio.to_thread.run_sync(train_alone, _job_file(tmp_path, job_file, 2, 1), tmp_path / "warm-up")
        rows = []
        async with trio.open_nursery() as nursery:
            provider, client_node = await _provider_and_client(nursery, tmp_path, capacity=rounds)
            client, provider_role = context_of(client_node).roles["client"], context_of(provider).roles["provider"]
            options = SubmitOptions(providers=1, accept_within=600, commit_within=3600, challenge_within=3600)
            for r in range(rounds):
                train_rate = await trio.to_thread.run_sync(gavel_train_rate, job_file, tmp_path / f"train{r}")
                job_id = await client.submit(job_file, options)
                while job_id not in provider_role.traces:
                    await trio.sleep(0.02)
                run = provider_role.runs[job_id]
                if run.trained_steps != steps:
                    raise SystemExit(f"the provider trained {run.trained_steps} steps, not {steps}")
                rows.append((train_rate, run.trained_steps / run.train_seconds))
            nursery.cancel_scope.cancel()
    detail = f"{source.stem}, {steps} steps, checkpoint every {every}"
    for r, (train_rate, node_rate) in enumerate(rows):
        report(f"speed round {r + 1}: gavel train / provider node", train_rate, "steps/s",
               f"{node_rate:,.2f} steps/s at the node, ratio {node_rate / train_rate:.2f}")
    best_train, best_node = max(t for t, _ in rows), max(n for _, n in rows)
    ratio = statistics.median(n / t for t, n in rows)
    report("training speed: gavel train (best)", best_train, "steps/s", detail)
    report("training speed: provider node (best)", best_node, "steps/s", "worker thread of a provider node")
    report("training speed: node / gavel train", ratio, "x",
           f"median of {rounds} rounds, target >= 0.9; best / best {best_node / best_train:.2f}")


async def _provider_and_client(nursery: trio.Nursery, directory: Path, *, capacity: int = 1):
    """A provider node and a client node bootstrapped to it, once the provider's advert reached the client."""
    from node.datadir import init_datadir, load_seed
    from node.roles.context import context_of
    from node.runtime import Node

    async def start(name: str, roles: list[str], **settings):
        config = init_datadir(directory / name, {"roles": roles, "metrics_listen": "", "advert_interval": 0.5,
                                                 **settings})
        node = Node(config, load_seed(config))
        await nursery.start(node.run)
        while (ctx := context_of(node)) is None or roles[0] not in ctx.roles:
            await trio.sleep(0.05)
        await ctx.wait_chain()
        return node

    provider = await start("provider", ["provider"], capacity=capacity)
    client_node = await start("client", ["client"], bootstrap=provider.host.listen_addrs)
    while not context_of(client_node).roles["client"].adverts:
        await trio.sleep(0.05)
    return provider, client_node


async def main_async(args) -> None:
    if not (args.job_only or args.speed_only):
        await bench_dial_and_requests(args.dials, args.requests)
        await bench_blob(args.size_mib * 2**20, args.rounds)
    if not args.speed_only:
        await bench_job(Path(args.job), args.job_steps, args.checkpoint_every)
    if not args.job_only:
        await bench_training_speed(Path(args.speed_job), args.speed_steps, args.speed_checkpoint_every,
                                   args.speed_rounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dials", type=int, default=20)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--job", default=str(Path(__file__).resolve().parent / "jobs" / "tiny-gpt.toml"),
                        help="the job of the whole-job section (default: tiny-GPT)")
    parser.add_argument("--job-steps", type=int, default=20, help="steps of that job (default 20)")
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--job-only", action="store_true", help="only the whole-job section")
    parser.add_argument("--speed-job", default=str(Path(__file__).resolve().parent / "jobs" / "mlp.toml"),
                        help="the job of the training-speed section (default: the MLP)")
    parser.add_argument("--speed-steps", type=int, default=200, help="steps of that job (default 200)")
    parser.add_argument("--speed-checkpoint-every", type=int, default=20)
    parser.add_argument("--speed-rounds", type=int, default=3, help="rounds of gavel train, then the node")
    parser.add_argument("--speed-only", action="store_true", help="only the training-speed section")
    args = parser.parse_args(argv)
    if args.quick:
        args.size_mib, args.rounds, args.dials, args.requests = 8, 2, 5, 100
        args.job_steps, args.checkpoint_every = 4, 2
        args.speed_steps, args.speed_checkpoint_every, args.speed_rounds = 40, 10, 2
    configure_logging("warning")
    print(f"python {sys.version.split()[0]}, trio {trio.__version__}, {os.cpu_count()} CPUs", flush=True)
    trio.run(main_async, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
