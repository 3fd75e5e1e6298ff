"""Sweep results from run directories (not from the W&B server): one row per run, which runs may
count in a private column, and the one selection of a configuration per table cell that the
tables and the figures share.

Selection (`select_configs`): runs are grouped by configuration (every hyperparameter but the
seed); `selection="val"` picks the configuration with the best mean validation accuracy over its
seeds (a split of the private training data) and reports its test accuracy as mean and standard
deviation over those seeds; `selection="test"` picks on mean test accuracy, which is the paper's
protocol and not itself private. A cell a sweep chose by private selection (`pazo-sweep
--selection private`) holds one released run per seed, each already the best of its selection:
they are that cell's seeds whatever their configurations, and the cell carries the selection's
total epsilon. The K runs of a selection (under `.private/`) are never read.

`private_contribution`: per setting and epsilon, the best private method minus the public-only
reference, with the spread between seeds beside it.
"""
from __future__ import annotations

import functools
import json
import sys
import math
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from pazo.errors import ConfigError, unknown_choice
from pazo.files.file_kinds import NotRegularFile, read_regular_text

if TYPE_CHECKING:
    import pandas as pd

#: the paper's published values, shipped with the package (package data)
PAPER_VALUES = Path(__file__).resolve().parents[1] / "report" / "paper_values.csv"
#: `pazo-bench methods`' paper-sized settings -> the column of the paper's Table 5 each matches
#: (the authors resize CIFAR-10 to 224 px)
BENCHMARK_PAPER_SETTING = {"cifar10_nf224": "cifar10", "tiny_imagenet_vit": "tiny_imagenet", "imdb_lstm": "imdb",
                           "mnli_roberta": "mnli"}

HYPERPARAMETERS = ["lr", "clip", "public_batch_size", "alpha", "k", "perturbation", "q"]
SELECTIONS = ("val", "test")
VAL_METRIC = {"final_accuracy": "final_val_accuracy", "best_accuracy": "best_val_accuracy"}
# config keys that say where or how fast a run computed, not what it computed: runs differing only
# in these (and the seed) are seeds of one configuration
NOT_HYPERPARAMETERS = {"seed", "logger", "sweep_name", "device", "dataset.root", "dataset.cache_dir",
                       "privacy.cache_dir", "warm_start.cache", "train.eval_batch_size", "engine.chunk_size",
                       "method.per_example_chunk", "method.grad_memory_mb", "method.public_grads_together"}
PRIVACY_FACTS = ("guarantee_holds", "epsilon_spent", "target_epsilon", "sampling_matches_accountant")


@functools.cache
def method_facts() -> dict:
    """What the tables and figures read of the registered methods, read from the method registry at
    first use (its modules load torch, which a report needs not to refuse its input): METHOD_ORDER
    (the tables' rows: the non-private references first, then the private methods as registered),
    LABELS, FIRST_ORDER, USES_PUBLIC and PRIVATE_METHODS, each also this module's attribute of that name."""
    from pazo.methods import METHODS, method_names

    return {"METHOD_ORDER": ([n for n, i in METHODS.items() if not i.private]
                             + [n for n, i in METHODS.items() if i.private]),
            "LABELS": {n: i.label for n, i in METHODS.items()},
            "FIRST_ORDER": set(method_names("first_order")),
            "USES_PUBLIC": {n for n, i in METHODS.items() if i.uses_public},
            "PRIVATE_METHODS": {n for n, i in METHODS.items() if i.private}}


#: the names of `method_facts`, this module's attributes
METHOD_FACTS = ("METHOD_ORDER", "LABELS", "FIRST_ORDER", "USES_PUBLIC", "PRIVATE_METHODS")


def __getattr__(name: str):
    """`METHOD_ORDER`, `LABELS`, ... (`method_facts`), read when first asked for."""
    if name not in METHOD_FACTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return method_facts()[name]


