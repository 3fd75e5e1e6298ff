"""Every method with its default hyperparameters on the offline default (digits, epsilon = 1): the
defaults must lie inside the paper's grids (configs/sweeps/grids/cifar10.yaml, Table 9) and still
train here. One run per method (privacy=none for the non-private ones), two at a time.

    pazo-bench defaults [--out scripts/results/defaults_digits_cpu.json] [--seed 0]

(or `python -m pazo.bench.defaults`, or `python scripts/check_defaults.py`)

Writes, per method: the defaults used, final and best validation and test accuracy, the chance-level
warning if any, status and epsilon spent. Runs go to outputs/check_defaults/<method>/ (a finished
run is not re-run: its summary is read again).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import yaml

from pazo.commands import ArgumentParser, summary_of
from pazo import REPO_ROOT as ROOT
from pazo.bench.common import RESULTS_DIR, at_least, command_line, git_commit, write_result
from pazo.methods import method_info, method_names
from pazo.results import read_json_object


def train(method: str, seed: int, out: Path, threads: int) -> dict:
    run_dir = out / method
    overrides = [f"method={method}", f"seed={seed}", "logger.mode=disabled", "device=cpu",
                 f"hydra.run.dir={run_dir}"]
    if not method_info(method).private:
        overrides.append("privacy=none")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-m", "pazo.train", *overrides], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        return {"method": method, "status": "no summary", "exit_code": done.returncode,
                "stderr_tail": done.stderr[-2000:]}
    try:
        summary = read_json_object(summary_path)
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        if not isinstance(config, dict):
            raise ValueError("config.yaml is not a mapping")
    except (OSError, ValueError, yaml.YAMLError) as err:   # a finished run's files, read again, now corrupt
        return {"method": method, "status": "unreadable run directory", "exit_code": done.returncode,
                "stderr_tail": f"{run_dir}: {err}"[:2000]}
    return {"method": method, "command": "python -m pazo.train " + " ".join(overrides[:-1]),
            "exit_code": done.returncode, "status": summary.get("status"),
            "final_val_accuracy": summary.get("final_val_accuracy"),
            "best_val_accuracy": summary.get("best_val_accuracy"),
            "final_test_accuracy": summary.get("final_test_accuracy"),
            "best_test_accuracy": summary.get("best_test_accuracy"),
            "warnings": summary.get("warnings", []),
            "epsilon_spent": (summary.get("privacy") or {}).get("epsilon_spent"),
            "method_config": config.get("method"), "engine": summary.get("engine", config.get("engine"))}


def main():
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--out", default=str(RESULTS_DIR / "defaults_digits_cpu.json"))
    parser.add_argument("--runs", default=str(ROOT / "outputs" / "check_defaults"))
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--jobs", type=at_least(1), default=2)
    parser.add_argument("--methods", default=",".join(method_names()))
    args = parser.parse_args()
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in method_names()]
    if unknown or not methods:
        print(f"pazo: error: unknown method(s) {', '.join(unknown) or '(none given)'}; choices: "
              f"{', '.join(method_names())}", file=sys.stderr)
        sys.exit(2)
    threads = max(1, (os.cpu_count() or 1) // args.jobs)
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda m: train(m, args.seed, Path(args.runs), threads), methods))
    for row in rows:
        print(f"{row['method']:14s} {row['status']:9s} val {row.get('final_val_accuracy')} "
              f"test {row.get('final_test_accuracy')} {'; '.join(row.get('warnings') or [])}")
    write_result(Path(args.out), {"command": command_line(), "commit": git_commit(),
                                  "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                              "threads_per_run": threads, "torch": torch.__version__},
                                  "results": rows})


def cli() -> None:
    """`pazo-bench defaults`, `python -m pazo.bench.defaults`, `python scripts/check_defaults.py`."""
    main()


if __name__ == "__main__":
    cli()
