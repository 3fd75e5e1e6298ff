"""Benchmarks and measurements: `pazo-bench <name> [args]` (or `python -m pazo.bench.<module>`,
or the launchers in scripts/). Result files go to scripts/results/ by default, whatever the working
directory. Shared: `settings` (the settings, synthetic inputs, models and methods, a step's bare
passes), `timing` (synchronised timing, peak memory, the result record), `common` (where results
go, the command and commit, the result file, Ctrl-C / SIGTERM)."""
from __future__ import annotations

#: name -> (module, one line for `pazo-bench --help`)
COMMANDS = {
    "methods": ("pazo.bench.methods", "seconds per step, floor and peak memory of every method (Table 5)"),
    "engines": ("pazo.bench.engines", "the two zeroth-order engines side by side (or --public-grads)"),
    "memory": ("pazo.bench.memory", "peak memory of a forward and of each ZO method's step on an OPT-shaped LM"),
    "calibration": ("pazo.bench.calibration", "time sigma calibration against a plain PRV bisection"),
    "profile": ("pazo.bench.profile_step", "a DPZero step against its floor and a minimal hand-written step"),
    "release": ("pazo.bench.release_paths", "a ZO step's release on the host path and the device path, on CPU"),
    "step-ops": ("pazo.bench.step_ops", "tensor operations a ZO step issues besides its floor's"),
    "defaults": ("pazo.bench.defaults", "every method with its default hyperparameters on digits"),
    "dimension": ("pazo.bench.dimension", "DPZero's dimension experiment (its Figures 1-2) on a quadratic"),
    "threads": ("pazo.bench.threads", "step time at 1, 2 and all CPU threads, and the default run (threads)"),
    "scaling": ("pazo.bench.scaling", "step time and bytes exchanged of one run on 1, 2, ... processes (torchrun)"),
}


def main(argv: list[str] | None = None) -> int:
    """`pazo-bench <name> [args]`."""
    from pazo import REPO_ROOT
    from pazo.commands.start import dispatch
    return dispatch("pazo-bench", f"benchmarks and measurements (results in {REPO_ROOT / 'scripts' / 'results'}, the "
                    "checkout's, whatever the current folder: --out writes elsewhere)", COMMANDS, argv)
