"""A sweep's private hyperparameter selection (`pazo-sweep <spec> --selection private`): per table
cell (setting, method, epsilon) and seed, K runs drawn from OS entropy, each with a configuration
drawn at random from the cell's grid, and only the best by validation accuracy released.

What this module does for the sweep: the cell's cost (`cell_cost`: every configuration a draw may
pick, its sample rate, steps and calibrated sigma, through the sigma cache; the total from
`pazo.privacy.selection`), the draw kept private and reused on relaunch (`load_or_draw`), the
choice (`choose`: a failed, over-budget or unscored run counts toward K with the lowest score) and
the release of the chosen run alone (`release`: the files and keys `pazo.run.outlets.RELEASE` lists, their
times one stamp). The K runs share the spec's seed, so one split, and draw their noise and Poisson
batches from OS entropy (`RUN_OVERRIDES`: secure mode); they live under `<sweep>/.private/`
(directories 0700, files 0600), which the tables never read.
"""
from __future__ import annotations

import functools
import json
import math
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from pazo.run import gate, metrics_file, outlets
from pazo.errors import ConfigError, DataMissingError
from pazo.config_schema import PrivacySchema
from pazo.data import DATASETS
from pazo.run.validate import planned_steps
from pazo.run.typed import RunConfig
from pazo.files.file_kinds import read_regular_bytes, read_regular_text
from pazo.run.loggers import CSV_FILE, csv_line, read_csv
from pazo.methods import method_config
from pazo.privacy.accountants import BudgetError, check_delta, default_eps_error
from pazo.privacy.calibration import calibrate
from pazo.privacy.sampling import SAMPLERS
from pazo.privacy.selection import KDistribution, RunAccount, run_epsilon, selection_epsilon
from pazo.run.results import guarantee_problem, read_json_object

#: the folder under a sweep's directory that holds the K runs of every selection (never released)
PRIVATE = gate.SWEEP_WORKSPACE
#: the validation score a selection picks on (summary.json key); a run without it scores lowest
SCORE = "final_val_accuracy"
#: training sets' published sizes, for a dry run whose data are not on this machine (n estimated)
PUBLISHED_TRAIN_SIZE = {"cifar10": 50_000, "tiny_imagenet": 100_000}
MODES = ("grid", "private")
#: how the K runs draw their secret streams (noise, Poisson batches): privacy.secure_mode=true, from the
#: operating system's entropy; the spec's seed sets only their public streams (splits, initialisation,
#: directions, public batches), the same for the K runs of a cell
STREAMS = "secure_mode"
#: the overrides every run of a selection gets, after the user's (which cannot undo them)
RUN_OVERRIDES = ("logger.mode=disabled", "privacy.secure_mode=true")


def k_distribution(name: str, mean, shape=None) -> KDistribution:
    """The distribution of K from a spec or the command line; a bad one is one ConfigError (naming
    the choices where the name is wrong)."""
    try:
        return KDistribution(name, mean, shape)
    except ValueError as err:
        raise ConfigError(str(err)) from None


@dataclass(frozen=True)
class PrivateSize:
    """The private set's size n of a setting, and how it is known ('' when read from the data)."""
    n: int
    estimated: str = ""


def private_size(cfg: RunConfig) -> PrivateSize:
    """n as the run's own loader gives it (the data set read once) from the run's typed config;
    where the data are missing and the data set's size is published, estimated from it and the
    config's public and validation fractions (a dry run's preview; a real run reads the data)."""
    from pazo.data import build_dataset  # imports torch: not needed by --help
    from pazo.rng import RandomStreams

    try:
        return PrivateSize(len(build_dataset(cfg.dataset, RandomStreams(cfg.seed)).private))
    except DataMissingError as err:
        total, dataset = PUBLISHED_TRAIN_SIZE.get(cfg.dataset.name), cfg.dataset
        if total is None or dataset.public_source != "split":
            raise ConfigError(f"the cost of a private selection needs the private set's size: "
                              f"{str(err).splitlines()[0]}") from None
        pool = total - _published_public_size(dataset, total)
        n = pool - round((dataset.val_fraction or 0) * pool)
        return PrivateSize(n, f"n estimated from {dataset.name}'s published {total} training examples (data not found)")


