"""One job on several workers: the same bits as one device, per batch-reducing op and per run.

Workers in one process are threads joined by a real gloo process group (a HashStore
for the rendezvous); `gavel train --workers N` starts real worker processes.
"""
from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

from repops_cupy import registry
from repops_cupy.graph import execute
from repops_cupy.jobspec import load_job
from repops_cupy.parallel import (NodeSplit, Share, SplitError, counts_by_how, execute_share, run_split_node, shares,
                                  split_plan)
from repops_cupy.parallel_comm import connect
from repops_cupy.train import TrainingProgram

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "scripts" / "jobs"
MLP_ROOT_20 = "be38c1d7"
GPT_ROOT_4 = "14f818d7"
UNEVEN = (1, 4, 2)  # a share of one example, a large one and a middle one


def on_workers(n: int, fn):
    """fn(comm) on n threads, each a rank of one gloo group; their results in rank order."""
    import torch.distributed as dist

    store = dist.HashStore()
    results: list = [None] * n
    errors: list = []

    def run(rank: int) -> None:
        try:
            results[rank] = fn(connect(rank, n, store=store))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _rows(x, split: NodeSplit, share: Share):
    index = [slice(None)] * x.ndim
    index[split.axis] = slice(split.per_example * share.start, split.per_example * (share.start + share.count))
    return x[tuple(index)]


def split_run(op: str, attrs: dict, inputs: list, in_splits: list[NodeSplit], out_split: NodeSplit,
              counts=UNEVEN) -> np.ndarray:
    """The op run by len(counts) workers on their rows; the whole output, joined."""
    opdef = registry.get(op)
    attrs = opdef.canonical_attrs(attrs)
    whole = registry.run(op, inputs, attrs)

    def work(comm):
        share = Share(comm.rank, counts)
        mine = [x if s.axis is None else _rows(x, s, share) for x, s in zip(inputs, in_splits)]
        return run_split_node(opdef.forward, attrs, mine, in_splits, [x.shape for x in inputs], out_split,
                              whole.shape, share, comm)

    outs = on_workers(len(counts), work)
    if out_split.axis is None:
        for out in outs[1:]:
            assert out.tobytes() == outs[0].tobytes()  # every worker holds the same whole value
        return outs[0]
    return np.concatenate(outs, axis=out_split.axis)


def assert_same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


ROWS = NodeSplit(0, 1, "local")
WHOLE = NodeSplit(None, 0, "replicated")
rng = np.random.default_rng(19)


def _normal(*shape, spread: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * spread)).astype(np.float32)


@pytest.mark.parametrize("transpose_b", [False, True])
def test_weight_gradient_product_with_k_cut_over_workers_has_the_one_device_bits(transpose_b):
    per = 3  # rows per example, as a (B * T, C) activation has T
    a = _normal(7 * per, 5, spread=3.0)
    b = _normal(7 * per, 6) if not transpose_b else _normal(6, 7 * per)
    k_split = NodeSplit(0, per, "local")
    b_split = k_split if not transpose_b else NodeSplit(1, per, "local")
    got = split_run("matmul", {"transpose_a": True, "transpose_b": transpose_b}, [a, b], [k_split, b_split],
                    NodeSplit(None, 0, "matmul_k"))
    assert_same_bits(got, registry.run("matmul", [a, b], {"transpose_a": True, "transpose_b": transpose_b}))


def test_k_cut_product_with_an_infinity_on_one_worker_gives_the_ieee_result_of_one_device():
    a, b = _normal(7, 4), _normal(7, 3)
    a[5, 2] = np.inf  # on the third worker only: every worker must take the whole product's path
    b[0, 1] = np.nan
    got = split_run("matmul", {"transpose_a": True}, [a, b], [ROWS, ROWS], NodeSplit(None, 0, "matmul_k"))
    assert_same_bits(got, registry.run("matmul", [a, b], {"transpose_a": True}))


