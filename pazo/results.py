"""Sweep results from run directories (not from the W&B server): one row per run, and the
best-over-grid selection the paper's tables report.

Selecting the best configuration by test accuracy is itself not differentially private; the
paper does it, so the tables do it too and say so.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAPER_VALUES = ROOT / "scripts" / "paper_values.csv"
METHOD_ORDER = ["sgd", "mezo", "dpsgd", "dpmd", "dope_sgd", "gep", "dpzero", "pazo_m", "pazo_p",
                "pazo_p_prime", "pazo_s"]
LABELS = {"sgd": "SGD", "mezo": "MeZO", "dpsgd": "DP-SGD", "dpmd": "DPMD", "dope_sgd": "DOPE-SGD",
          "gep": "GEP", "dpzero": "DPZero", "pazo_m": "PAZO-M", "pazo_p": "PAZO-P",
          "pazo_p_prime": "PAZO-P'", "pazo_s": "PAZO-S", "dp_zo": "DP-ZO", "dp_zogd": "DP-ZOGD"}
FIRST_ORDER = {"sgd", "dpsgd", "dpmd", "dope_sgd", "gep"}
USES_PUBLIC = {"dpmd", "dope_sgd", "gep", "pazo_m", "pazo_p", "pazo_p_prime", "pazo_s"}
HYPERPARAMETERS = ["lr", "clip", "public_batch_size", "alpha", "k", "perturbation", "q"]


def load_runs(sweep_dirs) -> pd.DataFrame:
    """Every run directory (a `config.yaml` beside or without a `summary.json`) below the sweeps."""
    rows = []
    for sweep_dir in map(Path, sweep_dirs):
        for config_path in sorted(sweep_dir.rglob("config.yaml")):
            if ".hydra" in config_path.parts or ".submitit" in config_path.parts:
                continue
            run_dir = config_path.parent
            cfg = yaml.safe_load(config_path.read_text())
            summary_path = run_dir / "summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
            method, privacy = cfg["method"], cfg.get("privacy", {})
            private = summary.get("privacy", {}).get("private", privacy.get("epsilon") is not None)
            row = {"sweep": sweep_dir.name, "setting": cfg["dataset"]["name"], "method": method["name"],
                   "epsilon": float(privacy["epsilon"]) if private and privacy.get("epsilon") is not None else math.nan,
                   "seed": cfg.get("seed"), "status": summary.get("status", "incomplete"),
                   "final_accuracy": summary.get("final_test_accuracy"),
                   "best_accuracy": summary.get("best_test_accuracy"),
                   "s_per_iter": summary.get("median_s_per_iter"), "run_dir": str(run_dir),
                   "batch_size": cfg.get("train", {}).get("batch_size")}
            row.update({h: method.get(h) for h in HYPERPARAMETERS})
            rows.append(row)
    columns = ["sweep", "setting", "method", "epsilon", "seed", "status", "final_accuracy", "best_accuracy",
               "s_per_iter", "run_dir", "batch_size", *HYPERPARAMETERS]
    return pd.DataFrame(rows, columns=columns)


def best_over_grid(runs: pd.DataFrame, metric: str = "final_accuracy",
                   by=("setting", "method", "epsilon")) -> pd.DataFrame:
    """Per group: the best finished run's accuracy (NaN when every configuration failed), the
    number of runs, finished and failed, and the best run's directory."""
    out = []
    for key, group in runs.groupby(list(by), dropna=False, sort=False):
        done = group[(group.status == "finished") & group[metric].notna()]
        best = done.loc[done[metric].idxmax()] if len(done) else None
        out.append({**dict(zip(by, key)), "accuracy": best[metric] if best is not None else math.nan,
                    "runs": len(group), "finished": len(done), "failed": int((group.status == "failed").sum()),
                    "best_run": best["run_dir"] if best is not None else None})
    return pd.DataFrame(out)


def paper_values() -> pd.DataFrame:
    table = pd.read_csv(PAPER_VALUES, comment="#", dtype=str)
    table["value"] = pd.to_numeric(table["value"].replace("—", "nan"), errors="coerce")
    return table
