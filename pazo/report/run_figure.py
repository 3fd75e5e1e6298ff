"""One run's curves, offline, without W&B: test and validation accuracy, the losses and the epsilon
spent, each against the step, read from the run directory's `metrics.jsonl` and drawn into
`curves.png` beside it.

    pazo-report run outputs/runs/digits/pazo_m/<time>_<token> [--out FILE]

(or `python -m pazo.report.run_figure`). The PNG is written atomically (a half-drawn file never
replaces a whole one), so it may be drawn while the run is still going. The file is read by the
rule every report shares (`pazo.run.metrics_file`): a last line that is not a whole row (the row the run
is writing at that moment, or one a kill cut short) is left out and said on stderr; a bad line before
it is corruption, one error line naming it."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pazo.files.file_kinds import output_file, path_argument
from pazo.commands.start import ArgumentParser, command, summary_of  # noqa: E402
from pazo.run.metrics_file import CorruptMetrics, read_metric_rows, torn_note  # noqa: E402
from pazo.files.rundir import write_atomic  # noqa: E402

#: the panels: title -> the metrics drawn in it (those a run does not log are left out)
PANELS = {
    "accuracy": ("test_accuracy", "val_accuracy"),
    "loss": ("train_loss", "test_loss", "val_loss"),
    "epsilon spent": ("epsilon",),
}
FILE = "curves.png"


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that hold a number under `key`."""
    points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [s for s, _ in points], [v for _, v in points]


def draw(rows: list[dict], title: str) -> bytes:
    """The PNG of the panels that have something to draw."""
    panels = {name: [k for k in keys if series(rows, k)[0]] for name, keys in PANELS.items()}
    panels = {name: keys for name, keys in panels.items() if keys}
    if not panels:
        raise ValueError("no accuracy, loss or epsilon in its metrics rows")
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    for ax, (name, keys) in zip(axes[0], panels.items()):
        for key in keys:
            steps, values = series(rows, key)
            ax.plot(steps, values, marker="." if len(steps) < 30 else None, label=key.replace("_", " "))
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="pazo-report run", description=summary_of(__doc__))
    parser.add_argument("run", type=lambda text: Path(path_argument(text)),
                        help="the run directory (it holds metrics.jsonl)")
    parser.add_argument("--out", type=output_file, help=f"where to write the PNG (default: <run>/{FILE})")
    args = parser.parse_args(argv)
    metrics = args.run / "metrics.jsonl"
    if not metrics.is_file():
        parser.error(f"no metrics.jsonl in {args.run} "
                     "(a run directory is outputs/runs/<dataset>/<method>/<time>_<token>)")
    try:
        read = read_metric_rows(metrics)
    except CorruptMetrics as err:
        parser.error(str(err))
    except OSError as err:
        parser.error(f"{metrics} is unreadable ({err.strerror or type(err).__name__})")
    if read.torn:
        print(torn_note(metrics), file=sys.stderr)
    try:
        png = draw(read.rows, f"{args.run.resolve().name}: {len(read.rows)} logged steps")
    except ValueError as err:
        parser.error(f"{metrics}: {err}")
    out = args.out or args.run / FILE
    write_atomic(out, png)
    print(out)
    return 0


#: `pazo-report run`, `python -m pazo.report.run_figure`.
cli = command(main)


if __name__ == "__main__":
    cli()
