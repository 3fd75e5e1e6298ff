"""Sweeps: the paper's grids enumerate the expected runs, every grid entry composes with the real
configs, dry-run prints without training, and a relaunch skips finished runs."""
import json
import math

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import pazo.sweep as sweep
from pazo.errors import ConfigError
from pazo.sweep import enumerate_runs, load_spec, load_yaml, status

# Table 9 by hand: sizes of each method's CIFAR-10 grid
CIFAR10_GRID = {"sgd": 6 * 3, "mezo": 7, "dpsgd": 5 * 4, "dope_sgd": 5 * 3 * 4, "dpmd": 5 * 3 * 4,
                "gep": 7 * 3 * 4, "dpzero": 7, "pazo_m": 3 * 2 * 3, "pazo_p": 5 * 3 * 3 * 3,
                "pazo_p_prime": 5 * 3 * 3 * 3, "pazo_s": 5 * 3 * 2 * 4}


def test_table1_enumerates_the_paper_grid():
    runs = enumerate_runs(load_spec("table1_cifar10"))
    expected = sum(n * (1 if m in ("sgd", "mezo") else 5) for m, n in CIFAR10_GRID.items())
    assert len(runs) == expected == 3220
    assert len({r.run_id for r in runs}) == len(runs)
    sgd = [r for r in runs if r.method == "sgd"]
    assert all(r.epsilon is None and "privacy=none" in r.overrides() for r in sgd)
    pazo_s = [r for r in runs if r.method == "pazo_s"]
    assert {r.epsilon for r in pazo_s} == {0.1, 0.5, 1.0, 2.0, 3.0}
    assert {dict(r.params)["method.perturbation"] for r in pazo_s} == {0.01, 0.001}


def test_table2_has_no_epsilon_3_and_table8_doubles_q():
    assert {r.epsilon for r in enumerate_runs(load_spec("table2_tiny_imagenet"))} == {None, 0.1, 0.5, 1.0, 2.0}
    runs = enumerate_runs(load_spec("table8_q"))
    assert {dict(r.params)["method.q"] for r in runs} == {1, 5}
    grid = load_yaml("imdb", sweep.SWEEPS / "grids", "grid")["methods"]["pazo_p"]
    imdb_p = [r for r in runs if r.setting == "imdb" and r.method == "pazo_p"]
    assert len(imdb_p) == 2 * math.prod(len(v) for v in grid.values())


@pytest.mark.parametrize("setting", ["cifar10", "tiny_imagenet", "imdb", "mnli"])
def test_every_grid_entry_composes(setting, monkeypatch, tmp_path):
    """A typo in a grid key would only surface on the cluster: compose the first and last run of
    every method with the real configs."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path))
    spec = {"name": "t", "settings": [setting], "methods": list(CIFAR10_GRID), "nonprivate": ["sgd", "mezo"],
            "epsilons": [1], "seeds": [0], "extra": {}}
    runs = enumerate_runs(spec)
    with initialize_config_dir(config_dir=str(sweep.ROOT / "configs"), version_base="1.3"):
        for method in CIFAR10_GRID:
            mine = [r for r in runs if r.method == method]
            for run in (mine[0], mine[-1]):
                cfg = compose(config_name="config", overrides=run.overrides())
                assert cfg.method.name == method and cfg.dataset.name == setting
                for key, value in run.params:
                    section, name = key.split(".")
                    assert cfg[section][name] == value


def test_bad_specs_are_refused():
    with pytest.raises(ConfigError, match="unknown sweep"):
        load_spec("table99")
    with pytest.raises(ConfigError, match="no method 'adam'"):
        enumerate_runs({"name": "t", "settings": ["cifar10"], "methods": ["adam"], "nonprivate": [],
                        "epsilons": [1], "seeds": [0], "extra": {}})
    with pytest.raises(ConfigError, match="non-empty list"):
        enumerate_runs({"name": "t", "settings": ["digits"], "methods": ["dpzero"], "nonprivate": [],
                        "epsilons": [1], "seeds": [0], "extra": {"method.q": 5}})


def test_dry_run_prints_and_trains_nothing(tmp_path, capsys):
    assert sweep.main(["demo", "--dry-run", "--show", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "sweep demo: 36 runs" in out and "36 to run" in out
    assert out.count("method=") == 2 and "privacy.epsilon=0.5" in out
    assert not any(tmp_path.iterdir())


def test_relaunch_skips_finished_runs(tmp_path, monkeypatch):
    runs = enumerate_runs(load_spec("demo"))
    sweep_dir = tmp_path / "demo"
    finished, failed, started = (sweep_dir / runs[i].run_id for i in (0, 1, 2))
    for d, state in ((finished, "finished"), (failed, "failed")):
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": state}))
    started.mkdir(parents=True)
    assert [status(d) for d in (finished, failed, started)] == ["finished", "failed", "incomplete"]
    launched = []
    monkeypatch.setattr(sweep, "run_one", lambda cmd, run_dir, threads=None: launched.append(run_dir) or 0)
    assert sweep.main(["demo", "--out", str(tmp_path)]) == 1      # the fake runs leave no summary
    assert len(launched) == len(runs) - 1 and str(finished) not in launched and str(failed) in launched
    launched.clear()
    sweep.main(["demo", "--out", str(tmp_path), "--skip-failed"])
    assert len(launched) == len(runs) - 2


def test_a_real_sequential_sweep_then_relaunch(tmp_path, monkeypatch):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))  # not the shared ~/.cache/pazo
    (tmp_path / "mini.yaml").write_text(  # two runs: the digits grid has two PAZO-M learning rates
        "name: mini\nsettings: [digits]\nmethods: [pazo_m]\nepsilons: [1]\nextra: {train.epochs: [2]}\n")
    args = [str(tmp_path / "mini.yaml"), "--out", str(tmp_path), "train.steps=3", "logger.mode=disabled",
            "device=cpu"]
    assert sweep.main(args) == 0
    runs = enumerate_runs(load_spec(str(tmp_path / "mini.yaml")))
    dirs = [tmp_path / "mini" / r.run_id for r in runs]
    assert len(dirs) == 2 and all(status(d) == "finished" for d in dirs)
    config = OmegaConf.load(dirs[1] / "config.yaml")
    assert config.method.lr == 0.5 and config.privacy.epsilon == 1 and config.method.name == "pazo_m"
    mtime = (dirs[0] / "summary.json").stat().st_mtime_ns
    assert sweep.main(args) == 0
    assert (dirs[0] / "summary.json").stat().st_mtime_ns == mtime


def test_submitit_launcher_runs_the_array(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    (tmp_path / "mini.yaml").write_text(
        "name: mini\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\nextra: {}\n")
    launched = []

    def fake_run(cmd, run_dir, threads=None):
        launched.append((cmd, run_dir))
        (sweep.Path(run_dir) / "summary.json").parent.mkdir(parents=True, exist_ok=True)
        (sweep.Path(run_dir) / "summary.json").write_text('{"status": "finished"}')
        return 0
    monkeypatch.setattr(sweep, "run_one", fake_run)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--out", str(tmp_path), "--launcher", "slurm",
                       "--set", "cluster=debug", "--set", "wait=true"]) == 0
    assert len(launched) == 2 and all("method=dpzero" in cmd for cmd, _ in launched)
    assert sweep.main([str(tmp_path / "mini.yaml"), "--launcher", "slurm", "--set", "launcher=pbs"]) == 2
