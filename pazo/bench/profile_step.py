"""How close a zeroth-order step can get to its floor on this machine: our DPZero step (in-place
engine; with its parameters packed into one flat buffer, as it runs, and moved one by one, as
before) beside a minimal hand-written one, each paired with its floor (two bare no-grad forwards).

    pazo-bench profile [--setting digits] [--device cpu] [--pairs 300] [--threads 1]
                       [--trace-steps 0] [--out scripts/results/zo_step_profile_<device>_<setting>.json]

(or `python -m pazo.bench.profile_step`, or `python scripts/profile_zo_step.py`)

The minimal step is the least a two-point step does on the live parameters: draw a seed and a
Gaussian direction (one buffer, the parameters' shapes; one draw per parameter on CPU, one for the
whole on CUDA), perturb +lam, forward, -2 lam, forward, +lam back, clip and sum the finite
differences (on Python floats, as the privatiser does), add one Gaussian noise draw, update: about
ten tensor operations and no bookkeeping. Its ratio to the floor is what the step's own work costs
at the least; the time of each of its operations (median over the pairs, taken between forwards,
where small operations run slower than in a tight loop; on CUDA the host's time to issue them,
the device's work being asynchronous) says where that goes. Not a training step of any method (no
accounting, no statistics): a yardstick for `pazo-bench methods`' paired ratios.

`--trace-steps N` also runs N of our steps under `torch.profiler` (CPU, and CUDA where it runs) and
records its operators per step, sorted by host time: where our step's time over the minimal one's
goes, on a GPU too (the forwards' operators are in it, so compare with the floor's).
"""
from __future__ import annotations

import math
import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from pazo.bench.common import RESULTS_DIR, at_least, command_line, git_commit, machine_details, run_main, write_result
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.bench.settings import SETTINGS, build_benchmark_method, device_or_exit, synthetic_inputs
from pazo.bench.timing import device_name, sync
OPS = ["seed", "manual_seed", "draw", "perturb", "forward+", "move", "forward-", "restore", "clip_sum", "noise",
       "update"]


def minimal_step(model, x, y, lam=1e-2, lr=1e-3, clip=1.0):
    """A bare DPZero step on the live parameters; returns the closure and its per-op timings."""
    params, device = model.params, model.device
    direction = torch.empty(model.dim, dtype=params[0].dtype, device=device)
    views = [v.view(p.shape) for v, p in zip(direction.split(model.numels), params)]
    rng, gen, noise_gen = np.random.default_rng(0), torch.Generator(device), torch.Generator().manual_seed(1)
    pieces = views if device.type == "cpu" else [direction]
    clock = time.perf_counter

    @torch.no_grad()
    def step(times: list[float]):
        t = [clock()]
        seed = int(rng.integers(0, 2**63 - 1))
        t.append(clock())
        gen.manual_seed(seed)
        t.append(clock())
        for v in pieces:
            v.normal_(generator=gen)
        t.append(clock())
        torch._foreach_add_(params, views, alpha=lam)
        t.append(clock())
        plus = model.current_losses(x, y)
        t.append(clock())
        torch._foreach_add_(params, views, alpha=-2 * lam)
        t.append(clock())
        minus = model.current_losses(x, y)
        t.append(clock())
        torch._foreach_add_(params, views, alpha=lam)
        t.append(clock())
        total = math.fsum(min(max((a - b) / (2 * lam), -clip), clip) for a, b in zip(plus.tolist(), minus.tolist()))
        t.append(clock())
        s = (total + float(torch.randn((), generator=noise_gen, dtype=torch.float64)) * clip) / len(y)
        t.append(clock())
        torch._foreach_add_(params, views, alpha=-lr * s)
        t.append(clock())
        times[:] = [b - a for a, b in zip(t, t[1:])]
    return step


def stepper(method, x, y):
    """One training step of `method` on the batch per call, with the step counter going on."""
    counter = iter(range(1, 10**9))
    return lambda: method.step(x, y, next(counter))


