"""What a long results page leads with (docs/results/): one figure drawn from the same result files
as its tables, and two to four lines computed from them that say what the figure shows, above the
summary table and the files' full rows. The figures are SVG written deterministically (a fixed hash
salt, no date, text kept as text), so that `python -m tools.docs pages --check` compares them as it compares
the other figures."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pazo.files.rundir import save_figure_atomic

#: matplotlib's settings for every docs figure: what makes the SVG the same on every run
SVG_STYLE = {"svg.hashsalt": "pazo-docs", "svg.fonttype": "none", "font.size": 9}
BAR_COLOUR = "#3f51b5"


@dataclass
class Overview:
    """A page's overview: its lines, and the figure (file name under figures/) with its alt text."""
    lines: list[str]
    figure: str
    alt: str

    def markdown(self) -> list[str]:
        return [*(f"- {line}" for line in self.lines), "", f"![{self.alt}](figures/{self.figure})", ""]


def save_svg(fig, out: Path) -> None:
    """The figure as a deterministic SVG (no date, no creator), written whole or not at all."""
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure_atomic(fig, out, metadata={"Date": None, "Creator": None})


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return matplotlib, plt


def times(value: float) -> str:
    return f"{value:.2f}x"


# ---------------------------------------------------------------------------------- figures

def bar_panels(panels: list[tuple[str, list[tuple[str, float]]]], xlabel: str, out: Path,
               reference: float | None = 1.0) -> None:
    """Horizontal bars, one panel per (title, [(label, value)]) stacked, each value written at its bar's
    end, with a line at `reference` (none when None)."""
    matplotlib, plt = _pyplot()
    sizes = [len(bars) for _, bars in panels]
    with matplotlib.rc_context(SVG_STYLE):
        fig, axes = plt.subplots(len(panels), 1, squeeze=False, figsize=(7, 0.3 * sum(sizes) + 1.2 * len(panels)),
                                 gridspec_kw={"height_ratios": [n + 4 for n in sizes]} if len(panels) > 1 else None)
        for ax, (title, bars) in zip(axes[:, 0], panels):
            labels, values = zip(*bars)
            ax.barh(range(len(bars)), values, color=BAR_COLOUR)
            ax.set_yticks(range(len(bars)), labels)
            ax.invert_yaxis()
            if reference is not None:
                ax.axvline(reference, color="black", linewidth=0.8)
            ax.set_xlim(0, max(*values, reference or 0) * 1.12)
            ax.set_xlabel(xlabel)
            ax.set_title(title)
            for i, v in enumerate(values):
                ax.annotate(f"{v:.3g}" if v >= 100 else f"{v:.2f}", (v, i), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=7)
        fig.tight_layout()
        save_svg(fig, out)
        plt.close(fig)


