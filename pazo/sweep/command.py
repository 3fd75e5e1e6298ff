"""Sweeps over the paper's grids: `pazo-sweep <spec> [--dry-run] [--launcher L] [overrides]`.

Before any run starts, every run's config is composed and validated (`check`): a typo in an
override, a bad grid value or an unknown method is one error line, not a sweep of failed runs.
A sweep spec (`configs/sweeps/<name>.yaml`) names settings, methods, epsilons, seeds and extra
axes; each setting's per-method grid comes from `configs/sweeps/grids/<setting>.yaml` (or, with
`grid: false`, every method runs at its defaults on the data set named by the setting). A spec
with `entry: audit` runs `python -m pazo.audit` (the privacy audit) instead of training. Every
combination is one run with a deterministic directory `<out>/<sweep>/<setting>/<method>/<eps>/<values>,rep=<i>`
(the i-th of the spec's seeds: the seed itself is in the run's config.yaml only),
so relaunching a sweep finds its earlier runs: runs whose `summary.json` says finished are
skipped, the rest are (re)run. Each run is a `python -m pazo.train` (or `pazo.audit`) subprocess (a crash or
out-of-memory ends that run only), launched one after another, several at once with joblib, or
as a SLURM array through submitit. W&B groups runs by `<sweep>/<setting>`.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir

from pazo.commands.console import use_console
from pazo.commands.interrupts import restore, stop_status, stop_word, until_work_starts, work_starts
from pazo.commands.start import ArgumentParser, at_least, quiet_when_the_reader_leaves, summary_of
from pazo.errors import ConfigError
from pazo.files.file_kinds import path_argument
from pazo.plugins import load_plugins
from pazo.sweep.checks import (_Checker, check, check_earlier_runs, check_replicates, check_sweep_folder,
                               composed_configs, missing_data, status)
from pazo.sweep.child_runs import Interrupted
from pazo.sweep.launchers import (check_can_launch, check_launcher, check_ranks_can_share, command, launch,
                                  parse_sets, tasks_in_all)
from pazo.sweep.spec import (MAX_RUNS, ROOT, SELECTION_MODES, SWEEPS, PlannedRun, enumerate_runs, fmt, load_spec,
                             load_yaml, select_methods)

log = logging.getLogger("pazo.sweep")  # the sweep's lines, whichever of its modules logs them


@dataclass
class Cell:
    """One table cell under private selection: its configurations (the grid a draw picks from) and
    the seeds, one selection each."""
    setting: str
    method: str
    epsilon: float
    configurations: list[PlannedRun]
    seeds: list[int]

    @property
    def cell_id(self) -> str:
        return f"{self.setting}/{self.method}/eps={fmt(self.epsilon)}"


def selection_cells(runs: list[PlannedRun]) -> list[Cell]:
    """The private runs of a sweep as cells: (setting, method, epsilon), each configuration once."""
    cells: dict[tuple, Cell] = {}
    for run in runs:
        cell = cells.setdefault((run.setting, run.method, run.epsilon),
                                Cell(run.setting, run.method, run.epsilon, [], []))
        if run.seed not in cell.seeds:
            cell.seeds.append(run.seed)
        if run.seed == cell.seeds[0]:
            cell.configurations.append(run)
    return list(cells.values())


def selection_costs(cells: list[Cell], extra: list[str], k) -> list:
    """Each cell's cost (pazo.sweep.selection.cell_cost): the private set's size read once a setting, each
    distinct (q, T, epsilon) calibrated once through the sigma cache."""
    from pazo.sweep.selection import cell_cost, private_size
    from pazo.run.typed import run_config

    configs = composed_configs([r for c in cells for r in c.configurations], extra)
    sizes, costs, i = {}, [], 0
    for cell in cells:
        mine, i = configs[i:i + len(cell.configurations)], i + len(cell.configurations)
        if cell.setting not in sizes:
            with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
                first = _Checker(extra).compose([*cell.configurations[0].overrides(), *extra])
            sizes[cell.setting] = private_size(run_config(first))
        try:
            costs.append(cell_cost(mine, k, len(cell.seeds), sizes[cell.setting]))
        except ConfigError as err:   # a dry run lists every cell's problem; a launch refuses the first
            costs.append(err)
    return costs


def _k_of(spec: dict, args):
    from pazo.sweep.selection import k_distribution

    given = {"distribution": args.k, "mean": args.k_mean, "shape": args.k_shape}
    merged = {"distribution": "geometric", "mean": 10.0, **spec["k"],
              **{a: v for a, v in given.items() if v is not None}}
    return k_distribution(merged["distribution"], merged["mean"], merged.get("shape"))


def private_selection(spec: dict, runs: list[PlannedRun], args, launcher: dict, sweep_dir: Path) -> int:
    """`--selection private`: the ordinary runs (non-private methods) as usual; per private cell and
    seed, the K drawn runs under `<sweep>/.private/` (W&B off, secure mode, the spec's seed), then the
    best of each released to `<setting>/<method>/eps=<e>/selected,seed=<s>`. Prints each cell's cost;
    K, the runs' progress and their scores are never printed."""
    if spec["entry"] != "train":
        raise ConfigError("private selection selects training runs; an audit sweep (entry: audit) has none")
    k = _k_of(spec, args)
    cells = selection_cells([r for r in runs if r.epsilon is not None])
    t0 = time.time()
    costs = selection_costs(cells, args.overrides, k)
    ordinary = [(r, sweep_dir / r.run_id) for r in runs if r.epsilon is None]
    log.info(f"sweep {spec['name']}: private selection, {len(cells)} cell(s) x {len(spec['seeds'])} seed(s), "
             f"{len(ordinary)} non-private run(s) in {sweep_dir}; costs in {time.time() - t0:.1f} s")
    for cell, cost in zip(cells, costs):
        what = f"cannot be accounted: {cost}" if isinstance(cost, ConfigError) else cost.line()
        log.info(f"  {cell.cell_id} ({len(cell.configurations)} configurations): {what}")
    if args.dry_run:
        return 0
    refused = [(cell, cost) for cell, cost in zip(cells, costs) if isinstance(cost, ConfigError)]
    if refused:
        raise ConfigError(f"cell {refused[0][0].cell_id} cannot be accounted: {refused[0][1]}"
                          + (f" ({len(refused) - 1} other cell(s) too)" if len(refused) > 1 else ""))
    check_sweep_folder(sweep_dir)
    done = {"finished", "failed"} if args.skip_failed else {"finished"}
    todo_ordinary = [(r, d, command(r, d, args.overrides)) for r, d in ordinary if status(d) not in done]
    private, todo_private = _selection_runs(cells, costs, k, sweep_dir, args.overrides, done)
    check_can_launch(launcher, args.overrides, todo_ordinary + todo_private)
    if todo_private:
        log.info("  the selections' runs log nothing to W&B (logger.mode=disabled) and draw their noise and batches "
                 "from the operating system (privacy.secure_mode=true): only the released runs are outputs")
    _launch_selection(todo_ordinary, todo_private, launcher, sweep_dir)
    if launcher.get("launcher") == "submitit" and not launcher.get("wait"):
        log.info("relaunch the same command once the jobs have ended: it releases each selection's best run")
        return 0
    released = _release_selections(private, sweep_dir)
    ordinary_done = sum(status(d) == "finished" for _, d in ordinary)
    total = sum(len(c.seeds) for c in cells)
    log.info(f"sweep {spec['name']}: {released} selection(s) released now, one run each, "
             f"{total - len(private)} earlier, of {total}"
             + (f"; {ordinary_done} of {len(ordinary)} non-private runs finished" if ordinary else ""))
    return 0 if released == len(private) and ordinary_done == len(ordinary) else 1


@dataclass
class Selection:
    """One cell and seed's selection this launch runs: its K runs' folders, where its best goes, and
    the time that stamps the release."""
    cell: Cell
    cost: Any
    seed: int
    dirs: list[Path]
    public: Path
    stamp: float


def _selection_runs(cells: list[Cell], costs: list, k, sweep_dir: Path, overrides: list[str],
                    done: set[str]) -> tuple[list[Selection], list]:
    """The selections not yet released, each drawn (or its draw read back), and the runs of theirs
    still to run. Every run of a cell and seed has the spec's seed (one split, whose n the cost used)
    and `selection.RUN_OVERRIDES` after the user's overrides: W&B off, secure mode."""
    from pazo.sweep import selection as sel
    set_here = {o.partition("=")[0] for o in sel.RUN_OVERRIDES}
    extra = [o for o in overrides if o.partition("=")[0].lstrip("+~") not in set_here] + list(sel.RUN_OVERRIDES)
    launched_at = float(round(time.time()))    # one time for every draw of this launch, whatever their K
    private, todo = [], []
    for cell, cost in zip(cells, costs):
        for replicate, seed in enumerate(cell.seeds):
            public = sweep_dir / cell.cell_id / f"selected,seed={seed}"
            if (public / "summary.json").exists():   # released once: rerunning its runs would be a second release
                continue
            folder = sweep_dir / sel.PRIVATE / cell.cell_id / f"seed={seed}"
            drawn = sel.load_or_draw(folder / "selection.json", k, [r.run_id for r in cell.configurations],
                                     launched_at)
            dirs = []
            for draw in drawn["draws"]:
                run = replace(cell.configurations[draw["configuration"]], seed=seed, replicate=replicate)
                dirs.append(sel.private_dir(folder / draw["name"]))
                if status(dirs[-1]) not in done:
                    todo.append((run, dirs[-1], command(run, dirs[-1], extra)))
            private.append(Selection(cell, cost, seed, dirs, public, drawn["launched_at"]))
    return private, todo


def _launch_selection(todo_ordinary: list, todo_private: list, launcher: dict, sweep_dir: Path) -> None:
    """The non-private runs, then the selections' (quiet: no line per run). An interrupt is said in
    one line that counts the non-private runs and not the selections' (their number is K's)."""
    from pazo.sweep import selection as sel
    try:
        if todo_ordinary:
            launch(todo_ordinary, launcher, sweep_dir)
        if todo_private:
            launch(todo_private, launcher, sweep_dir / sel.PRIVATE, quiet=True)
    except Interrupted as stop:
        finished = sum(status(d) == "finished" for _, d, _ in todo_ordinary)
        ordinary = f"{finished} of {len(todo_ordinary)} non-private runs finished; " if todo_ordinary else ""
        submitted = f"; {stop}" if launcher.get("launcher") == "submitit" else ""
        raise Interrupted(f"{ordinary}no selection was released by this launch (its draws, finished runs and the "
                          f"stopped runs' checkpoints are kept, private){submitted}", stop.signum) from None


def _release_selections(private: list[Selection], sweep_dir: Path) -> int:
    """Each selection's best run released (every run has ended: one without a summary failed); the
    private workspace sealed. Returns how many were released."""
    from pazo.sweep import selection as sel
    released = 0
    for s in private:
        best = sel.choose(s.dirs)
        if best is None:
            log.info(f"  {s.cell.cell_id} seed {s.seed}: nothing released (no run of the selection has a score)")
            continue
        sel.release(s.dirs[best], s.public, {**s.cost.record(), "seed": s.seed, "validation_metric": sel.SCORE},
                    s.stamp, sweep_dir)
        released += 1
    if (sweep_dir / sel.PRIVATE).exists():
        sel.seal(sweep_dir / sel.PRIVATE)
    return released


def main(argv: list[str] | None = None) -> int:
    """`pazo-sweep`: a Ctrl-C ends it in one line saying what was done, exit status 130, no traceback
    (a SIGTERM or SIGHUP during its runs: the same, exit status 143 or 129)."""
    try:
        return _main(argv)
    except Interrupted as stop:
        log.error(f"pazo: {stop.how}: {stop}; the same command resumes the sweep")
        return stop.exit_status
    except KeyboardInterrupt as stop:   # (a SIGTERM too, while no launcher passes it on: `Terminated`)
        log.error(f"pazo: {stop_word(stop)} while no run was in progress: the runs that had finished and the "
                  "selections released are kept; the same command resumes the sweep")
        return stop_status(stop)


def _main(argv: list[str] | None = None) -> int:
    """The sweep: its plan checked whole before any run starts (a mistake: one line, exit 2), then
    its private selections or its grid's runs."""
    args = _parser().parse_intermixed_args(argv)
    use_console()
    load_plugins()   # (its runs' subprocesses load them too: the entry points, and PAZO_PLUGINS inherited)
    try:
        spec, runs, launcher = _planned_sweep(args)
        t0 = time.time()
        composed = check(runs, args.overrides, spec["entry"])
        missing = _missing_data(spec, runs, args)
    except ConfigError as err:
        return _refused(err)
    runs = _runs_with_data(spec, runs, missing)
    if not runs:  # a sweep that ran nothing has not done what was asked: the user's one line, exit 2
        return _refused(f"sweep {spec['name']}: nothing to run, the data of every setting are missing "
                        "(each setting's line above says what is missing and how to get it)")
    sweep_dir = Path(args.out).resolve() / spec["name"]
    if (args.selection or spec["selection"]) == "private":
        try:
            work_starts()   # (the runs' Ctrl-C: each records it)
            return private_selection(spec, runs, args, launcher, sweep_dir)
        except ConfigError as err:
            return _refused(err)
    return _grid_sweep(spec, runs, args, launcher, sweep_dir, (composed, t0))


def _parser() -> ArgumentParser:
    """`pazo-sweep`'s arguments."""
    parser = ArgumentParser(prog="pazo-sweep", description=summary_of(__doc__))
    parser.add_argument("spec", type=path_argument,
                        help="a name in configs/sweeps/ (e.g. table1_cifar10) or a YAML path")
    parser.add_argument("overrides", nargs="*",
                        help="extra pazo.train overrides for every run, e.g. dataset.root=/data")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and stop")
    parser.add_argument("--show", type=at_least(0), default=5, help="override lines shown by --dry-run")
    parser.add_argument("--launcher", default="sequential", help="sequential | joblib | slurm, or a YAML path")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="launcher setting")
    parser.add_argument("--out", type=path_argument, default=str(Path("outputs") / "sweeps"),
                        help="sweeps folder (default: outputs/sweeps below the working directory)")
    parser.add_argument("--methods", default=None, help="only these methods (comma-separated)")
    parser.add_argument("--max-runs", type=at_least(1), default=MAX_RUNS, metavar="N",
                        help=f"refuse a grid of more than N runs, counted before any is made (default {MAX_RUNS:,})")
    parser.add_argument("--skip-failed", action="store_true", help="also skip runs that ended as failed")
    parser.add_argument("--selection", default=None, choices=SELECTION_MODES,
                        help="grid: run every configuration (default, or the spec's selection); private: per "
                             "cell and seed a random number K of runs, each a random configuration, only the best "
                             "released, the selection's total epsilon accounted")
    parser.add_argument("--k", default=None, help="private selection: the distribution of K (geometric, "
                        "logarithmic, truncated_negative_binomial, poisson; default the spec's, else geometric)")
    parser.add_argument("--k-mean", type=float, default=None, help="private selection: E[K] (default 10)")
    parser.add_argument("--k-shape", type=float, default=None,
                        help="private selection: the truncated negative binomial's shape eta > 0")
    return parser


