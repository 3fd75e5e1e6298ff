"""The two zeroth-order engines side by side, in one process: the evidence for `engine.name=auto`.

    pazo-bench engines [--settings digits,cifar_shape] [--methods mezo,dpzero,...]
                       [--iters 20] [--threads 1] [--out scripts/results/engines_<device>.json]
                       [--batch-size B] [--public-grads]

(or `python -m pazo.bench.engines`, or `python scripts/benchmark_engines.py`)

For each setting and method (default: every registered zeroth-order method), one method object per
engine (same config, model weights, data and seed) is built in the same process, and their steps
alternate: vectorised, in-place, vectorised, ...
The result is the median over `iters` pairs of (vectorised step time / in-place step time), which
holds on a machine whose speed drifts, as a shared one does; per-engine medians are reported beside
it. Synthetic inputs of each setting's shapes (`pazo.bench.settings`; `--batch-size` as in
`pazo-bench methods`, for smoke runs).

With `--public-grads`, PAZO-P's k public gradients of each setting instead (its config's k batches of
b' synthetic public examples, a bare model in train mode): taken together in one pass against one by
one (`FunctionalModel.mean_loss_grads(batched=True / False)`), alternated the same way; the evidence
for `FunctionalModel.grads_together_by_default`.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

from pazo.bench import common, settings, timing
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.methods import method_names

def alternate(ways: dict, device: torch.device, warmup: int, iters: int,
              clock=time.perf_counter) -> dict[str, list[float]]:
    """Each way's step times by `clock` (wall time, or the process's CPU time), the ways run in
    turn (a, b, a, b, ...) so that drift hits both."""
    times = {w: [] for w in ways}
    for i in range(warmup + iters):
        for way, step in ways.items():
            timing.sync(device)
            t0 = clock()
            step(i + 1)
            timing.sync(device)
            if i >= warmup:
                times[way].append(clock() - t0)
    return times


def paired(times: dict[str, list[float]], first: str, second: str) -> float:
    return statistics.median(a / b for a, b in zip(times[first], times[second]))


def compare(name: str, setting: str, device: torch.device, warmup: int, iters: int) -> dict:
    methods = {e: settings.build_benchmark_method(name, setting, device, e)[0] for e in settings.ENGINE_NAMES}
    torch.manual_seed(2)
    x, y = settings.synthetic_inputs(setting, settings.SETTINGS[setting][3], device)
    times = alternate({e: (lambda t, m=m: m.step(x, y, t)) for e, m in methods.items()}, device, warmup, iters)
    return {"setting": setting, "method": name, "iters": iters,
            **{f"{e}_median_s": statistics.median(t) for e, t in times.items()},
            "paired_vectorised_over_inplace": paired(times, "vectorised", "inplace")}


def compare_public_grads(setting: str, device: torch.device, warmup: int, iters: int) -> dict:
    """PAZO-P's k public gradients of the setting (its config's k and b'), taken together and one by
    one in turn on the same batches; the model's own default beside the paired ratio."""
    _, config, model = settings.build_benchmark_method("pazo_p", setting, device)
    torch.manual_seed(2)
    data = [settings.synthetic_inputs(setting, config.public_batch_size, device) for _ in range(config.k)]
    times = alternate({"together": lambda t: model.mean_loss_grads(data, batched=True),
                       "one_by_one": lambda t: model.mean_loss_grads(data, batched=False)}, device, warmup, iters)
    return {"setting": setting, "method": "pazo_p public gradients", "batches": config.k,
            "public_batch_size": config.public_batch_size, "iters": iters,
            "model_default": "together" if model.grads_together_by_default else "one_by_one",
            **{f"{w}_median_s": statistics.median(t) for w, t in times.items()},
            "paired_together_over_one_by_one": paired(times, "together", "one_by_one")}


def main():
    zeroth_order = method_names("zeroth_order")   # (the registry's, a plugin's included)
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--settings", default="digits,cifar_shape")
    parser.add_argument("--methods", default=",".join(zeroth_order))
    parser.add_argument("--iters", type=common.at_least(1), default=20)
    parser.add_argument("--warmup", type=common.at_least(0), default=2)
    parser.add_argument("--threads", type=common.at_least(0), default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=output_file, default=None)
    parser.add_argument("--batch-size", type=common.at_least(1), default=None,
                        help="every setting's batch size (smoke runs; default: each setting's own)")
    parser.add_argument("--public-grads", action="store_true",
                        help="PAZO-P's k public gradients together against one by one, instead of the engines")
    args = parser.parse_args()
    unknown = sorted(set(args.settings.split(",")) - set(settings.SETTINGS)) + \
        sorted(set(args.methods.split(",")) - set(zeroth_order))
    if unknown:
        sys.exit(f"benchmark_engines: unknown setting or method {', '.join(unknown)}; settings: "
                 f"{', '.join(settings.SETTINGS)}; methods: {', '.join(zeroth_order)}")
    device = settings.device_or_exit(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.batch_size:
        settings.set_batch_size(args.batch_size)
    setting_names = args.settings.split(",")
    if args.public_grads:
        jobs = [lambda s=s: compare_public_grads(s, device, args.warmup, args.iters) for s in setting_names]
    else:
        jobs = [lambda s=s, n=n: compare(n, s, device, args.warmup, args.iters)
                for s in setting_names for n in args.methods.split(",")]
    rows = []
    for job in jobs:
        rows.append(job())
        print(json.dumps(rows[-1]), flush=True)
    kind = "public_grads" if args.public_grads else "engines"
    out = Path(args.out or common.RESULTS_DIR / f"{kind}_{device.type}.json")
    common.write_result(out, timing.result_record(device, rows))
    if args.public_grads:
        print("\n| setting | k x b' | together s | one by one s | together / one by one (paired) | model's default |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['setting']} | {r['batches']} x {r['public_batch_size']} | {r['together_median_s']:.4f} | "
                  f"{r['one_by_one_median_s']:.4f} | {r['paired_together_over_one_by_one']:.2f} | "
                  f"{r['model_default']} |")
        return
    print("\n| setting | method | vectorised s/step | in-place s/step | vectorised / in-place (paired) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['method']} | {r['vectorised_median_s']:.4f} | {r['inplace_median_s']:.4f} | "
              f"{r['paired_vectorised_over_inplace']:.2f} |")


#: `pazo-bench engines`, `python -m pazo.bench.engines`, `python scripts/benchmark_engines.py`.
cli = command(partial(common.run_main, "benchmark_engines", main))


if __name__ == "__main__":
    cli()
