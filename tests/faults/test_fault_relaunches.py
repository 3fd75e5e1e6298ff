"""The relaunch rule (`pazo.run.attempts`) as a property: random sequences of launches into one run
directory, each killed after a few steps or not (SIGKILL, SIGTERM, SIGINT, a crash), relaunched
with a random change of one config key (every field of the train, privacy and method schemas, the
seed, the engine, the device, the data set's keys and the logger) or as it was.

Invariant, per directory: every launch either ran, or ended in one line (a ConfigError) with
nothing in the directory moved, changed or lost; and the epsilon the directory prints last is at
least the composition, computed independently with dp-accounting's PLD accountant, of every
computation whose rows left the process, each counted once over the steps it released. Two
attempts are one computation when their rows agree at every step both released (the noise makes
two computations' losses differ), so a replay of the same noise counts once and a relaunch that
drew other noise adds its own term.

A second walk (`Tampered`) logs to W&B (offline) and train.log and, between launches, deletes,
cuts short or edits one file of an outlet (metrics.jsonl, summary.json, train.log, a W&B log, an
archived attempt's): a launch with another config is refused whenever an outlet still shows a
release, and the epsilon summarised covers every step one shows.

Launches run in this process (`pazo.train.run`, stopped as tests/killed_launch.py stops them: a
SIGKILL is an exception that skips every write the killed process could not have made, and a dead
process's pid in its summary)."""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import pazo.train as train
import killed_launch
from conftest import composed_copy, run_cache
from fault_runtime_helpers import snapshot
from outlet_damage import DAMAGE, damage
from stateful_walks import rule_names, rules_ran
from wandb_log import wandb_records
from pazo.config_schema import LoggerSchema, PrivacySchema, TrainSchema
from pazo.errors import ConfigError
from pazo.methods import method_config

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

BASE = ["method=dpzero", "train.steps=5", "train.log_every=1", "train.checkpoint_every=null", "device=cpu",
        "logger.mode=disabled"]
#: values each changed key is drawn from, another value than the base one first (Hypothesis tries the
#: first one most), the base value among them (a "change" may change nothing)
TRAIN = {"epochs": [1, 30], "steps": [4, 5, 6], "batch_size": [32, 64], "evals_per_epoch": [1, 4, "null"],
         "eval_batch_size": [256, 1024], "log_every": [2, 1], "checkpoint_every": [2, "null"],
         "checkpoint_minutes": [5, 10], "keep_checkpoint": [True, False], "save_model": [False, True],
         "threads": [2, "auto"], "progress_seconds": [0, 60], "distributed_timeout_s": [60, 300]}
PRIVACY = {"epsilon": [2.0, 1, 1.0, 0.5], "delta": [1e-4, "null"], "sigma": [8.0, "null"],
           "adjacency": ["replace_one", "add_remove"], "sampling": ["shuffle", "poisson"],
           "eps_error": [0.05, "null"], "secure_mode": [True, False], "cache_dir": ["CACHE2", "CACHE"],
           "accountant": ["rdp", "prv"]}
METHOD = {"lr": [0.1, 0.05], "clip": [0.5, 1.0], "q": [2, 1], "smoothing": [0.001, 0.01],
          "direction": ["sphere", "gaussian"], "radius": ["fourth_root_d", "sqrt_d"]}
OTHER = {"seed": {"seed": [7, 0]},
         "engine": {"engine.name": ["vectorised", "inplace", "auto"], "engine.chunk_size": [1, "null"],
                    "engine.query_dropout": [True, False]},
         "device": {"device": ["auto", "cpu"]},
         # digits has no root: `+dataset.root` is a key its schema does not name (refused in one line)
         "dataset": {"dataset.val_fraction": [0.2, 0.1], "dataset.test_fraction": [0.25, 0.2],
                     "dataset.public_fraction": [0.2, 0.1], "dataset.public_imbalance": [0.0, 0.5],
                     "+dataset.root": ["/nonexistent/digits"]},
         "logger": {"logger.private_diagnostics": [True, False], "logger.verbose": [True, False],
                    "logger.name": ["other", "null"], "logger.group": ["g", "null"], "logger.tags": ["[a]", "[]"],
                    "logger.project": ["other", "pazo"], "logger.entity": ["me", "null"],
                    "logger.report_to": ["[csv,tensorboard]", "[wandb]"]}}
CHANGES = {"train": {f"train.{k}": v for k, v in TRAIN.items()},
           "privacy": {f"privacy.{k}": v for k, v in PRIVACY.items()},
           "method": {f"method.{k}": v for k, v in METHOD.items()}, **OTHER}
