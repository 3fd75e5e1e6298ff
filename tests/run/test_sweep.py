"""Sweeps: the paper's grids enumerate the expected runs, every run of every spec passes the
pre-launch check (composed with the real configs and validated), a user's mistake is one error line
that launches nothing, dry-run prints without training, and a relaunch skips finished runs."""
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import run_cache
from omegaconf import OmegaConf

import pazo.sweep.command as sweep
import pazo.sweep.launchers as launchers
from pazo.errors import ConfigError
from pazo.methods import METHODS
from pazo.sweep.checks import check, composed_configs, missing_data, status
from pazo.sweep.spec import SWEEPS, enumerate_runs, load_grid, load_spec, load_yaml

# Table 9 by hand: sizes of each method's CIFAR-10 grid
CIFAR10_GRID = {"sgd": 6 * 3, "mezo": 7, "public_only": 6, "dpsgd": 5 * 4, "dope_sgd": 5 * 3 * 4, "dpmd": 5 * 3 * 4,
                "gep": 7 * 3 * 4, "dpzero": 7, "pazo_m": 3 * 2 * 3, "pazo_p": 5 * 3 * 3 * 3,
                "pazo_p_prime": 5 * 3 * 3 * 3, "pazo_s": 5 * 3 * 2 * 4}
NONPRIVATE = ("sgd", "mezo", "public_only")
SPECS = sorted(p.stem for p in SWEEPS.glob("*.yaml"))


def mini_spec(tmp_path, methods="[dpzero]", extra="{}"):
    """A two-run sweep on the embedded digits data (its grid has two learning rates a method)."""
    path = tmp_path / "mini.yaml"
    path.write_text(f"name: mini\nsettings: [digits]\nmethods: {methods}\nepsilons: [1]\nextra: {extra}\n")
    return str(path)


def test_table1_enumerates_the_paper_grid():
    runs = enumerate_runs(load_spec("table1_cifar10"))
    expected = sum(n * (1 if m in NONPRIVATE else 5) for m, n in CIFAR10_GRID.items())
    assert len(runs) == expected == 3226
    assert len({r.run_id for r in runs}) == len(runs)
    for method in NONPRIVATE:
        assert all(r.epsilon is None and "privacy=none" in r.overrides() for r in runs if r.method == method)
    public_only = [dict(r.params) for r in runs if r.method == "public_only"]
    assert [p["method.lr"] for p in public_only] == [p["method.lr"] for p in [dict(r.params) for r in runs
                                                     if r.method == "sgd"] if p["train.batch_size"] == 8]
    pazo_s = [r for r in runs if r.method == "pazo_s"]
    assert {r.epsilon for r in pazo_s} == {0.1, 0.5, 1.0, 2.0, 3.0}
    assert {dict(r.params)["method.perturbation"] for r in pazo_s} == {0.01, 0.001}


def test_table2_has_no_epsilon_3_and_table8_doubles_q():
    assert {r.epsilon for r in enumerate_runs(load_spec("table2_tiny_imagenet"))} == {None, 0.1, 0.5, 1.0, 2.0}
    runs = enumerate_runs(load_spec("table8_q"))
    assert {dict(r.params)["method.q"] for r in runs} == {1, 5}
    grid = load_yaml("imdb", SWEEPS / "grids", "grid")["methods"]["pazo_p"]
    imdb_p = [r for r in runs if r.setting == "imdb" and r.method == "pazo_p"]
    assert len(imdb_p) == 2 * math.prod(len(v) for v in grid.values())


@pytest.mark.parametrize("name", ["table1_cifar10", "table2_tiny_imagenet", "table3_imdb", "table4_mnli"])
def test_seeds_variants_extend_the_single_seed_sweeps(name):
    """Same sweep name and grid, seeds 0-2: the seed-0 runs are the single-seed sweep's runs."""
    one, three = load_spec(name), load_spec(f"{name}_seeds")
    assert three["name"] == one["name"] and three["seeds"] == [0, 1, 2]
    assert {k: v for k, v in three.items() if k != "seeds"} == {k: v for k, v in one.items() if k != "seeds"}
    single, seeded = enumerate_runs(one), enumerate_runs(three)
    assert len(seeded) == 3 * len(single)
    assert {r.run_id for r in seeded if r.seed == 0} == {r.run_id for r in single}
    assert "public_only" in one["methods"] and "public_only" in one["nonprivate"]


