"""The paper's tables from sweep run directories, beside the published values.

    pazo-report tables outputs/sweeps/table1_cifar10 [outputs/sweeps/table3_imdb ...]
        [--selection val|test] [--metric final_accuracy|best_accuracy] [--include-shuffle]
        [--benchmark scripts/results/methods_cuda_*.json ...] [--out outputs/tables]

(or `python -m pazo.report.tables`, or `python scripts/make_tables.py`)

Accuracy tables (one per setting found, Tables 1-4 layout): for each method and epsilon one
configuration of its grid (pazo.run.results.select_configs, as the figures): by default the one with
the best mean validation accuracy over its seeds, its test accuracy shown as mean ± std over those
seeds; `--selection test` selects on test accuracy as the paper does (not a private selection), and
the caption says which. Beside ours, the paper's value and the difference. An epsilon column
counts only runs whose guarantee holds (finished, epsilon spent within the target, Poisson
sampling as accounted); the others are listed with the reason under "Excluded runs" and in
excluded.csv, and `--include-shuffle` shows shuffle-sampled runs as rows of their own, labelled
guarantee void. Public only (SGD on the public data alone) is the reference of the non-private
column. † marks a cell whose configuration ended at chance accuracy. A sweep named table8* gives
Table 8 (accuracy at each q). `--benchmark` (files written by `pazo-bench methods`) gives
Table 5 (median s/iter per method and setting, and each zeroth-order method's ratio to its floor),
each zeroth-order method's speedup over DP-SGD beside the paper's Table 5 ratio, and its step
against its floor per engine (table5_floor).
Written as Markdown, LaTeX and CSV.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pazo.commands.start import ArgumentParser, command, summary_of
from pazo import REPO_ROOT as ROOT
from pazo.errors import ConfigError
from pazo.report import none_finished, nothing_usable, status_counts
from pazo.files.file_kinds import path_argument, read_regular_text
from pazo.files.rundir import output_folder_problem, write_text_atomic
from pazo.run import results
from pazo.run.results import (BENCHMARK_PAPER_SETTING, SELECTIONS, excluded_runs, load_runs, missing_dirs, paper_values,
                              private_contribution, select_configs)

if TYPE_CHECKING:   # (pandas and the method registry load when a table is made: a refusal needs neither)
    import pandas as pd

PAPER_TABLE = {"cifar10": "1", "tiny_imagenet": "2", "imdb": "3", "mnli": "4"}
SETTING_ORDER = ["cifar10", "tiny_imagenet", "imdb", "mnli"]
PROTOCOL = {"val": "configuration selected on validation accuracy, test accuracy mean ± std over its seeds",
            "test": "selected on test accuracy, as in the paper: not a private selection"}
SHUFFLE = " (shuffle, guarantee void)"


def pct(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def difference(ours: float, runs: int, paper: float | None) -> float | None:
    """Ours minus the paper's, in accuracy points, where both exist."""
    if not runs or math.isnan(ours) or paper is None or math.isnan(paper):
        return None
    return 100 * ours - paper


def measured(h, usual_seeds: int) -> str:
    """Our part of a cell: mean, ± std over seeds, [n] where the seeds differ from the table's
    usual number, † for chance level; '—' where no configuration could be selected."""
    if h is None or not h.runs:
        return ""
    if math.isnan(h.accuracy):
        return "—"
    text = f"{100 * h.accuracy:.1f}" + (f" ± {100 * h['std']:.1f}" if h.seeds > 1 else "")
    text += (f" [{h.seeds}]" if h.seeds != usual_seeds else "") + ("†" if h.chance_level else "")
    return text + (f" ‡ε={h.selection_epsilon:.2f}" if paid(h) else "")


def paid(h) -> bool:
    """Whether a cell was chosen by private selection (it carries the selection's total epsilon)."""
    value = h.get("selection_epsilon", math.nan) if h is not None else math.nan
    return value is not None and not math.isnan(value)