def _refused(err: ConfigError | str) -> int:
    """A user's mistake: its one line, exit status 2."""
    log.error(f"pazo: error: {err}")
    return 2


def _planned_sweep(args) -> tuple[dict, list[PlannedRun], dict]:
    """The spec (only the methods asked for), its runs (at most `--max-runs`) and the launcher's
    settings, checked; a mistake in any is a ConfigError."""
    spec = load_spec(args.spec)
    if args.methods is not None:
        spec = {**spec, "methods": select_methods(spec, args.methods)}
    if (args.selection or spec["selection"]) == "private":
        _k_of(spec, args)   # (a bad K said before the runs are composed, which takes seconds on a loaded machine)
    runs = enumerate_runs(spec, args.max_runs)
    launcher = {**load_yaml(args.launcher, SWEEPS / "launchers", "launcher"), **parse_sets(args.set)}
    check_launcher(launcher)
    return spec, runs, launcher


def _missing_data(spec: dict, runs: list[PlannedRun], args) -> dict[str, str]:
    """Each setting whose data are missing here, with the line that says so; a ConfigError for the
    first when the spec does not skip such settings and the sweep would start runs."""
    missing = missing_data(runs, args.overrides, spec["entry"])
    if missing and not spec["skip_missing_data"] and not args.dry_run:
        (setting, message), *others = missing.items()
        also = f" (and the data of {len(others)} other setting(s))" if others else ""
        raise ConfigError(f"setting {setting}: {message.rstrip('.')}{also}; no run was started (or set "
                          "skip_missing_data: true in the spec to leave such settings out)")
    return missing


