"""Step time of one run on 1, 2, ... processes (`torchrun`, docs/design/distributed.md): what a
data-parallel zeroth-order run gains, and what its ranks exchange.

    pazo-bench scaling [--methods pazo_m,dp_zo] [--world-sizes 1,2] [--steps 100] [--repeats 3]
                       [--batch-size 64] [--device cpu] [--out scripts/results/scaling_cpu.json]

Each measurement is the run a user launches, on digits: `torchrun --standalone --nproc_per_node=N -m
pazo.train method=M train.steps=S train.batch_size=B ...` (one process: `python -m pazo.train`),
with one CPU thread per process (OMP_NUM_THREADS=1, train.threads=1) and the same global batch at
every N (each rank takes its shard of it). The run's summary gives its median step time
(`median_s_per_iter`) and the bytes a rank exchanged per step (`distributed.rank_bytes_per_step`; a
one-process run exchanges nothing). Each (method, N) runs `--repeats` times, the world sizes
interleaved (1, 2, 1, 2, ...) so that a drift of the machine's speed falls on every N alike; the
file records per N the median step time over the repeats with their least and greatest, and the
efficiency t1 / (N tN) (1: N processes take 1/N of one's time). `--device cuda` puts each rank on
its own GPU (LOCAL_RANK; the ranks still exchange their few integers over gloo, on the host).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from pazo.bench.common import RESULTS_DIR, at_least, comma_separated, machine_details, run_main, write_result
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.errors import ConfigError
from pazo.files.file_kinds import output_file

DEFAULT_METHODS = "pazo_m,dp_zo"
DATASET = "digits"
#: a run that has not ended after this long is stopped and recorded as failed (a hung rank ends
#: sooner: the runs' `train.distributed_timeout_s`)
RUN_TIMEOUT_S = 900
EXCHANGE_TIMEOUT_S = 60


def sharded_methods() -> list[str]:
    """The methods a run on several processes takes (their batch shards add exactly), by the registry."""
    from pazo.methods import METHODS

    return [name for name, info in METHODS.items() if info.cls.shards_batches]


def sharded_method(text: str) -> str:
    """An argparse type: a method that runs on several processes (else argparse's one line, saying
    whether the name is no method at all or one that runs on one process only)."""
    from pazo.methods import method_names

    choices = sharded_methods()
    if text not in choices:
        why = "does not run on several processes yet" if text in method_names() else "is not a method"
        raise argparse.ArgumentTypeError(f"{text!r} {why}; choices: {', '.join(choices)}")
    return text


def run_overrides(method: str, steps: int, batch_size: int, device: str, run_dir: Path, cache: Path) -> list[str]:
    """The run's command-line overrides: the method on digits, one thread, nothing but the run directory written."""
    from pazo.methods import method_info

    return [f"dataset={DATASET}", f"method={method}", f"train.steps={steps}", f"train.batch_size={batch_size}",
            f"device={device}", "train.threads=1", "train.evals_per_epoch=0", "train.save_model=false",
            f"train.distributed_timeout_s={EXCHANGE_TIMEOUT_S}", "logger.report_to=[]",
            *([] if method_info(method).private else ["privacy=none"]),
            f"privacy.cache_dir={cache}", f"hydra.run.dir={run_dir}"]


def launch_command(world_size: int) -> list[str]:
    """How this Python starts a run on `world_size` processes (`torchrun` is `torch.distributed.run`;
    `--standalone`: a free port of this machine, so that runs beside others do not collide)."""
    if world_size == 1:
        return [sys.executable, "-m", "pazo.train"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
            "-m", "pazo.train"]


def shown_command(world_size: int, overrides: list[str]) -> str:
    """The run's command as a user types it (the run's directory and cache left out)."""
    head = "pazo-train" if world_size == 1 else f"torchrun --standalone --nproc_per_node={world_size} -m pazo.train"
    kept = [o for o in overrides if not o.startswith(("hydra.run.dir=", "privacy.cache_dir="))]
    return "OMP_NUM_THREADS=1 " + " ".join([head, *map(shlex.quote, kept)])


