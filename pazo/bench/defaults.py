"""Every method with its default hyperparameters on the offline default (digits, epsilon = 1): the
defaults must lie inside the paper's grids (configs/sweeps/grids/cifar10.yaml, Table 9) and still
train here. One run per method (privacy=none for the non-private ones), two at a time.

    pazo-bench defaults [--out scripts/results/defaults_digits_cpu.json] [--seed 0] [--methods a,b]
    pazo-bench defaults --check scripts/results/defaults_digits_cpu.json [--methods a,b]

(or `python -m pazo.bench.defaults`, or `python scripts/check_defaults.py`)

Writes, per method: the defaults used, final and best validation and test accuracy, the chance-level
warning if any, status and epsilon spent. Each run is new, in outputs/check_defaults/<time>/<method>/
(a run directory of an earlier version is never read again), on one CPU thread per run, so that the
numbers are the same on every re-run of this version. `--check FILE` re-runs FILE's methods (or
`--methods`) with its seed and thread count, prints each number that differs from the file's and
exits 1 if any does, writing nothing under scripts/results/.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import yaml

from pazo.files.file_kinds import output_file, path_argument
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo import REPO_ROOT as ROOT
from pazo.bench.common import RESULTS_DIR, at_least, command_line, git_commit, write_result
from pazo.methods import method_info, method_names
from pazo.run.results import read_json_object


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
    return {"method": method, "command": f"OMP_NUM_THREADS={threads} python -m pazo.train " + " ".join(overrides[:-1]),
            "exit_code": done.returncode, "status": summary.get("status"),
            "final_val_accuracy": summary.get("final_val_accuracy"),
            "best_val_accuracy": summary.get("best_val_accuracy"),
            "final_test_accuracy": summary.get("final_test_accuracy"),
            "best_test_accuracy": summary.get("best_test_accuracy"),
            "warnings": summary.get("warnings", []),
            "epsilon_spent": (summary.get("privacy") or {}).get("epsilon_spent"),
            "method_config": config.get("method"), "engine": summary.get("engine", config.get("engine"))}


#: the numbers `--check` compares: seeded, so equal on every re-run of one version on one thread
CHECKED = ("status", "final_val_accuracy", "best_val_accuracy", "final_test_accuracy", "best_test_accuracy",
           "epsilon_spent")
#: threads per run: one, so that a re-run on any machine reduces in the same order (more threads
#: split torch's reductions differently and the trajectories part after a few hundred steps)
THREADS = 1


def differences(recorded: list[dict], now: list[dict]) -> list[str]:
    """`method key: recorded X, now Y` for each checked number that differs."""
    by_method = {row["method"]: row for row in recorded}
    return [f"{row['method']} {key}: recorded {by_method[row['method']].get(key)}, now {row.get(key)}"
            for row in now for key in CHECKED if by_method[row["method"]].get(key) != row.get(key)]


def result_line(row: dict) -> str:
    """A method's line on the terminal: its status and final accuracies as the run's summary prints
    them (4 decimals, "-" for none), and its warnings; the file keeps every digit."""
    accuracy = lambda key: "-" if row.get(key) is None else format(row[key], ".4f")  # noqa: E731
    return (f"{row['method']:14s} {row['status']:9s} val {accuracy('final_val_accuracy')} "
            f"test {accuracy('final_test_accuracy')} {'; '.join(row.get('warnings') or [])}").rstrip()


def _methods(text: str | None, known: list[str]) -> list[str]:
    methods = [m for m in (text or ",".join(known)).split(",") if m]
    unknown = [m for m in methods if m not in known]
    if unknown or not methods:
        print(f"pazo: error: unknown method(s) {', '.join(unknown) or '(none given)'}; choices: "
              f"{', '.join(known)}", file=sys.stderr)
        sys.exit(2)
    return methods


def main():
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--out", type=output_file, default=str(RESULTS_DIR / "defaults_digits_cpu.json"))
    parser.add_argument("--runs", type=path_argument, default=str(ROOT / "outputs" / "check_defaults"),
                        help="where each invocation's runs go (a new <time>/ folder inside)")
    parser.add_argument("--seed", type=at_least(0), default=0)
    parser.add_argument("--jobs", type=at_least(1), default=2, help="runs at a time (each on one thread)")
    parser.add_argument("--methods", default=None, help="comma-separated (default: every method, or FILE's)")
    parser.add_argument("--check", metavar="FILE", type=path_argument, default=None,
                        help="re-run FILE's methods with its seed and compare; exit 1 if a number differs")
    args = parser.parse_args()
    recorded = None
    if args.check:
        recorded = read_json_object(Path(args.check))
        known = [row["method"] for row in recorded.get("results", [])]
        seed = int(recorded.get("seed", 0))
    else:
        known, seed = method_names(), args.seed
    methods = _methods(args.methods, known)
    runs = Path(args.runs) / time.strftime("%Y-%m-%d_%H-%M-%S")
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda m: train(m, seed, runs, THREADS), methods))
    for row in rows:
        print(result_line(row))
    if recorded is not None:
        wrong = differences(recorded["results"], rows)
        for line in wrong:
            print(f"differs: {line}")
        print(f"{len(methods) - len({w.split()[0] for w in wrong})} of {len(methods)} methods re-ran to "
              f"{args.check}'s numbers")
        sys.exit(1 if wrong else 0)
    write_result(Path(args.out), {"command": command_line(), "commit": git_commit(), "seed": seed,
                                  "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                                              "threads_per_run": THREADS, "torch": torch.__version__},
                                  "results": rows})


#: `pazo-bench defaults`, `python -m pazo.bench.defaults`, `python scripts/check_defaults.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
