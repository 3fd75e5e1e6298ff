"""An outside package with a method, a data set and a model, installed with a `pazo.plugins` entry
point, run through every command as docs/guides/add-a-method.md shows: its files are the guide's
(written as `pip install` leaves them: the module beside a `*.dist-info` with its entry points), its
commands the guide's, run from a folder outside the checkout."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib

import pytest
from plugin_package import write_package

from conftest import ROOT

GUIDE = ROOT / "docs" / "guides" / "add-a-method.md"
#: the console scripts, as their `python -m` forms (the venv's scripts need not be on PATH)
MODULES = {"pazo-train": "pazo.train", "pazo-sweep": "pazo.sweep", "pazo-report": "pazo.report",
           "pazo-bench": "pazo.bench", "pazo-audit": "pazo.audit"}


def guide_block(title: str) -> str:
    """The guide's code block titled `title`."""
    found = re.search(rf'^```\w+ title="{re.escape(title)}"\n(.*?)^```', GUIDE.read_text(), re.M | re.S)
    assert found, f"the guide has no block titled {title}"
    return found.group(1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The guide's package installed on a fresh path, and a working folder with its sweep spec."""
    site, work = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("work")
    project = tomllib.loads(guide_block("pyproject.toml"))
    write_package(site, {"my_pazo_plugin": guide_block("my_pazo_plugin.py")},
                  project["project"]["entry-points"]["pazo.plugins"], dist=project["project"]["name"].replace("-", "_"),
                  version=project["project"]["version"])
    (work / "mine.yaml").write_text(guide_block("mine.yaml"))
    env = {k: v for k, v in os.environ.items() if k != "PAZO_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return work, env


def run(command: str, work, env) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", MODULES[words[0].rsplit("/", 1)[-1]], *words[1:]], cwd=work, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@pytest.mark.slow
def test_the_guides_plugin_runs_through_every_command(installed):
    work, env = installed
    commands = guide_block("try it").replace("\\\n", " ").strip().splitlines()
    assert [c.split()[0].rsplit("/", 1)[-1] for c in commands] == list(MODULES)

    train, sweep, tables, bench, audit = (run(c, work, env) for c in commands)
    summary = json.loads(next((work / "outputs" / "runs" / "blobs" / "dpzero_decay").glob("*/summary.json"))
                         .read_text())
    assert summary["status"] == "finished" and summary["privacy"]["within_budget"]
    assert "dpzero_decay on blobs (mlp" in train.stdout + train.stderr

    runs = sorted((work / "outputs" / "sweeps" / "mine").rglob("summary.json"))
    assert len(runs) == 2   # the registered grid: two learning rates
    assert all(json.loads(p.read_text())["status"] == "finished" for p in runs)
    assert "2 of 2 runs finished" in sweep.stdout + sweep.stderr

    table = (work / "tables" / "mine_blobs.md").read_text()
    assert re.search(r"^\| DPZero \(1/sqrt t\) +\| \d", table, re.M), table

    rows = json.loads((work / "bench.json").read_text())["results"]
    ours = [r for r in rows if r["method"] == "dpzero_decay"]
    assert {r["setting"] for r in rows} == {"blobs"}   # the plugin's data set, with its model
    assert all(r["dim"] == 8 * 16 + 16 + 16 * 3 + 3 for r in ours)   # mlp: 8 features -> 16 -> 3 classes
    assert {r["engine"] for r in ours} == {"vectorised", "inplace"}
    assert all(r["forwards"] == 2 and r["public_passes"] == 0 and r["floor_s"] > 0 for r in ours)

    audited = json.loads(next((work / "outputs" / "audits" / "blobs" / "dpzero_decay").rglob("summary.json"))
                         .read_text())
    assert audited["kind"] == "audit" and audited["audit"]["threat"] == "white_box"
    assert audited["audit"]["canaries"] == 20 and "verdict" in audit.stdout + audit.stderr


@pytest.mark.slow
def test_the_guides_plugin_is_chosen_by_name_and_checked_before_compute(installed):
    """Its names are choices (a typo lists them), and its schemas and facts are checked."""
    work, env = installed
    before = set(work.rglob("*.json"))
    for args, line in (
            (["method=dpzero_decai"], r"dpzero_decay"),
            (["dataset=blobs", "model=small_cnn"], "dataset=blobs is feature vectors for model=mlp, not model=small_cnn"
             ),
            (["dataset=blobs", "model=mlp", "dataset.classes=0"], "dataset.classes must be an integer >= 1, got 0"),
            (["dataset=blobs", "model=mlp", "model.hiden=3"], "model.hiden")):
        done = subprocess.run([sys.executable, "-m", "pazo.train", *args, "logger.mode=disabled"], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.startswith("pazo: error: "), done.stderr
        assert len(done.stderr.splitlines()) == 1 and re.search(line, done.stderr), done.stderr
    assert set(work.rglob("*.json")) == before   # refused before anything was written