def one_run(method: str, world_size: int, args, scratch: Path, index: int) -> dict:
    """One run of `method` on `world_size` processes: its median step time and the bytes a rank
    exchanged per step, from its summary; or what went wrong."""
    run_dir = scratch / f"{method}-{world_size}-{index}"
    overrides = run_overrides(method, args.steps, args.batch_size, args.device, run_dir, scratch / "cache")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    started = time.perf_counter()
    status, stderr = run_process_group([*launch_command(world_size), *overrides], env, scratch)
    wall = time.perf_counter() - started
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    if status != 0 or summary.get("status") != "finished":
        last = (stderr.strip().splitlines() or [f"exit {status}"])[-1][:300]
        return {"error": f"exit {status}: {last}"}
    block = summary.get("distributed") or {}
    return {"median_s": summary["median_s_per_iter"], "wall_s": wall,
            "rank_bytes_per_step": block.get("rank_bytes_per_step", 0.0),
            "world_size_recorded": block.get("world_size", 1), "threads": summary["threads"]["count"],
            "command": shown_command(world_size, overrides)}


def run_process_group(cmd: list[str], env: dict, cwd: Path) -> tuple[int | None, str]:
    """`cmd` in a process group of its own (torchrun and its ranks), waited on for at most
    RUN_TIMEOUT_S; stopped with every process it started when it runs past that, or when this
    benchmark is interrupted. (exit status or None, its stderr)."""
    with subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            _, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
            return proc.returncode, stderr
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None, f"still running after {RUN_TIMEOUT_S} s: stopped"
        except BaseException:   # Ctrl-C, SIGTERM: no rank is left running
            os.killpg(proc.pid, signal.SIGKILL)
            raise


def measure(methods: list[str], world_sizes: list[int], repeats: int, run) -> tuple[dict, list]:
    """`run(method, world_size, index)` for every method, repeat and world size, the world sizes
    interleaved within each repeat; (method, N) -> its runs, and the load averages between rounds."""
    runs: dict[tuple[str, int], list[dict]] = {(m, n): [] for m in methods for n in world_sizes}
    load = [os.getloadavg()]
    for method in methods:
        for index in range(repeats):
            for n in world_sizes:
                row = run(method, n, index)
                runs[(method, n)].append(row)
                shown = f"{row['median_s']:.4f} s/step" if "median_s" in row else row["error"]
                print(f"{method:8s} {n} process(es), repeat {index + 1}/{repeats}: {shown}", flush=True)
            load.append(os.getloadavg())
    return runs, load


def scaling_rows(runs: dict[tuple[str, int], list[dict]]) -> list[dict]:
    """One row per (method, world size): the median step time over its repeats with the least and
    the greatest, the bytes a rank exchanged per step, and against the method's one-process median
    the speedup t1 / tN and the efficiency t1 / (N tN) (None without a one-process median)."""
    rows = []
    for (method, n), done in runs.items():
        times = [r["median_s"] for r in done if "median_s" in r]
        row = {"method": method, "world_size": n, "repeats": len(times)}
        if times:
            row.update(median_s=statistics.median(times), min_s=min(times), max_s=max(times), runs_s=times,
                       rank_bytes_per_step=statistics.median(r["rank_bytes_per_step"] for r in done if "median_s" in r),
                       command=next(r["command"] for r in done if "command" in r))
        errors = [r["error"] for r in done if "error" in r]
        if errors:
            row["errors"] = errors
        rows.append(row)
    for row in rows:
        one = next((r for r in rows if r["method"] == row["method"] and r["world_size"] == 1 and "median_s" in r), None)
        if one and "median_s" in row:
            row["speedup"] = one["median_s"] / row["median_s"]
            row["efficiency"] = row["speedup"] / row["world_size"]
    return rows


