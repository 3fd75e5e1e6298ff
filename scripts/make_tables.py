"""The paper's tables from sweep run directories, beside the published values.

    python scripts/make_tables.py outputs/sweeps/table1_cifar10 [outputs/sweeps/table3_imdb ...]
        [--metric final_accuracy|best_accuracy] [--benchmark scripts/results/table5_cuda.json]
        [--out outputs/tables]

Accuracy tables (one per setting found, Tables 1-4 layout): for each method and epsilon the best
test accuracy over its grid - a selection on test accuracy that is not itself private, as in the
paper - with the paper's value and the difference; "—" where every configuration failed, blank
where nothing was run. A sweep named table8* gives Table 8 (accuracy at each q). `--benchmark`
(a file written by scripts/benchmark_methods.py) gives Table 5 (median s/iter per method and
setting, and each zeroth-order method's ratio to its floor). Written as Markdown, LaTeX and CSV.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from pazo.results import LABELS, METHOD_ORDER, best_over_grid, load_runs, paper_values

ROOT = Path(__file__).resolve().parents[1]

PAPER_TABLE = {"cifar10": "1", "tiny_imagenet": "2", "imdb": "3", "mnli": "4"}
SETTING_ORDER = ["cifar10", "tiny_imagenet", "imdb", "mnli"]


def pct(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def difference(ours: float, runs: int, paper: float | None) -> float | None:
    """Ours minus the paper's, in accuracy points, where both exist."""
    if not runs or math.isnan(ours) or paper is None or math.isnan(paper):
        return None
    return 100 * ours - paper


def cell(ours: float, runs: int, paper: float | None, paper_known: bool) -> str:
    if runs == 0:
        text = ""
    else:
        text = "—" if math.isnan(ours) else f"{100 * ours:.1f}"
    if paper_known:
        ref = "—" if paper is None or math.isnan(paper) else f"{paper:.1f}"
        diff = difference(ours, runs, paper)
        text = f"{text or 'not run'} ({ref}{'' if diff is None else f', {diff:+.1f}'})"
    return text


def accuracy_table(best: pd.DataFrame, setting: str, paper: pd.DataFrame):
    """(long rows for CSV, wide frame of cells) for one setting."""
    mine = best[best.setting == setting]
    ref = paper[paper.table == PAPER_TABLE.get(setting, "-")]
    paper_eps = {float(c) for c in ref.column if c != "nonprivate"}
    eps = sorted({e for e in mine.epsilon.unique() if not math.isnan(e)} | paper_eps)
    columns = [*(f"eps={e:g}" for e in eps), "non-private"]
    methods = [m for m in METHOD_ORDER if m in set(mine.method)] + sorted(set(mine.method) - set(METHOD_ORDER))
    long, wide = [], []
    for m in methods:
        row = {"method": LABELS.get(m, m)}
        for e, col in zip([*eps, math.nan], columns):
            hit = mine[(mine.method == m) & ((mine.epsilon == e) | (math.isnan(e) & mine.epsilon.isna()))]
            key = "nonprivate" if math.isnan(e) else f"{e:g}"
            pv = ref[(ref.method == m) & (ref.column == key)]
            paper_value = float(pv.value.iloc[0]) if len(pv) else None
            if hit.empty and paper_value is None:
                row[col] = ""
                continue
            h = hit.iloc[0] if len(hit) else None
            ours = float(h.accuracy) if h is not None else math.nan
            runs = int(h.runs) if h is not None else 0
            row[col] = cell(ours, runs, paper_value, len(ref) > 0)
            long.append({"setting": setting, "method": m, "column": key, "ours": pct(ours) if runs else "",
                         "paper": "" if paper_value is None else paper_value,
                         "diff": "" if (d := difference(ours, runs, paper_value)) is None else f"{d:+.1f}",
                         "runs": runs, "finished": int(h.finished) if h is not None else 0,
                         "failed": int(h.failed) if h is not None else 0,
                         "best_run": h.best_run if h is not None else ""})
        wide.append(row)
    frame = pd.DataFrame(wide, columns=["method", *columns])
    frame = frame.loc[:, (frame != "").any(axis=0)]
    return long, frame


def q_table(best: pd.DataFrame, paper: pd.DataFrame):
    ref = paper[paper.table == "8"]
    long, wide = [], []
    settings = [s for s in SETTING_ORDER if s in set(best.setting)]
    for m in [m for m in METHOD_ORDER if m in set(best.method)]:
        row = {"method": LABELS[m]}
        for s in settings:
            for q in sorted(best.q.dropna().unique()):
                h = best[(best.method == m) & (best.setting == s) & (best.q == q)]
                pv = ref[(ref.method == m) & (ref.setting == s) & (ref.column == f"q={int(q)}")]
                paper_value = float(pv.value.iloc[0]) if len(pv) else None
                ours = float(h.accuracy.iloc[0]) if len(h) else math.nan
                runs = int(h.runs.iloc[0]) if len(h) else 0
                row[f"{s} q={int(q)}"] = cell(ours, runs, paper_value, paper_value is not None)
                long.append({"setting": s, "method": m, "column": f"q={int(q)}", "ours": pct(ours) if runs else "",
                             "paper": "" if paper_value is None else paper_value, "runs": runs})
        wide.append(row)
    return long, pd.DataFrame(wide)