def _published_public_size(dataset, total: int) -> int:
    """The public split's size of a published training set of `total` examples, as the loader
    splits it (`public_split_size`: images of each class, or a fraction of the whole)."""
    from pazo.data.image_folder import public_split_size  # imports torch: not needed by --help

    size = public_split_size(dataset)
    if "per_class" in size:
        return size["per_class"] * DATASETS.get(dataset.name).classes   # (a public split of that many images a class)
    return round(size["fraction"] * total)


def run_account(cfg, n: int) -> tuple[RunAccount, float, float]:
    """(the run's account, its target epsilon, its delta) as `pazo.privacy.plan.make_plan` sets
    them: q = batch / n, T planned steps, delta 1/n unless given, sigma given or calibrated
    (through the sigma cache). Laplace noise and sampling the accountant does not model are refused."""
    pcfg, release = PrivacySchema(**cfg.privacy), method_config(cfg.method).release()
    if release.noise != "gaussian":
        raise ConfigError(f"private selection accounts Gaussian runs only: {cfg.method.name} adds {release.noise} "
                          "noise (its cells are refused; select them the ordinary way)")
    if not SAMPLERS[pcfg.sampling].matches_accountant:
        raise ConfigError(f"privacy.sampling={pcfg.sampling} is not the Poisson sampling the accountant assumes: "
                          "no selection over it can be accounted")
    q, steps = cfg.train.batch_size / n, planned_steps(cfg.train, n)
    target = float(pcfg.epsilon)
    delta = check_delta(pcfg.delta if pcfg.delta is not None else 1.0 / n, "gaussian", "privacy.delta", ConfigError)
    accountant = pcfg.accountant
    eps_error = float(pcfg.eps_error or default_eps_error(target)) if accountant == "prv" else None
    sigma = float(pcfg.sigma) if pcfg.sigma is not None else _calibrated(
        accountant, target, delta, q, steps, eps_error, release.mechanisms, pcfg.cache_dir)
    return RunAccount(q, steps, sigma, release.mechanisms), target, delta


@functools.cache
def _calibrated(accountant, target, delta, q, steps, eps_error, mechanisms, cache_dir) -> float:
    """sigma for one distinct request, calibrated as the run calibrates it (`calibrate`: by
    its accountant; PRV's through the sigma cache) once a process: a grid's configurations mostly
    share (q, T, epsilon)."""
    try:
        return calibrate(accountant, target, delta, q, steps, eps_error, mechanisms, cache_dir)
    except BudgetError as err:
        raise ConfigError(str(err)) from None


@dataclass
class CellCost:
    """What one cell's selection costs: per configuration a draw may pick its account; the run's
    target epsilon and its epsilon by the RDP accountant (worst configuration); the total of one
    selection and of one per seed, composed."""
    k: KDistribution
    accounts: list[RunAccount]
    target_epsilon: float
    run_epsilon: float
    delta: float
    total_epsilon: float
    seeds: int
    total_epsilon_all_seeds: float
    estimated: str = ""

    def line(self) -> str:
        distinct = sorted(set(self.accounts), key=lambda a: (a.sample_rate, a.steps))
        runs = "; ".join(f"q {a.sample_rate:.3g}, T {a.steps}, sigma {a.sigma:.3g}" for a in distinct[:3])
        more = f" (+{len(distinct) - 3} more)" if len(distinct) > 3 else ""
        seeds = (f"; {self.seeds} seeds (one selection each), composed: {self.total_epsilon_all_seeds:.3f}"
                 if self.seeds > 1 else "")
        return (f"{self.k.summary()}; each run epsilon {self.target_epsilon:g} (PRV target; RDP "
                f"{self.run_epsilon:.3f}; {runs}{more}); the cell's total epsilon {self.total_epsilon:.3f} "
                f"at delta {self.delta:.3g}{seeds}" + (f" [{self.estimated}]" if self.estimated else ""))

    def record(self) -> dict:
        return {"distribution": self.k.name, "mean": self.k.mean, "shape": self.k.shape,
                "target_epsilon": self.target_epsilon, "run_epsilon_rdp": self.run_epsilon, "delta": self.delta,
                "total_epsilon": self.total_epsilon, "seeds": self.seeds,
                "total_epsilon_all_seeds": self.total_epsilon_all_seeds,
                "configurations": len(self.accounts), "runs": [asdict(a) for a in dict.fromkeys(self.accounts)],
                "accountant": "dp-accounting RDP: RepeatAndSelectDpEvent over the run's PoissonSampled(Gaussian) "
                              "events composed over its steps (the worst configuration's RDP curve)"}