def checked_device(device: str, world_sizes: list[int]) -> str:
    """The device every rank runs on, checked before any run: CUDA present, and a GPU for each rank
    of the largest world size (each rank takes its LOCAL_RANK's). A ConfigError otherwise."""
    from pazo.run.build import resolve_device

    device = resolve_device(device, "--device ").type
    if device == "cuda":
        import torch

        have, need = torch.cuda.device_count(), max(world_sizes)
        if have < need:
            raise ConfigError(f"--device cuda with --world-sizes up to {need} needs {need} GPUs (one per process); "
                              f"this machine has {have}")
    return device


def crowded_note(world_sizes: list[int], device: str) -> str | None:
    """A note, where a world size has more processes than this machine's cores (on CPU): allowed, but
    such a run's processes take turns on the cores, and its times say so."""
    from pazo.threads import usable_cores

    cores, most = usable_cores(), max(world_sizes)
    if device != "cpu" or most <= cores:
        return None
    return f"{most} processes on {cores} usable core(s): the processes share cores, so their step times include waiting"


def parse_args():
    methods = sharded_methods()
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--methods", type=comma_separated(sharded_method), default=DEFAULT_METHODS.split(","),
                        help=f"methods that run on several processes (default {DEFAULT_METHODS}; "
                             f"choices: {', '.join(methods)})")
    parser.add_argument("--world-sizes", type=comma_separated(at_least(1)), default=[1, 2],
                        help="numbers of processes, 1 among them (default 1,2)")
    parser.add_argument("--steps", type=at_least(2), default=100, help="steps per run (default 100)")
    parser.add_argument("--repeats", type=at_least(1), default=3, help="runs of each method and world size (default 3)")
    parser.add_argument("--batch-size", type=at_least(1), default=64,
                        help="the global expected batch size, the same at every world size (default 64)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"],
                        help="cpu (default); cuda: a GPU per process; auto: cuda where there is one")
    parser.add_argument("--out", type=output_file, default=None,
                        help="the result file (default the checkout's scripts/results/scaling_<device>.json)")
    parser.add_argument("--note", default=None, help="a note for the result file (e.g. the machine's load)")
    return parser, parser.parse_args()


def main():
    parser, args = parse_args()
    world_sizes = sorted(set(args.world_sizes))
    if 1 not in world_sizes:
        parser.error("--world-sizes must include 1: the speed-up and the efficiency are measured against one process")
    try:
        device = checked_device(args.device, world_sizes)
    except ConfigError as err:
        parser.error(str(err))
    note = crowded_note(world_sizes, device)
    if note:
        print(f"pazo: note: {note}", file=sys.stderr)
    methods = list(dict.fromkeys(args.methods))
    with tempfile.TemporaryDirectory(prefix="pazo-scaling-") as tmp:
        counter = iter(range(10**9))
        runs, load = measure(methods, world_sizes, args.repeats,
                             lambda m, n, i: one_run(m, n, args, Path(tmp), next(counter)))
    rows = scaling_rows(runs)
    import torch   # (its version, in the file's machine)

    from pazo.threads import usable_cores

    out = Path(args.out or RESULTS_DIR / f"scaling_{device}.json")
    notes = [n for n in (args.note, note) if n]
    write_result(out, {"machine": machine_details(device=f"{device} x{os.cpu_count()}" if device == "cpu" else
                                                  f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}",
                                                  usable_cores=usable_cores(), threads_per_process=1,
                                                  load_averages=load),
                       **({"note": "; ".join(notes)} if notes else {}),
                       "dataset": DATASET, "batch_size": args.batch_size, "steps": args.steps,
                       "repeats": args.repeats, "world_sizes": world_sizes, "results": rows})
    for row in rows:
        print(f"{row['method']:8s} {row['world_size']} process(es): "
              + (f"{row['median_s']:.4f} s/step ({row['min_s']:.4f}-{row['max_s']:.4f}), "
                 f"{row['rank_bytes_per_step']:.0f} bytes/step, efficiency {row.get('efficiency', float('nan')):.2f}"
                 if "median_s" in row else "failed: " + row["errors"][-1]))


#: `pazo-bench scaling`, `python -m pazo.bench.scaling`, `python scripts/benchmark_scaling.py`.
cli = command(partial(run_main, "benchmark_scaling", main))


if __name__ == "__main__":
    cli()
