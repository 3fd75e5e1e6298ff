"""Peak memory of one no-grad forward and of one step of each zeroth-order method (in-place engine),
for a causal LM of a given shape with random weights built from its config (no download).

    pazo-bench memory [--shape opt-125m] [--dtype float32] [--device cpu]
                      [--batch 8] [--length 64] [--methods mezo,dpzero,dp_zo]
                      [--out scripts/results/memory_<device>_<shape>_<dtype>.json]

(or `python -m pazo.bench.memory`, or `python scripts/benchmark_memory.py`)

Every measurement runs in its own subprocess (`--one <what>`), which builds the model, makes a
batch of random token ids and does the one thing measured. On CPU the figure is the subprocess'
peak resident set (ru_maxrss, which includes the Python interpreter, torch and the model); on CUDA
it is `torch.cuda.max_memory_allocated` after a reset that follows the model's construction.
`ratio` = a method's peak over the forward's peak; the goal is at most 1.1. For float16/bfloat16 a
method's row also says how the queries ran (`half_precision_queries`): on the fly, with the most
one module's perturbed weights took (`temporary_peak_mib`), or with the exact shift, with how many
entries it kept at most at once (`kept_fraction` of the parameters, `kept_peak_mib`), the part of
that step's memory that grows with the model. A rerun keeps the result file's earlier results
under `history`.

Shapes (`SHAPES`): OPT configs at the sizes of the facebook/opt-* checkpoints (vocabulary 50272,
2048 positions). On a GPU:
    pazo-bench memory --device cuda --dtype float16 --shape opt-1.3b
    pazo-bench memory --device cuda --dtype float16 --shape opt-6.7b
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from pazo import REPO_ROOT
from pazo.bench.common import RESULTS_DIR, at_least, comma_separated, command_line, write_result
from pazo.errors import unknown_choice
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.bench.settings import device_or_exit

SHAPES = {  # hidden, layers, heads, ffn
    "opt-125m": (768, 12, 12, 3072), "opt-350m": (1024, 24, 16, 4096), "opt-1.3b": (2048, 24, 32, 8192),
    "opt-2.7b": (2560, 32, 32, 10240), "opt-6.7b": (4096, 32, 32, 16384), "opt-13b": (5120, 40, 40, 20480),
    "opt-30b": (7168, 48, 56, 28672),
}


def build(shape: str, dtype: str, device: str):
    import torch
    from transformers import OPTConfig, OPTForCausalLM

    from pazo.models.functional import FunctionalModel
    from pazo.models.hf_lm import DTYPES, CausalLMTask

    hidden, layers, heads, ffn = SHAPES[shape]
    config = OPTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, ffn_dim=ffn,
                       word_embed_proj_dim=hidden, vocab_size=50272, max_position_embeddings=2048)
    torch.manual_seed(0)
    with torch.device(device):
        lm = OPTForCausalLM._from_config(config, attn_implementation="sdpa", dtype=DTYPES[dtype]).eval()
    module = CausalLMTask(lm, None, "classification", pad_id=1, label_word_ids=[6587, 372])  # " terrible", " great"
    return FunctionalModel(module, loss_fn=module.loss_fn)


def one(what: str, args) -> dict:
    import torch

    import numpy as np

    from pazo.bench.settings import compose_cfg
    from pazo.data.base import DataBundle, TensorSplit
    from pazo.run.build import build_run
    from pazo.run.typed import run_config

    device = torch.device(args.device)
    model = build(args.shape, args.dtype, args.device)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(3, 50000, (args.batch, args.length), generator=g).to(device)
    y = torch.randint(0, 2, (args.batch,), generator=g).to(device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if what == "forward":
        with torch.no_grad():
            model.current_losses(x, y)
    else:
        # the method assembled as a run is (`build_run`): its real config, lr 1e-6, C = 1, q = 1,
        # sigma = 1 (fixed, not accounted), the in-place engine; the batch is the private data
        cfg = compose_cfg([f"method={what}", "method.lr=1e-6", "method.clip=1.0", "method.q=1",
                           "method.smoothing=1e-3", "engine.name=inplace", f"device={device}",
                           f"train.batch_size={args.batch}", "train.steps=1", "seed=0", "warm_start.epochs=0"])
        split = TensorSplit(x.cpu(), y.cpu())
        data = DataBundle(name="synthetic_opt", private=split, public=split.subset(np.arange(0)),
                          test=split.subset(np.arange(0)), num_classes=2, input_shape=(args.length,))
        r = build_run(run_config(cfg), data=data, module=model.module, sigma=1.0, time_engines=False)
        method, engine = r.method, r.method.ctx.engine
        method.step(x, y, 1)
        on_the_fly = engine.on_the_fly[1] if engine.on_the_fly else None
        kept = {"half_precision_queries": engine.half_precision_queries,
                "temporary_peak_mib": on_the_fly.temporary_peak_bytes / 2**20 if on_the_fly else None,
                "kept_peak_entries": engine.kept_peak, "kept_fraction": engine.kept_peak / model.dim,
                "kept_peak_mib": engine.kept_peak_bytes / 2**20}
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"what": what, "peak_bytes": peak, "seconds": time.perf_counter() - t0, "dim": model.dim,
            "torch_threads": torch.get_num_threads(), **(kept if what != "forward" else {})}


def earlier_results(out: Path) -> list[dict]:
    """The history a result file already holds, with the result it holds now first (its command,
    commit and rows), so that a new run does not lose what an earlier one measured."""
    if not out.exists():
        return []
    old = json.loads(out.read_text())
    rows = [{k: r[k] for k in ("what", "peak_bytes", "ratio", "kept_fraction", "temporary_peak_mib") if k in r}
            for r in old.get("rows", [])]
    previous = {"note": f"the run before, commit {old.get('commit') or 'unknown'}", "command": old.get("command"),
                "date": old.get("date"), "rows": rows}
    return [previous, *old.get("history", [])]


def zeroth_order_method(name: str) -> str:
    """An argparse type: a zeroth-order method's name (the steps this benchmark measures)."""
    from pazo.methods import METHODS, method_info

    choices = sorted(n for n in METHODS.names() if method_info(n).family == "zeroth_order")
    if name not in choices:
        raise argparse.ArgumentTypeError(unknown_choice("zeroth-order method", name, choices))
    return name