def _flatten(cfg: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if name in NOT_HYPERPARAMETERS:
            continue
        out.update(_flatten(value, f"{name}.") if isinstance(value, dict) else {name: value})
    return out


def guarantee_problem(summary: dict) -> str | None:
    """Why a private run's accuracy may not stand in an epsilon column (None: it may), as
    '<code>: <detail>'. Over budget (a failed run whose failure says so, `privacy.over_budget`, or
    epsilon spent above the target) is checked first, so it is listed whatever else the run did;
    other failed runs are failures, not exclusions."""
    privacy, failure = summary.get("privacy") or {}, summary.get("failure") or ""
    spent, target = privacy.get("epsilon_spent"), privacy.get("target_epsilon")
    signs = [f"epsilon spent {spent:.4g} > target {target:g}"] if (
        spent is not None and target is not None and spent > target + 1e-12) else []
    signs += [failure.removeprefix("over_budget: ")] if failure.startswith("over_budget") else []
    signs += ["privacy.over_budget is true"] if privacy.get("over_budget") is True else []
    signs += ["privacy.within_budget is false"] if privacy.get("within_budget") is False else []
    if signs:
        return f"over_budget: {signs[0]}"
    if summary.get("status") != "finished":
        return None
    missing = [f"privacy.{k}" for k in PRIVACY_FACTS if privacy.get(k) is None]
    if missing:
        return f"no_privacy_facts: summary.json lacks {', '.join(missing)}"
    if privacy["sampling_matches_accountant"] is not True:
        return (f"shuffle_sampling: {privacy.get('sampling')} sampling, not the Poisson sampling the "
                "accountant assumes (guarantee void)")
    if privacy["guarantee_holds"] is not True:
        return "guarantee_void: privacy.guarantee_holds is false"
    return None


def read_json_object(path: Path) -> dict:
    """A JSON file that must hold an object (a run's summary.json): a ValueError saying what is
    wrong with it otherwise."""
    try:
        data = json.loads(read_regular_text(path))
    except NotRegularFile as err:
        raise ValueError(f"{path.name} is unreadable ({err.strerror})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path.name} is unreadable ({type(err).__name__})") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path.name} is not valid JSON ({err.msg}, line {err.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} holds a {type(data).__name__}, not an object")
    return data


def skipped(run_dir, reason: str) -> None:
    """One line on stderr naming a run directory a report leaves out, and why."""
    print(f"pazo: skipped {run_dir}: {reason}", file=sys.stderr)


def _number_or_none(summary: dict, key: str):
    value = summary.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"summary.json's {key} is {value!r}, not a number")
    return value


def _run_row(sweep_dir: Path, run_dir: Path, config_path: Path) -> dict:
    """The row of one run directory; a ValueError saying what is wrong with it otherwise."""
    try:
        cfg = yaml.safe_load(read_regular_text(config_path))
    except NotRegularFile as err:
        raise ValueError(f"config.yaml is unreadable ({err.strerror})") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise ValueError(f"config.yaml is unreadable or not YAML ({type(err).__name__})") from None
    if not (isinstance(cfg, dict) and isinstance(cfg.get("method"), dict) and isinstance(cfg.get("dataset"), dict)
            and isinstance(cfg["method"].get("name"), str) and isinstance(cfg["dataset"].get("name"), str)):
        raise ValueError("config.yaml is not a run's config (no method.name or dataset.name)")
    summary_path = run_dir / "summary.json"
    summary = read_json_object(summary_path) if summary_path.exists() else {}
    method, privacy = cfg["method"], cfg.get("privacy") or {}
    if not isinstance(privacy, dict) or not isinstance(summary.get("privacy", {}), dict):
        raise ValueError("its privacy block is not a mapping")
    private = summary.get("privacy", {}).get("private", privacy.get("epsilon") is not None)
    try:
        epsilon = float(privacy["epsilon"]) if private and privacy.get("epsilon") is not None else math.nan
    except (TypeError, ValueError):
        raise ValueError(f"config.yaml's privacy.epsilon is {privacy.get('epsilon')!r}, not a number") from None
    row = {"sweep": sweep_dir.name, "setting": cfg["dataset"]["name"], "method": method["name"],
           "epsilon": epsilon, "seed": cfg.get("seed"), "status": summary.get("status", "incomplete"),
           **{col: _number_or_none(summary, key) for col, key in (
               ("final_accuracy", "final_test_accuracy"), ("best_accuracy", "best_test_accuracy"),
               ("final_val_accuracy", "final_val_accuracy"), ("best_val_accuracy", "best_val_accuracy"),
               ("s_per_iter", "median_s_per_iter"))},
           "chance_level": any(str(w).startswith("chance_level") for w in summary.get("warnings") or []),
           "problem": guarantee_problem(summary) if private else None,
           "config": json.dumps(_flatten(cfg), sort_keys=True, default=str), "run_dir": str(run_dir),
           "batch_size": (cfg.get("train") or {}).get("batch_size"),
           **_selection_facts(summary)}
    row.update({h: method.get(h) for h in HYPERPARAMETERS})
    return row


def _selection_facts(summary: dict) -> dict:
    """How a released run was chosen: by private selection (its total epsilon, all seeds composed,
    and delta) or not ("grid", NaN)."""
    record = summary.get("selection")
    if not isinstance(record, dict):
        return {"selection": "grid", "selection_epsilon": math.nan, "selection_delta": math.nan}
    total, delta = record.get("total_epsilon_all_seeds"), record.get("delta")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (total, delta)):
        raise ValueError("summary.json's selection record has no total epsilon and delta")
    return {"selection": "private", "selection_epsilon": float(total), "selection_delta": float(delta)}


