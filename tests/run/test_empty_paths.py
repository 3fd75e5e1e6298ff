"""An empty path is one line and exit 2, before anything is read or written, for every path a pazo
command takes (issue #60): `Path("")` is the current folder, so `pazo-sweep demo --out ''` planned
into ./demo/ and `pazo-report run ''` looked for metrics.jsonl in `.`. One rule
(`pazo.files.file_kinds.path_argument`, and `EMPTY_PATH` for Hydra's folders)."""
import signal
import sys

import pytest
import yaml

from pazo import CONFIG_DIR
from pazo.files.file_kinds import EMPTY_PATH
from pazo.run.cli import CONFIG_PATHS


def _bench(*argv):
    from pazo.bench import main
    return main(list(argv))


def _report(*argv):
    from pazo.report import main
    return main(list(argv))


def _sweep(*argv):
    from pazo.sweep.command import main
    return main(list(argv))


def _entry(module: str, prog: str):
    def run(*argv):
        import importlib

        saved = sys.argv
        sys.argv = [prog, *argv]
        try:
            return importlib.import_module(module).cli()
        finally:
            sys.argv = saved
    return run


_train, _audit, _eval = (_entry("pazo.train", "pazo-train"), _entry("pazo.audit.command", "pazo-audit"),
                         _entry("pazo.eval", "pazo-eval"))

#: every path argument of every command, given empty (the rest of each command line is valid)
EMPTY = {
    "pazo-sweep SPEC": (_sweep, "", "--dry-run"),
    "pazo-sweep --out": (_sweep, "demo", "--out", "", "--dry-run"),
    "pazo-report tables SWEEP": (_report, "tables", ""),
    "pazo-report tables --out": (_report, "tables", "outputs/sweeps/demo", "--out", ""),
    "pazo-report figures SWEEP": (_report, "figures", ""),
    "pazo-report figures --out": (_report, "figures", "outputs/sweeps/demo", "--out", ""),
    "pazo-report llm-table SWEEP": (_report, "llm-table", ""),
    "pazo-report llm-table --out": (_report, "llm-table", "outputs/sweeps/demo", "--out", ""),
    "pazo-report audit-table DIR": (_report, "audit-table", ""),
    "pazo-report audit-table --out": (_report, "audit-table", "outputs/audits", "--out", ""),
    "pazo-report run RUN": (_report, "run", ""),
    "pazo-report run --out": (_report, "run", "outputs/runs/x", "--out", ""),
    **{f"pazo-bench {name} --out": (_bench, name, "--out", "")
       for name in ["methods", "engines", "memory", "calibration", "profile", "release", "step-ops", "defaults",
                    "dimension", "threads", "scaling"]},
    "pazo-bench defaults --runs": (_bench, "defaults", "--runs", ""),
    "pazo-bench defaults --check": (_bench, "defaults", "--check", ""),
    "pazo-eval --export-hf": (_eval, "outputs/runs/x", "--export-hf", ""),
    "pazo-train hydra.run.dir": (_train, "method=dpzero", "hydra.run.dir="),
    "pazo-train -m hydra.sweep.dir": (_train, "-m", "method=dpzero", "seed=0,1", "hydra.sweep.dir="),
    "pazo-audit hydra.run.dir": (_audit, "method=dpzero", "hydra.run.dir="),
    "pazo-audit -m hydra.sweep.dir": (_audit, "-m", "method=dpzero", "seed=0,1", "hydra.sweep.dir=''"),
    "pazo-train dataset.root": (_train, "dataset=cifar10", "dataset.root="),
    "pazo-train dataset.public_folder": (_train, "dataset=cifar10", "dataset.public_folder=''"),
    "pazo-train dataset.tokenizer": (_train, "dataset=sst2", "model=hf_causal_lm", "dataset.tokenizer="),
    "pazo-train model.path": (_train, "dataset=sst2", "model=hf_causal_lm", "model.path="),
    "pazo-audit dataset.root": (_audit, "method=dpzero", "dataset=cifar10", "dataset.root="),
}


@pytest.mark.parametrize("argument", list(EMPTY))
def test_an_empty_path_is_one_line_and_exit_2_before_anything(argument, tmp_path, monkeypatch, capsys):
    """Was: planned, wrote or read in the current folder (rc 0, or a line about `.`)."""
    monkeypatch.chdir(tmp_path)   # (where an empty path would have written)
    run, *argv = EMPTY[argument]
    saved_int = signal.getsignal(signal.SIGINT)
    try:
        code = run(*argv)
    except SystemExit as stop:
        code = stop.code
    finally:
        signal.signal(signal.SIGINT, saved_int)
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(said) == 1 and EMPTY_PATH in said[0] and said[0].startswith("pazo: error: "), said
    assert not any(tmp_path.iterdir())


#: the names a config key that holds a folder or file to read goes by (a cache_dir given empty is no
#: cache, as null)
PATH_NAMES = {"root", "public_folder", "tokenizer", "path"}


def test_every_path_key_of_the_configs_is_checked_for_emptiness():
    """A new data set's or model's path key would escape the check unless CONFIG_PATHS names it."""
    found = set()
    for group in ("dataset", "model", "privacy"):
        for file in (CONFIG_DIR / group).glob("*.yaml"):
            found |= {f"{group}.{key}" for key in (yaml.safe_load(file.read_text()) or {}) if key in PATH_NAMES}
    assert found == set(CONFIG_PATHS)