def _runs_with_data(spec: dict, runs: list[PlannedRun], missing: dict[str, str]) -> list[PlannedRun]:
    """The runs of the settings whose data are here when the spec skips the others (each said in a
    line); all of them otherwise (a dry run: the plan is shown whole, the gap said)."""
    for setting, message in missing.items():
        if not spec["skip_missing_data"]:
            log.info(f"sweep {spec['name']}: setting {setting} cannot run here, its data are missing: {message}")
            continue
        log.info(f"sweep {spec['name']}: setting {setting} skipped, its data are missing: {message}")
        runs = [r for r in runs if r.setting != setting]
    return runs


def _grid_sweep(spec: dict, runs: list[PlannedRun], args, launcher: dict, sweep_dir: Path,
                checked: tuple[int, float]) -> int:
    """Every run of the grid not yet done, after the earlier runs in `sweep_dir` are checked; a dry
    run lists them and stops (`checked`: the compositions the checks made, and when they began).
    Exit status 0 when all finished (or were submitted), 1 otherwise."""
    planned = [(r, sweep_dir / r.run_id) for r in runs]
    done = {"finished", "failed"} if args.skip_failed else {"finished"}
    try:
        check_replicates(planned)
        check_earlier_runs(planned, args.overrides, done, spec["entry"])
    except ConfigError as err:
        return _refused(err)
    states = {d: status(d) for _, d in planned}
    todo = [(r, d, command(r, d, args.overrides, spec["entry"])) for r, d in planned if states[d] not in done]
    _say_plan(spec, runs, sweep_dir, states, len(todo), checked)
    try:   # (what the launcher's jobs can hold is the plan's, so a dry run says it too)
        check_ranks_can_share(todo, tasks_in_all(launcher))
    except ConfigError as err:
        return _refused(err)
    if args.dry_run:
        for _, _, cmd in todo[:args.show]:
            log.info("  " + " ".join(cmd[3:]))
        return 0
    if not todo:
        return 0
    try:
        check_sweep_folder(sweep_dir)
        check_can_launch(launcher, args.overrides)   # (the runs' ranks: checked with the plan)
    except ConfigError as err:
        return _refused(err)
    work_starts()   # (the runs' Ctrl-C: each records it)
    launch(todo, launcher, sweep_dir)
    if launcher.get("launcher") == "submitit" and not launcher.get("wait"):
        return 0
    return _say_finished(spec, todo)