def cell(h, paper: float | None, paper_known: bool, usual_seeds: int) -> str:
    text = measured(h, usual_seeds)
    if paper_known:
        ref = "—" if paper is None or math.isnan(paper) else f"{paper:.1f}"
        diff = difference(h.accuracy, h.runs, paper) if h is not None else None
        text = f"{text or 'not run'} ({ref}{'' if diff is None else f', {diff:+.1f}'})"
    return text


def long_row(h, setting: str, method: str, column: str, paper_value: float | None) -> dict:
    """One CSV row: the cell's numbers, its selected configuration and its run counts."""
    runs = int(h.runs) if h is not None else 0
    ours = float(h.accuracy) if h is not None else math.nan
    return {"setting": setting, "method": method, "variant": h.variant if h is not None else "",
            "column": column, "ours": pct(ours) if runs else "", "std": pct(h["std"]) if runs else "",
            "seeds": int(h.seeds) if runs else 0, "paper": "" if paper_value is None else paper_value,
            "diff": "" if (d := difference(ours, runs, paper_value)) is None else f"{d:+.1f}",
            "selected": (h.selected or "") if runs else "", "chance_level": int(h.chance_level) if runs else 0,
            "runs": runs, **{k: int(h[k]) if h is not None else 0
                             for k in ("finished", "failed", "excluded", "configs", "selectable_configs")},
            "best_run": (h.best_run or "") if runs else "",
            "selection": "private" if paid(h) else "grid",
            "selection_epsilon": f"{h.selection_epsilon:.4g}" if paid(h) else "",
            "selection_delta": f"{h.selection_delta:.3g}" if paid(h) else ""}


def rows_of(best: pd.DataFrame) -> list[tuple[str, str]]:
    """(method, variant) in the paper's order; a shuffle variant right after its method."""
    present = set(zip(best.method, best.variant))
    order = results.METHOD_ORDER
    methods = [m for m in order if m in set(best.method)] + sorted(set(best.method) - set(order))
    return [(m, v) for m in methods for v in ("", "shuffle") if (m, v) in present]


def usual(best: pd.DataFrame) -> int:
    """The commonest number of seeds behind a cell (cells with another number say theirs)."""
    seeds = best.seeds[best.seeds > 0]
    return int(seeds.mode().iloc[0]) if len(seeds) else 1


def accuracy_table(best: pd.DataFrame, setting: str, paper: pd.DataFrame):
    """(long rows for CSV, wide frame of cells) for one setting."""
    import pandas as pd

    mine = best[best.setting == setting]
    ref = paper[paper.table == PAPER_TABLE.get(setting, "-")]
    paper_eps = {float(c) for c in ref.column if c != "nonprivate"}
    eps = sorted({e for e in mine.epsilon.unique() if not math.isnan(e)} | paper_eps)
    columns = [*(f"eps={e:g}" for e in eps), "non-private"]
    seeds = usual(mine)
    long, wide = [], []
    for m, variant in rows_of(mine):
        row = {"method": results.LABELS.get(m, m) + (SHUFFLE if variant else "")}
        paper_known = not variant and m in set(ref.method)
        for e, col in zip([*eps, math.nan], columns):
            hit = mine[(mine.method == m) & (mine.variant == variant)
                       & ((mine.epsilon == e) | (math.isnan(e) & mine.epsilon.isna()))]
            key = "nonprivate" if math.isnan(e) else f"{e:g}"
            pv = ref[(ref.method == m) & (ref.column == key)] if paper_known else ref.iloc[0:0]
            paper_value = float(pv.value.iloc[0]) if len(pv) else None
            if hit.empty and paper_value is None:
                row[col] = ""
                continue
            h = hit.iloc[0] if len(hit) else None
            row[col] = cell(h, paper_value, paper_known, seeds)
            long.append(long_row(h, setting, m, key, paper_value))
        wide.append(row)
    contribution = private_contribution(best[best.setting == setting])
    if len(contribution):
        row = {"method": CONTRIBUTION}
        for _, c in contribution.iterrows():
            row[f"eps={c.epsilon:g}"] = contribution_cell(c)
            long.append(contribution_row(c, setting))
        wide.append(row)
    frame = pd.DataFrame(wide, columns=["method", *columns]).fillna("")
    frame = frame.loc[:, (frame != "").any(axis=0)]
    return long, frame


