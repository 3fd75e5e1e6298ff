"""The guarantee's rule over the entry points, as a property: every walk starts with a training (it
may be stopped by a signal or a crash), an audit, the library and (in the longer walks) a private
selection, in a random order, then takes random steps among trainings, relaunches with or without a
change, files deleted or cut short, audits, the library and the reports on what was written, all
under one output root. After every step, every file under the root and every line printed is checked:

- a secret (a run's seed, the private data's digest) is only in the private workspace: files that
  their owner alone may read (a released file is readable by others);
- nothing printed holds a secret;
- every run directory's summary prints an epsilon that covers every row that left it (the rows of
  metrics.jsonl and of its archived attempts each carry the epsilon spent by their step);
- nothing others can read of a private selection tells K: the selection step runs the sweep twice, with
  two draws of K, and the released folders and everything outside the sweep's `.private/` have the
  same names, modes and times (the launch's), the same bytes but for the chosen run's noisy numbers
  and model, and the sweep prints the same lines;
- every file under a run's, an audit's, a sweep's or a selection's release folder is one the gate
  lists for that kind of computation (`pazo.run.gate.FILES`), with the mode its status says (a file
  Hydra or W&B writes: owner-only where its status is, whatever its mode otherwise), and a run's
  private workspace is 0700.

Seeds are drawn large (at least 2^40), so that their decimal digits found in a file are the seed.
Trainings and the library run in this process; the selection's runs are the sweep's subprocesses."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import stat
import tempfile
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, next_seed_sharing_digits_size, one_noise_pass, run_cache
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)
from stateful_walks import check_invariants, rule_names, rules_ran
from torch import nn

import pazo.run.loop as training_loop
from pazo.run import gate
import pazo.sweep.command as sweep
import pazo.train as train
from pazo.errors import ConfigError
from pazo.private import private_zo

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

#: large seeds (their digits in a file are the seed), each moved up to the next with seed 0's digits private set
#: size, so that the walk's runs of a method share one calibration (a map: the walks draw what they drew before)
SEEDS = st.integers(2**40, 2**62).map(next_seed_sharing_digits_size)
METHODS = ("dpzero", "pazo_m", "dpsgd")
KILLS = (None, "SIGTERM", "SIGINT", "crash")
TAMPERS = ("metrics.jsonl", "summary.json", "train.log")
BASE = ["train.steps=3", "train.log_every=1", "train.checkpoint_every=1", "device=cpu", "logger.mode=disabled"]


def owner_only(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def run_in_process(cfg, run_dir: Path, kill: str | None, after: int, monkeypatch) -> str:
    """`pazo.train.run`, stopped by `kill` after `after` steps (None: to its end): 'ran', 'refused'
    or the kill."""
    real_step, done = training_loop.timed_step, []

    def step(r, sampler, loop, t):
        stats = real_step(r, sampler, loop, t)
        done.append(t)
        if kill is not None and len(done) == after:
            if kill == "crash":
                raise RuntimeError("injected crash")
            os.kill(os.getpid(), getattr(signal, kill))   # honoured after this step
        return stats

    with monkeypatch.context() as patch:
        patch.setattr(training_loop, "timed_step", step)
        try:
            train.run(cfg, run_dir)
        except ConfigError:
            return "refused"
        except (RuntimeError, KeyboardInterrupt):
            return kill or "crash"
    return "ran"


def mini_selection_spec(folder: Path) -> str:
    """One cell of one configuration (dpzero at its defaults): two draws of K differ in K alone."""
    path = folder / "sel.yaml"
    path.write_text("name: sel\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\nseeds: [0]\ngrid: false\n"
                    "selection: private\nk: {distribution: geometric, mean: 2}\n")
    return str(path)


#: the sweep folders of a walk's two selections (their draws of K differ)
SWEEP_ROOTS = ("sweeps", "sweeps-again")


def visible(sweep_dir: Path) -> dict[str, tuple]:
    """What others can read of a sweep's folder, relative to its launch's time: each path outside
    `.private/` (the `.private` folder's own entry included) with its mode and its modification time
    less the launch's; a released file's bytes with the chosen run's noisy numbers and model left out."""
    from pazo.sweep.selection import PRIVATE

    stamp = json.loads(next((sweep_dir / PRIVATE).rglob("selection.json")).read_text())["launched_at"]
    out = {}
    for path in sorted(sweep_dir.rglob("*")):
        relative = path.relative_to(sweep_dir)
        if relative.parts[0] == PRIVATE and len(relative.parts) > 1:
            continue
        info = path.lstat()
        when = "set by the draw" if path.name == PRIVATE else info.st_mtime - stamp
        out[relative.as_posix()] = (stat.S_IMODE(info.st_mode), when, _content(path, str(sweep_dir)))
    return out


def _content(path: Path, folder: str):
    """A file's content less what follows the chosen run's noise (floats, the model's bytes), its
    sweep's `folder` written SWEEP."""
    if path.is_dir() or path.name == "model.safetensors":
        return path.is_dir() or path.stat().st_size
    text = path.read_text().replace(folder, "SWEEP")
    if path.suffix == ".json":
        return _shape(json.loads(text))
    if path.suffix == ".jsonl":
        return [_shape(json.loads(line)) for line in text.splitlines() if line.strip()]
    return text


def _shape(value):
    """`value` with its floats, and the decimals in its strings, written as such; a summary's warnings
    (which of them a run gets follows its noisy accuracy) as a list of strings."""
    if isinstance(value, dict):
        return {k: "strings" if k == "warnings" else _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\d+\.\d+", "a decimal", value)
    return "a float" if isinstance(value, float) else value


class Entries(RuleBasedStateMachine):
    """One output root that every entry point writes under."""

    monkeypatch: pytest.MonkeyPatch
    with_selection: bool = True

    def __init__(self):
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="pazo-entries-"))
        self.cache = run_cache(self.root.parent / f"{self.root.name}-cache")
        self.runs: list[tuple[Path, list[str]]] = []    # (directory, overrides of its first launch)
        self.seeds: set[int] = set()
        self.printed = io.StringIO()
        self.selected = False
        self.log_handler = logging.StreamHandler(self.printed)
        logging.getLogger("pazo").addHandler(self.log_handler)

    def teardown(self):
        logging.getLogger("pazo").removeHandler(self.log_handler)

    def _compose(self, overrides: list[str], config: str = "config"):
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            return compose(config_name=config, overrides=[f"privacy.cache_dir={self.cache / 'sigma'}", *overrides])

    def _launch(self, run_dir: Path, overrides: list[str], kill, after) -> str:
        with contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed):
            return run_in_process(self._compose(overrides), run_dir, kill, after, self.monkeypatch)

    @rule(method=st.sampled_from(METHODS), seed=SEEDS, kill=st.sampled_from(KILLS), after=st.integers(1, 2))
    def training(self, method, seed, kill, after):
        self.seeds.add(seed)
        run_dir = self.root / "runs" / f"run{len(self.runs)}"
        overrides = [f"method={method}", f"seed={seed}", *BASE]
        self._launch(run_dir, overrides, kill, after)
        self.runs.append((run_dir, overrides))

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), change=st.sampled_from([None, "method.lr=0.07", "train.steps=4"]),
          kill=st.sampled_from(KILLS), after=st.integers(1, 2))
    def relaunch(self, data, change, kill, after):
        run_dir, overrides = data.draw(st.sampled_from(self.runs))
        self._launch(run_dir, [*overrides, *([change] if change else [])], kill, after)

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), name=st.sampled_from(TAMPERS), how=st.sampled_from(["delete", "cut"]))
    def tamper(self, data, name, how):
        run_dir, _ = data.draw(st.sampled_from(self.runs))
        path = run_dir / name
        if path.exists():
            path.unlink() if how == "delete" else path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    @rule(seed=SEEDS)
    def audit(self, seed):
        from pazo.audit.run import run_audit

        self.seeds.add(seed)
        cfg = self._compose([f"seed={seed}", "method=dpzero", "train.steps=3", "audit.canaries=20",
                             "device=cpu", "logger.mode=disabled"], config="audit")
        with contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed):
            with contextlib.suppress(ConfigError):
                run_audit(cfg, self.root / "audits" / f"audit{len(self.seeds)}")

    @rule(seed=SEEDS)
    def library(self, seed):
        self.seeds.add(seed)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(200, 5, generator=g), torch.randint(0, 3, (200,), generator=g)
        model = nn.Linear(5, 3)
        with contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed):
            engine = private_zo(model, nn.CrossEntropyLoss(reduction="none"), (x, y), method="dpzero", lr=0.05,
                                clip=1.0, epsilon=1.0, delta=1e-4, steps=3, batch_size=16, seed=seed)
            for batch in engine.batches():
                engine.step(batch)
            # what a user keeps of it: the facts `describe()` gives
            out = self.root / "library" / f"describe{len(self.seeds)}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(engine.describe(), default=str))

    @initialize(method=st.sampled_from(METHODS), seed=SEEDS, kill=st.sampled_from(KILLS), after=st.integers(1, 2))
    def first_training(self, method, seed, kill, after):
        self.training(method, seed, kill, after)

    @initialize(seed=SEEDS)
    def first_audit(self, seed):
        self.audit(seed)

    @initialize(seed=SEEDS)
    def first_library(self, seed):
        self.library(seed)

    @initialize(ks=st.tuples(st.integers(1, 3), st.integers(1, 3)).filter(lambda ks: ks[0] != ks[1]))
    def selection(self, ks):
        """A private selection's sweep, twice, with two draws of K `ks` (its runs are subprocesses: once
        a walk, in the longer walks; the fast suite runs one on its own,
        `test_a_private_selection_releases_no_secret_and_tells_nothing_of_k`)."""
        if not self.with_selection:
            return
        self.selected = True
        spec = mini_selection_spec(self.root)
        self.sweep_lines = []
        for k, out in zip(ks, SWEEP_ROOTS):
            self.sweep_lines.append(self._selection_sweep(spec, k, self.root / out))
        for folder in (self.root / "sweeps").rglob("config.yaml"):   # the K runs' seeds are secrets too
            if (seed := _config_seed(folder)) is not None and seed >= 2**20:
                self.seeds.add(seed)

    def _selection_sweep(self, spec: str, k: int, out: Path) -> list[str]:
        """`pazo-sweep spec --out out`, K drawn as `k`: the lines it printed, its folder and times as `out`."""
        from pazo.privacy.selection import KDistribution

        lines = []
        handler = logging.Handler()
        handler.emit = lambda record: lines.append(record.getMessage().replace(str(out), "OUT"))
        logging.getLogger("pazo").addHandler(handler)
        try:
            with self.monkeypatch.context() as patch, contextlib.redirect_stdout(self.printed), \
                    contextlib.redirect_stderr(self.printed):
                patch.setattr(KDistribution, "draw", lambda distribution, rng=None: k)
                sweep.main([spec, "--out", str(out), "train.steps=3", "device=cpu"])
        finally:
            logging.getLogger("pazo").removeHandler(handler)
        return [re.sub(r"\b[0-9.]+ s\b", "_ s", line) for line in lines]

    @invariant()
    def nothing_others_read_tells_k(self):
        if not self.selected:
            return
        first, again = (visible(self.root / out / "sel") for out in SWEEP_ROOTS)
        assert any(name.endswith("selected,seed=0/summary.json") for name in first)   # (one run released)
        assert first == again, "what others can read of a selection varies with K: " + "; ".join(
            f"{name}: {first.get(name)} / {again.get(name)}" for name in sorted(set(first) | set(again))
            if first.get(name) != again.get(name))[:2000]
        assert self.sweep_lines[0] == self.sweep_lines[1], "the sweep's printed lines vary with K"

    @precondition(lambda self: self.selected)
    @rule()
    def report(self):
        from pazo.report import main as report

        with contextlib.redirect_stdout(self.printed), contextlib.redirect_stderr(self.printed):
            with contextlib.suppress(SystemExit):
                report(["tables", str(self.root / "sweeps" / "sel"), "--out", str(self.root / "tables")])

    def _secrets(self) -> set[bytes]:
        digests = set()
        for record in self.root.rglob("private_computation.json"):
            with contextlib.suppress(OSError, ValueError):
                digests.add(json.loads(record.read_text()).get("private_data_sha256", ""))
        return {str(s).encode() for s in self.seeds} | {d.encode() for d in digests if d}

    @invariant()
    def secrets_stay_in_the_private_workspace(self):
        secrets = self._secrets()
        leaked = [str(p.relative_to(self.root)) for p in self.root.rglob("*")
                  if p.is_file() and not owner_only(p) and any(s in p.read_bytes() for s in secrets)]
        assert not leaked, f"a secret in a file others may read: {leaked}"
        printed = self.printed.getvalue().encode()
        assert not [s for s in secrets if s in printed], "a secret was printed"

    @invariant()
    def every_released_row_is_covered(self):
        for summary_path in self.root.rglob("summary.json"):
            with contextlib.suppress(OSError, ValueError):
                summary = json.loads(summary_path.read_text())
            privacy = summary.get("privacy") if isinstance(summary, dict) else None
            if not isinstance(privacy, dict) or privacy.get("epsilon_spent") is None:
                continue
            run_dir = summary_path.parent
            rows = [json.loads(line) for path in [run_dir / "metrics.jsonl", *run_dir.glob("attempts/*/metrics.jsonl")]
                    if path.exists() for line in path.read_text().splitlines() if _whole(line)]
            most = max((row.get("epsilon") or 0.0 for row in rows), default=0.0)
            assert privacy["epsilon_spent"] >= most - 1e-9, (run_dir, privacy["epsilon_spent"], most)


    @invariant()
    def every_file_is_listed_with_its_mode(self):
        unlisted, wrong = [], []
        for kind, folder, path in self._files():
            listed = gate.entry(kind, path.relative_to(folder))
            mode = stat.S_IMODE(path.stat().st_mode)
            if listed is None:
                unlisted.append(f"{kind}: {path.relative_to(self.root)}")
            elif (mode & 0o077 if listed.status in gate.OWNER_ONLY
                  else listed.writer == "pazo" and mode != listed.mode):
                wrong.append(f"{path.relative_to(self.root)} {mode:04o} ({listed.status})")
        assert not unlisted, f"files pazo.run.gate.FILES does not list: {unlisted}"
        assert not wrong, f"modes that are not their status's: {wrong}"
        workspaces = [p for p in self.root.rglob(gate.WORKSPACE) if p.is_dir()]
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in workspaces), workspaces

    def _files(self):
        """(kind, its folder, a file) for every file under the root's computations."""
        folders = [("run", d) for d in (self.root / "runs").glob("*")]
        folders += [("audit", d) for d in (self.root / "audits").glob("*")]
        sweeps = [self.root / out for out in SWEEP_ROOTS]
        releases = [d for root in sweeps for d in root.rglob("selected,seed=*") if d.is_dir()]
        folders += [("selection release", d) for d in releases]
        folders += [("sweep", d) for root in sweeps for d in root.glob("*")]
        for kind, folder in folders:
            for path in folder.rglob("*"):
                inside_release = kind == "sweep" and any(r in path.parents for r in releases)
                if path.is_file() and not path.is_symlink() and not inside_release:
                    yield kind, folder, path