def load_runs(sweep_dirs) -> pd.DataFrame:
    """Every run directory (a `config.yaml` beside or without a `summary.json`) below the sweeps,
    with its configuration (hyperparameters but the seed, as JSON), its test and validation
    accuracies, its chance-level warning and, for private runs, why it may not count. A run
    directory whose files do not parse (or hold no run's config) is left out, named on stderr."""
    import pandas as pd

    rows = []
    for sweep_dir in map(Path, sweep_dirs):
        for config_path in sorted(sweep_dir.rglob("config.yaml")):
            if {".hydra", ".submitit", ".private"} & set(config_path.parts) or archived_attempt(config_path):
                continue
            run_dir = config_path.parent
            try:
                rows.append(_run_row(sweep_dir, run_dir, config_path))
            except (ValueError, TypeError, AttributeError) as err:
                skipped(run_dir, str(err))
    columns = ["sweep", "setting", "method", "epsilon", "seed", "status", "final_accuracy", "best_accuracy",
               "final_val_accuracy", "best_val_accuracy", "chance_level", "problem", "config", "s_per_iter",
               "run_dir", "batch_size", "selection", "selection_epsilon", "selection_delta", *HYPERPARAMETERS]
    return pd.DataFrame(rows, columns=columns)


def archived_attempt(config_path: Path) -> bool:
    """Whether `config_path` is an earlier attempt's, kept in `<run dir>/attempts/<n>/` by a relaunch
    (`pazo.run.attempts`): part of its run's record, not a run of its own."""
    attempt = config_path.parent
    run_dir = attempt.parent.parent
    return (attempt.name.isdigit() and attempt.parent.name == "attempts"
            and any((run_dir / name).exists() for name in ("config.yaml", "summary.json")))


def missing_dirs(dirs) -> list[str]:
    return [str(d) for d in dirs if not Path(d).is_dir()]


def with_exclusions(runs: pd.DataFrame, include_shuffle: bool = False) -> pd.DataFrame:
    """`runs` with `excluded` (the reason a run may not count, or None) and `variant`: "shuffle"
    for shuffle-sampled runs that `include_shuffle` keeps as rows of their own, else ""."""
    shuffle = runs.problem.fillna("").str.startswith("shuffle_sampling") & include_shuffle
    return runs.assign(excluded=runs.problem.where(~shuffle, None), variant=shuffle.map({True: "shuffle", False: ""}))


def _describe(config: str, configs: list[str]) -> str:
    """The selected configuration by the hyperparameters that vary within its cell."""
    mine, all_ = json.loads(config), [json.loads(c) for c in configs]
    varying = [k for k in mine if len({json.dumps(c.get(k), default=str) for c in all_}) > 1]
    return ", ".join(f"{k}={mine[k]}" for k in varying)


