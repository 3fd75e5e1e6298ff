"""The paper's figures from sweep run directories, as PNG and PDF.

    pazo-report figures outputs/sweeps/table1_cifar10 [...] [--epsilon 1]
        [--selection val|test] [--metric final_accuracy|best_accuracy] [--out outputs/figures]

(or `python -m pazo.report.figures`, or `python scripts/make_figures.py`)

figure2: accuracy of each method's selected configuration against epsilon, one panel per setting;
         the public-only reference (no privacy cost) as a horizontal line.
figure3: best first-order vs best zeroth-order method, each with and without public data.
figure4: test accuracy against steps of the selected PAZO-M/P/S and DPZero runs at --epsilon.
figure5: accuracy of the selected configurations against s/iter (median over the run) at --epsilon.
figure6: robustness heat maps at --epsilon: PAZO-M (b' x alpha), PAZO-P (b' x k), PAZO-S (b' x
         perturbation), each cell selected over the other hyperparameters (the paper's Figures 6
         and 8; one row of panels per setting).
Configurations are selected as in the tables (pazo.run.results.select_configs): on validation accuracy,
test accuracy averaged over seeds, or with --selection test on test accuracy (the paper's protocol,
not private); each figure's title says which. Private points count only runs whose guarantee
holds (`pazo-report tables` lists the others). A figure whose runs are absent is skipped with a note.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from pazo.commands.start import ArgumentParser, command, summary_of
from pazo import REPO_ROOT as ROOT
from pazo.errors import ConfigError
from pazo.report import none_finished, nothing_usable
from pazo.run import results
from pazo.run.metrics_file import FILE, CorruptMetrics, read_metric_rows, torn_note
from pazo.run.results import SELECTIONS, load_runs, missing_dirs, select_configs
from pazo.files.file_kinds import path_argument
from pazo.files.rundir import output_folder_problem, save_figure_atomic

SETTING_ORDER = ["cifar10", "tiny_imagenet", "imdb", "mnli"]
PROTOCOL = {"val": "selected on validation accuracy; test accuracy, mean over seeds",
            "test": "selected on test accuracy, as in the paper: not a private selection"}


def heat_maps() -> dict[str, tuple[str, str]]:
    """Method -> the (rows, columns) keys of its robustness heat map, from the registry's facts
    (`heat_map`), in registration order: a method registered with one is drawn too."""
    from pazo.methods import method_info, method_names

    return {n: method_info(n).heat_map for n in method_names() if method_info(n).heat_map}


def pyplot():
    """matplotlib's pyplot, drawing into files (Agg), loaded when a figure is drawn: a refusal of the
    command's input needs none of it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def settings_of(runs):
    return [s for s in SETTING_ORDER if s in set(runs.setting)] + sorted(set(runs.setting) - set(SETTING_ORDER))