@pytest.mark.parametrize("name", [s for s in SPECS if not s.endswith("_seeds")])
def test_every_spec_passes_the_prelaunch_check(name, monkeypatch, tmp_path):
    """A typo in a grid key or value would only surface on the cluster: every run of every spec is
    composed (once per setting and method) and validated with the real configs. (The _seeds specs
    differ from these only in their seeds, checked above.)"""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path))
    spec = load_spec(name)
    runs = enumerate_runs(spec)
    assert check(runs, [], spec["entry"]) == len({(r.setting, r.method) for r in runs})


def test_bad_specs_are_refused():
    with pytest.raises(ConfigError, match="unknown sweep"):
        load_spec("table99")
    with pytest.raises(ConfigError, match="no method 'adam'"):
        enumerate_runs({"name": "t", "settings": ["cifar10"], "methods": ["adam"], "nonprivate": [],
                        "epsilons": [1], "seeds": [0], "extra": {}})
    with pytest.raises(ConfigError, match="non-empty list"):
        enumerate_runs({"name": "t", "settings": ["digits"], "methods": ["dpzero"], "nonprivate": [],
                        "epsilons": [1], "seeds": [0], "extra": {"method.q": 5}})


def test_an_audit_spec_runs_the_audit_at_each_method_defaults(tmp_path):
    """entry: audit makes each run a `python -m pazo.audit` composed from the audit config; grid:
    false leaves every method at its defaults (only the spec's own axes)."""
    spec = load_spec("audit_breaks")
    runs = enumerate_runs(spec)
    assert spec["entry"] == "audit" and len(runs) == 6 * 3
    assert all(dict(r.params).keys() == {"train.epochs", "audit.threat", "audit.debug_break"} for r in runs)
    cmd = launchers.command(runs[0], tmp_path / "r", [], spec["entry"])
    assert cmd[1:3] == ["-m", "pazo.audit"] and "dataset=digits" in cmd and "audit.threat=white_box" in cmd
    with pytest.raises(ConfigError, match="unknown entry 'bench'"):
        path = tmp_path / "bad.yaml"
        path.write_text("name: bad\nentry: bench\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\n")
        load_spec(str(path))


def test_a_setting_whose_data_are_missing_is_left_out_with_the_loaders_line(tmp_path, capsys):
    """skip_missing_data: true (the image-set audit table): with FashionMNIST's idx files under
    dataset.root and MNIST's absent, MNIST's runs are left out, named with what is missing and how
    to get it, and FashionMNIST's are planned; without the key a missing set is not probed."""
    from fixtures import write_mnist_raw
    write_mnist_raw(tmp_path / "data", "FashionMNIST", n_train=60, n_test=20)
    spec = load_spec("audit_table_images")
    assert spec["skip_missing_data"] and spec["settings"] == ["mnist", "fashion_mnist"]
    root = f"dataset.root={tmp_path / 'data'}"
    missing = missing_data(enumerate_runs(spec), [root], spec["entry"])
    assert list(missing) == ["mnist"] and missing["mnist"].startswith("MNIST is missing: train-images-idx3-ubyte")
    assert sweep.main(["audit_table_images", "--dry-run", "--out", str(tmp_path / "out"), root]) == 0
    out = capsys.readouterr().out
    assert "setting mnist skipped, its data are missing: MNIST is missing" in out and "dataset.download=true" in out
    assert "sweep audit_table_images: 24 runs" in out and "dataset=fashion_mnist" in out
    assert "dataset=mnist " not in out and not (tmp_path / "out").exists()
    assert not load_spec("audit_table")["skip_missing_data"]


