"""Tensor operations a zeroth-order step issues besides its floor's, counted, per setting and method.

    pazo-bench step-ops [--settings digits,cifar_shape,cifar10_nf224,tiny_imagenet_vit,imdb_lstm]
                        [--methods mezo,dpzero,pazo_m,pazo_p,pazo_s] [--engine inplace]
                        [--out scripts/results/step_ops_cpu.json]

(or `python -m pazo.bench.step_ops`, or `python scripts/count_step_ops.py`)

Every aten operation dispatched during one step (after two untimed ones) is counted under a
`TorchDispatchMode`, and so are those of the step's bare passes (its private no-grad forwards and
public gradients, as `pazo-bench methods` times them for the floor); the difference is the step's
own work: perturbing, restoring, updating, drawing directions, the basis, the release. On a GPU each
such operation costs a few microseconds of host time, which the device waits for when kernels are
short, so this count, which needs no GPU and does not depend on the machine's noise, is where a
step's time over its floor on a GPU starts (`pazo-bench profile --device cuda` measures the time
itself). On CPU, with private and public batches of 2 examples: the counts do not depend on the
batch sizes. Views count as operations (each is a dispatch, with its host time).

Switching train/eval mode is host time too but no operation: each row also has `mode_switch_us`,
the best of five `timeit` runs of a switch to eval mode and back, by `module.train()` and by
`FunctionalModel.set_training` (which the engines use), where the model's mode matters.
"""
from __future__ import annotations

import collections
import timeit
from functools import partial
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pazo.bench.common import RESULTS_DIR, run_main, write_result
from pazo.errors import unknown_choice
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.bench.settings import (SETTINGS, bare_passes, build_benchmark_method,
                                 set_batch_size, synthetic_inputs)
from pazo.bench.timing import result_record
from pazo.methods import method_info, method_names
BATCH = 2


class CountOps(TorchDispatchMode):
    """Counts the aten operations dispatched while it is active, by name."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count(fn) -> collections.Counter:
    with CountOps() as mode:
        fn()
    return mode.counts


def step_ops(setting: str, name: str, engine: str) -> dict:
    """One row: the step's operations, its floor's, and the difference by operation."""
    method, config, model = build_benchmark_method(name, setting, "cpu", engine,
                                                   extra=(f"method.public_batch_size={BATCH}",)
                                                   if method_info(name).uses_public else ())
    x, y = synthetic_inputs(setting, BATCH)
    for step in (1, 2):
        method.step(x, y, step)
    step = count(lambda: method.step(x, y, 3))
    bare = bare_passes(setting, "cpu", name, config, model, x, y)
    bare()
    floor = count(bare)
    extra = step.copy()
    extra.subtract(floor)
    module = model.module
    switches = {"module.train": lambda: (module.train(False), module.train(True)),
                "set_training": lambda: (model.set_training(False), model.set_training(True))}
    mode_switch_us = {k: min(timeit.repeat(fn, number=200, repeat=5)) / 200 * 1e6 for k, fn in switches.items()} \
        if model.train_mode_matters else None
    return {"setting": setting, "method": name, "engine": engine, "dim": model.dim, "parameters": len(model.params),
            "step_ops": sum(step.values()), "floor_ops": sum(floor.values()), "extra_ops": sum(extra.values()),
            "extra_by_op": dict(sorted(((k, v) for k, v in extra.items() if v), key=lambda kv: -kv[1])),
            "mode_switch_us": mode_switch_us}


def main():
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--settings", default="digits,cifar_shape,cifar10_nf224,tiny_imagenet_vit,imdb_lstm")
    parser.add_argument("--methods", default="mezo,dpzero,pazo_m,pazo_p,pazo_s")
    parser.add_argument("--engine", default="inplace", choices=["inplace", "vectorised"])
    parser.add_argument("--out", type=output_file, default=str(RESULTS_DIR / "step_ops_cpu.json"))
    args = parser.parse_args()
    settings, methods = args.settings.split(","), args.methods.split(",")
    for value, known, what in ((settings, SETTINGS, "setting"), (methods, method_names("zeroth_order"), "method")):
        unknown = [v for v in value if v not in known]
        if unknown:
            parser.error(unknown_choice(what, unknown[0], known))
    torch.set_num_threads(1)
    set_batch_size(BATCH)
    rows = []
    for setting in settings:
        for name in methods:
            row = step_ops(setting, name, args.engine)
            top = ", ".join(f"{k} {v}" for k, v in list(row["extra_by_op"].items())[:4])
            switch = row["mode_switch_us"]
            switch = f"  mode switch {switch['module.train']:.0f} / {switch['set_training']:.0f} us" if switch else ""
            print(f"{setting:18s} {name:8s} step {row['step_ops']:6d}  floor {row['floor_ops']:6d}  "
                  f"extra {row['extra_ops']:5d}  ({top}){switch}", flush=True)
            rows.append(row)
    write_result(Path(args.out), result_record(torch.device("cpu"), rows))


#: `pazo-bench step-ops`, `python -m pazo.bench.step_ops`, `python scripts/count_step_ops.py`.
cli = command(partial(run_main, "count_step_ops", main))


if __name__ == "__main__":
    cli()
