"""CPU threads against step time: the evidence for `train.threads=auto` (`pazo.threads`).

    pazo-bench threads [--settings digits,cifar_shape,cifar10_nf32,imdb_lstm,tiny_imagenet_vit]
                       [--methods sgd,dpsgd,pazo_m] [--counts 1,2,<cores>] [--iters 10] [--warmup 2]
                       [--batch-size B] [--no-train] [--train-runs 3] [--out scripts/results/threads_cpu.json]

For each setting, method and thread count, one subprocess (`OMP_NUM_THREADS` set, so torch starts
with that many) times `iters` steps on synthetic inputs of the setting's shapes (the median and
25th/75th percentiles). Then, unless `--no-train`, the whole default run (`make run`: PAZO-M on
digits, `python -m pazo.train`) is timed end to end at each count and at `train.threads=auto` with
no `OMP_NUM_THREADS`. Each row records what `auto` would pick for the setting's model and how far
that is from the best count measured (`auto_over_best`: the goal is at most about 1.1).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from pazo.bench.common import REPO_ROOT, RESULTS_DIR, at_least, machine_details, run_main, write_result
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.errors import unknown_choice

DEFAULT_SETTINGS = "digits,cifar_shape,cifar10_nf32,imdb_lstm,tiny_imagenet_vit"


def time_job(setting: str, method: str, iters: int, warmup: int, batch_size: int | None) -> dict:
    """In this process (its threads from the environment): the method's step times on the setting."""
    import torch

    from pazo.bench.settings import SETTINGS, build_benchmark_method, set_batch_size, synthetic_inputs
    from pazo.bench.timing import time_steps

    if batch_size:
        set_batch_size(batch_size)
    m, _, model = build_benchmark_method(method, setting, torch.device("cpu"))
    x, y = synthetic_inputs(setting, SETTINGS[setting][3], "cpu")
    counter = iter(range(1, 10**9))
    row = time_steps(lambda: m.step(x, y, next(counter)), torch.device("cpu"), warmup, iters)
    return {**row, "threads": torch.get_num_threads(), "dim": model.dim, "batch_size": SETTINGS[setting][3]}


def run_isolated(job: dict, threads: int, args) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "pazo.bench.threads", "--job", json.dumps(job), "--iters", str(args.iters),
           "--warmup", str(args.warmup), *(["--batch-size", str(args.batch_size)] if args.batch_size else [])]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
    return json.loads(lines[-1])