def cell_cost(cfgs: list, k: KDistribution, seeds: int, size: PrivateSize) -> CellCost:
    """The cost of one cell whose grid composes to `cfgs` (one config a configuration) on a private
    set of `size`. Each distinct (q, T, epsilon, delta) is calibrated once (and cached on disk)."""
    accounts, targets, deltas = [], set(), set()
    for cfg in cfgs:
        account, target, delta = run_account(cfg, size.n)
        accounts.append(account)
        targets.add(target)
        deltas.add(delta)
    if len(targets) > 1:
        raise ConfigError(f"a cell's configurations must share one epsilon, got {sorted(targets)}")
    delta = max(deltas)
    distinct = tuple(dict.fromkeys(accounts))
    return CellCost(k, accounts, targets.pop(), max(_run_epsilon(a, delta) for a in distinct), delta,
                    _selection_epsilon(distinct, k, delta, 1), seeds, _selection_epsilon(distinct, k, delta, seeds),
                    size.estimated)


# a sweep's cells mostly share their runs' accounts (every method at one epsilon): each computed once
_run_epsilon = functools.lru_cache(maxsize=None)(run_epsilon)
_selection_epsilon = functools.lru_cache(maxsize=None)(
    lambda accounts, k, delta, seeds: selection_epsilon(list(accounts), k, delta, seeds))


def private_dir(path: Path) -> Path:
    """`path` created with every folder from the sweep's `.private` down readable by its owner alone."""
    return gate.owner_only_dirs(path, PRIVATE)


def load_or_draw(state: Path, k: KDistribution, grid: list[str], launched_at: float) -> dict:
    """The selection's draw, kept in `state` (0600) and reused on relaunch: K from OS entropy, each
    run's configuration (an index into `grid`, the cell's configurations by name) from OS entropy, and
    its folder's name (random: a released run's path must not tell K); `launched_at`, the launch's
    time (one for every cell: it stamps the release's files). A state drawn for another grid,
    distribution or way of running is refused: drawing again would be a second selection on the same
    data, whose cost adds to the first."""
    wanted = {"distribution": asdict(k), "grid": grid, "streams": STREAMS}
    if state.exists():
        drawn = read_json_object(state)
        if {key: drawn.get(key) for key in wanted} != wanted:
            raise ConfigError(f"{state} was drawn for another grid or distribution of K, or by an earlier pazo whose "
                              "runs were seeded; its runs have spent their privacy already. Relaunch with the same "
                              "spec, or remove its folder to draw again (a second selection on the same data, "
                              "which costs again)")
        return drawn
    rng = secrets.SystemRandom()
    draws = [{"configuration": rng.randrange(len(grid)), "name": f"run-{secrets.token_hex(6)}"}
             for _ in range(k.draw(rng))]
    drawn = {**wanted, "k": len(draws), "launched_at": launched_at, "draws": draws}
    gate.write_private(private_dir(state.parent) / state.name, json.dumps(drawn, indent=1).encode())
    return drawn