#: the row under each accuracy table: what the private data added over the public data alone
CONTRIBUTION = "Private data's contribution (best private − public only)"


def contribution_cell(c) -> str:
    """'+1.2 ± 0.8 (PAZO-M)': the difference in points, the spread between seeds (none with one
    seed), the best method, and '≤ spread' where the difference is within it."""
    spread = "" if math.isnan(c.spread) else f" ± {100 * c.spread:.1f}"
    within = ", within the seeds' spread" if c.within_spread is True else ""
    return f"{100 * c.contribution:+.1f}{spread} ({results.LABELS.get(c.best_method, c.best_method)}{within})"


def contribution_row(c, setting: str) -> dict:
    """The contribution as a row of the long CSV (method `contribution`)."""
    return {"setting": setting, "method": "contribution", "variant": "", "column": f"{c.epsilon:g}",
            "ours": f"{100 * c.contribution:+.1f}", "std": pct(c.spread), "seeds": "", "paper": "", "diff": "",
            **dict.fromkeys(("chance_level", "runs", "finished", "failed", "excluded", "configs", "selectable_configs",
                             "best_run", "selection", "selection_epsilon", "selection_delta"), ""),
            "selected": c.best_method, "best_accuracy": pct(c.best_accuracy),
            "reference_accuracy": pct(c.reference_accuracy),
            "within_spread": "" if c.within_spread is None else bool(c.within_spread)}


def q_table(best: pd.DataFrame, paper: pd.DataFrame):
    import pandas as pd

    ref = paper[paper.table == "8"]
    long, wide = [], []
    settings = [s for s in SETTING_ORDER if s in set(best.setting)]
    seeds = usual(best)
    for m, variant in rows_of(best):
        row = {"method": results.LABELS.get(m, m) + (SHUFFLE if variant else "")}
        for s in settings:
            for q in sorted(best.q.dropna().unique()):
                hit = best[(best.method == m) & (best.variant == variant) & (best.setting == s) & (best.q == q)]
                pv = ref[(ref.method == m) & (ref.setting == s) & (ref.column == f"q={int(q)}")]
                paper_value = float(pv.value.iloc[0]) if len(pv) and not variant else None
                h = hit.iloc[0] if len(hit) else None
                row[f"{s} q={int(q)}"] = cell(h, paper_value, paper_value is not None, seeds)
                long.append(long_row(h, s, m, f"q={int(q)}", paper_value))
        wide.append(row)
    return long, pd.DataFrame(wide)


#: numbers a benchmark row may carry that the tables format (each a number or null)
BENCHMARK_NUMBERS = ("median_s", "p25_s", "p75_s", "peak_mem_mb", "floor_s", "floor_ratio", "paired_floor_ratio",
                     "mem_ratio", "paired_speedup_over_dpsgd")


