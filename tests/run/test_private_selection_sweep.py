"""A sweep's private selection (pazo.sweep.selection, `pazo-sweep --selection private`): the draw is kept
0600 and reused, a failed, over-budget or unscored run counts with the lowest score, only the chosen
run is released (without K), the dry run prints each cell's cost and launches nothing, a user's
mistake is one line, and on digits a small sweep releases one run per cell whose printed total
agrees with the independent Theorem 2 computation of tests/privacy/test_private_selection.py."""
import hashlib
import json
import logging
import math
import os
import random
import re
import stat
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo.sweep.command as sweep
import pazo.sweep.launchers as launchers
import pazo.sweep.selection as sel
from pazo.run import outlets
from pazo.run.attempts import read_private_record
from pazo.errors import ConfigError
from pazo.privacy.selection import DISTRIBUTIONS, MAX_MEAN, KDistribution
from tests.faults.test_fault_special_files import make_special
from tests.privacy.test_private_selection import theorem2_epsilon


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_draw_is_private_reused_and_tied_to_its_grid(tmp_path):
    state = tmp_path / "sweep" / sel.PRIVATE / "digits" / "dpsgd" / "eps=1" / "seed=0" / "selection.json"
    k, grid = KDistribution("geometric", 5), ["a", "b", "c"]
    drawn = sel.load_or_draw(state, k, grid, 1000.0)
    assert mode(state) == 0o600
    assert all(mode(p) == 0o700 for p in [state.parent, *state.parents[:4]])
    assert drawn["k"] == len(drawn["draws"]) >= 1
    assert all(0 <= d["configuration"] < len(grid) for d in drawn["draws"])
    assert all(set(d) == {"configuration", "name"} for d in drawn["draws"])   # no seed: the runs' streams are the OS's
    assert len({d["name"] for d in drawn["draws"]}) == drawn["k"]    # folder names tell nothing of K
    assert sel.load_or_draw(state, k, grid, 2000.0) == drawn         # a relaunch reuses it, its time too
    with pytest.raises(ConfigError, match="another grid"):
        sel.load_or_draw(state, k, ["a", "b"], 1000.0)
    with pytest.raises(ConfigError, match="another grid"):
        sel.load_or_draw(state, KDistribution("geometric", 6), grid, 1000.0)
    seeded = {key: value for key, value in drawn.items() if key != "streams"}   # drawn by an earlier pazo
    state.write_text(json.dumps(seeded))
    with pytest.raises(ConfigError, match="runs were seeded"):
        sel.load_or_draw(state, k, grid, 1000.0)


OUTCOMES = st.sampled_from(["finished", "failed", "over_budget", "no_val", "no_summary", "broken"])


def fake_selection_run(folder: Path, outcome: str, val: float) -> Path:
    folder.mkdir(parents=True)
    if outcome == "no_summary":
        return folder
    if outcome == "broken":
        (folder / "summary.json").write_text("{not json")
        return folder
    privacy = {"private": True, "target_epsilon": 1.0, "epsilon_spent": 0.99, "within_budget": True,
               "guarantee_holds": True, "sampling": "poisson", "sampling_matches_accountant": True}
    if outcome == "over_budget":
        privacy.update(epsilon_spent=1.5, within_budget=False)
    summary = {"status": "failed" if outcome == "failed" else "finished", "privacy": privacy,
               "final_val_accuracy": None if outcome == "no_val" else val}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


@settings(max_examples=40, deadline=None)
@given(runs=st.lists(st.tuples(OUTCOMES, st.floats(0, 1)), max_size=8))
def test_the_best_scored_run_is_chosen_and_the_others_score_lowest(tmp_path_factory, runs):
    root = tmp_path_factory.mktemp("runs")
    dirs = [fake_selection_run(root / f"run-{i}", outcome, val) for i, (outcome, val) in enumerate(runs)]
    scores = [val if outcome == "finished" else -math.inf for outcome, val in runs]
    chosen = sel.choose(dirs)
    if not scores or max(scores) == -math.inf:
        assert chosen is None
    else:
        assert chosen == scores.index(max(scores))


