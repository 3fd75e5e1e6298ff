"""The relaunch rule (`pazo.attempts`) as a property: random sequences of launches into one run
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

Launches run in this process (`pazo.train.run`); a SIGKILL is played by an exception that skips
every write the killed process could not have made, and a dead process's pid in its summary."""
from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import pazo.loop as training_loop
import pazo.train as train
from conftest import CONFIG_DIR
from fault_runtime_helpers import snapshot
from pazo.config_schema import LoggerSchema, PrivacySchema, TrainSchema
from pazo.errors import ConfigError
from pazo.methods import method_config
from pazo.recorder import Recorder

BASE = ["method=dpzero", "train.steps=5", "train.log_every=1", "train.checkpoint_every=null", "device=cpu",
        "logger.mode=disabled"]
#: values each changed key is drawn from, another value than the base one first (Hypothesis tries the
#: first one most), the base value among them (a "change" may change nothing)
TRAIN = {"epochs": [1, 30], "steps": [4, 5, 6], "batch_size": [32, 64], "evals_per_epoch": [1, 4, "null"],
         "eval_batch_size": [256, 1024], "log_every": [2, 1], "checkpoint_every": [2, "null"],
         "checkpoint_minutes": [5, 10], "keep_checkpoint": [True, False], "save_model": [False, True],
         "threads": [2, "auto"], "progress_seconds": [0, 60]}
PRIVACY = {"epsilon": [2.0, 1, 1.0, 0.5], "delta": [1e-4, "null"], "sigma": [8.0, "null"],
           "adjacency": ["replace_one", "add_remove"], "sampling": ["shuffle", "poisson"],
           "eps_error": [0.05, "null"], "secure_mode": [True, False], "cache_dir": ["CACHE2", "CACHE"]}
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
                    "logger.project": ["other", "pazo"], "logger.entity": ["me", "null"]}}
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


class Killed(BaseException):
    """A SIGKILL: the process ends at once, writing nothing more."""


def compose_cfg(overrides: list[str], cache: Path):
    values = [o.replace("CACHE2", str(cache) + "2").replace("CACHE", str(cache)) for o in overrides]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=[f"privacy.cache_dir={cache}", *values])


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def launch(cfg, run_dir: Path, kill: str | None, after: int, monkeypatch) -> str:
    """Run `cfg` into `run_dir`, stopped by `kill` after `after` steps of this launch (None: to its
    end); returns how it ended: "refused", "ran" or the kill."""
    real_step, real_fail = training_loop.timed_step, Recorder.fail
    done = []

    def step(r, sampler, loop, t):
        stats = real_step(r, sampler, loop, t)
        done.append(t)
        if kill is not None and len(done) == after:
            if kill == "SIGKILL":
                raise Killed
            if kill == "crash":
                raise RuntimeError("injected crash")
            os.kill(os.getpid(), getattr(signal, kill))  # honoured after this step
        return stats

    def fail(self, summary):
        if kill == "SIGKILL":  # a killed process records nothing
            self._metrics.close()
            return None
        return real_fail(self, summary)

    with monkeypatch.context() as patch:
        patch.setattr(training_loop, "timed_step", step)
        patch.setattr(Recorder, "fail", fail)
        try:
            train.run(cfg, run_dir)
        except ConfigError:
            return "refused"
        except Killed:
            summary = json.loads((run_dir / "summary.json").read_text())
            (run_dir / "summary.json").write_text(json.dumps({**summary, "pid": dead_pid()}))
            return kill
        except (RuntimeError, KeyboardInterrupt):
            return kill
    return "ran"


def pld_composition(terms: list[tuple[float, float, int, int]], delta: float) -> float:
    """dp-accounting's epsilon of Poisson-sampled Gaussian releases composed: (sigma, q, steps,
    mechanisms per step) each."""
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
        self.run_dir, self.cache = self.tmp / "run", self.tmp / "cache"
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