def load_benchmark(path: Path) -> dict:
    """A `pazo-bench methods` result file, checked for what the tables read: a ConfigError naming
    the file and what is wrong (not JSON, no `results` list, a row without method and setting, a
    number that is not one)."""
    try:
        data = json.loads(read_regular_text(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"benchmark result file {path} is unreadable or not JSON ({type(err).__name__}); "
                          "run pazo-bench methods again to rewrite it") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or not results:
        raise ConfigError(f"benchmark result file {path} has no list of results (is it a pazo-bench methods file?)")
    for i, row in enumerate(results):
        if not (isinstance(row, dict) and isinstance(row.get("method"), str) and isinstance(row.get("setting"), str)):
            raise ConfigError(f"benchmark result file {path}: result {i} has no method and setting")
        bad = [k for k in BENCHMARK_NUMBERS if row.get(k) is not None and (
            isinstance(row[k], bool) or not isinstance(row[k], (int, float)) or not math.isfinite(row[k]))]
        if bad or ("median_s" in row and not (row.get("median_s") or 0) > 0):
            raise ConfigError(f"benchmark result file {path}: result {i} ({row['method']}, {row['setting']}) has "
                              f"{', '.join(f'{k}={row.get(k)!r}' for k in (bad or ['median_s']))}, not a positive "
                              "finite number")
    return data


def benchmark_rows(paths: list[Path]) -> tuple[list[dict], str]:
    """Our methods' rows (not Opacus') of one or more `pazo-bench methods` result files, and a
    note naming each file's device and command."""
    rows, notes = [], []
    for path in paths:
        data = load_benchmark(path)
        rows += [{**r, "paper_setting": r.get("paper_setting") or BENCHMARK_PAPER_SETTING.get(r["setting"])}
                 for r in data["results"] if r.get("impl", "pazo") == "pazo" and "median_s" in r]
        machine = data["machine"] if isinstance(data.get("machine"), dict) else data  # (files before `machine`)
        where = [str(machine.get("device"))]
        if machine.get("threads"):
            where.append(f"{machine['threads']} thread(s)")
        if machine.get("load_average"):
            where.append("load average " + ", ".join(f"{x:.1f}" for x in machine["load_average"]))
        notes.append(f"{path.name}: {', '.join(where)}; `{data.get('command')}`")
    return rows, "; ".join(notes) + ". Paper: L40S."


def fastest(rows: list[dict], method: str, setting: str) -> dict | None:
    """A method's row on a setting; of the engines benchmarked, the faster: by the paired speedup
    over DP-SGD where every engine's row has one (each engine timed against DP-SGD in its own job,
    so the machine's drift between the jobs cancels; their medians alone can rank them the wrong
    way round), else by the median step time."""
    return faster_engine([r for r in rows if r["method"] == method and r["setting"] == setting])


def faster_engine(hit: list[dict]) -> dict | None:
    """Of one method's rows on one setting (one per engine), the faster, as `fastest` says."""
    if not hit:
        return None
    if all(_paired(h) is not None for h in hit):
        return max(hit, key=_paired)
    return min(hit, key=lambda h: h["median_s"])


def _paired(row: dict) -> float | None:
    """A row's paired speedup over DP-SGD, None where it has none (missing, zero or not finite:
    a NaN would make `max` depend on the order of the rows)."""
    value = row.get("paired_speedup_over_dpsgd")
    return value if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None


def speedup_table(paths: list[Path], paper: pd.DataFrame):
    """Each zeroth-order method's speedup over DP-SGD, ours per benchmarked setting beside the
    paper's from its Table 5 (ratios, not times: the paper used an L40S; a setting without a paper
    column gets none). Ours is the benchmark's paired ratio (DP-SGD and the method alternated in one
    process, `paired_speedup_over_dpsgd`) where the file has it, else DP-SGD's median s/iter over the
    method's (separate subprocesses, older files)."""
    import pandas as pd

    rows, note = benchmark_rows(paths)
    ref = paper[paper.table == "5"]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    zeroth = [m for m in results.METHOD_ORDER if any(r["method"] == m and r.get("forwards") for r in rows)]
    long, wide = [], []
    for s in settings:
        base = fastest(rows, "dpsgd", s)
        paper_setting = next((r.get("paper_setting") for r in rows if r["setting"] == s and r.get("paper_setting")),
                             None)
        row = {"setting": s + (f" ({paper_setting})" if paper_setting else "")}
        for m in zeroth:
            r = fastest(rows, m, s)
            paper_pair = [ref[(ref.method == k) & (ref.setting == paper_setting)].value for k in ("dpsgd", m)]
            paper_ratio = (float(paper_pair[0].iloc[0]) / float(paper_pair[1].iloc[0])
                           if paper_setting and all(len(v) for v in paper_pair) else None)
            ours = _paired(r) if r else None   # paired in one process, where measured
            if ours is None:
                ours = base["median_s"] / r["median_s"] if base and r else None
            row[results.LABELS[m]] = ((f"{ours:.2f}x" if ours is not None else "not run")
                                      + (f" ({paper_ratio:.1f}x)" if paper_ratio is not None else ""))
            long.append({"setting": s, "paper_setting": paper_setting, "method": m,
                         "engine": r.get("engine") if r else None, "speedup_over_dpsgd": ours,
                         "paper_speedup_over_dpsgd": paper_ratio})
        wide.append(row)
    return long, pd.DataFrame(wide), note


def speed_table(paths: list[Path], paper: pd.DataFrame):
    import pandas as pd

    rows, note = benchmark_rows(paths)
    ref = paper[paper.table == "5"]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    long, wide = [], []
    for m in [m for m in results.METHOD_ORDER if any(r["method"] == m for r in rows)]:
        row = {"method": results.LABELS[m]}
        for s in settings:
            hit = [r for r in rows if r["method"] == m and r["setting"] == s]
            if not hit:
                row[s] = ""
                continue
            r = faster_engine(hit)  # of the engines benchmarked, the faster (as the speedup table picks it)
            paper_setting = r.get("paper_setting")
            pv = ref[(ref.method == m) & (ref.setting == paper_setting)] if paper_setting else ref.iloc[0:0]
            paper_value = float(pv.value.iloc[0]) if len(pv) and not math.isnan(pv.value.iloc[0]) else None
            engine = r.get("engine") or r.get("clip_engine")   # a zeroth-order engine, or a clip engine
            text = f"{r['median_s']:.4f}" + (f" {engine}" if len(hit) > 1 else "")
            if r.get("floor_ratio"):
                text += f" [{r['floor_ratio']:.1f}x floor]"
            if paper_value is not None:
                text += f" ({paper_value:.3f})"
            row[s] = text
            long.append({"setting": s, "method": m, "engine": engine, "median_s": r["median_s"],
                         "p25_s": r.get("p25_s"),
                         "p75_s": r.get("p75_s"), "peak_mem_mb": r.get("peak_mem_mb"),
                         "floor_s": r.get("floor_s"), "floor_ratio": r.get("floor_ratio"),
                         "paper_s": paper_value})
        wide.append(row)
    return long, pd.DataFrame(wide), note


def floor_table(paths: list[Path]):
    """Each zeroth-order method against its floor, per setting and engine: median ms per step, the
    floor (the bare passes it needs, each timed alone in the job), the paired ratio (the step over
    its bare passes run just before it: the figure the goal of 1.15x names), and the in-place
    engine's peak memory over that of one no-grad forward of the same batch."""
    import pandas as pd

    rows, note = benchmark_rows(paths)
    note = note.removesuffix(" Paper: L40S.")
    forwards = {r["setting"]: r for p in paths for r in load_benchmark(p)["results"]
                if r["method"] == "forward" and "median_s" in r}   # the files' bare no-grad forward rows
    long, wide = [], []
    for s in dict.fromkeys(r["setting"] for r in rows):
        forward = forwards.get(s)
        for m in results.METHOD_ORDER:
            by_engine = {r.get("engine") or "vectorised": r for r in rows
                         if r["setting"] == s and r["method"] == m and r.get("forwards")}
            if not by_engine:
                continue
            row = {"setting": s, "method": results.LABELS[m]}
            for engine in ("inplace", "vectorised"):
                r = by_engine.get(engine)
                row[f"{engine} ms"] = f"{r['median_s'] * 1e3:.1f}" if r else "not run"
                row[f"{engine} x floor (paired)"] = (f"{r['paired_floor_ratio']:.3f}"
                                                     if r and r.get("paired_floor_ratio") else "")
                if r:
                    long.append({"setting": s, "method": m, "engine": engine, "median_s": r["median_s"],
                                 "floor_s": r.get("floor_s"), "floor_ratio": r.get("floor_ratio"),
                                 "paired_floor_ratio": r.get("paired_floor_ratio"),
                                 "peak_mem_mb": r.get("peak_mem_mb"), "mem_ratio": r.get("mem_ratio")})
            r = by_engine.get("inplace") or next(iter(by_engine.values()))
            row["floor ms"] = f"{r['floor_s'] * 1e3:.1f}" if r.get("floor_s") else ""
            mem = by_engine.get("inplace", {})
            row["in-place peak MB (x fwd)"] = (f"{mem['peak_mem_mb']:.0f} ({mem['mem_ratio']:.2f})"
                                               if mem.get("peak_mem_mb") and mem.get("mem_ratio") else "")
            wide.append(row)
        if forward:
            note += (f" {s}: one no-grad forward {forward['median_s'] * 1e3:.1f} ms"
                     + (f", peak {forward['peak_mem_mb']:.0f} MB" if forward.get("peak_mem_mb") else "") + ".")
    columns = ["setting", "method", "inplace ms", "floor ms", "inplace x floor (paired)", "vectorised ms",
               "vectorised x floor (paired)", "in-place peak MB (x fwd)"]
    return long, pd.DataFrame(wide, columns=columns), note


def shows_paper(long: list[dict]) -> bool:
    """Whether a table's cells show the paper's values (a cell beside one has it in its CSV row)."""
    return any(row.get("paper", "") != "" for row in long)


def notes_for(best: pd.DataFrame, selection: str, metric: str, paper: bool = True) -> list[str]:
    """What a reader needs to read the cells: the selection protocol and the marks used (the paper's
    values only where the cells show them, `paper`)."""
    what = "final" if metric == "final_accuracy" else "best during training"
    seeds = usual(best)
    count = f"{seeds} seed{'s' * (seeds > 1)}; [n]: n seeds"
    notes = [f"Each cell: the configuration (every hyperparameter but the seed) with the best mean "
             f"validation accuracy ({what}) over its seeds, of those whose every seed finished within its "
             f"guarantee; its test accuracy ({what}) as mean ± sample std over those seeds ({count}). The "
             "validation split is carved from the private training data; the selection itself is not "
             "accounted in epsilon (except in cells marked ‡, chosen by private selection)."
             if selection == "val" else
             f"Each cell: the configuration with the best test accuracy ({what}; mean over its seeds if "
             f"several, {count}): selected on the test set, as in the paper, which is not itself private.",
             ("Cells: ours (paper, ours - paper); '—' no configuration could be selected (every one failed "
              "or was excluded); 'not run' no run of ours." if paper else
              "Cells: ours; '—' no configuration could be selected (every one failed or was excluded).")]
    if "selection_outside_epsilon" not in best or best.selection_outside_epsilon.any():
        notes.append("Privacy of the selection: a private cell without ‡ is the best of its configurations (the "
                     "configs column of the long table), each trained on the same private data, so the number shown "
                     "is not covered by one run's epsilon; releasing it costs up to that many runs' epsilons by "
                     "composition. `pazo-sweep --selection private` pays for it instead (cells marked ‡).")
    if "selection_epsilon" in best and best.selection_epsilon.notna().any():
        delta = best.selection_delta.dropna().max()
        notes.append(f"‡ε=x: the cell was chosen by private selection (Papernot and Steinke 2022): per seed, a random "
                     "number K of runs, each a configuration drawn at random from the grid, only the best by "
                     "validation accuracy released; x is the total epsilon of the cell (every seed's selection, "
                     f"composed; dp-accounting's RDP accountant) at delta {delta:.3g}, which covers the selection "
                     "for the private training examples; the validation examples it reads without noise lie "
                     "outside it.")
    if "public_only" in set(best.method):
        notes.append("Public only: SGD on the public split alone, no private data and so no privacy cost: "
                     "its non-private value is the reference for every epsilon column.")
        notes.append(f"{CONTRIBUTION}: per epsilon, the best private method's accuracy minus public only's, in "
                     "points, ± the spread between seeds of that difference (sqrt of the sum of the two cells' "
                     "variances over seeds; none with one seed); 'within the seeds' spread' where the difference "
                     "is no larger. Also in the CSV (method contribution).")
    if (best.chance_level > 0).any():
        notes.append("†: the selected configuration ended at chance-level accuracy in at least one seed "
                     "(the run's summary warns chance_level).")
    if (best.variant == "shuffle").any():
        notes.append(f"Rows marked{SHUFFLE}: runs that shuffled the data instead of Poisson sampling; the "
                     "accountant assumes Poisson sampling, so their epsilon is no guarantee.")
    return notes


def write(out: Path, name: str, title: str, frame: pd.DataFrame, long: list[dict], notes: list[str],
          excluded: pd.DataFrame | None = None) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / f"{name}.csv", pd.DataFrame(long).to_csv(index=False))
    md = (f"### {title}\n\n" + frame.to_markdown(index=False, disable_numparse=True) + "\n\n"
          + "\n".join(f"- {n}" for n in notes) + "\n")
    if excluded is not None:
        md += "\n#### Excluded runs\n\n" + ("none\n" if excluded.empty else (
            f"Not in any epsilon column ({len(excluded)} run{'s' * (len(excluded) > 1)}; also in excluded.csv):\n\n"
            + excluded[["run_dir", "method", "epsilon", "reason"]].to_markdown(index=False) + "\n"))
    write_text_atomic(out / f"{name}.md", md)
    latex = frame.to_latex(index=False, escape=True, caption=title, label=f"tab:{name}")
    write_text_atomic(out / f"{name}.tex", latex)
    print(md)