def profiled_ops(fn, device, steps: int, top: int = 40) -> list[dict]:
    """`steps` calls of `fn` under torch.profiler: its operators (their own host time per step, and
    the device time of the kernels they launched), the `top` by host time."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            fn()
        sync(device)
    rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [{"op": e.key, "calls_per_step": e.count / steps, "self_host_us_per_step": e.self_cpu_time_total / steps,
             "device_us_per_step": getattr(e, "device_time_total", 0) / steps} for e in rows]


def main():
    args = _parser().parse_args()
    torch.set_num_threads(args.threads)
    device = device_or_exit(args.device)
    x, y = synthetic_inputs(args.setting, SETTINGS[args.setting][3], device)
    op_times, per_op = [], []
    jobs, bare = build_jobs(args.setting, device, x, y, op_times)
    for fn, _ in jobs.values():
        for _ in range(args.warmup):
            fn()
    rows = {}
    for name, (fn, model) in jobs.items():
        record_ops = (lambda: per_op.append(list(op_times))) if name == "minimal" else None
        rows[name] = paired_against_floor(fn, model, x, y, device, args.pairs, record_ops)
    ops_us = {op: statistics.median(r[k] for r in per_op) * 1e6 for k, op in enumerate(OPS)}
    result = {"command": command_line(), "commit": git_commit(),
              "machine": machine_details(device=device_name(device), threads=torch.get_num_threads()),
              "setting": args.setting, "dim": bare.dim, "batch_size": len(y), "threads": args.threads,
              "pairs": args.pairs, "steps": rows, "minimal_step_op_us": ops_us}
    if args.trace_steps:
        result["ours_profiled_ops"] = profiled_ops(jobs["ours"][0], device, args.trace_steps)
    print_profile(rows, ops_us, result.get("ours_profiled_ops", []), device)
    out = Path(args.out or RESULTS_DIR / f"zo_step_profile_{device.type}_{args.setting}.json")
    write_result(out, result)


def _parser() -> ArgumentParser:
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--setting", default="digits", choices=list(SETTINGS))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--pairs", type=at_least(1), default=300)
    parser.add_argument("--warmup", type=at_least(0), default=20)
    parser.add_argument("--threads", type=at_least(1), default=1)
    parser.add_argument("--trace-steps", type=at_least(0), default=0)
    parser.add_argument("--out", type=output_file, default=None)
    return parser


def build_jobs(setting: str, device, x, y, op_times: list) -> tuple[dict, object]:
    """name -> (step, its model): ours with packed parameters, ours without, and the minimal step
    (its per-op times into `op_times`); and the minimal step's model."""
    jobs = {}
    for name in ("ours", "ours_unpacked"):
        method, _, model = build_benchmark_method("dpzero", setting, device, "inplace")
        if name == "ours_unpacked":
            model._packed = None          # the parameters stay views of the buffer, but are moved one by one
        jobs[name] = (stepper(method, x, y), model)
    _, _, bare = build_benchmark_method("dpzero", setting, device, "inplace")
    minimal = minimal_step(bare, x, y)
    jobs["minimal"] = (lambda: minimal(op_times), bare)
    return jobs, bare


def paired_against_floor(fn, model, x, y, device, pairs: int, after_step=None) -> dict:
    """`pairs` times: two bare no-grad forwards (the floor), then one step; the median of the step
    over its floor pair by pair (the machine's drift cancels), and of each alone. `after_step` runs
    after each step (the minimal step's op times)."""
    timed = []
    for _ in range(pairs):
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            model.current_losses(x, y)
            model.current_losses(x, y)
        sync(device)
        t1 = time.perf_counter()
        fn()
        sync(device)
        timed.append((time.perf_counter() - t1, t1 - t0))
        if after_step is not None:
            after_step()
    return {"paired_floor_ratio": statistics.median(s / f for s, f in timed),
            "median_step_ms": statistics.median(s for s, _ in timed) * 1e3,
            "median_floor_ms": statistics.median(f for _, f in timed) * 1e3}


def print_profile(rows: dict, ops_us: dict, profiled: list[dict], device) -> None:
    """Each job's step against its floor, the minimal step's time per op, the most costly profiled ops."""
    for name, r in rows.items():
        print(f"{name:8s} x floor (paired) {r['paired_floor_ratio']:.3f}  step {r['median_step_ms']:.2f} ms  "
              f"floor {r['median_floor_ms']:.2f} ms")
    print("minimal step, us per op" + (" (host)" if device.type == "cuda" else "") + ":",
          ", ".join(f"{k} {v:.0f}" for k, v in ops_us.items()))
    for row in profiled[:15]:
        print(f"  {row['op'][:40]:40s} calls {row['calls_per_step']:7.1f}  host {row['self_host_us_per_step']:8.0f} us"
              f"  device {row['device_us_per_step']:8.0f} us")


#: `pazo-bench profile`, `python -m pazo.bench.profile_step`, `python scripts/profile_zo_step.py`.
cli = command(partial(run_main, "profile_zo_step", main))


if __name__ == "__main__":
    cli()