@pytest.mark.parametrize("present", [(), ("MNIST",), ("FashionMNIST",), ("MNIST", "FashionMNIST")])
def test_a_sweep_runs_the_settings_whose_data_are_there_and_refuses_when_none_are(tmp_path, capsys, present):
    """skip_missing_data: whichever sets are under dataset.root, exactly the others are left out; a
    sweep left with no setting has nothing to do and says so in one `pazo: error:` line (exit 2),
    writing nothing, instead of ending as a sweep that succeeded."""
    from fixtures import write_mnist_raw
    for name in present:
        write_mnist_raw(tmp_path / "data", name, n_train=60, n_test=20)
    out_dir = tmp_path / "out"
    code = sweep.main(["audit_table_images", "--dry-run", "--out", str(out_dir), f"dataset.root={tmp_path / 'data'}"])
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if line.startswith("pazo: error:")]
    setting = {"MNIST": "mnist", "FashionMNIST": "fashion_mnist"}
    for folder, name in setting.items():
        assert (f"setting {name} skipped" in out) == (folder not in present)
    if present:
        assert code == 0 and not errors and f"sweep audit_table_images: {24 * len(present)} runs" in out
    else:
        assert code == 2 and len(errors) == 1 and "nothing to run" in errors[0] and "Traceback" not in err
    assert not out_dir.exists()