def _whole(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _config_seed(path: Path) -> int | None:
    for line in path.read_text().splitlines():
        if line.startswith("seed:"):
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1])
    return None


def _walk(monkeypatch, tmp_path: Path, max_examples: int, steps: int, with_selection: bool) -> None:
    """The walks, each audit's noise check on one pass of its run's steps (the files an audit writes
    are the same at any count) and the selection's sweep on the session's sigma cache (`hermetic`).
    (What Hypothesis draws follows the source of `Entries`: an edit of it draws other walks.)"""
    one_noise_pass(monkeypatch)
    hermetic(monkeypatch, tmp_path)
    Entries.monkeypatch, Entries.with_selection = monkeypatch, with_selection
    run_state_machine_as_test(Entries, settings=settings(
        max_examples=max_examples, stateful_step_count=steps, derandomize=True, deadline=None,
        phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck)))


#: the rules the bounded walk does not run (each walk starts with the four initialize rules, and has one step
#: left), with the case that runs each instead (the longer walks draw them all)
RUN_APART = {"selection": "test_a_private_selection_releases_no_secret_and_tells_nothing_of_k",
             "report": "test_a_private_selection_releases_no_secret_and_tells_nothing_of_k",
             "relaunch": "test_a_relaunch_and_a_damaged_file_release_no_secret_and_no_uncounted_row",
             "tamper": "test_a_relaunch_and_a_damaged_file_release_no_secret_and_no_uncounted_row"}


