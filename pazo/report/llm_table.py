"""Mean and spread over data seeds for the LLM sweeps (dpzero_opt_sst2, dpzo_squad), as DPZero and
DP-ZO report them.

    pazo-report llm-table outputs/sweeps/dpzero_opt_sst2 [more sweep dirs] [--out table.md]

(or `python -m pazo.report.llm_table`, or `python scripts/llm_table.py`)

For each (task, method, epsilon), the configuration (every hyperparameter but the data seed and the
run seed) with the best mean validation score over its data seeds is selected - validation, never
test - and its test score is reported as mean and standard deviation (ddof 1) over the data seeds,
with the number of seeds. The test score is the accuracy for classification and the F1 for SQuAD
(`final_test_accuracy` holds it), with exact match beside it. Runs that did not finish, or whose
guarantee does not hold, do not count.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pazo.files.file_kinds import output_file, path_argument
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.errors import ConfigError
from pazo.report import nothing_usable, show_table, status_counts
from pazo.run.results import load_runs, missing_dirs, read_json_object

if TYPE_CHECKING:   # (pandas loads when the table is made: a refusal needs none of it)
    import pandas as pd

SEED_KEYS = ("dataset.data_seed",)


def _exact_match(run_dir: str) -> float:
    summary = read_json_object(Path(run_dir) / "summary.json")   # (load_runs has read it once)
    value = (summary.get("final_test_metrics") or {}).get("exact_match", math.nan)
    return value if isinstance(value, (int, float)) else math.nan


def seed_table(runs: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    runs = runs[(runs.status == "finished") & runs.problem.isna()].copy()
    if runs.empty:
        return pd.DataFrame(columns=["task", "method", "epsilon", "test_mean", "test_std", "em_mean", "em_std",
                                     "seeds", "val_mean", "selected"])
    configs = runs.config.map(json.loads)
    runs["data_seed"] = configs.map(lambda c: c.get("dataset.data_seed"))
    runs["setting_key"] = configs.map(lambda c: json.dumps({k: v for k, v in c.items() if k not in SEED_KEYS},
                                                           sort_keys=True, default=str))
    runs["exact_match"] = runs.run_dir.map(_exact_match)
    rows = []
    for (task, method, eps), cell in runs.groupby(["setting", "method", runs.epsilon.fillna(math.inf)]):
        by_config = cell.groupby("setting_key")
        val = by_config.final_val_accuracy.mean()
        if val.isna().all():
            raise ConfigError(f"{task}/{method}/eps={eps}: no validation scores to select on "
                              "(set dataset.n_val or val_k_shot)")
        best = cell[cell.setting_key == val.idxmax()]
        chosen = {k: v for k, v in json.loads(best.setting_key.iloc[0]).items() if k.startswith("method.")}
        rows.append({"task": task, "method": method, "epsilon": eps,
                     "test_mean": best.final_accuracy.mean(), "test_std": best.final_accuracy.std(ddof=1),
                     "em_mean": best.exact_match.mean(), "em_std": best.exact_match.std(ddof=1),
                     "seeds": best.data_seed.nunique(), "val_mean": val.max(),
                     "selected": ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in sorted(chosen.items())
                                           if k not in ("method.name",))})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = ArgumentParser(description=summary_of(__doc__))
    p.add_argument("sweeps", nargs="+", type=path_argument)
    p.add_argument("--out", type=output_file, default=None)
    args = p.parse_args(argv)
    missing = missing_dirs(args.sweeps)
    if missing:
        print(f"pazo: error: no sweep directory {', '.join(missing)}", file=sys.stderr)
        return 2
    runs = load_runs(args.sweeps)
    try:
        table = seed_table(runs)
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    if table.empty:
        counts = status_counts(runs)
        return nothing_usable(f"nothing to tabulate below {', '.join(args.sweeps)}: no finished run whose guarantee "
                              f"holds (run directories: {counts})")
    text = table.to_markdown(index=False, floatfmt=".4f")
    return show_table(text, args.out)


#: `pazo-report llm-table`, `python -m pazo.report.llm_table`, `python scripts/llm_table.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