def test_the_release_carries_the_total_and_not_k(tmp_path):
    run = fake_selection_run(tmp_path / ".private" / "run-x", "finished", 0.5)
    (run / "config.yaml").write_text("seed: 3\n")
    (run / "wandb").mkdir()
    summary = json.loads((run / "summary.json").read_text())
    summary["privacy"]["assumptions"] = {"no_selection": "...", "seed_secret": "..."}
    (run / "summary.json").write_text(json.dumps(summary))
    record = {"distribution": "geometric", "mean": 10, "total_epsilon": 2.5, "delta": 1e-5, "seeds": 2,
              "total_epsilon_all_seeds": 3.4}
    public = tmp_path / "digits" / "dpsgd" / "eps=1" / "selected,seed=0"
    public.parent.mkdir(parents=True)
    sel.release(run, public, record, 1000.0, tmp_path)
    released = json.loads((public / "summary.json").read_text())
    assert released["selection"] == record and released["run_dir"] == str(public)
    assert "no_selection" not in released["privacy"]["assumptions"]
    assert "3.4" in released["privacy"]["assumptions"]["private_selection"]
    assert not (public / "wandb").exists() and (public / "config.yaml").exists()
    assert "seed" not in (public / "config.yaml").read_text()
    assert mode(public) == 0o755 and mode(public / "summary.json") == 0o644


def mini(tmp_path, methods="[dpsgd]", extra="{train.steps: [2]}", more=""):
    path = tmp_path / "mini.yaml"
    path.write_text(f"name: mini\nsettings: [digits]\nmethods: {methods}\nepsilons: [1]\nextra: {extra}\n{more}")
    return str(path)