@pytest.mark.parametrize("op, attrs, make, splits", [
    ("sum_to", {"shape": (9,)}, lambda: [_normal(7, 9)], [ROWS]),
    ("sum_to", {"shape": (4, 5)}, lambda: [_normal(7, 4, 5)], [ROWS]),
    ("layer_norm_grad_gamma", {}, lambda: [_normal(7, 4, 8), _normal(7, 4, 8)], [ROWS, ROWS]),
    ("cross_entropy", {}, lambda: [_normal(14, 5), rng.integers(0, 5, 14)], [NodeSplit(0, 2, "local")] * 2),
    ("embedding_grad", {"num_embeddings": 6}, lambda: [_normal(7, 3, 4), rng.integers(0, 6, (7, 3))], [ROWS, ROWS]),
])
def test_batch_reducing_op_gathered_over_uneven_shares_has_the_one_device_bits(op, attrs, make, splits):
    inputs = make()
    got = split_run(op, attrs, inputs, splits, NodeSplit(None, 0, "gather"))
    assert_same_bits(got, registry.run(op, inputs, attrs))


def test_cross_entropy_grad_divides_by_the_whole_batch_on_every_worker():
    g, logits, targets = np.float32(1.0).reshape(()), _normal(14, 5), rng.integers(0, 5, 14)
    two = NodeSplit(0, 2, "local")
    got = split_run("cross_entropy_grad", {}, [np.asarray(g), logits, targets], [WHOLE, two, two],
                    NodeSplit(0, 2, "embed"))
    assert_same_bits(got, registry.run("cross_entropy_grad", [np.asarray(g), logits, targets]))


def test_dropout_mask_follows_each_rows_position_in_the_whole_batch():
    x, step = _normal(7, 10), np.array(3, np.int64)
    attrs = {"p": 0.3, "seed": 5, "site": 1}
    got = split_run("dropout_at_step", attrs, [x, step], [ROWS, WHOLE], NodeSplit(0, 1, "embed"))
    assert_same_bits(got, registry.run("dropout_at_step", [x, step], attrs))


def test_shares_are_contiguous_and_even_and_more_workers_than_examples_is_refused():
    assert shares(7, 3) == (3, 2, 2)
    assert shares(4, 4) == (1, 1, 1, 1)
    with pytest.raises(SplitError, match="5 workers for a batch of 4: every worker needs at least one example"):
        shares(4, 5)
    with pytest.raises(SplitError, match="positive integer"):
        shares(4, 0)


def _program_and_plan(job: str):
    program = TrainingProgram(load_job(JOBS / job))
    b = program.spec.batch_size
    return program, split_plan(program.graph, b, program.at_batch_size(b + 1).graph, b + 1)


def test_mlp_plan_cuts_weight_gradients_over_k_and_keeps_outputs_whole():
    program, plan = _program_and_plan("mlp.toml")
    counts = counts_by_how(plan)
    assert counts["matmul_k"] == 3  # one per linear layer's weight gradient
    assert counts["embed"] == 5  # four dropouts (forward and backward) and the loss gradient
    assert all(plan[i].axis is None for i in program.graph.outputs.values())


def test_one_mlp_step_on_three_threads_gives_every_output_of_one_device():
    program, plan = _program_and_plan("mlp.toml")
    leaves = program.leaf_values(program.initial_state())
    want = execute(program.graph, leaves).outputs
    counts = shares(program.spec.batch_size, 3)
    outs = on_workers(3, lambda comm: execute_share(program.graph, plan, leaves, Share(comm.rank, counts), comm))
    for out in outs:
        assert sorted(out) == sorted(want)
        for name in want:
            assert_same_bits(np.asarray(out[name]), np.asarray(want[name]))