def main() -> None:
    p = ArgumentParser(description=summary_of(__doc__))
    p.add_argument("--shape", default="opt-125m", choices=sorted(SHAPES))
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch", type=at_least(1), default=8)
    p.add_argument("--length", type=at_least(1), default=64)
    p.add_argument("--methods", type=comma_separated(zeroth_order_method), default="mezo,dpzero,dp_zo")
    p.add_argument("--out", type=output_file, default=None)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args)))
        return
    device_or_exit(args.device)   # (in this process, before any measuring one starts)
    rows = []
    for what in ["forward", *args.methods]:
        cmd = [sys.executable, "-m", "pazo.bench.memory", "--one", what, *sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
        if out.returncode:
            last = next((line for line in reversed(out.stderr.splitlines()) if line.strip()), "no message")
            sys.exit(f"pazo: error: pazo-bench memory: measuring {what} failed (exit {out.returncode}): {last}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        kept = (f"; exact restore kept {rows[-1]['kept_fraction']:.2%} of the entries at most "
                f"({rows[-1]['kept_peak_mib']:.1f} MiB)" if rows[-1].get("kept_peak_entries") else "")
        if rows[-1].get("temporary_peak_mib"):
            kept += f"; on the fly, one module's perturbed weights at most {rows[-1]['temporary_peak_mib']:.1f} MiB"
        print(f"{what:8s} peak {rows[-1]['peak_bytes'] / 2**20:9.1f} MiB  ({rows[-1]['seconds']:.2f} s){kept}",
              flush=True)
    base = rows[0]["peak_bytes"]
    for row in rows:
        row["ratio"] = row["peak_bytes"] / base
    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if os.environ.get("OMP_NUM_THREADS") else ""
    result = {"command": threads + command_line(),
              "shape": args.shape, "dtype": args.dtype, "device": args.device, "batch": args.batch,
              "length": args.length, "measure": "ru_maxrss of a subprocess" if args.device == "cpu"
              else "torch.cuda.max_memory_allocated after the model is built",
              "rows": rows}
    for row in rows[1:]:
        print(f"{row['what']}: {row['ratio']:.3f}x the forward's peak")
    out = Path(args.out or RESULTS_DIR / f"memory_{args.device.split(':')[0]}_{args.shape}_{args.dtype}.json")
    result["history"] = earlier_results(out)
    write_result(out, result)


#: `pazo-bench memory`, `python -m pazo.bench.memory`, `python scripts/benchmark_memory.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