def test_dry_run_prints_and_trains_nothing(tmp_path, capsys):
    assert sweep.main(["demo", "--dry-run", "--show", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sweep demo: 38 runs" in out and "38 to run" in out and "every config valid" in out
    assert out.count("method=") == 2 and "method=public_only" in out and "privacy=none" in out
    assert not any(tmp_path.iterdir())


def test_dry_run_prints_under_python_m(tmp_path):
    """`python -m pazo.sweep` runs the module as __main__: its lines must still reach the terminal."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "pazo.sweep", "demo", "--dry-run", "--show", "1", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "sweep demo: 38 runs" in done.stdout and done.stdout.count("method=") == 1


@pytest.mark.parametrize("args, says", [
    (["method.lrr=0.1"], "unknown key 'method.lrr' in override 'method.lrr=0.1' (method has clip,"),
    (["foo=1"], "unknown key 'foo' in override 'foo=1' (the top level has dataset,"),
    (["model=resnet"], "unknown model=resnet; did you mean model=nf_resnet18? (choices: hf_causal_lm, hf_masked_lm, "
                       "lstm, nf_resnet18,"),
    (["train.batch_size=0"], "train.batch_size must be an integer >= 1, got 0 (4 of 4 runs, e.g. digits/dpzero"),
    (["method.lr=[1"], "'method.lr=[1' cannot be read as an override ("),
    (["--methods", "pazo_m,adam"],
     "sweep mini, --methods 'pazo_m,adam': unknown method 'adam' (choices: dpzero, pazo_m)"),
    (["--methods", "pazom"], "unknown method 'pazom'; did you mean 'pazo_m'? (choices: dpzero, pazo_m)"),
    (["--methods", ","], "--methods ',' selects no method; sweep mini has dpzero, pazo_m"),
])
def test_a_mistake_is_one_error_line_and_launches_nothing(args, says, tmp_path, monkeypatch, capsys):
    launched = []
    monkeypatch.setattr(launchers, "run_one", lambda cmd, run_dir, threads=None: launched.append(run_dir) or 0)
    out = tmp_path / "out"
    assert sweep.main([mini_spec(tmp_path, "[dpzero, pazo_m]"), "--out", str(out), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("pazo: error: ") and says in captured.err, captured.err
    assert launched == [] and not out.exists()


def test_bad_grid_values_and_unknown_specs_are_one_line(tmp_path, capsys):
    """Each run's values are validated, not only the first composed one; a bad spec name lists the
    specs."""
    assert sweep.main([mini_spec(tmp_path, extra="{method.clip: [1.0, -1.0]}"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pazo: error: method.clip must be a positive number, got -1.0 (2 of 4 runs, e.g. "
                          "digits/dpzero/eps=1/lr=0.02,clip=-1,rep=0)") and err.count("\n") == 1
    assert sweep.main([mini_spec(tmp_path, extra="{method.lrr: [1.0]}"), "--dry-run"]) == 2
    assert "unknown key 'method.lrr' in override 'method.lrr=1' (method has " in capsys.readouterr().err
    assert sweep.main(["table99", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pazo: error: unknown sweep 'table99'")
    assert ("choices: audit_breaks, audit_seeds, audit_table, audit_table_images, demo, demo_private_selection, "
            "dp_aggzo_paper, "
            "dpzero_opt_sst2, dpzo_squad, table1_cifar10,") in err


def test_relaunch_skips_finished_runs(tmp_path, monkeypatch):
    spec = mini_spec(tmp_path, "[dpzero, pazo_m]")
    runs = enumerate_runs(load_spec(spec))
    sweep_dir = tmp_path / "mini"
    finished, failed, started = (sweep_dir / runs[i].run_id for i in (0, 1, 2))
    for d, state in ((finished, "finished"), (failed, "failed")):
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": state}))
    started.mkdir(parents=True)
    assert [status(d) for d in (finished, failed, started)] == ["finished", "failed", "incomplete"]
    launched = []
    monkeypatch.setattr(launchers, "run_one", lambda cmd, run_dir, threads=None: launched.append(run_dir) or 0)
    assert sweep.main([spec, "--out", str(tmp_path)]) == 1      # the fake runs leave no summary
    assert len(launched) == len(runs) - 1 and str(finished) not in launched and str(failed) in launched
    launched.clear()
    sweep.main([spec, "--out", str(tmp_path), "--skip-failed"])
    assert len(launched) == len(runs) - 2
    launched.clear()
    assert sweep.main([spec, "--out", str(tmp_path), "--methods", "pazo_m"]) == 1
    assert launched and all("/pazo_m/" in d for d in launched)


def test_a_real_sequential_sweep_then_relaunch(tmp_path, monkeypatch):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))  # not the shared ~/.cache/pazo
    args = [mini_spec(tmp_path, "[pazo_m]", "{train.epochs: [2]}"), "--out", str(tmp_path), "train.steps=3",
            "logger.mode=disabled", "device=cpu"]
    assert sweep.main(args) == 0
    runs = enumerate_runs(load_spec(str(tmp_path / "mini.yaml")))
    dirs = [tmp_path / "mini" / r.run_id for r in runs]
    assert len(dirs) == 2 and all(status(d) == "finished" for d in dirs)
    config = OmegaConf.load(dirs[1] / "config.yaml")
    assert config.method.lr == 0.5 and config.privacy.epsilon == 1 and config.method.name == "pazo_m"
    mtime = (dirs[0] / "summary.json").stat().st_mtime_ns
    assert sweep.main(args) == 0
    assert (dirs[0] / "summary.json").stat().st_mtime_ns == mtime
    # a run that crashed after releasing rows: the same sweep command replays it in its own directory
    summary = json.loads((dirs[1] / "summary.json").read_text())
    (dirs[1] / "summary.json").write_text(json.dumps({**summary, "status": "failed", "final_test_accuracy": None}))
    def rows():
        lines = (dirs[1] / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(line).items() if k != "s_per_iter"} for line in lines]
    before = rows()
    assert sweep.main(args) == 0
    again = json.loads((dirs[1] / "summary.json").read_text())
    assert again["status"] == "finished" and again["earlier_attempt_moved_to"].endswith("attempts/1")
    assert rows() == before   # the same noise: the same rows, counted once
    # the same sweep with another extra override: refused, not reported as finished
    assert sweep.main([a.replace("train.steps=3", "train.steps=4") for a in args]) == 2
    assert json.loads((dirs[1] / "summary.json").read_text()) == again


def test_submitit_launcher_runs_the_array(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    mini_spec(tmp_path)
    launched = []

    def fake_run(cmd, run_dir, threads=None):
        launched.append((cmd, run_dir))
        (Path(run_dir) / "summary.json").parent.mkdir(parents=True, exist_ok=True)
        (Path(run_dir) / "summary.json").write_text('{"status": "finished"}')
        return 0
    monkeypatch.setattr(launchers, "run_one", fake_run)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--out", str(tmp_path), "--launcher", "slurm",
                       "--set", "cluster=debug", "--set", "wait=true"]) == 0
    assert len(launched) == 2 and all("method=dpzero" in cmd for cmd, _ in launched)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--launcher", "slurm", "--set", "launcher=pbs"]) == 2


def test_a_slurm_job_requeues_itself_with_the_same_command(tmp_path):
    """submitit calls checkpoint() on preemption or time-out: the same run is resubmitted, and it
    resumes from the run directory's checkpoint."""
    from pazo.sweep.launchers import TrainJob

    cmd, run_dir = ["python", "-m", "pazo.train", "method=dpzero"], str(tmp_path / "r")
    again = TrainJob().checkpoint(cmd, run_dir)
    assert isinstance(again.function, TrainJob) and again.args == (cmd, run_dir)


@settings(max_examples=20, deadline=None)
@given(methods=st.lists(st.sampled_from(METHODS.names()), min_size=1, max_size=4, unique=True),
       grid_file=st.booleans(), epsilons=st.integers(1, 3), seeds=st.integers(1, 2),
       sweeps=st.dictionaries(st.sampled_from(["method.lr", "train.batch_size"]),
                              st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True), max_size=2))
def test_a_method_a_grid_does_not_name_runs_its_registered_grid(methods, grid_file, epsilons, seeds, sweeps):
    """A method missing from the setting's grid file, or every method on a registered data set with no
    grid file (torchvision has none), runs the grid its registration declares (`sweeps`), at each
    epsilon and seed; a method the grid file names runs that grid instead."""
    import dataclasses

    from pazo.methods import method_info

    setting = "digits" if grid_file else "torchvision"
    named = load_grid("digits")["methods"] if grid_file else {}
    pairs = tuple((key, tuple(values)) for key, values in sweeps.items())
    infos = {m: dataclasses.replace(method_info(m), sweeps=pairs) for m in methods}
    with pytest.MonkeyPatch.context() as patch:
        for m, info in infos.items():
            patch.setitem(METHODS._items, m, info)
        runs = enumerate_runs({"name": "t", "settings": [setting], "methods": methods, "nonprivate": [],
                               "epsilons": list(range(1, epsilons + 1)), "seeds": list(range(seeds)), "extra": {}})
    for m in methods:
        axes = named.get(m, sweeps)
        mine = [r for r in runs if r.method == m]
        assert len(mine) == math.prod(len(v) for v in axes.values()) * epsilons * seeds
        assert {tuple(k for k, _ in r.params) for r in mine} == {tuple(axes)}
        assert all(r.experiment is None and r.setting == setting for r in mine)


#: extra overrides a relaunch may add: key -> (values, whether the key decides a run's result);
#: the first value is the one the finished runs had
RELAUNCH_KEYS = {"train.steps": (["5", "6"], True), "train.batch_size": (["64", "32"], True),
                 "method.clip": (["1.0", "2.0"], True),
                 "logger.mode": (["disabled", "offline"], False), "train.threads": (["1", "2"], False),
                 "train.progress_seconds": (["60", "5"], False), "device": (["cpu", "cpu"], False)}


def _finished_sweep(tmp_path, extra: list[str]) -> str:
    """A mini sweep whose every run finished with the config `extra` composes (as its runs record it)."""
    spec = mini_spec(tmp_path, "[dpzero]")
    runs = enumerate_runs(load_spec(spec))
    for run, cfg in zip(runs, composed_configs(runs, extra)):
        run_dir = tmp_path / "mini" / run.run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(json.loads(json.dumps(cfg)))))
        (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "final_test_accuracy": 0.5}))
    return spec


