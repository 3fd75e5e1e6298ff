"""The documentation's results pages (docs/results/), generated from the measurements committed
under scripts/results/: one page per kind of measurement, each file with the command, commit,
machine and date it records, its rows as a table, and a figure of each step's time against its
floor where a reader would rather look than read. A long page leads with an overview (a figure of
all its files and a few lines on what it shows: `tools.docs.overview`) and folds each file's
full rows. `python -m tools.docs pages` writes them."""
from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pazo import REPO_ROOT
from tools.docs.overview import (Overview, SVG_STYLE, bar_panels, engines_overview, save_svg, scaling_overview,
                                 speed_overview, step_ops_overview)
from tools.docs.tables import CELL_PAIRS, cell, code, fitted, rows_of, table, table_columns  # noqa: F401 (the pages' cells)

RESULTS = REPO_ROOT / "scripts" / "results"
#: subfolders of scripts/results/ that hold run directories (each run's summary.json records it), not result files
RUN_DIRECTORIES = ("audits",)


def result_files(root: Path = RESULTS) -> list[Path]:
    """The benchmarks' result files: every JSON under `root` but the run directories'."""
    return sorted(p for p in root.rglob("*.json") if p.relative_to(root).parts[0] not in RUN_DIRECTORIES)


@dataclass
class Page:
    """One results page: its file name under docs/results/, title, what it measures, the result
    files it shows (globs under scripts/results/), and the columns of their rows (None: all)."""
    name: str
    title: str
    intro: str
    files: tuple[str, ...]
    columns: tuple[str, ...] | None = None
    figure: bool = False
    extra: list[str] = field(default_factory=list)
    #: the columns of the summary table the page leads with (one row per measured row of its files;
    #: `spread` is the interquartile range of the step time where the file has it)
    summary: tuple[str, ...] = ()
    #: which rows the summary keeps (default: all)
    summary_rows: Callable[[dict], bool] | None = None
    #: where a file measures a method several ways (two engines), the summary keeps the row with the
    #: least of this column, as Table 5 shows the faster engine
    summary_least: str | None = None
    #: the figure and lines a long page leads with, from the summary's rows (`tools.docs.overview`);
    #: such a page folds each file's full rows
    overview: Callable[[list[dict], Path], Overview] | None = None


STEP_COLUMNS = ("setting", "method", "impl", "engine", "batch_size", "dim", "median_s", "floor_ratio",
                "paired_floor_ratio", "paired_speedup_over_dpsgd", "peak_mem_mb", "mem_ratio", "run", "error")