def time_default_run(threads: int | None) -> dict:
    """Seconds of the whole default run (`make run`), with OMP_NUM_THREADS=threads, or none and
    train.threads=auto; what the run's summary says it used."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pazo.train", "logger.mode=disabled", f"hydra.run.dir={tmp}/run",
                               f"privacy.cache_dir={tmp}/cache"], capture_output=True, text=True, env=env,
                              cwd=REPO_ROOT)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]}
        summary = json.loads((Path(tmp) / "run" / "summary.json").read_text())
    return {"seconds": seconds, "threads_used": summary["threads"], "median_s_per_iter": summary["median_s_per_iter"]}


def auto_pick(dim: int) -> int:
    """What `train.threads=auto` picks for a model of `dim` parameters on this machine now (between
    jobs: the bench itself idle)."""
    from pazo.threads import choose_threads

    return choose_threads("auto", dim, environ={})[0]


def time_default_runs(counts: list[int], runs: int) -> dict:
    """The default run `runs` times at each count and at auto, interleaved (1, 2, ..., auto, 1, 2,
    ...) so that a drift of the machine's speed falls on every column alike: per column the median,
    min and max seconds, and the thread counts auto used."""
    columns = [str(n) for n in counts] + ["auto"]
    timed: dict[str, list[dict]] = {c: [] for c in columns}
    for _ in range(runs):
        for c in columns:
            timed[c].append(time_default_run(None if c == "auto" else int(c)))
    out = {}
    for c, rows in timed.items():
        seconds = [r["seconds"] for r in rows if "seconds" in r]
        errors = [r["error"] for r in rows if "error" in r]
        out[c] = {"runs": len(seconds), **({"errors": errors} if errors else {})}
        if seconds:
            out[c].update(seconds=float(np.median(seconds)), min_s=min(seconds), max_s=max(seconds),
                          threads_used=sorted({r["threads_used"]["count"] for r in rows if "threads_used" in r}))
    return out


def main():
    args = _parser().parse_args()
    if args.job:
        job = json.loads(args.job)
        print(json.dumps(time_job(job["setting"], job["method"], args.iters, args.warmup, args.batch_size)))
        return
    from pazo.threads import usable_cores

    counts = _thread_counts(args.counts)
    _refuse_unknown_settings(args.settings)
    rows, load = [], [os.getloadavg()]
    for setting in args.settings.split(","):
        rows += [time_counts(setting, method, counts, args) for method in args.methods.split(",")]
        load.append(os.getloadavg())
    train = None
    if not args.no_train:
        train = time_default_runs(counts, args.train_runs)
        seconds = {k: v["seconds"] for k, v in train.items() if "seconds" in v}
        if seconds:
            best = min((k for k in seconds if k != "auto"), key=seconds.get, default=None)
            train["auto_over_best"] = seconds["auto"] / seconds[best] if best and "auto" in seconds else None
        load.append(os.getloadavg())
    out = Path(args.out or RESULTS_DIR / "threads_cpu.json")
    write_result(out, {"machine": machine_details(device=f"cpu x{os.cpu_count()}", usable_cores=usable_cores(),
                                                  load_averages=load,
                                                  load_average_median=float(np.median([a[0] for a in load]))),
                       **({"note": args.note} if args.note else {}), "counts": counts, "iters": args.iters,
                       "results": rows, "default_run": train})
    print_summary(rows, train)


def _parser() -> ArgumentParser:
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--settings", default=DEFAULT_SETTINGS)
    parser.add_argument("--methods", default="sgd,dpsgd,pazo_m")
    parser.add_argument("--counts", default=None, help="thread counts (default: 1, 2 and the machine's cores)")
    parser.add_argument("--iters", type=at_least(1), default=10)
    parser.add_argument("--warmup", type=at_least(0), default=2)
    parser.add_argument("--batch-size", type=at_least(1), default=None,
                        help="every setting's batch size (default: each setting's own)")
    parser.add_argument("--no-train", action="store_true", help="skip timing the whole default run")
    parser.add_argument("--train-runs", type=at_least(1), default=3,
                        help="how many times the default run is timed at each count and at auto (interleaved)")
    parser.add_argument("--out", type=output_file, default=None)
    parser.add_argument("--note", default=None, help="a note for the result file (e.g. the machine's load)")
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)  # internal: one job in this process
    return parser


def _thread_counts(text: str | None) -> list[int]:
    """--counts as sorted distinct counts (default 1, 2 and the usable cores); one error line and
    exit 2 where one is not an integer >= 1."""
    from pazo.threads import usable_cores

    try:
        counts = sorted({int(c) for c in text.split(",")} if text else {1, 2, usable_cores()})
        if min(counts) < 1:
            raise ValueError
    except ValueError:
        print(f"pazo: error: --counts must be integers >= 1, got {text!r}", file=sys.stderr)
        sys.exit(2)
    return counts


def _refuse_unknown_settings(settings: str) -> None:
    """One error line and exit 2 where --settings names a setting the bench does not have."""
    from pazo.bench.settings import SETTINGS

    unknown = sorted(set(settings.split(",")) - set(SETTINGS))
    if unknown:
        print(f"pazo: error: {unknown_choice('setting', unknown[0], SETTINGS)}", file=sys.stderr)
        sys.exit(2)


def time_counts(setting: str, method: str, counts: list[int], args) -> dict:
    """One method on one setting at each thread count (a subprocess each, printed as it ends), the
    best count and how `auto`'s pick compares with it."""
    by_count = {}
    for n in counts:
        by_count[n] = run_isolated({"setting": setting, "method": method}, n, args)
        print(json.dumps({"setting": setting, "method": method, "threads": n, **by_count[n]}), flush=True)
    medians = {n: r["median_s"] for n, r in by_count.items() if "median_s" in r}
    row = {"setting": setting, "method": method, "by_threads": by_count}
    if medians:
        best = min(medians, key=medians.get)
        dim = next(r["dim"] for r in by_count.values() if "dim" in r)
        auto = auto_pick(dim)
        row.update(best_threads=best, auto_threads=auto,
                   auto_over_best=medians[auto] / medians[best] if auto in medians else None)
    return row


def print_summary(rows: list[dict], train: dict | None) -> None:
    """One line per setting and method (time at each count, best, auto) and the default run's times."""
    for r in rows:
        meds = {n: v.get("median_s") for n, v in r["by_threads"].items()}
        print(f"{r['setting']:>18} {r['method']:>7} " + " ".join(
            f"{n}t {m:.4f}s" if m else f"{n}t failed" for n, m in meds.items())
            + (f"  best {r.get('best_threads')}, auto {r.get('auto_threads')} "
               f"({r['auto_over_best']:.2f}x best)" if r.get("auto_over_best") else ""))
    if train:
        print("default run:", {k: (round(v["seconds"], 1) if isinstance(v, dict) and "seconds" in v else v)
                               for k, v in train.items()})


#: `pazo-bench threads`, `python -m pazo.bench.threads`.
cli = command(partial(run_main, "benchmark_threads", main))


if __name__ == "__main__":
    cli()