def main(argv=None) -> int:
    """`pazo-report tables`: a mistake in its inputs is one line and exit 2 (`_refuse_inputs`), said
    before pandas and the method registry (torch) load; then the tables."""
    args = _parser().parse_args(argv)
    refused = _refuse_inputs(args)
    if refused:
        return refused
    out, paper = Path(args.out), paper_values()
    all_excluded = []
    try:
        for sweep_dir in args.sweeps:
            runs = load_runs([sweep_dir])
            if runs.empty:
                return nothing_usable(f"no usable run directory (a config.yaml and, once run, a summary.json) "
                                      f"under {sweep_dir}")
            if problem := none_finished(runs, sweep_dir):   # (a table of no run's numbers)
                return nothing_usable(problem)
            all_excluded.append(write_sweep_tables(out, paper, args, sweep_dir, runs))
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    if args.sweeps:
        import pandas as pd

        write_text_atomic(out / "excluded.csv", pd.concat(all_excluded).to_csv(index=False))
    if args.benchmark:
        write_benchmark_tables(out, paper, [Path(p) for p in args.benchmark])
    return 0


def _parser() -> ArgumentParser:
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("sweeps", nargs="*", type=path_argument, help="sweep directories (outputs/sweeps/<name>)")
    parser.add_argument("--selection", default="val", choices=SELECTIONS,
                        help="val: select on validation accuracy, mean ± std over seeds (default); "
                             "test: on test accuracy, the paper's protocol (not private)")
    parser.add_argument("--metric", default="final_accuracy", choices=["final_accuracy", "best_accuracy"])
    parser.add_argument("--include-shuffle", action="store_true",
                        help="shuffle-sampled runs as rows of their own, labelled guarantee void")
    parser.add_argument("--benchmark", nargs="+", default=None,
                        help="`pazo-bench methods` result files (Table 5 and the speedup over DP-SGD)")
    parser.add_argument("--out", type=path_argument, default=str(ROOT / "outputs" / "tables"))
    return parser