#: the groups in the order the bounded run takes them (the keys that change the computation first)
GROUPS = ("method", "seed", "privacy", "train", "dataset", "engine", "device", "logger")
KILLS = ("SIGKILL", "SIGTERM", "SIGINT", "crash")
#: row fields that carry the noise: equal at a step only if the noise up to it was the same
NOISY = ("step", "sigma", "epsilon", "train_loss")


def test_the_changes_cover_every_field_of_the_train_privacy_and_method_schemas():
    """A field added to a schema must be added to the drawn changes (else the property skips it)."""
    dpzero = type(method_config({"name": "dpzero", "lr": 0.05, "clip": 1.0}))
    assert {f.name for f in dataclasses.fields(TrainSchema)} == set(TRAIN)
    assert {f.name for f in dataclasses.fields(PrivacySchema)} == set(PRIVACY)
    assert {f.name for f in dataclasses.fields(dpzero)} - {"name"} == set(METHOD)
    assert {f.name for f in dataclasses.fields(LoggerSchema)} - {"mode"} <= {k.split(".")[1] for k in OTHER["logger"]}


def compose_cfg(overrides: list[str], cache: Path):
    values = [o.replace("CACHE2", str(cache) + "2").replace("CACHE", str(cache)) for o in overrides]
    return composed_copy(f"privacy.cache_dir={cache}", *values)


def launch(cfg, run_dir: Path, kill: str | None, after: int, monkeypatch) -> str:
    """`killed_launch.launch`; a SIGKILL closes metrics.jsonl and finishes W&B (what W&B was sent
    reached it: its service flushes)."""
    return killed_launch.launch(cfg, run_dir, kill, after, monkeypatch, closes_outlets=True)


def pld_composition(terms: list[tuple[float, float, int, int]], delta: float) -> float:
    """dp-accounting's epsilon of Poisson-sampled Gaussian releases composed: (sigma, q, steps,
    mechanisms per step) each. Remembered: a walk asks again after every launch, mostly for terms
    it asked before (a refused launch adds none), and each account takes seconds."""
    return _pld_composition(tuple(map(tuple, terms)), delta)


