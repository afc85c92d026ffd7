"""GPT-2 small (124M parameters, scripts/jobs/gpt2-small.toml) trained a few steps on CPU.

The model is the job's whole: 12 layers, d_model 768, 12 heads, 1024 positions,
vocabulary 50257, tied head. To fit a small shared CPU the run shortens what the
model reads, not the model: --context tokens per row (default 64; the first rows of
the 1024-position table) and --batch rows (default 1). Measured in one run, each
side in its own process (so each peak is its own):

- ours: `TrainingProgram.run_step` (reproducible operators, AdamW), s/step over
  --steps steps after one warm-up step (the warm-up builds kernels and caches);
  peak RSS of the process, and the interpreter's peak of live node outputs;
- torch eager float32: the same network and AdamW step written with torch ops,
  on the same weights and batches, s/step after one warm-up step; peak RSS.

Prints the ratio ours / torch. Example: python scripts/bench_gpt2.py (on 2 cores shared with
other work, 2026-11-25: torch 12.7 s/step, peak RSS 4.2 GiB; gavel 59.5 s/step, 5.4 GiB, 4.7x;
tracing the graph 271 s; the three losses equal to 6 digits)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing as mp
import resource
import time
from pathlib import Path

JOB = Path(__file__).resolve().parents[1] / "scripts/jobs/gpt2-small.toml"


def _spec(context: int, batch: int, steps: int):
    from repops_cupy.jobspec import load_job

    spec = load_job(JOB)
    return dataclasses.replace(spec, batch_size=batch, steps=steps + 1,
                               data=dataclasses.replace(spec.data, context=context))


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def ours(context: int, batch: int, steps: int, threads: int, queue) -> None:
    import numpy as np
    import torch

    from repops_cupy.graph import execute
    from repops_cupy.models import count_params
    from repops_cupy.train import TrainingProgram

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    program = TrainingProgram(_spec(context, batch, steps))
    state = program.initial_state()
    graph = program.graph
    setup = time.perf_counter() - t0
    times, losses = [], []
    peak_nodes = 0
    for s in range(steps + 1):
        t = time.perf_counter()
        run = execute(graph, program.leaf_values(state), host_outputs=False)
        losses.append(float(np.asarray(run.outputs.pop("loss"))))
        state = run.outputs
        peak_nodes = max(peak_nodes, run.peak_bytes)
        if s:
            times.append(time.perf_counter() - t)
    queue.put({"params": count_params(program.net), "nodes": len(graph), "setup_s": setup,
               "s_per_step": sum(times) / len(times), "losses": losses, "peak_rss_mib": _peak_mib(),
               "peak_node_outputs_mib": peak_nodes / 2**20})


def torch_eager(context: int, batch: int, steps: int, threads: int, queue) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from repops_cupy.train import TrainingProgram

    torch.set_num_threads(threads)
    program = TrainingProgram(_spec(context, batch, steps))
    spec = program.spec
    init = program.initial_state()
    p = {k.removeprefix("params/"): torch.tensor(v, requires_grad=True) for k, v in init.items()
         if k.startswith("params/")}
    o = spec.optimizer
    opt = torch.optim.AdamW(list(p.values()), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps,
                            weight_decay=o.weight_decay)
    m = spec.model
    d, h = m.d_model, m.n_heads

    def forward(ids):
        b, t = ids.shape
        x = p["wte.weight"][ids] + p["wpe.weight"][:t]
        for i in range(m.n_layers):
            q = f"blocks.{i}."
            y = F.layer_norm(x, (d,), p[q + "ln1.weight"], p[q + "ln1.bias"])
            heads = [F.linear(y, p[f"{q}attn.{n}.weight"], p[f"{q}attn.{n}.bias"]).view(b, t, h, d // h).transpose(1, 2)
                     for n in ("q_proj", "k_proj", "v_proj")]
            att = heads[0] @ heads[1].transpose(-1, -2) / math.sqrt(d // h)
            att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
            y = (att @ heads[2]).transpose(1, 2).reshape(b, t, d)
            x = x + F.linear(y, p[q + "attn.out_proj.weight"], p[q + "attn.out_proj.bias"])
            y = F.layer_norm(x, (d,), p[q + "ln2.weight"], p[q + "ln2.bias"])
            y = F.gelu(F.linear(y, p[q + "mlp.0.weight"], p[q + "mlp.0.bias"]), approximate="tanh")
            x = x + F.linear(y, p[q + "mlp.2.weight"], p[q + "mlp.2.bias"])
        x = F.layer_norm(x, (d,), p["ln_f.weight"], p["ln_f.bias"])
        return x @ p["wte.weight"].T

    times, losses = [], []
    for s in range(steps + 1):
        batch = program.batch(s)
        x, y = (torch.from_numpy(np.asarray(batch[k])) for k in ("batch/x", "batch/y"))
        t = time.perf_counter()
        logits = forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if s:
            times.append(time.perf_counter() - t)
    queue.put({"s_per_step": sum(times) / len(times), "losses": losses, "peak_rss_mib": _peak_mib()})


def _in_child(fn, *args):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=fn, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2, help="timed steps, after one warm-up step")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    shape = (args.context, args.batch, args.steps, args.threads)
    base = _in_child(torch_eager, *shape)
    mine = _in_child(ours, *shape)
    print(f"GPT-2 small: {mine['params']:,} parameters, {mine['nodes']} graph nodes; batch {args.batch} x context "
          f"{args.context} tokens, {args.threads} threads, {args.steps} timed steps after 1 warm-up")
    print(f"torch eager float32: {base['s_per_step']:.2f} s/step, peak RSS {base['peak_rss_mib']:.0f} MiB, "
          f"losses {', '.join(f'{x:.4f}' for x in base['losses'])}")
    print(f"gavel (reproducible): {mine['s_per_step']:.2f} s/step, peak RSS {mine['peak_rss_mib']:.0f} MiB "
          f"(live node outputs at most {mine['peak_node_outputs_mib']:.0f} MiB), setup {mine['setup_s']:.1f} s, "
          f"losses {', '.join(f'{x:.4f}' for x in mine['losses'])}")
    print(f"ratio gavel / torch float32: {mine['s_per_step'] / base['s_per_step']:.2f}x s/step, "
          f"{mine['peak_rss_mib'] / base['peak_rss_mib']:.2f}x peak RSS")
    print(json.dumps({"ours": mine, "torch_f32": base, "shape": dict(zip(("context", "batch", "steps", "threads"), shape))}))


if __name__ == "__main__":
    main()
