"""The paper's figures from sweep run directories, as PNG and PDF.

    python scripts/make_figures.py outputs/sweeps/table1_cifar10 [...] [--epsilon 1]
        [--metric final_accuracy|best_accuracy] [--out outputs/figures]

figure2: best accuracy against epsilon per method, one panel per setting.
figure3: best first-order vs best zeroth-order method, each with and without public data.
figure4: test accuracy against steps of the best PAZO-M/P/S run and the best DPZero run at --epsilon.
figure5: best accuracy against s/iter (median over the run) at --epsilon.
figure6: robustness heat maps at --epsilon: PAZO-M (b' x alpha), PAZO-P (b' x k), PAZO-S (b' x
         perturbation), each cell the best accuracy over the other hyperparameters (the paper's
         Figures 6 and 8; one row of panels per setting).
Best-over-grid selections use test accuracy (not private, as in the paper). A figure whose runs
are absent is skipped with a note.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pazo.results import FIRST_ORDER, LABELS, METHOD_ORDER, USES_PUBLIC, best_over_grid, load_runs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

SETTING_ORDER = ["cifar10", "tiny_imagenet", "imdb", "mnli"]
HEATMAPS = {"pazo_m": ("public_batch_size", "alpha"), "pazo_p": ("public_batch_size", "k"),
            "pazo_s": ("public_batch_size", "perturbation")}


def settings_of(runs):
    return [s for s in SETTING_ORDER if s in set(runs.setting)] + sorted(set(runs.setting) - set(SETTING_ORDER))


def save(fig, out: Path, name: str, written: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "pdf"):
        fig.savefig(out / f"{name}.{ext}", bbox_inches="tight", dpi=150)
    plt.close(fig)
    written.append(name)


def panels(frame):
    """One panel per setting of `frame`: the figure and (axis, setting, that setting's rows)."""
    settings = settings_of(frame)
    fig, axes = plt.subplots(1, len(settings), figsize=(4.2 * len(settings), 3.4), squeeze=False)
    return fig, [(ax, s, frame[frame.setting == s]) for ax, s in zip(axes[0], settings)]


def figure2(best, out, written):
    private = best[best.epsilon.notna()]
    if private.empty:
        return print("figure2: no private runs")
    fig, grid = panels(private)
    for ax, s, mine in grid:
        for m in [m for m in METHOD_ORDER if m in set(mine.method)]:
            rows = mine[mine.method == m].sort_values("epsilon")
            ax.plot(rows.epsilon, 100 * rows.accuracy, marker="o", label=LABELS[m],
                    linestyle="-" if m.startswith("pazo") else "--")
        ax.set(xscale="log", xlabel="epsilon", ylabel="test accuracy (%)", title=s)
    grid[-1][0].legend(fontsize=7, loc="best")
    save(fig, out, "figure2_accuracy_vs_epsilon", written)


def figure3(best, out, written):
    private = best[best.epsilon.notna()]
    groups = {"FO": lambda m: m in FIRST_ORDER and m not in USES_PUBLIC,
              "FO+PUB": lambda m: m in FIRST_ORDER and m in USES_PUBLIC,
              "ZO": lambda m: m not in FIRST_ORDER and m not in USES_PUBLIC,
              "ZO+PUB": lambda m: m not in FIRST_ORDER and m in USES_PUBLIC}
    if private.empty:
        return print("figure3: no private runs")
    fig, grid = panels(private)
    for ax, s, mine in grid:
        for name, member in groups.items():
            rows = mine[mine.method.map(member)]
            if rows.empty:
                continue
            top = rows.groupby("epsilon").accuracy.max()
            ax.plot(top.index, 100 * top.values, marker="o", label=name,
                    linestyle="-" if name.startswith("ZO") else "--")
        ax.set(xscale="log", xlabel="epsilon", ylabel="best test accuracy (%)", title=s)
    grid[-1][0].legend(fontsize=8)
    save(fig, out, "figure3_best_zo_vs_fo", written)


def figure4(best, epsilon, out, written):
    chosen = best[(best.epsilon == epsilon) & best.method.isin(["dpzero", "pazo_m", "pazo_p", "pazo_s"])
                  & best.best_run.notna()]
    if chosen.empty:
        return print(f"figure4: no DPZero/PAZO runs at epsilon {epsilon}")
    fig, grid = panels(chosen)
    for ax, s, mine in grid:
        for _, row in mine.iterrows():
            lines = (Path(row.best_run) / "metrics.jsonl").read_text().splitlines()
            metrics = [json.loads(line) for line in lines if line]
            points = [(m["step"], m["test_accuracy"]) for m in metrics if m.get("test_accuracy") is not None]
            if points:
                steps, acc = zip(*points)
                ax.plot(steps, 100 * np.asarray(acc), label=LABELS[row.method])
        ax.set(xlabel="step", ylabel="test accuracy (%)", title=f"{s}, epsilon {epsilon:g}")
    grid[-1][0].legend(fontsize=8)
    save(fig, out, "figure4_accuracy_vs_steps", written)


def figure5(runs, best, epsilon, out, written):
    chosen = best[(best.epsilon == epsilon) & best.best_run.notna()]
    if chosen.empty:
        return print(f"figure5: no runs at epsilon {epsilon}")
    speed = runs.set_index("run_dir").s_per_iter
    fig, grid = panels(chosen)
    for ax, s, mine in grid:
        for _, row in mine.iterrows():
            t = speed.get(row.best_run)
            if t is None or (isinstance(t, float) and math.isnan(t)):
                continue
            ax.scatter(t, 100 * row.accuracy, marker="o" if row.method.startswith("pazo") else "s")
            ax.annotate(LABELS[row.method], (t, 100 * row.accuracy), fontsize=7)
        ax.set(xscale="log", xlabel="s/iter (median of the run)", ylabel="test accuracy (%)",
               title=f"{s}, epsilon {epsilon:g}")
    save(fig, out, "figure5_accuracy_vs_speed", written)


def figure6(runs, epsilon, metric, out, written):
    at = runs[(runs.epsilon == epsilon) & (runs.status == "finished") & runs.method.isin(list(HEATMAPS))]
    if at.empty:
        return print(f"figure6: no PAZO runs at epsilon {epsilon}")
    settings = settings_of(at)
    fig, axes = plt.subplots(len(settings), len(HEATMAPS), figsize=(4.2 * len(HEATMAPS), 3.4 * len(settings)),
                             squeeze=False)
    for row_axes, s in zip(axes, settings):
        for ax, (m, (rows_key, cols_key)) in zip(row_axes, HEATMAPS.items()):
            mine = at[(at.setting == s) & (at.method == m)]
            ax.set_title(f"{LABELS[m]}, {s}")
            if mine.empty or mine[rows_key].isna().all() or mine[cols_key].isna().all():
                ax.axis("off")
                continue
            grid = mine.pivot_table(index=rows_key, columns=cols_key, values=metric, aggfunc="max")
            ax.imshow(100 * grid.values, cmap="viridis", aspect="auto")
            ax.set(xticks=range(len(grid.columns)), xticklabels=[f"{c:g}" for c in grid.columns],
                   yticks=range(len(grid.index)), yticklabels=[f"{i:g}" for i in grid.index],
                   xlabel=cols_key, ylabel=rows_key)
            for (i, j), v in np.ndenumerate(grid.values):
                ax.text(j, i, "" if math.isnan(v) else f"{100 * v:.1f}", ha="center", va="center",
                        color="white", fontsize=8)
    save(fig, out, "figure6_robustness", written)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--metric", default="final_accuracy", choices=["final_accuracy", "best_accuracy"])
    parser.add_argument("--out", default=str(ROOT / "outputs" / "figures"))
    args = parser.parse_args(argv)
    runs = load_runs(args.sweeps)
    if runs.empty:
        print("no runs found", file=sys.stderr)
        return 1
    best = best_over_grid(runs, args.metric)
    out, written = Path(args.out), []
    figure2(best, out, written)
    figure3(best, out, written)
    figure4(best, args.epsilon, out, written)
    figure5(runs, best, args.epsilon, out, written)
    figure6(runs, args.epsilon, args.metric, out, written)
    print(f"wrote {', '.join(written) or 'nothing'} (PNG and PDF) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