def _say_plan(spec: dict, runs: list[PlannedRun], sweep_dir: Path, states: dict, to_run: int,
              checked: tuple[int, float]) -> None:
    """The grid's lines before it launches: its runs by state, how many to run, how long the checks
    took, a line per setting and method."""
    composed, t0 = checked
    counts = {s: list(states.values()).count(s) for s in ("finished", "failed", "incomplete", "new")}
    log.info(f"sweep {spec['name']}: {len(runs)} runs in {sweep_dir} "
             f"({', '.join(f'{v} {k}' for k, v in counts.items() if v)}); {to_run} to run; "
             f"every config valid ({composed} compositions, {time.time() - t0:.1f} s)")
    for (setting, method), n in Counter((r.setting, r.method) for r in runs).items():
        log.info(f"  {setting:14s} {method:13s} {n:5d}")


def _say_finished(spec: dict, todo: list) -> int:
    """How many of the runs launched finished: exit status 0 when all did, 1 otherwise."""
    final = [status(d) for _, d, _ in todo]
    log.info(f"sweep {spec['name']}: {final.count('finished')} of {len(todo)} runs finished"
             + (f"; not finished: {len(todo) - final.count('finished')} (see their stdout.log; "
                "relaunch the same command to re-run them)" if final.count("finished") < len(todo) else ""))
    return 0 if final.count("finished") == len(todo) else 1


@quiet_when_the_reader_leaves
def cli(argv: list[str] | None = None) -> int:
    """`pazo-sweep`, `python -m pazo.sweep`: `main`, with a Ctrl-C before the first run is launched
    one line and exit 130 (`pazo.commands.interrupts`); the handler found is put back at the end."""
    previous = until_work_starts("before the sweep launched a run: nothing was run")
    try:
        return main(argv)
    finally:
        restore(previous)