@functools.cache
def _pld_composition(terms: tuple[tuple[float, float, int, int], ...], delta: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant()
    for sigma, q, steps, mechanisms in terms:
        inner = dp_event.GaussianDpEvent(sigma / math.sqrt(mechanisms))
        accountant.compose(dp_event.PoissonSampledDpEvent(q, inner) if q < 1 else inner, steps)
    return accountant.get_epsilon(delta)


def rows_of(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [{k: row.get(k) for k in NOISY} for row in map(json.loads, lines)]


def same_computation(a: list[dict], b: list[dict]) -> bool:
    at, bt = {r["step"]: r for r in a}, {r["step"]: r for r in b}
    common = at.keys() & bt.keys()
    return bool(common) and all(at[s] == bt[s] for s in common)


class Relaunches(RuleBasedStateMachine):
    """One run directory, launched into again and again."""

    monkeypatch: pytest.MonkeyPatch
    hit: set
    #: the bounded run takes the changed group in turn (each is hit), the longer one draws it
    in_turn: bool = False

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pazo-relaunch-"))
        self.run_dir, self.cache = self.tmp / "run", run_cache(self.tmp / "cache")   # (the session's sigmas)
        self.current = list(BASE)   # the overrides of the last launch that ran
        self.changes = 0
        #: what left the process, launch by launch: (rows of metrics.jsonl, the privacy facts)
        self.released: list[tuple[list[dict], dict]] = []

    def _launch(self, overrides: list[str], kill: str | None, after: int) -> None:
        before = snapshot(self.run_dir) if self.run_dir.exists() else {}
        try:
            cfg = compose_cfg(overrides, self.cache)
        except Exception:  # a value Hydra's types refuse: nothing launched
            return
        how = launch(cfg, self.run_dir, kill, after, self.monkeypatch)
        if how == "refused":
            after_files = snapshot(self.run_dir) if self.run_dir.exists() else {}
            assert after_files == before, "a refused launch moved, changed or lost files"
            return
        self.current = overrides
        summary = json.loads((self.run_dir / "summary.json").read_text())
        self.released.append((rows_of(self.run_dir), summary["privacy"]))

    @initialize(kill=st.sampled_from(KILLS), after=st.integers(1, 3))
    def launch_and_kill(self, kill, after):
        """Every walk starts from an attempt that released rows and was stopped."""
        self._launch(list(self.current), kill, after)

    @rule(changed=st.integers(0, 3), group=st.sampled_from(GROUPS), data=st.data(),
          kill=st.sampled_from((None, *KILLS)), after=st.integers(1, 3))
    def relaunch(self, changed, group, data, kill, after):
        """As it ran (one time in four), or with one key changed."""
        if changed == 3:
            self._launch(list(self.current), kill, after)
            return
        if self.in_turn:  # (counted per walk: a count across walks would make the draws depend on the past)
            group, self.changes = GROUPS[self.changes % len(GROUPS)], self.changes + 1
        key = data.draw(st.sampled_from(sorted(CHANGES[group])), label="key")
        value = data.draw(st.sampled_from(CHANGES[group][key]), label="value")
        self.hit.add(group)
        spelt = "true" if value is True else "false" if value is False else str(value)
        plain = key.lstrip("+")
        overrides = [o for o in self.current if o.split("=")[0].lstrip("+") != plain] + [f"{key}={spelt}"]
        self._launch(overrides, kill, after)

    @invariant()
    def the_printed_epsilon_covers_every_release(self):
        groups: list[tuple[list[dict], dict, int]] = []   # (rows, privacy, steps released) per computation
        for rows, privacy in self.released:
            if not rows or not privacy.get("private"):
                continue
            for i, (seen, facts, steps) in enumerate(groups):
                if same_computation(seen, rows):
                    groups[i] = (seen + rows, facts, max(steps, max(r["step"] for r in rows)))
                    break
            else:
                groups.append((rows, privacy, max(r["step"] for r in rows)))
        if not groups:
            return
        last = rows_of(self.run_dir)
        summary = json.loads((self.run_dir / "summary.json").read_text())
        printed = (summary["privacy"].get("epsilon_spent") if summary.get("status") == "finished"
                   else (last[-1]["epsilon"] if last else None))
        assert printed is not None
        terms = [(facts["sigma"], facts["sample_rate"], steps, facts.get("mechanisms", 1))
                 for _, facts, steps in groups]
        oracle = pld_composition(terms, summary["privacy"]["delta"])
        assert printed >= oracle * 0.99 - 1e-3, (printed, oracle, terms)

    def teardown(self):
        try:  # the run as it ran last, to its end: what the directory prints last
            if self.released:
                self._launch(list(self.current), None, 0)
                self.the_printed_epsilon_covers_every_release()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def check_relaunches(monkeypatch, in_turn: bool, **bounds) -> set:
    Relaunches.monkeypatch, Relaunches.hit, Relaunches.in_turn = monkeypatch, set(), in_turn
    run_state_machine_as_test(Relaunches, settings=settings(
        derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), **bounds))
    return Relaunches.hit


def test_every_relaunch_is_refused_replayed_or_counted(monkeypatch):
    """Bounded (a failure is reported as found, not shrunk: each launch takes a second or two)."""
    assert set(GROUPS) == set(CHANGES)
    hit = check_relaunches(monkeypatch, True, max_examples=2, stateful_step_count=10,
                           phases=(Phase.explicit, Phase.reuse, Phase.generate))
    assert hit == set(CHANGES), f"groups never drawn: {set(CHANGES) - hit}"


@pytest.mark.slow
def test_every_relaunch_is_refused_replayed_or_counted_on_longer_walks(monkeypatch):
    hit = check_relaunches(monkeypatch, False, max_examples=25, stateful_step_count=15)
    assert hit == set(CHANGES)


#: the walk over damaged outlets: W&B offline, a progress line in train.log after every step
TAMPERED_BASE = [*BASE[:-1], "logger.mode=offline", "train.steps=6", "train.progress_seconds=0.000001"]
TAMPERED_CHANGE = "method.lr=0.5"
PROGRESS = re.compile(r"progress: step (\d+)/\d+ \(")
#: the outlets the bounded walk damages in turn (each file of that kind, the archived attempts' too)
OUTLET_KINDS = ("metrics.jsonl", ".wandb", "summary.json", "train.log")


def outlet_files(run_dir: Path) -> list[Path]:
    """The files of the directory's outlets (its own and its archived attempts'), which a rule damages."""
    names = ("metrics.jsonl", "summary.json", "wandb/*/run-*.wandb")
    found = [p for where in (run_dir, *sorted(run_dir.glob("attempts/*"))) for name in names for p in where.glob(name)]
    return sorted({p for p in found if not p.parent.is_symlink()} | set(run_dir.glob("train.log")))


def strictly_shown(path: Path, damaged: set[str]) -> int:
    """The highest step `path` shows, read strictly (whole rows, whole JSON, W&B logs not `damaged`
    that read whole): what any reader of the outlet would see."""
    text = path.read_text(errors="replace")
    if path.name == "metrics.jsonl":
        steps = []
        for line in text.splitlines():
            try:
                steps.append(int(json.loads(line)["step"]))
            except (ValueError, KeyError, TypeError):
                continue
        return max(steps, default=0)
    if path.name == "summary.json":
        try:
            summary = json.loads(text)
            return max(int(summary.get("steps_done") or 0), int(summary.get("stopped_at_step") or 0))
        except (ValueError, AttributeError, TypeError):
            return 0
    if path.name == "train.log":
        return max((int(n) for n in PROGRESS.findall(text)), default=0)
    if path.name in damaged:
        return 0
    try:
        return max((r.history.step.num for r in wandb_records(path) if r.WhichOneof("record_type") == "history"),
                   default=0)
    except Exception:   # (wandb-core may not have written its header yet, or a block of its log)
        return 0


def pazo_files(run_dir: Path) -> dict[str, str]:
    """`snapshot`, less the bytes of W&B's own files (wandb-core may still be flushing a finished
    run's log): their names are kept."""
    files = snapshot(run_dir) if run_dir.exists() else {}
    return {name: "" if "wandb/" in name else digest for name, digest in files.items()}


class Tampered(RuleBasedStateMachine):
    """One W&B-logged run directory, its train.log written as Hydra's job logging writes it,
    launched into as it ran or with another lr, and one outlet's file damaged between launches."""

    monkeypatch: pytest.MonkeyPatch
    #: the bounded walk damages an outlet before every relaunch, the outlets and damages in turn, and
    #: changes the lr every other time (the first: the reported case); the longer one draws all three
    in_turn: bool = False

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="pazo-tampered-"))
        self.run_dir, self.cache = self.tmp / "run", run_cache(self.tmp / "cache")
        #: the W&B logs damaged, by name (the name stays when they are archived): no longer read strictly
        self.damaged: set[str] = set()
        self.launches, self.turn = 0, 0

    def shown(self) -> int:
        """The highest step any outlet of the directory shows released (0: none, or no directory)."""
        files = outlet_files(self.run_dir) if self.run_dir.exists() else []
        return max((strictly_shown(p, self.damaged) for p in files), default=0)

    def _launch(self, overrides: list[str], kill: str | None, after: int) -> None:
        shown, before = self.shown(), pazo_files(self.run_dir)
        with logged_to_train_log(self.run_dir):
            how = launch(compose_cfg(overrides, self.cache), self.run_dir, kill, after, self.monkeypatch)
        if how == "refused":
            assert pazo_files(self.run_dir) == before, "a refused launch moved, changed or lost files"
            return
        self.launches += 1
        assert TAMPERED_CHANGE not in overrides or not shown, \
            f"a launch with another config ran, though an outlet showed step {shown} released"
        summary = json.loads((self.run_dir / "summary.json").read_text())
        covered = shown if summary["status"] == "running" else max(shown, summary["steps_done"])
        if covered > (summary.get("resumed_from_step") or 0):
            privacy = summary["privacy"]
            terms = [(privacy["sigma"], privacy["sample_rate"], min(covered, privacy["steps"]),
                      privacy.get("mechanisms", 1))]
            oracle = pld_composition(terms, privacy["delta"])
            assert privacy.get("epsilon_spent", 0) >= oracle * 0.99 - 1e-3, (summary["status"], covered, privacy)

    @initialize(kill=st.sampled_from(KILLS), after=st.integers(2, 4))
    def launch_and_kill(self, kill, after):
        """Every walk starts from an attempt that released rows and was stopped."""
        self._launch(list(TAMPERED_BASE), kill, after)

    @rule(changed=st.booleans(), kill=st.sampled_from((None, *KILLS)), after=st.integers(1, 4), damaged=st.booleans(),
          how=st.sampled_from(DAMAGE), at=st.floats(0, 1), junk=st.binary(min_size=1, max_size=64), data=st.data())
    def relaunch(self, changed, kill, after, damaged, how, at, junk, data):
        """As it ran or with another lr, one outlet's file damaged first (or not)."""
        kind = None
        if self.in_turn:  # (counted per walk, as the walk above)
            kind = OUTLET_KINDS[self.turn % len(OUTLET_KINDS)]
            how = DAMAGE[self.turn % len(DAMAGE)]   # (each damage in the bounded walk's 7 turns, as each outlet)
            damaged, changed, self.turn = True, self.turn % 2 == 0, self.turn + 1
        if damaged:
            self.damage_one_outlet(data, kind, how, at, junk)
        self._launch([*TAMPERED_BASE, TAMPERED_CHANGE] if changed else list(TAMPERED_BASE), kill, after)

    def damage_one_outlet(self, data, kind: str | None, how: str, at: float, junk: bytes) -> None:
        """Delete, cut or edit one outlet's file (of `kind`, where the directory holds one)."""
        files = outlet_files(self.run_dir) if self.run_dir.exists() else []
        files = [p for p in files if kind and p.name.endswith(kind)] or files
        if files:
            path = data.draw(st.sampled_from(files), label="file")
            damage(path, how, at, junk)
            self.damaged |= {path.name} if path.suffix == ".wandb" else set()

    def teardown(self):
        try:  # the run as it ran, to its end (a relaunch with another lr may have started it afresh)
            if self.launches:
                self._launch(list(TAMPERED_BASE), None, 0)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