def test_the_dry_run_prints_each_cells_cost_and_launches_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    out = tmp_path / "out"
    assert sweep.main([mini(tmp_path), "--dry-run", "--selection", "private", "--k-mean", "4", "--out", str(out)]) == 0
    line = next(r.getMessage() for r in caplog.records if "digits/dpsgd/eps=1" in r.getMessage())
    assert "K ~ geometric (mean 4)" in line and "E[K] 4" in line and "each run epsilon 1" in line
    assert float(re.search(r"total epsilon ([0-9.]+)", line).group(1)) > 1
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--k", "poisson", "--k-shape", "2"], "takes no shape"),
    (["--k", "binomial"], "unknown distribution"),
    (["--k-mean", "0.5"], "above 1"),
])
def test_a_bad_selection_setting_is_one_line(tmp_path, capsys, args, message):
    assert sweep.main([mini(tmp_path), "--dry-run", "--selection", "private", *args,
                       "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pazo: error:") and message in err[0]


def test_a_spec_with_an_unknown_selection_is_refused(tmp_path, capsys):
    assert sweep.main([mini(tmp_path, more="selection: best\n"), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    assert "unknown selection 'best'" in capsys.readouterr().err


@pytest.mark.slow
def test_digits_releases_one_run_per_cell_with_the_total_the_tests_compute(tmp_path, caplog):
    """A spec asking for private selection: one cell (DP-SGD at epsilon 1 over two learning rates),
    E[K] 1.5; the released run's own account gives the printed total by Theorem 2; a relaunch runs
    nothing and keeps the draw."""
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    spec = mini(tmp_path, more="selection: private\nk: {distribution: geometric, mean: 1.5}\n")
    out = tmp_path / "out"
    assert sweep.main([spec, "--out", str(out), "logger.mode=offline"]) == 0
    sweep_dir = out / "mini"
    released = [p.parent for p in sweep_dir.rglob("config.yaml") if sel.PRIVATE not in p.parts
                and ".hydra" not in p.parts]
    assert [p.relative_to(sweep_dir).as_posix() for p in released] == ["digits/dpsgd/eps=1/selected,seed=0"]
    summary = json.loads((released[0] / "summary.json").read_text())
    privacy, record = summary["privacy"], summary["selection"]
    assert "k" not in record and not (released[0] / "wandb").exists()
    assert mode(sweep_dir / sel.PRIVATE) == 0o700
    state = next((sweep_dir / sel.PRIVATE).rglob("selection.json"))
    assert mode(state) == 0o600
    digests = set()
    for run in state.parent.glob("run-*"):      # the K runs logged nothing to W&B and stay private
        assert "mode: disabled" in (run / "config.yaml").read_text() and mode(run / "config.yaml") == 0o600
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["seed"] == 0 and config["privacy"]["secure_mode"] is True   # the spec's seed; OS noise
        digests.add(json.loads((run / "private" / "private_computation.json").read_text())["private_data_sha256"])
    assert len(digests) == 1                    # one split for the K runs: the one the cost's n is of
    drawn = json.loads(state.read_text())
    dirs = [state.parent / d["name"] for d in drawn["draws"]]
    check_release(released[0], dirs[sel.choose(dirs)], drawn["launched_at"], sweep_dir)
    printed = next(r.getMessage() for r in caplog.records if "digits/dpsgd/eps=1" in r.getMessage())
    total = float(re.search(r"total epsilon ([0-9.]+)", printed).group(1))
    independent = theorem2_epsilon(privacy["sample_rate"], privacy["sigma"], privacy["steps"], 1.5, 1.0,
                                   privacy["delta"])
    assert total == pytest.approx(record["total_epsilon"], abs=5e-4)
    assert independent * 0.9 <= total <= independent * (1 + 1e-6) + 5e-4
    before = state.read_text()
    caplog.clear()
    assert sweep.main([spec, "--out", str(out)]) == 0
    assert state.read_text() == before
    assert not any(r.getMessage().startswith("[") for r in caplog.records)   # no run line: nothing ran


def test_a_laplace_cell_is_refused_before_any_run(tmp_path, capsys):
    """DP-ZO with Laplace noise: no RDP account of its selection here; the dry run names the cell,
    a launch is one error line, exit 2, and nothing is drawn or run."""
    spec = tmp_path / "lap.yaml"
    spec.write_text("name: lap\nsettings: [digits]\nmethods: [dp_zo]\nepsilons: [1]\ngrid: false\n"
                    "extra: {method.noise: [laplace], train.steps: [2]}\n")
    out = tmp_path / "out"
    assert sweep.main([str(spec), "--selection", "private", "--out", str(out)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pazo: error:")]
    assert len(err) == 1 and "Gaussian runs only" in err[0] and "digits/dp_zo/eps=1" in err[0]
    assert not out.exists()


# --- what a selection releases, and what it keeps private (fake runs: what pazo.train writes) ------------

SECRET_DIGEST = "d1" * 32     # the private data's digest every fake run records (one split: one digest)


def overrides_of(cmd: list[str]) -> dict[str, str]:
    """A run command's `key=value` overrides, the last one of a key winning (as Hydra reads them)."""
    return dict(arg.split("=", 1) for arg in cmd[3:] if "=" in arg)


def fake_train(cmd: list[str], run_dir: str, threads=None) -> int:
    """What `pazo.train` leaves in a run directory, K-telling parts included: its launch time, clock,
    process and attempt, the seed in config.yaml and .hydra/, the data digest and fingerprint, step
    times and noiseless private statistics; the noisy numbers and the model drawn at random. Each
    file's time is the run's own (later for each run of a sweep)."""
    run_dir, given = Path(run_dir), overrides_of(cmd)
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    fake_train.count = getattr(fake_train, "count", 0) + 1
    when = 1.7e9 + 100 * fake_train.count
    fingerprint = hashlib.sha256(" ".join(cmd).encode()).hexdigest()
    config = {"seed": int(given["seed"]), "method": {"name": given["method"], "lr": float(given.get("method.lr", 0.1))},
              "privacy": {"epsilon": float(given["privacy.epsilon"]),
                          "secure_mode": given.get("privacy.secure_mode") == "true"},
              "logger": {"mode": given["logger.mode"], "name": given["logger.name"]}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(cmd[3:]))
    (run_dir / "private_computation.json").write_text(json.dumps(
        {"private_data_sha256": SECRET_DIGEST, "fingerprint": fingerprint, "sigma": 0.8}))
    (run_dir / "train.log").write_text(f"[{time.ctime(when)}] pazo: dpsgd on digits\n")
    (run_dir / "checkpoint.pt").write_bytes(b"state")
    (run_dir / "model.safetensors").write_bytes(random.randbytes(64))
    rows = [{"step": t, "epoch": t / 10, "s_per_iter": random.random(), "sigma": 0.8, "epsilon": 0.5 * t,
             "train_loss": random.random(), "grad_norm": random.random(), "test_accuracy": random.random(),
             "val_accuracy": random.random()} for t in (1, 2)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    val = random.random()
    summary = {"status": "finished", "failure": None, "method": "dpsgd", "dataset": "digits", "host": "node7",
               "pid": 4000 + fake_train.count, "heartbeat": when, "attempt": fake_train.count, "run_dir": str(run_dir),
               "resumed_from_step": None, "wandb_run_id": None, "threads": {"count": 1, "why": "2 idle cores"},
               "engine": {"name": "inplace", "reason": f"timed {random.random():.3f} ms"},
               "computation": {"fingerprint": fingerprint, "sigma": 0.8, "device": "cpu"},
               "data": {"n_private": 1165, "n_val": 129}, "steps_done": 2, "steps_planned": 2,
               "privacy": {"private": True, "target_epsilon": 1.0, "epsilon_spent": 0.99, "within_budget": True,
                           "guarantee_holds": True, "sampling": "poisson", "sampling_matches_accountant": True,
                           "assumptions": {"n_private_public": "n is public", "no_selection": "no selection"}},
               "outside_guarantee": ["the validation split's size per class rounds the private set's class counts",
                                     outlets.STEP_TIMES_SENTENCE, outlets.private_diagnostics_sentence()],
               "final_test_accuracy": random.random(), "best_test_accuracy": random.random(),
               "final_val_accuracy": val, "best_val_accuracy": val, "mean_s_per_iter": random.random(),
               "median_s_per_iter": random.random(), "warnings": []}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with open(run_dir / "stdout.log", "a") as out:
        out.write(f"=== {time.ctime(when)} {' '.join(cmd)}\n")
    for path in run_dir.rglob("*"):
        os.utime(path, (when, when))
    return 0


#: the noisy numbers a released run's files may differ in between two selections (and the model's bytes)
NOISY = {"final_test_accuracy", "best_test_accuracy", "grad_norm", "test_accuracy"}


def released_files(public: Path) -> dict[str, object]:
    """A released folder as comparable values: each file's parsed content less the noisy numbers."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in NOISY}
        return value
    out = {}
    for path in sorted(public.rglob("*")):
        name = path.relative_to(public).as_posix()
        if path.is_dir():
            out[name] = "a folder"
        elif name == "summary.json":
            out[name] = strip({**json.loads(path.read_text()), "run_dir": None})
        elif name == "metrics.jsonl":
            out[name] = [strip(json.loads(line)) for line in path.read_text().splitlines()]
        elif name != "model.safetensors":
            out[name] = path.read_bytes()
        else:
            out[name] = path.stat().st_size
    return out


def check_release(public: Path, run_dir: Path, stamp: float, sweep_dir: Path) -> None:
    """The rules of a released folder: only the allow-list's files, each with only its rule's keys; no
    seed, data digest, fingerprint, process, clock or attempt; one time on every file and folder from
    the sweep's down; the validation reading named as outside the guarantee."""
    assert {p.name for p in public.iterdir()} <= set(outlets.RELEASE)
    assert all(p.is_file() for p in public.iterdir())
    summary = json.loads((public / "summary.json").read_text())
    assert summary == {**outlets.for_release("summary.json", summary), "run_dir": str(public)}
    assert not {"host", "pid", "heartbeat", "attempt", "threads", "final_val_accuracy"} & set(summary)
    assert "fingerprint" not in summary["computation"] and "reason" not in summary["engine"]
    for line in (public / "metrics.jsonl").read_text().splitlines():
        assert json.loads(line) == outlets.for_release("metrics.jsonl", json.loads(line))
        assert not {"s_per_iter", "train_loss", "val_accuracy"} & set(json.loads(line))
    assert "seed" not in yaml.safe_load((public / "config.yaml").read_text())
    private = read_private_record(run_dir)   # (in private/, or beside summary.json in the fake's old layout)
    for path in public.iterdir():
        text = path.read_bytes()
        assert private["private_data_sha256"].encode() not in text and private["fingerprint"].encode() not in text
    assert outlets.STEP_TIMES_SENTENCE not in summary["outside_guarantee"]
    assert sel.VALIDATION_OUTSIDE in summary["outside_guarantee"]
    assert "validation split without noise" in summary["privacy"]["assumptions"]["private_selection"]
    folders = [public, *(sweep_dir / p for p in public.relative_to(sweep_dir).parents)]
    assert {p.stat().st_mtime for p in [*public.iterdir(), *folders]} == {stamp}
    assert mode(public) == 0o755 and all(mode(p) == 0o644 for p in public.iterdir())


class FakeCost:
    def record(self) -> dict:
        return {"distribution": "geometric", "mean": 3, "total_epsilon": 2.5, "delta": 1e-5, "seeds": 1,
                "total_epsilon_all_seeds": 2.5}


@settings(max_examples=15, deadline=None)
@given(configurations=st.integers(1, 3), seeds=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=2, unique=True),
       ks=st.lists(st.integers(1, 5), min_size=2, max_size=2),
       overrides=st.sampled_from([[], ["privacy.secure_mode=false", "logger.mode=online"],
                                  ["++privacy.secure_mode=false"]]))
def test_a_selection_releases_the_allow_list_and_its_runs_share_a_split_and_draw_from_the_os(
        tmp_path_factory, configurations, seeds, ks, overrides):
    """Over random cells and K: every run of a selection has the spec's seed (one split: the one its n
    and delta come from) and secure mode after the user's overrides; the released folder holds the
    allow-list alone, with no seed, digest or fingerprint, one time; the K runs stay owner-only."""
    sweep_dir = tmp_path_factory.mktemp("sweeps") / "mini"
    grid = [sweep.PlannedRun("mini", "digits", None, "dpsgd", 1.0, seeds[0], (("method.lr", 0.1 * (i + 1)),))
            for i in range(configurations)]
    cell = sweep.Cell("digits", "dpsgd", 1.0, grid, list(seeds))
    draws = iter(ks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KDistribution, "draw", lambda self, rng=None: next(draws))
        private, todo = sweep._selection_runs([cell], [FakeCost()], KDistribution("geometric", 3), sweep_dir,
                                              overrides, {"finished"})
    assert len(todo) == sum(ks[:len(seeds)])
    for s in private:
        for run_dir in s.dirs:
            cmd = next(c for _, d, c in todo if d == run_dir)
            given = overrides_of(cmd)
            assert given["seed"] == str(s.seed) and given["privacy.secure_mode"] == "true"
            assert given["logger.mode"] == "disabled" and "++privacy.secure_mode" not in given
    for _, run_dir, cmd in todo:
        fake_train(cmd, str(run_dir))
    assert sweep._release_selections(private, sweep_dir) == len(seeds)
    for s in private:
        chosen = s.dirs[sel.choose(s.dirs)]
        check_release(s.public, chosen, s.stamp, sweep_dir)
    for path in (sweep_dir / sel.PRIVATE).rglob("*"):
        assert mode(path) == (0o700 if path.is_dir() else 0o600)


@pytest.mark.parametrize("score_at", ["first", "last"])
def test_two_selections_with_different_k_release_and_print_the_same(tmp_path, monkeypatch, caplog, score_at):
    """K = 1 and K = 4 through the sweep's command (the runs faked): the released folders are the same
    up to the model's bytes and the noisy numbers, every time in them the launch's, and the sweep
    prints the same lines, whichever of the runs is chosen."""
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    monkeypatch.setattr(launchers, "run_one", fake_train)
    spec = mini(tmp_path, extra="{train.steps: [2]}", more="grid: false\n")
    released, printed, states = [], [], []
    for k in (1, 4):
        monkeypatch.setattr(KDistribution, "draw", lambda self, rng=None, k=k: k)
        monkeypatch.setattr(sel, "choose", lambda dirs: 0 if score_at == "first" else len(dirs) - 1)
        caplog.clear()
        out = tmp_path / f"out{k}"
        assert sweep.main([spec, "--selection", "private", "--out", str(out)]) == 0
        public = out / "mini" / "digits" / "dpsgd" / "eps=1" / "selected,seed=0"
        state_file = next((out / "mini" / sel.PRIVATE).rglob("selection.json"))
        states.append((public, state_file, json.loads(state_file.read_text()), out / "mini"))
        released.append(released_files(public))
        printed.append([re.sub(r"[0-9.]+ s\b", "_ s", r.getMessage().replace(str(out), "OUT")) for r in caplog.records])
    assert released[0] == released[1]
    assert printed[0] == printed[1]
    for (public, state_file, state, sweep_dir), k in zip(states, (1, 4)):
        assert state["k"] == k
        chosen = state["draws"][0 if score_at == "first" else -1]["name"]
        check_release(public, state_file.parent / chosen, state["launched_at"], sweep_dir)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(["geometric", "logarithmic", "truncated_negative_binomial", "poisson", "binomial", "tnb"]),
       mean=st.one_of(st.floats(allow_nan=True), st.integers(-5, 5_000)),
       shape=st.one_of(st.none(), st.floats(-1, 10)))
@example(name="geometric", mean=1e9, shape=None)
def test_a_bad_distribution_of_k_names_the_choices_only_for_a_bad_name(name, mean, shape):
    """A ConfigError of one line, which names the distributions where the name is wrong and only there;
    a mean above the maximum says the maximum and why."""
    try:
        sel.k_distribution(name, mean, shape)
    except ConfigError as err:
        message = str(err)
        assert "\n" not in message
        assert ("choices:" in message) == (name not in DISTRIBUTIONS)
        if name in DISTRIBUTIONS and isinstance(mean, (int, float)) and MAX_MEAN < mean < math.inf:
            assert f"at most {MAX_MEAN}" in message and "whole training run" in message


def test_an_expected_k_of_a_billion_is_one_line_before_anything_is_drawn(tmp_path, capsys, monkeypatch):
    """The reported case: `--k-mean 1e9` drew a list of 693 million runs (3 GB) before anything ran."""
    monkeypatch.setattr(KDistribution, "draw", lambda *a, **k: pytest.fail("K was drawn"))
    out = tmp_path / "out"
    for dry in ([], ["--dry-run"]):
        assert sweep.main([mini(tmp_path), "--selection", "private", "--k-mean", "1e9", "--out", str(out), *dry]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pazo: error: the mean of K is at most 1000, got 1e+09")
        assert "choices" not in err[0]
    assert not out.exists()


RECORD = {"distribution": "geometric", "mean": 10, "total_epsilon": 2.5, "delta": 1e-5, "seeds": 1,
          "total_epsilon_all_seeds": 2.5}
#: what a damaged file of the chosen run holds, per file the release parses
GARBAGE = {"summary.json": "{not json", "metrics.jsonl": 'x\n{"step": 1}\n', "config.yaml": "a: [b\n"}


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(sorted(outlets.RELEASE)), damage=st.sampled_from(["fifo", "directory", "garbage"]))
@example(name="metrics.jsonl", damage="fifo")    # the reported case: a plain open() of a private file
def test_a_chosen_run_file_that_cannot_be_read_is_one_line_and_nothing_is_published(tmp_path_factory, name,
                                                                                   damage):
    """Each file the release reads (issue 60): a FIFO, a directory or damaged content in its place
    is one ConfigError line naming it, never a wait on the FIFO or a traceback, and no release."""
    if damage == "garbage" and name not in GARBAGE:
        damage = "fifo"
    root = tmp_path_factory.mktemp("sel")
    run = fake_selection_run(root / ".private" / "run-x", "finished", 0.5)
    for other in ("metrics.jsonl", "metrics.csv", "config.yaml", "model.safetensors"):
        (run / other).write_text({"metrics.jsonl": '{"step": 1}\n', "metrics.csv": "step\n1\n"}.get(other, "a: 1\n"))
    (run / name).unlink()
    if damage == "garbage":
        (run / name).write_text(GARBAGE[name])
    else:
        make_special(run / name, damage)
    public = root / "cell" / "selected,seed=0"
    public.parent.mkdir()
    with pytest.raises(ConfigError) as refused:
        sel.release(run, public, RECORD, 1000.0, root)
    line = str(refused.value)
    assert "\n" not in line and str(run / name) in line and "cannot be released" in line, line
    assert not public.exists() and not public.with_name(public.name + ".tmp").exists()