def _refuse_inputs(args) -> int:
    """2, after one `pazo: error:` line, where a benchmark file or a sweep directory named is missing,
    a benchmark file is unreadable or a file stands where the --out folder would be; else 0.
    Checked before any table is written."""
    missing = [f for f in args.benchmark or [] if not Path(f).is_file()]
    if missing:
        print(f"pazo: error: no benchmark result file {', '.join(missing)} (pazo-bench methods writes "
              "them, e.g. scripts/results/methods_cpu_digits.json)", file=sys.stderr)
        return 2
    try:
        for path in args.benchmark or []:
            load_benchmark(Path(path))
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    missing = missing_dirs(args.sweeps)
    problem = f"no sweep directory {', '.join(missing)}" if missing else output_folder_problem(args.out)
    if problem:
        print(f"pazo: error: {problem}", file=sys.stderr)
        return 2
    return 0


def write_sweep_tables(out: Path, paper: pd.DataFrame, args, sweep_dir: str, runs: pd.DataFrame) -> pd.DataFrame:
    """One sweep's tables (Table 8 for a sweep named table8*, else one accuracy table per setting);
    returns its excluded runs (for excluded.csv)."""
    name = Path(sweep_dir).name
    excluded = excluded_runs(runs, args.include_shuffle)
    if name.startswith("table8"):
        best = select_configs(runs, args.metric, args.selection, ("setting", "method", "q"), args.include_shuffle)
        long, frame = q_table(best, paper)
        write(out, name, f"Table 8: accuracy (%) at q = 1 and q = 5; {PROTOCOL[args.selection]}", frame,
              long, notes_for(best, args.selection, args.metric, shows_paper(long)), excluded)
        return excluded
    best = select_configs(runs, args.metric, args.selection, include_shuffle=args.include_shuffle)
    settings = [s for s in SETTING_ORDER if s in set(runs.setting)]
    for setting in settings + sorted(set(runs.setting) - set(SETTING_ORDER)):
        long, frame = accuracy_table(best, setting, paper)
        table = PAPER_TABLE.get(setting)
        title = (f"{'Table ' + table + ': ' if table else ''}{setting} test accuracy (%) ({name}); "
                 f"{PROTOCOL[args.selection]}")
        counts = status_counts(runs[runs.setting == setting])
        write(out, f"{name}_{setting}", title, frame, long,
              [*notes_for(best[best.setting == setting], args.selection, args.metric, shows_paper(long)),
               f"Runs: {counts}; source: {sweep_dir}."], excluded[excluded.setting == setting])
    return excluded