PAGES = (
    Page("speed", "Speed of a step",
         "Seconds per training step of every method against its *floor* (the bare forward and backward "
         "passes the step cannot avoid), and its peak memory, measured by `pazo-bench methods`. "
         "`median_s` is the median step time; `floor_ratio` the step over its floor's median; "
         "`paired_floor_ratio` the median of step / floor timed pair by pair (the machine's drift "
         "cancels), the figure the bars show; `paired_speedup_over_dpsgd` DP-SGD's step over this one; "
         "`mem_ratio` the step's peak memory over the bare forward's.",
         ("methods_cpu_digits.json", "methods_cpu_digits_dp_aggzo.json", "methods_cpu_cifar_shape.json",
          "methods_cpu_imdb_lstm_b16.json", "methods_cuda_*.json", "methods_cpu.json", "table5_cpu.json"),
         STEP_COLUMNS, figure=True,
         summary=("file", "setting", "method", "engine", "median_s", "spread", "paired_floor_ratio", "floor_ratio"),
         summary_rows=lambda r: (r.get("impl", "pazo") == "pazo"
                                 and bool(r.get("paired_floor_ratio") or r.get("floor_ratio"))),
         summary_least="median_s", overview=speed_overview),
    Page("engines", "Engines and public gradients",
         "The two zeroth-order engines (`vectorised`: one vmap over all perturbed copies; `inplace`: "
         "MeZO-style perturbation in place) timed side by side in one process, and PAZO's public "
         "gradients computed together against one by one (`pazo-bench engines`, `--public-grads`); "
         "the evidence for `engine.name=auto` and the models' default way. The files under "
         "`public_grads_default/` time the methods with each way of computing the public gradients. "
         "`dpsgd_engines_*` time DP-SGD by each clip engine (`method.clip_engine`: per-example "
         "gradients or book-keeping) beside SGD (`pazo-bench methods --methods sgd,dpsgd`); "
         "`paired_over_sgd` is its step over an SGD step timed pair by pair.",
         ("engines_cpu.json", "engines_cuda.json", "public_grads_cpu.json", "public_grads_cuda.json",
          "public_grads_default/*.json", "dpsgd_engines_*.json"),
         summary=("file", "setting", "method", "clip_engine", "paired_vectorised_over_inplace",
                  "paired_together_over_one_by_one", "paired_over_sgd"),
         summary_rows=lambda r: ("paired_vectorised_over_inplace" in r or "paired_together_over_one_by_one" in r
                                 or "paired_over_sgd" in r),
         overview=engines_overview),
    Page("threads", "CPU threads",
         "Step times at 1, 2 and all cores (`OMP_NUM_THREADS` per subprocess) and the whole default run "
         "at each count and at `train.threads=auto` (`pazo-bench threads`); `auto_threads` is what the "
         "rule picks for the model, `auto_over_best` its time over the best count's.",
         ("threads_cpu.json",),
         ("setting", "method", "best_threads", "auto_threads", "auto_over_best"),
         summary=("setting", "method", "best_threads", "auto_threads", "auto_over_best")),
    Page("scaling", "Many processes",
         "One run's step time on 1 and 2 processes (`torchrun`, one CPU thread each, the same global batch), "
         "the bytes a rank exchanged per step, and the efficiency t1 / (N tN) (`pazo-bench scaling`; "
         "[the guide](../guides/many-processes.md)). Each row is a method on N processes: `median_s` the "
         "median over the repeats of each run's median step, `min_s` and `max_s` the least and the greatest "
         "of them, `rank_bytes_per_step` from the run's summary (`distributed`). The machine these were "
         "measured on is shared with other people's jobs: its load averages are in each file's machine, "
         "and the spread between repeats is the noise they add. GPUs were not measured.",
         ("scaling_*.json",),
         ("method", "world_size", "repeats", "median_s", "min_s", "max_s", "runs_s", "rank_bytes_per_step",
          "speedup", "efficiency", "errors", "command"),
         summary=("file", "method", "world_size", "median_s", "min_s", "max_s", "rank_bytes_per_step", "efficiency"),
         overview=scaling_overview),
    Page("memory", "Memory of a language model's step",
         "Peak memory of one no-grad forward and of one step of each zeroth-order method on an "
         "OPT-shaped causal language model with random weights (`pazo-bench memory`); `ratio` is the "
         "step's peak over the forward's (the goal: at most 1.1).",
         ("memory_*.json",),
         ("what", "peak_bytes", "ratio", "seconds", "dim", "torch_threads", "half_precision_queries",
          "temporary_peak_mib", "kept_fraction", "kept_peak_mib"),
         summary=("file", "what", "ratio", "peak_bytes")),
    Page("defaults", "Every method with its defaults",
         "Every method trained on the bundled digits data set with its default hyperparameters "
         "(`pazo-bench defaults`, one CPU thread per run): a check that the defaults train, not a "
         "comparison of methods. CI re-runs it (`make check-defaults`) and fails on any number that differs.",
         ("defaults_digits_cpu.json",),
         ("method", "status", "engine", "epsilon_spent", "final_val_accuracy", "final_test_accuracy",
          "best_test_accuracy", "warnings"),
         summary=("method", "status", "engine", "epsilon_spent", "final_test_accuracy", "best_test_accuracy")),
    Page("cuda-check", "A check on CUDA",
         "Every private method's default digits run with `device=cuda` and four white-box audits on "
         "CUDA (`bash scripts/gpu_check.sh`): that the runs finish with the CPU's sigma and epsilon and "
         "the audits give the CPU's verdicts. CUDA's random draws differ from the CPU's, so the "
         "accuracies are not the CPU defaults' numbers, and CUDA's kernels are not deterministic: "
         "three runs of the script on one H100 gave PAZO-M a final accuracy of 0.9192, 0.9164 and "
         "0.9192, and PAZO-P 0.8914, 0.8914 and 0.8969 (epsilon, sigma and the audits never moved). "
         "Recorded at an earlier version (the file's commit below), before the digits defaults were "
         "re-recorded on one thread per run with the canonical fingerprints and before the audit's "
         "noise check read real batches: every accuracy here, and the CPU numbers it was checked "
         "against, are that version's; it has not been re-run since.",
         ("cuda_check_digits.json",),
         ("kind", "method", "debug_break", "device", "status", "final_test_accuracy", "best_test_accuracy",
          "epsilon_spent", "sigma", "median_s_per_iter", "engine", "epsilon_at_audit_delta",
          "epsilon_lower_bound", "epsilon_lower_bound_fdp", "auroc", "exceeds"),
         summary=("kind", "method", "debug_break", "status", "final_test_accuracy", "epsilon_spent", "exceeds")),
    Page("tuning", "Tuning grids",
         "Small grids that chose a method's defaults on digits, each run selected on validation "
         "accuracy (a selection on private data, outside each run's epsilon).",
         ("*_digits_grid.json",),
         summary=("file", "q", "lr", "clip", "final_val_accuracy", "final_test_accuracy")),
    Page("calibration", "Noise calibration",
         "The time to calibrate the noise multiplier sigma for a target epsilon (`pazo-bench "
         "calibration`), against a plain bisection over the PRV accountant, and the sigma each finds.",
         ("calibration_cpu.json",),
         summary=("epsilon", "steps", "sigma", "seconds", "baseline_seconds")),
    Page("step-ops", "Tensor operations of a step",
         "The tensor operations each zeroth-order step issues besides its floor's, counted with "
         "torch's dispatcher (`pazo-bench step-ops`): a count that needs no GPU and does not depend on "
         "the machine's noise, where a GPU step's host work shows.",
         ("step_ops_cpu.json",),
         ("setting", "method", "engine", "dim", "parameters", "step_ops", "floor_ops", "extra_ops",
          "extra_by_op"),
         summary=("setting", "method", "engine", "extra_ops"), overview=step_ops_overview),
    Page("profiles", "A zeroth-order step against its floor",
         "DPZero's step against its floor and against a minimal hand-written step (`pazo-bench "
         "profile`), and the microseconds of each operation of the minimal step. `release_paths_*` "
         "time a step's release on the host path (Python floats) and on the device path (tensors) "
         "in one process, alternating (`pazo-bench release`; docs/design/exact-releases.md): "
         "`paired_device_over_host` is the device step over the host step, round by round.",
         ("zo_step_profile_*.json", "release_paths_*.json")),
    Page("dimension", "DPZero's dimension experiment",
         "DPZero's Figures 1-2 on a synthetic quadratic (`pazo-bench dimension`): the best loss and the "
         "gradient norm against the dimension, for each mode of the Hessian's spectrum.",
         ("dpzero_dimension/settings.json",)),
    Page("earlier-runs", "Earlier runs",
         "Result files kept from earlier versions of the code for comparison with the current ones, "
         "each in a folder named after a commit; what each file records is listed here, its rows are "
         "in the file.",
         ("earlier_runs/*/*.json",)),
)