def _train_root(tmp_path: Path, job: str, steps: int, workers: int) -> str:
    out = tmp_path / f"{job}-{workers}"
    proc = subprocess.run([sys.executable, "-m", "node", "train", str(JOBS / job), "--out", str(out),
                           "--steps", str(steps), "--workers", str(workers), "--threads", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_gavel_train_mlp_gives_one_trace_root_on_1_2_and_3_workers(tmp_path):
    roots = {w: _train_root(tmp_path, "mlp.toml", 20, w) for w in (1, 2, 3)}
    assert roots[1].startswith(MLP_ROOT_20)  # workers = 1 is the one-device run of today
    assert roots[2] == roots[1] and roots[3] == roots[1]


@pytest.mark.slow
def test_gavel_train_tiny_gpt_gives_one_trace_root_on_1_2_and_3_workers(tmp_path):
    roots = {w: _train_root(tmp_path, "tiny-gpt.toml", 4, w) for w in (1, 2, 3)}
    assert roots[1].startswith(GPT_ROOT_4)
    assert roots[2] == roots[1] and roots[3] == roots[1]


def test_gavel_train_refuses_more_workers_than_examples(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "node", "train", str(JOBS / "mlp.toml"), "--out", str(tmp_path / "o"),
                           "--steps", "1", "--workers", "65"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2
    assert "65 workers for a batch of 64: every worker needs at least one example" in proc.stderr
    assert not (tmp_path / "o" / "trace.json").exists()


@pytest.mark.slow
def test_torchrun_ranks_give_the_one_device_trace_root(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    import socket

    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "tr"
    proc = subprocess.run([str(torchrun), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                           str(port), "-m", "node", "train", str(JOBS / "mlp.toml"), "--out", str(out), "--steps", "20",
                           "--torchrun", "--threads", "1"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith(MLP_ROOT_20)


def _fail_in_the_worker():
    raise RuntimeError("this worker cannot start")


class ProgramThatFailsInItsWorkers(TrainingProgram):
    """A real program here; in a spawned worker its unpickling raises (as a broken install would)."""

    def __reduce__(self):
        return (_fail_in_the_worker, ())


def test_a_worker_that_dies_before_joining_ends_the_run_with_a_clear_error():
    from repops_cupy.parallel_comm import WorkerError
    from repops_cupy.parallel_train import worker_pool

    program = ProgramThatFailsInItsWorkers(load_job(JOBS / "mlp.toml"))
    with pytest.raises(WorkerError, match=r"a worker process stopped before joining \(exit status \[1\]\)"):
        with worker_pool(program, 2, threads=1):
            pass


def test_gather_many_joins_arrays_of_several_dtypes_and_axes_in_one_collective():
    counts = UNEVEN
    floats, ints, flags = _normal(3, 7 * 2), rng.integers(-9, 9, (7, 2)), rng.random((7,)) < 0.5

    def work(comm):
        share = Share(comm.rank, counts)
        mine = [_rows(floats, NodeSplit(1, 2, "local"), share), _rows(ints, ROWS, share), _rows(flags, ROWS, share)]
        lengths = [tuple(2 * c for c in counts), counts, counts]
        return comm.gather_many([(x, axis, n) for x, axis, n in zip(mine, (1, 0, 0), lengths)])

    for got in on_workers(3, work):
        for value, want in zip(got, (floats, ints, flags)):
            assert_same_bits(value, want)


@pytest.mark.slow
def test_a_run_resumed_on_another_worker_count_passes_through_the_same_bits(tmp_path):
    out = tmp_path / "resumed"
    base = [sys.executable, "-m", "node", "train", str(JOBS / "mlp.toml"), "--out", str(out), "--threads", "1"]
    first = subprocess.run(base + ["--steps", "10", "--workers", "2"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(base + ["--steps", "20", "--workers", "3", "--resume"], capture_output=True, text=True,
                            timeout=600, cwd=ROOT)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().splitlines()[-1].startswith(MLP_ROOT_20)


def _time_major_graph(batch: int):
    from repops_cupy.graph import GraphBuilder

    b = GraphBuilder()
    x = b.leaf("batch/x", np.ones((batch, 3), np.float32), "batch")
    flat = b.op("reshape", b.op("transpose", x, perm=(1, 0)), shape=(-1,))  # time-major rows
    return b.finish({"loss": b.op("sum", flat)})


def test_a_graph_that_moves_the_batch_off_the_leading_axis_is_refused_by_name():
    with pytest.raises(SplitError, match=r"\(reshape\) moves the batch off the leading axis"):
        split_plan(_time_major_graph(4), 4, _time_major_graph(5), 5)


@pytest.mark.slow
def test_ctrl_c_stops_every_worker_and_says_how_to_resume(tmp_path):
    import signal
    import time

    out = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "node", "train", str(JOBS / "tiny-gpt.toml"), "--out", str(out),
                             "--steps", "300", "--workers", "2", "--threads", "1"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    while not (out / "trace.json").exists() and proc.poll() is None:  # the workers have joined
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err[-3000:]
    assert "--workers 2 --resume" in err.strip().splitlines()[-1]
