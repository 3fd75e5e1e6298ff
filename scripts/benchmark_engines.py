"""The two zeroth-order engines side by side, in one process: the evidence for `engine.name=auto`.

    python scripts/benchmark_engines.py [--settings digits,cifar_shape] [--methods mezo,dpzero,pazo_m,pazo_p,pazo_s]
                                        [--iters 20] [--threads 1] [--out scripts/results/engines_<device>.json]
                                        [--batch-size B]

For each setting and method, one method object per engine (same config, model weights, data and
seed) is built in the same process, and their steps alternate: vectorised, in-place, vectorised, ...
The result is the median over `iters` pairs of (vectorised step time / in-place step time), which
holds on a machine whose speed drifts, as a shared one does; per-engine medians are reported beside
it. Synthetic inputs of each setting's shapes (see benchmark_methods.py; `--batch-size` as there, for
smoke runs).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchmark_methods as bm  # noqa: E402

ZEROTH_ORDER = ["mezo", "dpzero", "pazo_m", "pazo_p", "pazo_s"]


def compare(name: str, setting: str, device: torch.device, warmup: int, iters: int) -> dict:
    methods = {e: bm.build_benchmark_method(name, setting, device, e)[0] for e in bm.ENGINE_NAMES}
    torch.manual_seed(2)
    x, y = bm.synthetic_inputs(setting, bm.SETTINGS[setting][3], device)
    times = {e: [] for e in methods}
    for i in range(warmup + iters):
        for engine, method in methods.items():
            bm.sync(device)
            t0 = time.perf_counter()
            method.step(x, y, i + 1)
            bm.sync(device)
            if i >= warmup:
                times[engine].append(time.perf_counter() - t0)
    ratios = [v / p for v, p in zip(times["vectorised"], times["inplace"])]
    return {"setting": setting, "method": name, "iters": iters,
            **{f"{e}_median_s": statistics.median(t) for e, t in times.items()},
            "paired_vectorised_over_inplace": statistics.median(ratios)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--settings", default="digits,cifar_shape")
    parser.add_argument("--methods", default=",".join(ZEROTH_ORDER))
    parser.add_argument("--iters", type=bm.at_least(1), default=20)
    parser.add_argument("--warmup", type=bm.at_least(0), default=2)
    parser.add_argument("--threads", type=bm.at_least(0), default=1, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--batch-size", type=bm.at_least(1), default=None,
                        help="every setting's batch size (smoke runs; default: each setting's own)")
    args = parser.parse_args()
    unknown = sorted(set(args.settings.split(",")) - set(bm.SETTINGS)) + \
        sorted(set(args.methods.split(",")) - set(ZEROTH_ORDER))
    if unknown:
        sys.exit(f"benchmark_engines: unknown setting or method {', '.join(unknown)}; settings: "
                 f"{', '.join(bm.SETTINGS)}; methods: {', '.join(ZEROTH_ORDER)}")
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.batch_size:
        bm.set_batch_size(args.batch_size)
    rows = []
    for setting in args.settings.split(","):
        for name in args.methods.split(","):
            rows.append(compare(name, setting, device, args.warmup, args.iters))
            print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out or bm.ROOT / "scripts" / "results" / f"engines_{device.type}.json")
    bm.write_result(out, bm.result_record(device, rows))
    print("\n| setting | method | vectorised s/step | in-place s/step | vectorised / in-place (paired) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['setting']} | {r['method']} | {r['vectorised_median_s']:.4f} | {r['inplace_median_s']:.4f} | "
              f"{r['paired_vectorised_over_inplace']:.2f} |")


if __name__ == "__main__":
    bm.run_main("benchmark_engines", main)
