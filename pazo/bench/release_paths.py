"""The two arithmetics of a zeroth-order step's release, timed on CPU in one process: the host path
(the per-example losses read once as Python floats, the clipped sum by `math.fsum`) and the device
path (the same in float64 tensors, the sum by `pazo.privacy.device_sum`), which CUDA uses.

    pazo-bench release [--setting digits] [--methods dpzero] [--rounds 300] [--warmup 20]
                       [--threads 1] [--clock cpu] [--out scripts/results/release_paths_cpu.json]

(or `python -m pazo.bench.release_paths`)

`releases_on_device` picks the host path on CPU; whether one arithmetic would do everywhere depends
on how much slower the device path is there (docs/design/exact-releases.md). For each method two
copies are built alike (the same config, weights, seed and batch) and the second is put on the
device path as the device-step tests put it (`method.on_device = True`: the code a CUDA step runs,
here on CPU tensors). Their steps alternate, host then device, for `--rounds` rounds after
`--warmup` untimed ones, so that a machine's drift hits both. Each row has each path's median step
time with its interquartile range, and, round by round, the device step over the host step and the
device step minus the host step (median and interquartile range).

`--clock cpu` (the default) times a step by the process's CPU time: on a machine shared with other
jobs a step's wall time is mostly its wait for a core, which says nothing of its arithmetic (one
torch thread: the process's CPU time is the step's). `--clock wall` times it by the wall clock, as
the other benchmarks do, for an idle machine.
"""
from __future__ import annotations

import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from pazo.bench import common, settings, timing
from pazo.bench.engines import alternate
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.errors import ConfigError, unknown_choice
from pazo.files.file_kinds import output_file
from pazo.methods import method_names

PATHS = ("host", "device")
CPU = torch.device("cpu")
#: `--clock`: how a step is timed
CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def path_steps(name: str, setting: str) -> dict:
    """path -> one step of method `name` per call (the step number its argument), each path its own
    copy of the method built alike, on the same synthetic batch."""
    steps = {}
    for path in PATHS:
        method = settings.build_benchmark_method(name, setting, CPU)[0]
        if not hasattr(method, "on_device"):   # (a plugin's zeroth-order step may have one path only)
            raise ConfigError(f"method {name} has no device path for its release (no `on_device`)")
        method.on_device = path == "device"
        steps[path] = method.step
    torch.manual_seed(2)
    x, y = settings.synthetic_inputs(setting, settings.SETTINGS[setting][3], CPU)
    return {path: (lambda t, step=step: step(x, y, t)) for path, step in steps.items()}


def quartiles(values: list[float], scale: float = 1.0) -> dict[str, float]:
    """The median and the interquartile range (25th and 75th percentiles) of `values`, times `scale`."""
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median * scale, "p25": low * scale, "p75": high * scale}


def compare_paths(name: str, setting: str, steps: dict, rounds: tuple[int, int], clock: str) -> dict:
    """One row: method `name`'s `steps` (`path_steps`) timed in turn by `clock` (`rounds`: untimed,
    timed), and the device path against the host's."""
    times = alternate(steps, CPU, *rounds, clock=CLOCKS[clock])
    host, device = times["host"], times["device"]
    return {"setting": setting, "method": name, "batch_size": settings.SETTINGS[setting][3], "rounds": rounds[1],
            "clock": clock,
            "host_step_ms": quartiles(host, 1e3), "device_step_ms": quartiles(device, 1e3),
            "paired_device_over_host": quartiles([d / h for h, d in zip(host, device)]),
            "paired_device_minus_host_us": quartiles([d - h for h, d in zip(host, device)], 1e6)}


def _parser(zeroth_order: list[str]) -> ArgumentParser:
    """`pazo-bench release`'s arguments (`zeroth_order`: the methods it may time, named in the help)."""
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--setting", default="digits", choices=list(settings.SETTINGS))
    parser.add_argument("--methods", default="dpzero",
                        help=f"zeroth-order methods, comma-separated ({', '.join(zeroth_order)})")
    parser.add_argument("--rounds", type=common.at_least(2), default=300,
                        help="timed rounds, each one step on each path (default 300)")
    parser.add_argument("--warmup", type=common.at_least(0), default=20, help="untimed rounds first (default 20)")
    parser.add_argument("--threads", type=common.at_least(1), default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--clock", default="cpu", choices=list(CLOCKS),
                        help="cpu: the process's CPU time (default; a shared machine); wall: the wall clock")
    parser.add_argument("--out", type=output_file, default=str(common.RESULTS_DIR / "release_paths_cpu.json"),
                        help="the result file (default the checkout's scripts/results/release_paths_cpu.json)")
    return parser


def main():
    zeroth_order = method_names("zeroth_order")   # (the registry's, a plugin's included)
    parser = _parser(zeroth_order)
    args = parser.parse_args()
    names = args.methods.split(",")
    unknown = [n for n in names if n not in zeroth_order]
    if unknown:
        parser.error(unknown_choice("method", unknown[0], zeroth_order))
    torch.set_num_threads(args.threads)
    try:   # every method built before any is timed: one without a device path is refused first
        steps = {name: path_steps(name, args.setting) for name in names}
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    rows = []
    for name in names:
        rows.append(compare_paths(name, args.setting, steps[name], (args.warmup, args.rounds), args.clock))
        ratio, host = rows[-1]["paired_device_over_host"], rows[-1]["host_step_ms"]["median"]
        print(f"{args.setting} {name}: host step {host:.3f} ms; device / host {ratio['median']:.3f} "
              f"(IQR {ratio['p25']:.3f}-{ratio['p75']:.3f})", flush=True)
    common.write_result(Path(args.out), timing.result_record(CPU, rows))


#: `pazo-bench release`, `python -m pazo.bench.release_paths`, `python scripts/benchmark_release_paths.py`.
cli = command(partial(common.run_main, "release_paths", main))


if __name__ == "__main__":
    cli()