def save(fig, out: Path, name: str, written: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        save_figure_atomic(fig, out / f"{name}.{ext}", bbox_inches="tight", dpi=150)
    pyplot().close(fig)
    written.append(name)


def panels(frame, note: str):
    """One panel per setting of `frame`: the figure (titled with the selection protocol `note`) and
    (axis, setting, that setting's rows)."""
    settings = settings_of(frame)
    fig, axes = pyplot().subplots(1, len(settings), figsize=(4.2 * len(settings), 3.4), squeeze=False)
    fig.suptitle(note, fontsize=8)
    return fig, [(ax, s, frame[frame.setting == s]) for ax, s in zip(axes[0], settings)]


def figure2(best, note, out, written):
    private = best[best.epsilon.notna()]
    if private.empty:
        return print("figure2: no private runs")
    public_only = best[(best.method == "public_only") & best.accuracy.notna()].set_index("setting").accuracy
    fig, grid = panels(private, note)
    for ax, s, mine in grid:
        for m in [m for m in results.METHOD_ORDER if m in set(mine.method)]:
            rows = mine[mine.method == m].sort_values("epsilon")
            ax.plot(rows.epsilon, 100 * rows.accuracy, marker="o", label=results.LABELS[m],
                    linestyle="-" if m.startswith("pazo") else "--")
        if s in public_only.index:    # no privacy cost: the same reference at every epsilon
            ax.axhline(100 * public_only[s], color="0.3", linestyle=":", label=results.LABELS["public_only"])
        ax.set(xscale="log", xlabel="epsilon", ylabel="test accuracy (%)", title=s)
    grid[-1][0].legend(fontsize=7, loc="best")
    save(fig, out, "figure2_accuracy_vs_epsilon", written)


def figure3(best, note, out, written):
    private = best[best.epsilon.notna()]
    groups = {"FO": lambda m: m in results.FIRST_ORDER and m not in results.USES_PUBLIC,
              "FO+PUB": lambda m: m in results.FIRST_ORDER and m in results.USES_PUBLIC,
              "ZO": lambda m: m not in results.FIRST_ORDER and m not in results.USES_PUBLIC,
              "ZO+PUB": lambda m: m not in results.FIRST_ORDER and m in results.USES_PUBLIC}
    if private.empty:
        return print("figure3: no private runs")
    fig, grid = panels(private, note)
    for ax, s, mine in grid:
        for name, member in groups.items():
            rows = mine[mine.method.map(member) & mine.accuracy.notna()]
            if rows.empty:
                continue
            # chosen on the selection score, as a cell; a privately selected cell has none (its release
            # withholds the validation accuracy): its test accuracy, already released, stands in
            ranked = rows.assign(rank=rows.score.fillna(rows.accuracy))
            top = rows.loc[ranked.groupby("epsilon")["rank"].idxmax()]
            ax.plot(top.epsilon, 100 * top.accuracy, marker="o", label=name,
                    linestyle="-" if name.startswith("ZO") else "--")
        ax.set(xscale="log", xlabel="epsilon", ylabel="best test accuracy (%)", title=s)
    grid[-1][0].legend(fontsize=8)
    save(fig, out, "figure3_best_zo_vs_fo", written)


def metric_rows(run_dir: Path) -> list[dict]:
    """The rows of a run's metrics.jsonl by the rule every report shares (`pazo.run.metrics_file`): a torn
    last line is left out and said on stderr; a file with a bad line before it (corrupt), or that
    cannot be read, gives no rows: the run's curve is left out, with one line naming the file and
    the line (as `load_runs` skips a run whose files do not parse)."""
    path = run_dir / FILE
    try:
        read = read_metric_rows(path)
    except (CorruptMetrics, OSError) as err:
        why = str(err) if isinstance(err, CorruptMetrics) else f"{path} is unreadable ({err.strerror})"
        print(f"pazo: left out the curve of {run_dir}: {why}", file=sys.stderr)
        return []
    if read.torn:
        print(torn_note(path), file=sys.stderr)
    return read.rows


def figure4(best, epsilon, note, out, written):
    import numpy

    chosen = best[(best.epsilon == epsilon) & best.method.isin(["dpzero", "pazo_m", "pazo_p", "pazo_s"])
                  & best.best_run.notna()]
    if chosen.empty:
        return print(f"figure4: no DPZero/PAZO runs at epsilon {epsilon}")
    fig, grid = panels(chosen, note)
    for ax, s, mine in grid:
        for _, row in mine.iterrows():
            metrics = metric_rows(Path(row.best_run))
            points = [(m["step"], m["test_accuracy"]) for m in metrics
                      if isinstance(m.get("test_accuracy"), (int, float))]
            if points:
                steps, acc = zip(*points)
                ax.plot(steps, 100 * numpy.asarray(acc), label=results.LABELS[row.method])
        ax.set(xlabel="step", ylabel="test accuracy (%)", title=f"{s}, epsilon {epsilon:g}")
    if grid[-1][0].get_legend_handles_labels()[0]:   # (no curve, as when every run's file was refused: no legend)
        grid[-1][0].legend(fontsize=8)
    save(fig, out, "figure4_accuracy_vs_steps", written)


def figure5(runs, best, epsilon, note, out, written):
    chosen = best[(best.epsilon == epsilon) & best.best_run.notna()]
    if chosen.empty:
        return print(f"figure5: no runs at epsilon {epsilon}")
    speed = runs.set_index("run_dir").s_per_iter
    fig, grid = panels(chosen, note)
    for ax, s, mine in grid:
        for _, row in mine.iterrows():
            t = speed.get(row.best_run)
            if t is None or (isinstance(t, float) and math.isnan(t)):
                continue
            ax.scatter(t, 100 * row.accuracy, marker="o" if row.method.startswith("pazo") else "s")
            ax.annotate(results.LABELS[row.method], (t, 100 * row.accuracy), fontsize=7)
        ax.set(xscale="log", xlabel="s/iter (median of the run)", ylabel="test accuracy (%)",
               title=f"{s}, epsilon {epsilon:g}")
    save(fig, out, "figure5_accuracy_vs_speed", written)


def figure6(runs, epsilon, metric, selection, note, out, written):
    import numpy

    maps = heat_maps()
    at = runs[(runs.epsilon == epsilon) & runs.method.isin(list(maps))]
    if at.empty:
        return print(f"figure6: no PAZO runs at epsilon {epsilon}")
    settings = settings_of(at)
    fig, axes = pyplot().subplots(len(settings), len(maps), figsize=(4.2 * len(maps), 3.4 * len(settings)),
                             squeeze=False)
    fig.suptitle(note, fontsize=8)
    for row_axes, s in zip(axes, settings):
        for ax, (m, (rows_key, cols_key)) in zip(row_axes, maps.items()):
            mine = at[(at.setting == s) & (at.method == m)]
            ax.set_title(f"{results.LABELS[m]}, {s}")
            if mine.empty or mine[rows_key].isna().all() or mine[cols_key].isna().all():
                ax.axis("off")
                continue
            cells = select_configs(mine, metric, selection, by=("setting", "method", rows_key, cols_key))
            grid = cells.set_index([rows_key, cols_key]).accuracy.unstack()
            ax.imshow(100 * grid.values, cmap="viridis", aspect="auto")
            ax.set(xticks=range(len(grid.columns)), xticklabels=[f"{c:g}" for c in grid.columns],
                   yticks=range(len(grid.index)), yticklabels=[f"{i:g}" for i in grid.index],
                   xlabel=cols_key, ylabel=rows_key)
            for (i, j), v in numpy.ndenumerate(grid.values):
                ax.text(j, i, "" if math.isnan(v) else f"{100 * v:.1f}", ha="center", va="center",
                        color="white", fontsize=8)
    save(fig, out, "figure6_robustness", written)


def main(argv=None) -> int:
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("sweeps", nargs="+", type=path_argument)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--selection", default="val", choices=SELECTIONS,
                        help="val: select on validation accuracy (default); test: on test accuracy, as the paper")
    parser.add_argument("--metric", default="final_accuracy", choices=["final_accuracy", "best_accuracy"])
    parser.add_argument("--out", type=path_argument, default=str(ROOT / "outputs" / "figures"))
    args = parser.parse_args(argv)
    missing = missing_dirs(args.sweeps)
    problem = f"no sweep directory {', '.join(missing)}" if missing else output_folder_problem(args.out)
    if problem:
        print(f"pazo: error: {problem}", file=sys.stderr)
        return 2
    runs = load_runs(args.sweeps)
    if runs.empty:
        return nothing_usable(f"no usable run directory under {', '.join(args.sweeps)}")
    if problem := none_finished(runs, ", ".join(args.sweeps)):   # (figures of no run's numbers)
        return nothing_usable(problem)
    note = PROTOCOL[args.selection]
    try:
        best = select_configs(runs, args.metric, args.selection)
        out, written = Path(args.out), []
        figure2(best, note, out, written)
        figure3(best, note, out, written)
        figure4(best, args.epsilon, note, out, written)
        figure5(runs, best, args.epsilon, note, out, written)
        figure6(runs, args.epsilon, args.metric, args.selection, note, out, written)
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(written) or 'nothing'} (PNG and PDF) to {out}")
    return 0


#: `pazo-report figures`, `python -m pazo.report.figures`, `python scripts/make_figures.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
