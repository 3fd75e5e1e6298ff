"""Regenerate DPZero's dimension experiment (Figures 1-2 of Zhang et al. 2023) on CPU.

    pazo-bench dimension [--dims 10,30,100,300,1000] [--epsilon 2] [--out outputs/dpzero_dimension]

(or `python -m pazo.bench.dimension`, or `python scripts/dpzero_dimension.py`; `--out` relative to
the working directory, by default the repository's outputs/dpzero_dimension)

Writes runs.csv (every mode, d, method, lr, seed), best.csv (the best lr per mode, d and method),
figure1_grad_norm.{png,pdf} (train and test gradient norm against d, one column per effective-rank
mode) and figure2_best_loss.{png,pdf} (best train and test loss against d). sigma is calibrated for
(epsilon, delta = 1/n) over T full-batch steps with pazo's accountant (q = 1: exact Gaussian
composition). Expected: DPGD-0th degrades with d in every mode; DPZero stays flat when the
effective rank is small, like DP-GD.
"""
from __future__ import annotations

import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pazo import REPO_ROOT  # noqa: E402
from pazo.bench.common import at_least, comma_separated, one_of, positive_number, write_result  # noqa: E402
from pazo.commands.start import ArgumentParser, command, summary_of  # noqa: E402
from pazo.privacy.calibration import calibrate_sigma  # noqa: E402
from pazo.files.file_kinds import path_argument  # noqa: E402
from pazo.files.rundir import save_figure_atomic, write_text_atomic  # noqa: E402
from pazo.synthetic.quadratic import METHODS, MODES, best_over_lr, sweep  # noqa: E402

LABELS = {"dpgd_0th": "DPGD-0th", "dpzero": "DPZero", "dpgd": "DP-GD"}


def setting_text(epsilon: float, n: int, steps: int, sigma: float, clip: float) -> str:
    return f"epsilon={epsilon}, delta=1/n, n={n}, T={steps}, sigma={sigma:.3f}, C={clip}"


#: the two figures: file name -> (the metrics plotted, row by row, with their labels; the title's start)
FIGURES = {"figure1_grad_norm": ([("train_grad_norm", "train gradient norm"), ("test_grad_norm", "test gradient norm")],
                                 "Gradient norm against dimension"),
           "figure2_best_loss": ([("best_train_loss", "best train loss"), ("best_test_loss", "best test loss")],
                                 "Best loss against dimension")}


def figure(best: pd.DataFrame, metrics: list[tuple[str, str]], title: str):
    """One figure: a row per metric, a column per mode, a line per method against the dimension."""
    fig, axes = plt.subplots(len(metrics), len(MODES), figsize=(4 * len(MODES), 3.2 * len(metrics)),
                             squeeze=False)
    for row, (metric, label) in enumerate(metrics):
        for col, mode in enumerate(MODES):
            ax = axes[row][col]
            for method in METHODS:
                part = best[(best["mode"] == mode) & (best["method"] == method)].sort_values("d")
                ax.plot(part["d"], part[metric], marker="o", label=LABELS[method])
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("dimension d")
            ax.set_title(f"{mode} effective rank" if row == 0 else "")
            if col == 0:
                ax.set_ylabel(label)
    axes[0][0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot(best: pd.DataFrame, metrics: list[tuple[str, str]], title: str, path: Path) -> None:
    fig = figure(best, metrics, title)
    for suffix in (".png", ".pdf"):
        save_figure_atomic(fig, path.with_suffix(suffix), dpi=120)
    plt.close(fig)


def main(argv=None):
    p = ArgumentParser(description=summary_of(__doc__))
    p.add_argument("--dims", type=comma_separated(at_least(1)), default="10,30,100,300,1000")
    p.add_argument("--modes", type=comma_separated(one_of(list(MODES))), default=",".join(MODES))
    p.add_argument("--lrs", type=comma_separated(positive_number), default="0.001,0.003,0.01,0.03,0.1,0.3,1.0")
    p.add_argument("--steps", type=at_least(1), default=100)
    p.add_argument("--n", type=at_least(2), default=500)
    p.add_argument("--n-test", type=at_least(1), default=500)
    p.add_argument("--epsilon", type=positive_number, default=2.0)
    p.add_argument("--clip", type=positive_number, default=1.0)
    p.add_argument("--smoothing", type=positive_number, default=1e-3)
    p.add_argument("--seeds", type=at_least(1), default=2)
    p.add_argument("--out", type=path_argument, default=str(REPO_ROOT / "outputs" / "dpzero_dimension"))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    delta = 1.0 / args.n
    sigma = calibrate_sigma(args.epsilon, delta, 1.0, args.steps)
    t0 = time.perf_counter()
    rows = sweep(args.dims, args.modes, args.lrs, args.steps, args.n, args.n_test, sigma,
                 args.clip, args.smoothing, range(args.seeds))
    write_text_atomic(out / "runs.csv", pd.DataFrame(rows).to_csv(index=False))
    best = pd.DataFrame(best_over_lr(rows))
    write_text_atomic(out / "best.csv", best.to_csv(index=False))
    setting = setting_text(args.epsilon, args.n, args.steps, sigma, args.clip)
    for name, (metrics, title) in FIGURES.items():
        plot(best, metrics, f"{title} ({setting})", out / name)
    write_result(out / "settings.json", {**vars(args), "delta": delta, "sigma": sigma,
                                         "seconds": time.perf_counter() - t0})
    print(best[["mode", "d", "method", "lr", "best_train_loss", "train_grad_norm"]].to_string(index=False))
    print(f"wrote {out}/ (runs.csv, best.csv, figure1_grad_norm.png/pdf, figure2_best_loss.png/pdf)")


#: `pazo-bench dimension`, `python -m pazo.bench.dimension`, `python scripts/dpzero_dimension.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