def write_benchmark_tables(out: Path, paper: pd.DataFrame, paths: list[Path]) -> None:
    """Table 5 (speed), each step against its floor, and the speedup over DP-SGD, from benchmark files."""
    long, frame, note = speed_table(paths, paper)
    write(out, "table5_speed", "Table 5: median s/iter (paper's L40S s/iter in brackets)", frame, long,
          [note, "[Nx floor]: the method's time over the bare passes it needs (private forwards and "
                 "public forward-and-backward passes), each timed alone in the same run."])
    long, frame, note = floor_table(paths)
    write(out, "table5_floor", "Each zeroth-order step against its floor (ms per step; x floor: paired, the "
          "goal is at most 1.15x; peak memory over one no-grad forward's, the goal at most 1.1x)", frame, long,
          [note, "Floor: the bare passes a step needs (2q, or k + 1, no-grad forwards of the private batch and "
                 "the public forward-and-backward passes), each timed alone in the same job; paired: the step "
                 "over its bare passes run just before it, pair by pair (the machine's drift cancels)."])
    long, frame, note = speedup_table(paths, paper)
    write(out, "table5_speedup", "Speedup over DP-SGD per step (DP-SGD's step time over the method's; the "
          "paper's Table 5 ratio in brackets)", frame, long,
          [note, "Of the two engines benchmarked, the faster (by the paired ratio where both have one); the "
                 "median of paired steps (DP-SGD's, then the method's, in one process) where the file records "
                 "it, else the ratio of the two jobs' "
                 "medians; one run only (one file per setting)."])


#: `pazo-report tables`, `python -m pazo.report.tables`, `python scripts/make_tables.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