# ---------------------------------------------------------------------------------- formatting

def provenance(data: dict) -> list[str]:
    """What produced a result file, as it records it (`not recorded` where it says so, or null),
    with its note on what was not recorded."""
    machine = data.get("machine")
    if isinstance(machine, dict):
        machine_text = "; ".join(f"{k} {cell(v)}" for k, v in machine.items())
    else:
        machine_text = "not recorded"
    lines = [f"- **Command:** {_recorded(data.get('command'), code)}",
             f"- **Commit:** {_recorded(data.get('commit'), code)}",
             f"- **Machine:** {machine_text}",
             f"- **Date:** {_recorded(data.get('date'), str)}"]
    if data.get("provenance_note"):
        lines.append(f"- **Provenance:** {data['provenance_note']}")
    return lines


def _recorded(value, show) -> str:
    return "not recorded" if value in (None, "", "not recorded") else show(value)


# ---------------------------------------------------------------------------------- figures

def speed_figure(rows: list[dict], title: str, out: Path) -> bool:
    """Bars of each method's step over its floor (paired where measured), written as a deterministic
    SVG; False when the rows have no floor ratio."""
    bars = [(f"{r['method']} ({r.get('engine') or r.get('impl')})", r.get("paired_floor_ratio") or r.get("floor_ratio"))
            for r in rows if r.get("paired_floor_ratio") or r.get("floor_ratio")]
    if not bars:
        return False
    bar_panels([(title, bars)], "step time / floor time (the line at 1 is the floor)", out)
    return True