class logged_to_train_log:
    """The run's lines into `<run_dir>/train.log`, timestamped, as Hydra's job logging
    (configs/hydra/job_logging/pazo.yaml) writes them in a launch from the command line."""

    def __init__(self, run_dir: Path):
        self.run_dir, self.logger = run_dir, logging.getLogger("pazo.train")

    def __enter__(self):
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(self.run_dir / "train.log", delay=True)
        self.handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        self.level = self.logger.level
        self.logger.addHandler(self.handler)
        self.logger.setLevel(logging.INFO)

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
        self.handler.close()
        return False


def check_tampered(monkeypatch, in_turn: bool, **bounds) -> None:
    monkeypatch.setenv("WANDB_SILENT", "true")
    Tampered.monkeypatch, Tampered.in_turn = monkeypatch, in_turn
    run_state_machine_as_test(Tampered, settings=settings(
        derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), **bounds))


def test_a_damaged_outlet_hides_no_release_from_a_relaunch(monkeypatch):
    """Bounded, as the walk above; every rule of `Tampered` runs in it, and every damage (an edit of
    the class draws another walk, which may leave one out)."""
    ran, done = rules_ran(monkeypatch, Tampered), set()
    monkeypatch.setitem(globals(), "damage", lambda path, how, at, junk, real=damage: (done.add(how),
                                                                                      real(path, how, at, junk)))
    check_tampered(monkeypatch, True, max_examples=2, stateful_step_count=8,
                   phases=(Phase.explicit, Phase.reuse, Phase.generate))
    assert ran == rule_names(Tampered), f"rules never run: {rule_names(Tampered) - ran}"
    assert done == set(DAMAGE), f"damages never done: {set(DAMAGE) - done}"


