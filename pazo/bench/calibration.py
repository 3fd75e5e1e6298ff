"""Time sigma calibration: pazo's bracketed two-stage solver against a plain PRV bisection.

    pazo-bench calibration [--out scripts/results/calibration_cpu.json] [--no-baseline]

(or `python -m pazo.bench.calibration`, or `python scripts/benchmark_calibration.py`)

Setting: n = 48000 private examples, b = 256 (q = 256/48000), delta = 1/n, the PRV accuracy pazo
uses (eps_error = min(0.01, epsilon/100)). Each row: seconds uncached, seconds from the disk cache,
the sigma found and the epsilon it spends (PRV upper bound), and what one logged row of a training
run costs (`seconds_per_logged_row`: the epsilon after each of 20 consecutive rows 10 steps apart,
as the run's tracker computes them). The baseline bisects sigma in [0.3, 100] to the same relative
precision with one full-accuracy PRV evaluation per probe.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path

from pazo.bench.common import (RESULTS_DIR, at_least, comma_separated, command_line, git_commit, positive_number,
                               write_result)
from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.privacy.accountants import BudgetError, GaussianAccountant, check_target_epsilon, default_eps_error
from pazo.privacy.calibration import calibrate_sigma

N, B = 48000, 256


def plain_bisection(epsilon, delta, q, steps, eps_error, rel_tol=2e-3):
    lo, hi = 0.3, 100.0
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        spent = GaussianAccountant(mid, q, steps, delta, eps_error=eps_error).epsilon(steps).upper
        lo, hi = (mid, hi) if spent > epsilon else (lo, mid)
    return hi


def epsilon_steps(text: str) -> tuple[float, int]:
    """An argparse type: one `epsilon:steps` case, an epsilon the accountant takes and a step count >= 1."""
    fields = text.split(":")
    if len(fields) != 2:
        raise argparse.ArgumentTypeError(f"a case is epsilon:steps (two fields), got {text!r}")
    epsilon, steps = positive_number(fields[0]), at_least(1)(fields[1])
    try:
        check_target_epsilon(epsilon)
    except BudgetError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return epsilon, steps


def main():
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--out", type=output_file, default=str(RESULTS_DIR / "calibration_cpu.json"))
    parser.add_argument("--no-baseline", action="store_true", help="skip the slow plain bisection")
    parser.add_argument("--cases", type=comma_separated(epsilon_steps),
                        default="1:18750,0.1:18750,1:100000,0.1:100000,2:100000",
                        help="comma-separated epsilon:steps pairs")
    args = parser.parse_args()
    q, delta = B / N, 1 / N
    rows = []
    for epsilon, steps in args.cases:
        err = default_eps_error(epsilon)
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            try:
                sigma = calibrate_sigma(epsilon, delta, q, steps, cache_dir=cache)
            except BudgetError as refused:  # beyond the accountant's memory bound: recorded, not timed
                row = {"epsilon": epsilon, "steps": steps, "sample_rate": q, "delta": delta, "eps_error": err,
                       "refused": str(refused), "seconds": time.perf_counter() - t0}
                rows.append(row)
                print(json.dumps(row))
                continue
            uncached = time.perf_counter() - t0
            t0 = time.perf_counter()
            calibrate_sigma(epsilon, delta, q, steps, cache_dir=cache)
            cached = time.perf_counter() - t0
        accountant = GaussianAccountant(sigma, q, steps, delta, eps_error=err)
        spent = accountant.epsilon(steps).upper
        accountant.epsilon(steps // 2)
        # 20 rows after the middle of the run, fewer on a run too short for them (rows stop at T)
        row_steps = range(steps // 2 + 10, min(steps, steps // 2 + 200) + 1, 10)
        t0 = time.perf_counter()
        for row_step in row_steps:
            accountant.epsilon(row_step)
        per_row = (time.perf_counter() - t0) / len(row_steps) if len(row_steps) else None
        row = {"epsilon": epsilon, "steps": steps, "sample_rate": q, "delta": delta, "eps_error": err,
               "sigma": sigma, "epsilon_spent_upper": spent, "seconds": uncached,
               "seconds_cached": cached, "prv_grid_points": len(accountant._fourier.domain),
               "seconds_per_logged_row": per_row}
        if not args.no_baseline:
            t0 = time.perf_counter()
            row["baseline_sigma"] = plain_bisection(epsilon, delta, q, steps, err)
            row["baseline_seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(json.dumps(row))
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(),
               "load_average_at_end": os.getloadavg()}
    write_result(Path(args.out), {"command": command_line(), "commit": git_commit(), "machine": machine,
                                  "results": rows})


#: `pazo-bench calibration`, `python -m pazo.bench.calibration`, `python scripts/benchmark_calibration.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