def score(run_dir: Path) -> float:
    """A run's validation score; -inf (the lowest) where it failed, broke its guarantee, went over
    budget, or has none."""
    try:
        summary = read_json_object(run_dir / "summary.json")
    except (ValueError, FileNotFoundError):
        return -math.inf
    value = summary.get(SCORE)
    if (summary.get("status") != "finished" or guarantee_problem(summary) is not None
            or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        return -math.inf
    return float(value)


def choose(run_dirs: list[Path]) -> int | None:
    """The index of the best run by validation score (the first of equals); None where K is 0 or
    every run scores lowest (nothing is released)."""
    scores = [score(d) for d in run_dirs]
    if not scores or max(scores) == -math.inf:
        return None
    return scores.index(max(scores))


def seal(folder: Path) -> None:
    """Every file under `folder` 0600 and every folder 0700: the K runs stay their owner's."""
    gate.seal(folder)


def release(run_dir: Path, public: Path, record: dict, stamp: float, top: Path) -> None:
    """Release the chosen run to `public` (a folder below the sweep's, `top`): the files of
    `outlets.RELEASE` alone, each with the keys its rule keeps, the selection's record in its
    summary.json; modes 0644/0755; every file's and folder's times, and those of the folders from
    `top` down to `public`, set to `stamp` (the launch's time, the same whatever K: the files' own
    times would tell how long the K runs took). A file of the run that cannot be read as a regular
    file of its kind (a FIFO, a directory, damaged) is one ConfigError line, and nothing is published."""
    staging = public.with_name(public.name + ".tmp")
    files = {name: _released_file(name, run_dir / name, record, public)
             for name in outlets.RELEASE if os.path.lexists(run_dir / name)}
    gate.new_staging(staging)
    gate.release_into(staging, files, stamp)
    gate.publish(staging, public, top, stamp)


def _released_file(name: str, path: Path, record: dict, public: Path) -> bytes:
    """`path`'s bytes as the release lets them out (`outlets.RELEASE[name]`), read through
    `pazo.files.file_kinds` (a FIFO is never waited on); a ConfigError line where it cannot be."""
    try:
        return _release_bytes(name, path, record, public)
    except (OSError, ValueError, yaml.YAMLError) as err:
        reason = " ".join(str(err).split())
        raise ConfigError(f"the selection's chosen run cannot be released: {path} is unreadable ({reason}); "
                          "nothing was published, and the same command releases it once the file is "
                          "repaired") from None


def _release_bytes(name: str, path: Path, record: dict, public: Path) -> bytes:
    if name == "summary.json":
        summary = released_summary(read_json_object(path), record, public)
        return json.dumps(summary, indent=2, default=str).encode()
    if name == metrics_file.FILE:
        rows = metrics_file.read_metric_rows(path).rows
        return "".join(json.dumps(outlets.for_release(name, row)) + "\n" for row in rows).encode()
    if name == CSV_FILE:
        return released_csv(path)
    if name == "config.yaml":
        config = yaml.safe_load(read_regular_text(path)) or {}
        return yaml.safe_dump(outlets.for_release(name, config), sort_keys=False).encode()
    return read_regular_bytes(path)


def released_csv(path: Path) -> bytes:
    """The chosen run's metrics.csv as released: each row the keys `outlets.RELEASE` keeps, under a
    header of those alone."""
    header, rows = read_csv(path)
    kept = [outlets.for_release(CSV_FILE, {k: v for k, v in row.items() if v != ""}) for row in rows]
    columns = [key for key in header if any(key in row for row in kept)]
    return b"".join([csv_line(columns), *(csv_line(row.get(key, "") for key in columns) for row in kept)])


def released_summary(summary: dict, record: dict, public: Path) -> dict:
    """The chosen run's summary as released: the keys `outlets.RELEASE` keeps, the selection's record,
    `private_selection` in place of the `no_selection` assumption, and the choice's reading of the
    validation split among what lies outside the guarantee (the sentences on keys the release
    withholds dropped)."""
    out = outlets.for_release("summary.json", summary)
    privacy = out.setdefault("privacy", {})
    assumptions = {k: v for k, v in (privacy.get("assumptions") or {}).items() if k != "no_selection"}
    assumptions["private_selection"] = selection_assumption(record)
    privacy["assumptions"] = assumptions
    withheld = {outlets.STEP_TIMES_SENTENCE, outlets.private_diagnostics_sentence()}
    out["outside_guarantee"] = [*(s for s in out.get("outside_guarantee") or [] if s not in withheld),
                                VALIDATION_OUTSIDE]
    return {**out, "run_dir": str(public), "selection": record}


#: what the choice reads, outside the selection's total (the released summary's outside_guarantee)
VALIDATION_OUTSIDE = (f"the choice among the selection's K runs read each run's {SCORE}: its accuracy on the "
                      "validation split, computed without noise on private examples held out of training, which the "
                      "selection's total epsilon does not cover (the accuracies themselves are not released)")


def selection_assumption(record: dict) -> str:
    """The released run's `private_selection` assumption: what the total covers and what the choice reads."""
    return (f"this run is the best by {SCORE} of a random number K of runs on the same private data (K ~ "
            f"{record['distribution']}, mean {record['mean']:g}; K stays private). The selection's total epsilon "
            f"{record['total_epsilon']:.4g} at delta {record['delta']:.3g} ({record['seeds']} selection(s), one per "
            f"seed: {record['total_epsilon_all_seeds']:.4g}) covers the n_private training examples: the K runs' "
            f"training and the choice among them. The choice reads each run's accuracy on the validation split "
            f"without noise: those examples are held out of the private set, never trained on, and lie outside the "
            f"total (outside_guarantee)")