@pytest.mark.slow
def test_a_damaged_outlet_hides_no_release_from_a_relaunch_on_longer_walks(monkeypatch):
    check_tampered(monkeypatch, False, max_examples=20, stateful_step_count=15)


def test_a_release_only_wandb_still_shows_decides_the_relaunch(monkeypatch, tmp_path):
    """The reported case: a W&B-logged attempt killed after 12 rows, its metrics.jsonl deleted. A
    relaunch with another lr is refused in one line that names the W&B log; one as it ran replays,
    and stopped after 3 steps its summary's epsilon still covers the 12 steps released."""
    base = [*BASE[:-1], "logger.mode=offline", "train.steps=20"]
    run_dir, cache = tmp_path / "run", run_cache(tmp_path / "cache")
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert launch(compose_cfg(base, cache), run_dir, "SIGKILL", 13, monkeypatch) == "SIGKILL"
    twelve = rows_of(run_dir)[-1]
    assert twelve["step"] == 12
    (run_dir / "metrics.jsonl").unlink()
    before = snapshot(run_dir)
    with pytest.raises(ConfigError, match=r"that released rows \(through step 12, as wandb/offline-run-[^/]+/run-"
                                          r"\w+\.wandb shows\): this launch would draw other noise"):
        train.run(compose_cfg([*base, "method.lr=0.5"], cache), run_dir)
    assert snapshot(run_dir) == before
    assert launch(compose_cfg(base, cache), run_dir, "SIGTERM", 3, monkeypatch) == "ran"
    summary = json.loads((run_dir / "summary.json").read_text())
    privacy = summary["privacy"]
    assert summary["status"] == "preempted" and summary["earlier_attempt_moved_to"].endswith("attempts/1")
    assert privacy["steps_done"] == 3 and privacy["steps_released"] == 12
    assert privacy["epsilon_spent"] == pytest.approx(twelve["epsilon"], rel=1e-12)