def speed_table(path: Path, paper: pd.DataFrame):
    data = json.loads(path.read_text())
    rows = [r for r in data["results"] if r.get("impl", "pazo") == "pazo" and "median_s" in r]
    ref = paper[paper.table == "5"]
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    long, wide = [], []
    for m in [m for m in METHOD_ORDER if any(r["method"] == m for r in rows)]:
        row = {"method": LABELS[m]}
        for s in settings:
            hit = [r for r in rows if r["method"] == m and r["setting"] == s]
            if not hit:
                row[s] = ""
                continue
            r = hit[0]
            paper_setting = r.get("paper_setting")
            pv = ref[(ref.method == m) & (ref.setting == paper_setting)] if paper_setting else ref.iloc[0:0]
            paper_value = float(pv.value.iloc[0]) if len(pv) and not math.isnan(pv.value.iloc[0]) else None
            text = f"{r['median_s']:.4f}"
            if r.get("floor_ratio"):
                text += f" [{r['floor_ratio']:.1f}x floor]"
            if paper_value is not None:
                text += f" ({paper_value:.3f})"
            row[s] = text
            long.append({"setting": s, "method": m, "median_s": r["median_s"], "p25_s": r.get("p25_s"),
                         "p75_s": r.get("p75_s"), "peak_mem_mb": r.get("peak_mem_mb"),
                         "floor_s": r.get("floor_s"), "floor_ratio": r.get("floor_ratio"),
                         "paper_s": paper_value})
        wide.append(row)
    note = f"Device: {data.get('device')}; command: `{data.get('command')}`. Paper: L40S."
    return long, pd.DataFrame(wide), note


def write(out: Path, name: str, title: str, frame: pd.DataFrame, long: list[dict], notes: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(long).to_csv(out / f"{name}.csv", index=False)
    md = (f"### {title}\n\n" + frame.to_markdown(index=False, disable_numparse=True) + "\n\n"
          + "\n".join(f"- {n}" for n in notes) + "\n")
    (out / f"{name}.md").write_text(md)
    latex = frame.to_latex(index=False, escape=True, caption=title, label=f"tab:{name}")
    (out / f"{name}.tex").write_text(latex)
    print(md)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", help="sweep directories (outputs/sweeps/<name>)")
    parser.add_argument("--metric", default="final_accuracy", choices=["final_accuracy", "best_accuracy"])
    parser.add_argument("--benchmark", default=None, help="a scripts/benchmark_methods.py result file (Table 5)")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "tables"))
    args = parser.parse_args(argv)
    out, paper = Path(args.out), paper_values()
    selection = (f"Best {args.metric.replace('_', ' ')} over each method's grid, chosen on the test set "
                 "(not private, as in the paper). Cells: ours (paper, ours - paper); '—' every "
                 "configuration failed; 'not run' no run of ours.")
    for sweep_dir in args.sweeps:
        runs = load_runs([sweep_dir])
        if runs.empty:
            print(f"no runs under {sweep_dir}", file=sys.stderr)
            return 1
        name = Path(sweep_dir).name
        if name.startswith("table8"):
            best = best_over_grid(runs, args.metric, by=("setting", "method", "q"))
            long, frame = q_table(best, paper)
            write(out, name, "Table 8: accuracy (%) at q = 1 and q = 5", frame, long, [selection])
            continue
        best = best_over_grid(runs, args.metric)
        found = set(runs.setting)
        for setting in [s for s in SETTING_ORDER if s in found] + sorted(found - set(SETTING_ORDER)):
            long, frame = accuracy_table(best, setting, paper)
            table = PAPER_TABLE.get(setting)
            title = f"{'Table ' + table + ': ' if table else ''}{setting} test accuracy (%) ({name})"
            counts = runs[runs.setting == setting].status.value_counts().to_dict()
            write(out, f"{name}_{setting}", title, frame, long,
                  [selection, f"Runs: {counts}; source: {sweep_dir}."])
    if args.benchmark:
        long, frame, note = speed_table(Path(args.benchmark), paper)
        write(out, "table5_speed", "Table 5: median s/iter (paper's L40S s/iter in brackets)", frame, long,
              [note, "[Nx floor]: the method's time over the bare private forward passes it needs, "
                     "timed in the same run."])
    return 0


if __name__ == "__main__":
    sys.exit(main())