def select_configs(runs: pd.DataFrame, metric: str = "final_accuracy", selection: str = "val",
                   by=("setting", "method", "epsilon"), include_shuffle: bool = False) -> pd.DataFrame:
    """One selected configuration per group of `by` (and variant). A configuration may be selected
    only when every run of it finished and counts (a seed that diverged or broke its guarantee
    rules the configuration out rather than leaving its luckier seeds to speak for it); it is
    selected on mean validation accuracy over its seeds ("val") or mean test accuracy ("test").

    Returns per group: accuracy (mean test `metric` of the selected configuration's seeds), std
    (sample std, NaN for one seed), seeds, score (the mean it was selected on), selected (its
    hyperparameters that vary in the group), chance_level (its seeds that warned of chance-level
    accuracy), best_run (its seed with the best score), and the group's runs, finished, failed,
    excluded and configs (all, and selectable)."""
    import pandas as pd

    if selection not in SELECTIONS:
        raise ConfigError(unknown_choice("selection", selection, SELECTIONS))
    runs = with_exclusions(runs, include_shuffle)
    runs = runs.assign(**{c: d for c, d in (("selection", "grid"), ("selection_epsilon", math.nan),
                                            ("selection_delta", math.nan)) if c not in runs})  # older frames
    score = VAL_METRIC[metric] if selection == "val" else metric
    counts = (runs.status == "finished") & runs.excluded.isna() & runs[metric].notna()
    # a privately selected cell's released runs are its seeds, whatever configuration each selection chose;
    # their release withholds the validation accuracy the selection read (noiseless): nothing is chosen on it
    private = runs.selection == "private"
    unscored = runs[counts & runs[score].isna() & ~private]
    if len(unscored):
        raise ConfigError(f"{len(unscored)} of {int(counts.sum())} finished runs have no validation accuracy "
                          f"(no {score} in summary.json, e.g. {unscored.run_dir.iloc[0]}); select on test "
                          "accuracy with --selection test (the paper's protocol, not a private selection)")
    runs = runs.assign(config=runs.config.where(~private, json.dumps({"selection": "private"})))
    keys, out = [*by, "variant"], []
    for key, group in runs.assign(counts=counts).groupby(keys, dropna=False, sort=False):
        paid = bool((group.selection == "private").all())
        per_config = group.groupby("config", sort=True).agg(
            selectable=("counts", "all"), accuracy=(metric, "mean"), std=(metric, "std"), seeds=("counts", "size"),
            score=(score, "mean"), chance_level=("chance_level", "sum"))
        selectable = per_config[per_config.selectable]
        row = {**dict(zip(keys, key)), "runs": len(group), "finished": int((group.status == "finished").sum()),
               "failed": int(((group.status == "failed") & group.excluded.isna()).sum()),
               "excluded": int(group.excluded.notna().sum()), "configs": len(per_config),
               "selectable_configs": len(selectable), "accuracy": math.nan, "std": math.nan, "seeds": 0,
               "score": math.nan, "selected": None, "chance_level": 0, "best_run": None,
               # a best of several private configurations trained on the same private data: the number
               # shown costs more privacy than one run's epsilon (outside the printed guarantee)
               "selection_outside_epsilon": bool(len(selectable) > 1 and group.epsilon.notna().any() and not paid),
               # chosen by private selection: the total epsilon that covers the cell (every seed's selection)
               "selection_epsilon": group.selection_epsilon.max() if paid else math.nan,
               "selection_delta": group.selection_delta.max() if paid else math.nan}
        if len(selectable):
            config = selectable.index[0] if paid else selectable.score.idxmax()   # (paid: one, unscored)
            chosen = selectable.loc[config]
            mine = group[group.config == config]
            row.update(accuracy=chosen.accuracy, std=chosen["std"], seeds=int(chosen.seeds), score=chosen.score,
                       selected="private selection" if paid else _describe(config, list(per_config.index)),
                       chance_level=int(chosen.chance_level),
                       best_run=mine.loc[mine[metric if paid else score].idxmax(), "run_dir"])
        out.append(row)
    return pd.DataFrame(out)


def private_contribution(best: pd.DataFrame, reference: str = "public_only") -> pd.DataFrame:
    """Per setting and epsilon: the best private method's accuracy minus the public-only reference's
    (its non-private cell: no private data), and the spread between seeds of that difference,
    sqrt(std_best^2 + std_reference^2) (the two cells' seeds independent; NaN where either has one
    seed). `within_spread`: the difference is no larger than that spread."""
    import pandas as pd

    rows, private_methods = [], method_facts()["PRIVATE_METHODS"]
    ok = best[(best.variant == "") & best.accuracy.notna()]
    for setting, mine in ok.groupby("setting", sort=False):
        ref = mine[(mine.method == reference) & mine.epsilon.isna()]
        if ref.empty:
            continue
        ref = ref.iloc[0]
        private = mine[mine.epsilon.notna() & mine.method.isin(private_methods)]
        for epsilon, column in private.groupby("epsilon", sort=True):
            top = column.loc[column.accuracy.idxmax()]
            spread = math.sqrt(top["std"] ** 2 + ref["std"] ** 2)
            difference = top.accuracy - ref.accuracy
            rows.append({"setting": setting, "epsilon": epsilon, "best_method": top.method,
                         "best_accuracy": top.accuracy, "best_std": top["std"], "reference_accuracy": ref.accuracy,
                         "reference_std": ref["std"], "contribution": difference, "spread": spread,
                         "within_spread": bool(abs(difference) <= spread) if not math.isnan(spread) else None})
    return pd.DataFrame(rows, columns=["setting", "epsilon", "best_method", "best_accuracy", "best_std",
                                       "reference_accuracy", "reference_std", "contribution", "spread",
                                       "within_spread"])


def excluded_runs(runs: pd.DataFrame, include_shuffle: bool = False) -> pd.DataFrame:
    """The runs left out of the private columns, with the reason."""
    runs = with_exclusions(runs, include_shuffle)
    return runs[runs.excluded.notna()].rename(columns={"excluded": "reason"})[
        ["run_dir", "method", "epsilon", "reason", "sweep", "setting"]]


def paper_values() -> pd.DataFrame:
    import pandas as pd

    table = pd.read_csv(PAPER_VALUES, comment="#", dtype=str)
    table["value"] = pd.to_numeric(table["value"].replace("—", "nan"), errors="coerce")
    return table