@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(changes=st.dictionaries(st.sampled_from(sorted(RELAUNCH_KEYS)), st.integers(0, 1), max_size=3))
def test_a_relaunch_with_other_overrides_never_reuses_finished_runs(changes, tmp_path_factory, capsys):
    """A finished run is skipped only if the relaunch composes its config (or differs only in where
    and how keys: logging, threads, device); any other changed, added or removed override refuses
    the whole sweep with one line before anything runs, and the finished files stay as they were."""
    tmp_path = tmp_path_factory.mktemp("relaunch")
    base = [f"{k}={v[0]}" for k, (v, _) in RELAUNCH_KEYS.items()]
    spec = _finished_sweep(tmp_path, base)
    chosen = {k: RELAUNCH_KEYS[k][0][i] for k, i in changes.items()}
    extra = [f"{k}={chosen.get(k, v[0])}" for k, (v, _) in RELAUNCH_KEYS.items()]
    before = sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "mini").rglob("*"))
    capsys.readouterr()
    code = sweep.main([spec, "--out", str(tmp_path), "--dry-run", *extra])
    err = capsys.readouterr().err
    differs = any(RELAUNCH_KEYS[k][1] and i != 0 for k, i in changes.items())
    assert code == (2 if differs else 0), err
    if differs:
        assert err.count("pazo: error:") == 1 and "were run with another config" in err
    assert sorted((p, p.stat().st_mtime_ns) for p in (tmp_path / "mini").rglob("*")) == before
