"""pazo as an installed package: the console scripts run from any directory, the scripts import
pazo without path tricks, `pazo-bench` / `pazo-report` list their commands and refuse an unknown
one, the run's lines reach Hydra's train.log, and W&B stays quiet unless `logger.verbose=true`."""
import os
import re
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pazo.errors import unknown_choice

from conftest import ROOT, run_cache

BIN = Path(sys.executable).parent
TIMESTAMPED = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[pazo\.train\]\[INFO\] - (.*)$")


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # W&B's defaults, as a user has them
    return {**env, "PAZO_CACHE_DIR": str(run_cache(tmp_path / "cache")), "WANDB_DIR": str(tmp_path / "wandb_home"),
            **extra}


def _console_script(name):
    path = BIN / name
    assert path.exists(), f"{path} missing: install pazo with `make setup` (pip install -e .)"
    return str(path)


def _run_dir(cwd):
    dirs = list((cwd / "outputs" / "runs" / "digits" / "pazo_m").iterdir())
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_pazo_train_from_another_directory_logs_to_train_log_and_keeps_wandb_quiet(tmp_path):
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    out = subprocess.run([_console_script("pazo-train"), "train.steps=4", "device=cpu"], cwd=cwd,
                         env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    run_dir = _run_dir(cwd)  # Hydra's run dir is relative to the working directory; configs are not
    stdout = out.stdout.splitlines()
    assert stdout[0].startswith("pazo: pazo_m on digits (small_cnn, d=9930, device cpu, 1 CPU thread)")
    assert "FINISHED" in stdout and stdout[-1] == f"  results: {run_dir}"
    assert not any(TIMESTAMPED.match(line) for line in stdout)  # the terminal gets plain lines
    assert "wandb" not in (out.stdout + out.stderr).lower()  # logger.verbose=false: none of W&B's lines
    assert list(run_dir.glob("wandb/offline-run-*/*.wandb"))  # ... but its offline files are written

    logged = [TIMESTAMPED.match(line) for line in (run_dir / "train.log").read_text().splitlines()]
    assert all(logged), "every train.log line is timestamped"
    assert [m.group(1) for m in logged] == stdout  # the same lines as on the terminal


@pytest.mark.slow   # two audit subprocesses (about 30 s); in the quick suite:
# test_each_hydra_entry_point_resolves_its_own_run_dir[pazo.audit.command-audit] (no hydra.run.dir),
# tests/audit/test_audit.py::test_audit_refuses_bad_settings_before_compute and the in-process audits of
# test_noise_check.py
def test_pazo_audit_from_another_directory_audits_and_refuses_a_bad_override_in_one_line(tmp_path):
    out = subprocess.run([_console_script("pazo-audit"), "method=nope"], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 2 and out.stderr.startswith("pazo: error: ") and len(out.stderr.splitlines()) == 1
    out = subprocess.run([_console_script("pazo-audit"), "method=dpzero", "train.steps=3", "device=cpu",
                          "audit.canaries=10", "logger.mode=disabled", f"hydra.run.dir={tmp_path / 'audit'}"],
                         cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    audit = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert audit["canaries"] == 10 and audit["steps"] == 3 and audit["epsilon_lower_bound"] >= 0


def test_wandb_prints_its_lines_when_asked(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pazo.train", "train.steps=4", "device=cpu", "privacy=none",
                          "logger.verbose=true", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    wandb_lines = [line for line in out.stderr.splitlines() if line.startswith("wandb:")]
    assert any("offline" in line for line in wandb_lines) and any("wandb sync" in line for line in wandb_lines)
    assert "FINISHED" in (tmp_path / "run" / "train.log").read_text()


def test_pazo_sweep_console_script(tmp_path):
    out = subprocess.run([_console_script("pazo-sweep"), "demo", "--dry-run", "--show", "1", "--out", str(tmp_path)],
                         cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sweep demo: 38 runs") and "38 to run" in out.stdout
    bad = subprocess.run([_console_script("pazo-sweep"), "nope"], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.startswith("pazo: error: unknown sweep 'nope'")
    assert bad.stdout == ""


def test_scripts_import_pazo_as_installed(tmp_path):
    """Each script's --help, run as `python scripts/<name>.py` would be, from a directory where only
    the installed package can provide `pazo`."""
    code = ("import runpy, sys\n"
            "for path in sys.argv[1:]:\n"
            "    sys.argv = [path, '--help']\n"
            "    try:\n"
            "        runpy.run_path(path, run_name='__main__')\n"
            "    except SystemExit as stop:\n"
            "        assert stop.code in (0, None), (path, stop.code)\n"
            "    print('ok', path)\n")
    scripts = sorted(str(p) for p in (ROOT / "scripts").glob("*.py"))
    assert len(scripts) >= 5
    out = subprocess.run([sys.executable, "-c", code, *scripts], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [line for line in out.stdout.splitlines() if line.startswith("ok /")] == [f"ok {s}" for s in scripts]


def test_each_console_script_runs_as_python_m_of_its_name(tmp_path):
    """`pazo-<name>` is also `python -m pazo.<name>` (what the docs and a checkout without the console
    scripts use): each one's --help, run as `python -m` runs it, from a directory outside the checkout
    (was: `python -m pazo.privacy`: "'pazo.privacy' is a package and cannot be directly executed")."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    modules = [f"pazo.{name.removeprefix('pazo-')}" for name in sorted(scripts)]
    code = ("import runpy, sys\n"
            "for module in sys.argv[1:]:\n"
            "    sys.argv = [module, '--help']\n"
            "    try:\n"
            "        runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
            "    except SystemExit as stop:\n"
            "        assert stop.code in (0, None), (module, stop.code)\n"
            "    print('ok', module, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code, *modules], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert [line for line in out.stdout.splitlines() if line.startswith("ok pazo.")] == [f"ok {m}" for m in modules]


def _requirement_lines(path):
    lines = [line.split("#")[0].strip() for line in (ROOT / path).read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("-r")]


def test_pyproject_declares_the_pinned_requirements():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements.txt"]}
    assert {"torch==2.14.1", "torchvision==0.29.1"} <= set(_requirement_lines("requirements.txt"))
    extras = project["project"]["optional-dependencies"]
    assert extras["dev"] == _requirement_lines("requirements-dev.txt")
    assert extras["bench"] == _requirement_lines("requirements-bench.txt")
    assert project["project"]["scripts"] == {"pazo-train": "pazo.train:cli", "pazo-sweep": "pazo.sweep.command:cli",
                                             "pazo-audit": "pazo.audit.command:cli",
                                             "pazo-bench": "pazo.bench:main", "pazo-report": "pazo.report:main",
                                             "pazo-privacy": "pazo.privacy.command:cli",
                                             "pazo-eval": "pazo.eval:cli"}
    assert project["tool"]["setuptools"]["package-data"] == {"pazo.report": ["paper_values.csv"]}


@pytest.mark.parametrize("package,names", [
    ("bench", ["methods", "engines", "memory", "calibration", "profile", "release", "step-ops", "defaults", "dimension",
               "threads", "scaling"]),
    ("report", ["tables", "figures", "audit-table", "llm-table", "configs", "run"]),
])
def test_bench_and_report_list_their_commands_and_refuse_an_unknown_one(package, names, tmp_path):
    """`pazo-bench --help` / `pazo-report --help` (here `python -m pazo.bench`, the same function,
    run from a directory other than the repository): each command on a line of its own; an unknown
    name is one `pazo: error:` line and exit 2; a command's own --help is its argparse usage."""
    prog = f"pazo-{package}"
    run = lambda *args: subprocess.run([sys.executable, "-m", f"pazo.{package}", *args], cwd=tmp_path,  # noqa: E731
                                       env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    done = run("--help")
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith(f"usage: {prog} <name> [args]")
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == names
    bad = run("nope", "--help")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == f"pazo: error: {unknown_choice(f'{prog} command', 'nope', names)}\n"
    one = run(names[0], "--help")
    assert one.returncode == 0 and one.stdout.startswith(f"usage: {prog} {names[0]} ")
    assert not list(tmp_path.glob("*.json"))


def test_every_command_runs_its_module_in_process(capsys):
    """Each name of `pazo-bench` / `pazo-report` reaches its module's `cli()` (its --help), which is
    also what `python -m pazo.<package>.<module>` and the launcher in scripts/ run."""
    import importlib

    import pazo.bench
    import pazo.report

    for package in (pazo.bench, pazo.report):
        prog = "pazo-" + package.__name__.split(".")[1]
        for name, (module, summary) in package.COMMANDS.items():
            assert callable(importlib.import_module(module).cli) and summary
            assert package.main([name, "--help"]) == 0
            assert capsys.readouterr().out.startswith(f"usage: {prog} {name} ")
        assert package.main([]) == 2 and capsys.readouterr().err.startswith("pazo: error: ")
    launchers = {p.stem: p.read_text() for p in (ROOT / "scripts").glob("*.py")}
    modules = {m for p in (pazo.bench, pazo.report) for m, _ in p.COMMANDS.values()}
    assert {next(line.split()[1] for line in text.splitlines() if "import cli" in line)
            for text in launchers.values()} == modules
    assert all(len(text.splitlines()) <= 4 for text in launchers.values())


@pytest.mark.parametrize("module,config_name", [("pazo.train", "config"), ("pazo.audit.command", "audit")])
def test_each_hydra_entry_point_resolves_its_own_run_dir(module, config_name):
    """The rule the README's `pazo-audit ...` broke: every Hydra entry point's app (`hydra_main`), in
    an interpreter that imported nothing else of pazo, composes its config with Hydra's own section
    and resolves `hydra.run.dir` without the user giving one (what it loads registers the resolvers
    and schemas the config names). Hydra's `main` is replaced by a composition that prints the
    directory; in a fresh interpreter, since this test process has imported every entry point already."""
    code = f"""
import importlib
import hydra
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

def composing_main(version_base, config_path, config_name):
    def app_of(task):
        def app():
            with initialize_config_dir(config_dir=config_path, version_base=version_base):
                cfg = compose(config_name=config_name, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            print(OmegaConf.to_container(cfg.hydra.run, resolve=True)["dir"])
        return app
    return app_of

hydra.main = composing_main
importlib.import_module({module!r}).hydra_main()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = out.stdout.strip().splitlines()[-1]
    assert run_dir.startswith(f"outputs/{'runs' if config_name == 'config' else 'audits'}/") and "${" not in run_dir
    assert re.search(r"_[0-9a-f]{6}$", run_dir)


def _argparse_commands():
    from pazo.bench import COMMANDS as BENCH
    from pazo.report import COMMANDS as REPORT
    return [("pazo-bench", name, module) for name, (module, _) in BENCH.items()] + \
        [("pazo-report", name, module) for name, (module, _) in REPORT.items()] + \
        [("pazo-sweep", "", "pazo.sweep.command")]


@pytest.mark.parametrize("prog,name,module", _argparse_commands(), ids=lambda x: str(x))
def test_every_argparse_help_says_a_whole_sentence(prog, name, module, capsys):
    """`pazo-bench defaults --help` stopped mid-sentence (its description was the docstring's first
    line): each command's description is its docstring's whole first paragraph, ending as a sentence."""
    import importlib

    mod = importlib.import_module(module)
    saved, sys.argv = sys.argv, [f"{prog} {name}".strip(), "--help"]
    try:
        with pytest.raises(SystemExit) as stop:
            (mod.cli if hasattr(mod, "cli") else mod.main)()
    finally:
        sys.argv = saved
    assert stop.value.code in (0, None)
    text = capsys.readouterr().out
    description = " ".join(text.split("\n\n", 2)[1].split())
    assert description[-1] in ".:)", description
    first_paragraph = " ".join(mod.__doc__.strip().split("\n\n")[0].split())
    assert description == first_paragraph


def test_pazo_train_help_names_every_choice_and_no_internal_entry(tmp_path):
    """`pazo-train --help` says what pazo is, with examples, every method (from the registry) and
    every data set, setting and model (from configs/), one line each, and none of the `*_schema`
    entries or per-setting tuning files Hydra's generated help listed."""
    from pazo import CONFIG_DIR
    from pazo.methods.registry import method_names

    out = subprocess.run([_console_script("pazo-train"), "--help"], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stderr == "" and "examples:" in out.stdout
    lines = out.stdout.splitlines()
    named = {line.split()[0] for line in lines if line.startswith("  ") and not line.startswith("   ")}
    for group in ("dataset", "experiment", "model"):
        assert {p.stem for p in (CONFIG_DIR / group).glob("*.yaml")} <= named, group
    assert set(method_names()) <= named
    tuning = {p.stem for p in (CONFIG_DIR / "tuning").glob("*.yaml")}
    assert not any(name.endswith("_schema") or name in tuning for name in named)
    assert not (tmp_path / "outputs").exists()
    assert all(line.count("(") == line.count(")") for line in lines if line.startswith("  "))
    hydra = subprocess.run([_console_script("pazo-train"), "--hydra-help"], cwd=tmp_path, env=_env(tmp_path),
                           capture_output=True, text=True, timeout=300)
    assert hydra.returncode == 0 and "Hydra" in hydra.stdout