def grid_figure(values: dict[tuple[str, str], float], rows: list[str], columns: list[str], label: str, out: Path,
                text: Callable[[float], str]) -> None:
    """A grid of cells, one row per `rows` and one column per `columns`, each coloured by its value on
    a log scale (one colour when fewer than two distinct values are positive) and written with
    `text(value)`; a cell without a value is left blank."""
    matplotlib, plt = _pyplot()
    import numpy as np
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FuncFormatter, NullFormatter

    grid = np.ma.masked_invalid([[values.get((r, c), math.nan) for c in columns] for r in rows])
    with matplotlib.rc_context(SVG_STYLE):
        fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(columns), 1.6 + 0.32 * len(rows)))
        found = [v for v in values.values() if v > 0]
        norm = LogNorm(min(found), max(found)) if len(set(found)) > 1 else None
        mesh = ax.pcolormesh(grid, cmap="Blues", norm=norm, edgecolors="white", linewidth=1)
        for (i, j), v in np.ndenumerate(grid.filled(math.nan)):
            if not math.isnan(v):
                dark = norm is not None and norm(v) > 0.6
                ax.text(j + 0.5, i + 0.5, text(v), ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")
        ax.set_xticks([j + 0.5 for j in range(len(columns))], columns, rotation=35, ha="right")
        ax.set_yticks([i + 0.5 for i in range(len(rows))], rows)
        ax.invert_yaxis()
        ax.tick_params(length=0)
        bar = fig.colorbar(mesh, ax=ax, label=label, fraction=0.04, pad=0.02)
        plain = FuncFormatter(lambda v, _: f"{v:g}")  # 2, 3, 1000 rather than 2x10^0, 10^3
        bar.ax.yaxis.set_major_formatter(plain)
        # within a decade the minor ticks are the only ones labelled; across decades they would crowd
        bar.ax.yaxis.set_minor_formatter(plain if norm and norm.vmax < 10 * norm.vmin else NullFormatter())
        fig.tight_layout()
        save_svg(fig, out)
        plt.close(fig)


def scatter_against_diagonal(groups: list[tuple[str, str, list[tuple[float, float]]]], xlabel: str, ylabel: str,
                             out: Path) -> None:
    """Points (x, y), one marker and legend entry per (name, marker, points), with the line y = x, on
    axes linear up to 1 and logarithmic above (zeros and values far apart both show)."""
    matplotlib, plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    with matplotlib.rc_context(SVG_STYLE):
        fig, ax = plt.subplots(figsize=(6, 4.5))
        top = max(max(x, y) for _, _, points in groups for x, y in points) * 1.5
        ax.plot([0, top], [0, top], color="black", linewidth=0.8, label="lower bound = the run's epsilon")
        for (name, marker, points), colour in zip(groups, (BAR_COLOUR, "#c62828", "#2e7d32")):
            if points:
                ax.scatter(*zip(*points), marker=marker, color=colour, label=name, s=22)
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_yscale("symlog", linthresh=1.0)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(loc="lower right", fontsize=7)
        fig.tight_layout()
        save_svg(fig, out)
        plt.close(fig)


# ---------------------------------------------------------------------------------- the pages

def _label(method: str) -> str:
    from pazo.methods import METHODS
    return METHODS.get(method).label if method in METHODS.names() else method


def _order(methods) -> list[str]:
    from pazo.methods import METHODS
    known = {name: i for i, name in enumerate(METHODS.names())}
    return sorted(set(methods), key=lambda m: (known.get(m, len(known)), m))


#: the prefixes of result files' names that say what kind of file it is (the page says that already)
KIND_PREFIXES = ("methods_", "dpsgd_engines_", "engines_", "public_grads_", "step_ops_")


def _where(row: dict) -> str:
    """A measurement's place: its file's name without its kind, and its setting where the name lacks it."""
    stem = row["file"].removesuffix(".json").split("/")[-1]
    short = next((stem.removeprefix(p) for p in KIND_PREFIXES if stem.startswith(p)), stem)
    return short if row.get("setting") and row["setting"] in short else f"{short} {row.get('setting') or ''}".strip()


def floor_ratio(row: dict) -> float | None:
    """A step over its floor: paired where the file measured it so, else the ratio of the medians."""
    return row.get("paired_floor_ratio") or row.get("floor_ratio")


def speed_overview(rows: list[dict], figure_dir: Path) -> Overview:
    """Every method's step over its floor in every measured setting, as one grid."""
    measured = [(r, floor_ratio(r)) for r in rows if floor_ratio(r)]
    values = {(_label(r["method"]), _where(r)): v for r, v in measured}
    methods = [_label(m) for m in _order(r["method"] for r, _ in measured)]
    places = list(dict.fromkeys(_where(r) for r, _ in measured))
    grid_figure(values, methods, places, "step / floor", figure_dir / "overview_speed.svg", times)
    low, high = min(measured, key=lambda m: m[1]), max(measured, key=lambda m: m[1])
    per_method = {m: statistics.median(v for (name, _), v in values.items() if name == m) for m in methods}
    return Overview(
        [f"{len(measured)} measurements of {len(methods)} methods in {len(places)} settings and files: a step "
         f"costs from {times(low[1])} its floor ({_label(low[0]['method'])}, {_where(low[0])}) to "
         f"{times(high[1])} ({_label(high[0]['method'])}, {_where(high[0])}), "
         f"{times(statistics.median(v for _, v in measured))} at the median.",
         "Per method, the median over the settings: "
         + ", ".join(f"{m} {times(v)}" for m, v in per_method.items()) + ".",
         "The grid shows each step over its floor (paired where the file measured it so); the table below "
         "has the step times, each file's full rows are folded under it."],
        "overview_speed.svg", "Each method's step over its floor in each setting")


#: the engines page's ratios: column -> (panel title, what a value below 1 means)
ENGINE_RATIOS = {
    "paired_vectorised_over_inplace": ("vectorised engine / in-place engine", "the vectorised engine is faster"),
    "paired_together_over_one_by_one": ("public gradients together / one by one", "together is faster"),
    "paired_over_sgd": ("DP-SGD / SGD, by clip engine", "DP-SGD is faster than SGD"),
}


def engines_overview(rows: list[dict], figure_dir: Path) -> Overview:
    """Each ratio the page measures, one panel of bars each, and one line each."""
    panels, lines = [], []
    for column, (title, below) in ENGINE_RATIOS.items():
        measured = [r for r in rows if isinstance(r.get(column), (int, float))]
        if not measured:
            continue
        several = len({r["method"] for r in measured}) > 1
        bars = [(_where(r) + (f": {r['method']}" if several else "")
                 + (f" ({r['clip_engine']})" if r.get("clip_engine") else ""), r[column]) for r in measured]
        panels.append((title, bars))
        values = [v for _, v in bars]
        lines.append(f"{title}: {times(min(values))} to {times(max(values))}, "
                     f"{times(statistics.median(values))} at the median over {len(values)} measurements; "
                     f"below 1 ({below}) in {sum(v < 1 for v in values)}.")
    bar_panels(panels, "paired step-time ratio (1: as fast)", figure_dir / "overview_engines.svg")
    return Overview(lines, "overview_engines.svg", "The engines' and the public gradients' paired time ratios")


def step_ops_overview(rows: list[dict], figure_dir: Path) -> Overview:
    """The extra tensor operations of each method's step in each setting, as one grid."""
    measured = [r for r in rows if isinstance(r.get("extra_ops"), int)]
    values = {(_label(r["method"]), r["setting"]): float(r["extra_ops"]) for r in measured}
    methods = [_label(m) for m in _order(r["method"] for r in measured)]
    settings = list(dict.fromkeys(r["setting"] for r in measured))
    grid_figure(values, methods, settings, "extra operations per step",
                figure_dir / "overview_step_ops.svg", lambda v: f"{v:.0f}")
    low = min(measured, key=lambda r: r["extra_ops"])
    high = max(measured, key=lambda r: r["extra_ops"])
    per_setting = {s: statistics.median(v for (_, where), v in values.items() if where == s) for s in settings}
    return Overview(
        [f"{len(measured)} steps of {len(methods)} methods in {len(settings)} settings issue from {low['extra_ops']} "
         f"({_label(low['method'])}, {low['setting']}) to {high['extra_ops']} ({_label(high['method'])}, "
         f"{high['setting']}) tensor operations beyond their floor's.",
         "Per setting, the median over the methods: "
         + ", ".join(f"{s} {v:.0f}" for s, v in per_setting.items()) + "."],
        "overview_step_ops.svg", "Each method's extra tensor operations per step in each setting")


def audits_overview(summaries: list[dict], figure_dir: Path) -> Overview:
    """Every audit's largest lower bound against the run's epsilon at the audit's delta, correct runs
    apart from those with a deliberate bug, and what the audit found of each."""
    from pazo.report.audit_table import audited_epsilon, exceeds

    correct = [s for s in summaries if not s["audit"]["debug_break"]]
    broken = [s for s in summaries if s["audit"]["debug_break"]]
    point = lambda s: (s["audit"]["epsilon_at_audit_delta"], audited_epsilon(s["audit"]))  # noqa: E731
    scatter_against_diagonal([("correct run", "o", [point(s) for s in correct]),
                              ("deliberate bug (audit.debug_break)", "x", [point(s) for s in broken])],
                             "the run's epsilon at the audit's delta", "the audit's largest lower bound on epsilon",
                             figure_dir / "overview_audits.svg")
    caught = [s for s in broken if exceeds(s["audit"])]
    missed = sorted({s["audit"]["debug_break"] for s in broken} - {s["audit"]["debug_break"] for s in caught})
    false_alarms = [s for s in correct if exceeds(s["audit"])]
    closest = max(correct, key=lambda s: audited_epsilon(s["audit"]) / s["audit"]["epsilon_at_audit_delta"])
    lines = [f"{len(summaries)} audits: {len(correct)} of correct runs, {len(broken)} of runs with a deliberate bug "
             "(`audit.debug_break`).",
             f"The audit shows a run less private than it prints in {len(false_alarms)} of the {len(correct)} correct "
             f"runs (the closest: {audited_epsilon(closest['audit']):.2f} against "
             f"{closest['audit']['epsilon_at_audit_delta']:.2f}, {_label(closest['method'])}) and in {len(caught)} of "
             f"the {len(broken)} broken ones" + (f"; never in a run of {', '.join(missed)}." if missed else "."),
             "Each point is an audit: its largest lower bound on epsilon (the canaries', the f-DP one, the noise "
             "check's where it exceeds) against the run's epsilon; above the line, the audit caught the run."]
    return Overview(lines, "overview_audits.svg", "Each audit's lower bound against the run's epsilon")


def scaling_overview(rows: list[dict], figure_dir: Path) -> Overview:
    """Each method's step time against its number of processes (the repeats' median, bars from the
    least to the greatest), and the efficiency t1 / (N tN); lines on the medians, their spread and the
    bytes a rank exchanged."""
    measured = [r for r in rows if isinstance(r.get("median_s"), (int, float))]
    methods = _order(r["method"] for r in measured)
    by_method = {m: sorted((r for r in measured if r["method"] == m), key=lambda r: r["world_size"]) for m in methods}
    def per_method(text) -> str:
        return "; ".join(f"{_label(m)} " + ", ".join(map(text, rows)) for m, rows in by_method.items()) + "."

    lines = ["Median step by processes: "
             + per_method(lambda r: f"{_ms(r['median_s'])} on {r['world_size']}{_efficiency(r)}"),
             "From the least to the greatest of the repeats: "
             + per_method(lambda r: f"{_ms(r['min_s'])} to {_ms(r['max_s'])} on {r['world_size']}")]
    scaling_figure(by_method, figure_dir / "overview_scaling.svg")
    exchanged = sorted({r["rank_bytes_per_step"] for r in measured if r["world_size"] > 1})
    if exchanged:
        lines.append("Bytes a rank exchanged per step on several processes: "
                     + ", ".join(f"{b:,.0f}" for b in exchanged) + " (one process exchanges none).")
    lines.append("Each run's step time is its median step; the figure's bars span the repeats. Efficiency "
                 "t1 / (N tN) of 1 would be N processes taking 1/N of one's time.")
    return Overview(lines, "overview_scaling.svg", "Step time and efficiency against the number of processes")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _efficiency(row: dict) -> str:
    """` (efficiency E)` for a row of several processes that has one."""
    value = row.get("efficiency")
    return f" (efficiency {value:.2f})" if row["world_size"] > 1 and isinstance(value, (int, float)) else ""


def scaling_figure(series: dict[str, list[dict]], out: Path) -> None:
    """Two panels: the step time in ms against the processes, one line per method with bars from the
    least to the greatest repeat; and the efficiency, with the ideal 1 drawn."""
    matplotlib, plt = _pyplot()
    colours = (BAR_COLOUR, "#c62828", "#2e7d32", "#ef6c00")
    with matplotlib.rc_context(SVG_STYLE):
        fig, (times_ax, eff_ax) = plt.subplots(1, 2, figsize=(7, 2.8))
        sizes = sorted({r["world_size"] for rows in series.values() for r in rows})
        for (method, rows), colour in zip(series.items(), colours * len(series)):
            n = [r["world_size"] for r in rows]
            median = [r["median_s"] * 1e3 for r in rows]
            below = [(r["median_s"] - r["min_s"]) * 1e3 for r in rows]
            above = [(r["max_s"] - r["median_s"]) * 1e3 for r in rows]
            times_ax.errorbar(n, median, yerr=[below, above], marker="o", capsize=3, color=colour,
                              label=_label(method))
            efficient = [(r["world_size"], r["efficiency"]) for r in rows if isinstance(r.get("efficiency"), float)]
            if efficient:
                eff_ax.plot(*zip(*efficient), marker="o", color=colour, label=_label(method))
        eff_ax.axhline(1.0, color="black", linewidth=0.8)
        for ax, label in ((times_ax, "ms per step"), (eff_ax, "efficiency t1 / (N tN)")):
            ax.set_xticks(sizes)
            ax.set_xlabel("processes (torchrun, one thread each)")
            ax.set_ylabel(label)
            ax.set_ylim(bottom=0)
        eff_ax.set_ylim(0, 1.1 * max([1.0, *(r["efficiency"] for rows in series.values() for r in rows
                                             if isinstance(r.get("efficiency"), float))]))
        times_ax.legend(fontsize=7)
        fig.tight_layout()
        save_svg(fig, out)
        plt.close(fig)