def test_no_entry_point_releases_a_secret_or_an_uncounted_row(monkeypatch, tmp_path):
    """Bounded; and every rule of `Entries` runs in it or in the case `RUN_APART` names (an edit of
    the class draws another walk, which may leave a rule out)."""
    ran = rules_ran(monkeypatch, Entries)
    _walk(monkeypatch, tmp_path, max_examples=2, steps=5, with_selection=False)
    assert ran | set(RUN_APART) == rule_names(Entries), \
        f"rules neither walked nor run apart: {rule_names(Entries) - ran - set(RUN_APART)}"


@settings(max_examples=1, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_relaunch_and_a_damaged_file_release_no_secret_and_no_uncounted_row(monkeypatch, tmp_path, data):
    """The rules the bounded walk leaves out (`RUN_APART`), in turn on one run stopped after a step:
    a relaunch with another lr (refused: rows left), its metrics.jsonl cut short, a relaunch as it
    ran to its end; every invariant after each."""
    one_noise_pass(monkeypatch)
    hermetic(monkeypatch, tmp_path)
    Entries.monkeypatch, Entries.with_selection = monkeypatch, False
    state = Entries()
    try:
        state.first_training("dpzero", next_seed_sharing_digits_size(2**40), "SIGTERM", 1)
        check_invariants(state)
        for step in (lambda: state.relaunch(data, "method.lr=0.07", None, 1),
                     lambda: state.tamper(data, "metrics.jsonl", "cut"),
                     lambda: state.relaunch(data, None, None, 1)):
            step()
            check_invariants(state)
    finally:
        state.teardown()


def hermetic(monkeypatch, tmp_path: Path) -> None:
    """The selection's sweep and its runs (subprocesses) on the session's sigma cache, not ~/.cache."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))


def test_a_private_selection_releases_no_secret_and_tells_nothing_of_k(monkeypatch, tmp_path):
    """The selection step alone, K drawn as 1 and then 2, and every invariant after it."""
    hermetic(monkeypatch, tmp_path)
    Entries.monkeypatch, Entries.with_selection = monkeypatch, True
    state = Entries()
    try:
        state.selection((1, 2))
        state.report()
        state.nothing_others_read_tells_k()
        state.secrets_stay_in_the_private_workspace()
        state.every_released_row_is_covered()
        state.every_file_is_listed_with_its_mode()
    finally:
        state.teardown()


@pytest.mark.slow
def test_no_entry_point_releases_a_secret_or_an_uncounted_row_on_longer_walks(monkeypatch, tmp_path):
    _walk(monkeypatch, tmp_path, max_examples=10, steps=14, with_selection=True)