def dimension_figures(best_csv: Path, settings: dict, figure_dir: Path) -> list[str]:
    """DPZero's Figures 1-2 redrawn from the committed best.csv with `pazo-bench dimension`'s own
    plotting, as deterministic SVGs; their file names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from pazo.bench.dimension import FIGURES, figure, setting_text

    best = pd.read_csv(best_csv)
    setting = setting_text(settings["epsilon"], settings["n"], settings["steps"], settings["sigma"], settings["clip"])
    names = []
    with matplotlib.rc_context({k: v for k, v in SVG_STYLE.items() if k != "font.size"}):
        for name, (metrics, title) in FIGURES.items():
            fig = figure(best, metrics, f"{title} ({setting})")
            save_svg(fig, figure_dir / f"dpzero_dimension_{name}.svg")
            plt.close(fig)
            names.append(f"dpzero_dimension_{name}.svg")
    return names


# ---------------------------------------------------------------------------------- pages

def _rows(data: dict) -> list[dict] | None:
    for key in ("results", "rows"):
        if isinstance(data.get(key), list):
            return data[key]
    return None


def file_section(path: Path, page: Page, figures: dict[str, str], figure_dir: Path) -> list[str]:
    rel = path.relative_to(RESULTS).as_posix()
    data = json.loads(path.read_text())
    lines = [f"## {rel}", "", *provenance(data), ""]
    if data.get("note"):
        lines += [f"> {cell(data['note'])}", ""]
    rows = _rows(data)
    if page.name == "earlier-runs":
        return lines + [f"{len(rows) if rows else 0} rows; see the current file of the same name for the "
                        "columns.", ""]
    if page.figure and rows:
        name = rel.replace("/", "_").removesuffix(".json") + ".svg"
        if speed_figure([r for r in rows if r.get("impl", "pazo") != "floor"], rel, figure_dir / name):
            figures[name] = rel
            lines += [f"![Step time over floor, {rel}](figures/{name})", ""]
    if rows:
        # shown whole in the window, folded or not (`tools.docs.tables.fitted`)
        full = fitted(rows, page.columns)
        lines += [*(folded(f"{rel}: {counted(len(rows), 'row')}", full) if page.overview else full), ""]
    if page.name == "profiles" and "steps" in data:   # (a profile; the release paths have rows)
        lines += ["Steps against the floor:", "", *fitted([{"step": k, **v} for k, v in data["steps"].items()]), "",
                  "Microseconds per operation of the minimal step:", "",
                  *fitted([data["minimal_step_op_us"]]), ""]
    if page.name == "dimension":
        settings = {k: v for k, v in data.items()
                    if k not in ("command", "commit", "date", "machine", "provenance_note")}
        lines += ["Settings:", "", *fitted([settings]), ""]
        best = path.with_name("best.csv")
        if best.exists():
            for name in dimension_figures(best, data, figure_dir):
                figures[name] = rel
                lines += [f"![{name}](figures/{name})", ""]
            best_rows = list(csv.DictReader(io.StringIO(best.read_text())))
            lines += ["Best learning rate per mode, dimension and method (`best.csv`):", "",
                      *fitted([{k: _number(v) for k, v in r.items()} for r in best_rows]), ""]
    if page.name == "memory" and data.get("history"):
        lines += ["Earlier runs of the same file (`history`):", ""]
        for old in data["history"]:
            lines += [f"- {cell(old.get('note'))}: {code(old['command']) if old.get('command') else ''}",
                      "", *["    " + line for line in fitted(old.get("rows", []))], ""]
    return lines


def folded(title: str, lines: list[str]) -> list[str]:
    """Markdown folded in a <details> block, closed until the reader opens it (md_in_html renders
    the Markdown inside; GitHub does too)."""
    return ["<details markdown>", f"<summary>{title}</summary>", "", *lines, "", "</details>"]


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def summary_rows(page: Page, paths: list[Path]) -> list[dict]:
    """The rows of the page's summary: the rows it keeps of every file, each with its file and
    `spread` (the step time's interquartile range, where the file has it), one per method and
    setting where `summary_least` chooses."""
    rows = []
    for path in paths:
        for row in _rows(json.loads(path.read_text())) or []:
            if page.summary_rows is None or page.summary_rows(row):
                spread = (f"{row['p25_s']:.3g}-{row['p75_s']:.3g}"
                          if isinstance(row.get("p25_s"), float) and isinstance(row.get("p75_s"), float) else None)
                rows.append({"file": path.relative_to(RESULTS).as_posix(), "spread": spread, **row})
    if page.summary_least:
        least: dict[tuple, dict] = {}
        for row in rows:
            key = (row["file"], row.get("setting"), row.get("method"))
            value = row.get(page.summary_least) or math.inf
            if key not in least or value < (least[key].get(page.summary_least) or math.inf):
                least[key] = row
        rows = [r for r in rows if least[(r["file"], r.get("setting"), r.get("method"))] is r]
    return rows


def summary_section(page: Page, rows: list[dict], several_files: bool) -> list[str]:
    """The short table a page leads with: the columns that matter of every file's rows (the file
    named where the page shows several), the full rows below."""
    columns = tuple(c for c in page.summary if c != "file" or several_files)
    if not rows:
        return []
    note = (" `spread` is the step time's interquartile range in seconds (its 25th to 75th percentile)."
            if "spread" in columns and any(r["spread"] for r in rows) else "")
    if page.summary_least:
        note += f" Where a method was measured several ways, the one with the least `{page.summary_least}`."
    follow = "each file's full rows (folded) and what produced it follow" if page.overview else \
        "each file's full rows and what produced it follow"
    return ["## Summary", "", f"The columns that matter, one row per measurement; {follow}.{note}", "",
            *fitted(rows, columns), ""]


def _number(text: str):
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


def audits_page(figure_dir: Path) -> tuple[str, Overview]:
    """The audits committed under scripts/results/audits/, one table per folder (folded) as `pazo-report
    audit-table` prints them, led by the overview of them all; the page and its overview."""
    from pazo.audit.run import read_audits
    from pazo.report.audit_table import table as audit_table
    from tools.docs.overview import audits_overview

    lines = ["# Privacy audits", "",
             "Empirical lower bounds on epsilon from `pazo-audit` (canaries inserted with probability 1/2, "
             "the guesses of a white-box or black-box attacker), gathered by `pazo-report audit-table`. "
             "A bound above the printed epsilon would be a bug; the `audit_table_broken` folder holds "
             "runs with a deliberate bug (`audit.debug_break`) that the audit must catch.", ""]
    folders = {folder: read_audits([folder]) for folder in sorted((RESULTS / "audits").iterdir()) if folder.is_dir()}
    overview = audits_overview([s for summaries in folders.values() for s in summaries], figure_dir)
    lines += overview.markdown()
    for folder, summaries in folders.items():
        if not summaries:
            continue
        rel = folder.relative_to(REPO_ROOT).as_posix()
        commits = sorted({str(s.get("commit")) for s in summaries if s.get("commit")})
        lines += [f"## {folder.name}", "",
                  f"- **Command:** {code(f'pazo-report audit-table {rel}')} (each audit's own command is in its "
                  "summary.json)",
                  f"- **Commit:** {', '.join(map(code, commits)) if commits else 'not recorded'}", "",
                  *folded(f"{folder.name}: {counted(len(summaries), 'audit')}",
                          fitted(*rows_of(audit_table(summaries)))), ""]
    return "\n".join(lines), overview


def index_page(pages: list[tuple[Page, int]]) -> str:
    lines = ["# Results", "",
             "Every page here is generated from the result files committed under `scripts/results/` by "
             "`make docs-pages` (a test checks that regenerating them changes nothing). Each "
             "file states the command that produced it, the commit, the machine and the date, as the file "
             "records them; files written before these were recorded say *not recorded*.", "",
             "| page | what it shows | files |", "|---|---|---|"]
    for page, count in pages:
        lines.append(f"| [{page.title}]({page.name}.md) | {cell(page.intro.split('. ')[0])} | {count} |")
    lines += ["| [Privacy audits](audits.md) | Empirical lower bounds on epsilon from `pazo-audit` | "
              f"{len(list((RESULTS / 'audits').iterdir()))} folders |", "",
              "Not here: the paper's tables and figures and the language-model tables need the sweeps' run "
              "directories (`pazo-report tables`, `figures`, `llm-table` read `outputs/sweeps/`), which "
              "are not committed.", ""]
    return "\n".join(lines)


def results_pages(figure_dir_name: str = "figures") -> dict[str, str | bytes]:
    """Every results page and figure: relative path under docs/results/ -> its text (figures as text too)."""
    import tempfile

    out: dict[str, str] = {}
    done = []
    with tempfile.TemporaryDirectory() as tmp:
        figure_dir = Path(tmp)
        figures: dict[str, str] = {}
        for page in PAGES:
            paths = sorted({p for pattern in page.files for p in RESULTS.glob(pattern)},
                           key=lambda p: (next(i for i, pat in enumerate(page.files) if p.match(pat)), p.as_posix()))
            lines = [f"# {page.title}", "", page.intro, ""]
            rows = summary_rows(page, paths) if page.summary else []
            if page.overview and rows:
                overview = page.overview(rows, figure_dir)
                figures[overview.figure] = page.name
                lines += overview.markdown()
            if page.summary:
                lines += summary_section(page, rows, len(paths) > 1)
            if page.figure:
                lines += ["The bars show each step's time over its floor's (1 is the floor itself).", ""]
            for path in paths:
                lines += file_section(path, page, figures, figure_dir)
            out[f"{page.name}.md"] = "\n".join(lines).rstrip() + "\n"
            done.append((page, len(paths)))
        audits, overview = audits_page(figure_dir)
        figures[overview.figure] = "audits"
        for name in figures:
            out[f"{figure_dir_name}/{name}"] = (figure_dir / name).read_text()
    out["audits.md"] = audits.rstrip() + "\n"
    out["index.md"] = index_page(done)
    return out
