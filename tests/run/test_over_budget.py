"""A run whose final epsilon exceeds its target is a failed run: status, record and exit code.

The accountant cannot produce such a run by itself (calibration and the cache check prevent it), so
the tests hand the loop too little noise by wrapping `make_plan`."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
import pazo.run.build as experiment
from pazo.train import run


HALVE_SIGMA = textwrap.dedent("""
    import runpy
    import pazo.privacy.plan as plan_module
    real = plan_module.make_plan

    def too_little_noise(*args, **kwargs):
        plan = real(*args, **kwargs)
        plan.sigma *= 0.5
        return plan

    plan_module.make_plan = too_little_noise  # `python -m pazo.train` imports it from here
    runpy.run_module("pazo.train", run_name="__main__", alter_sys=True)
""")


def test_within_budget_run_is_not_over_budget(hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=dpzero"), tmp_path)
    assert s["status"] == "finished" and s["failure"] is None
    assert s["privacy"]["within_budget"] and s["privacy"]["over_budget"] is False


def test_over_budget_run_ends_failed_and_says_so(hydra_cfg, tmp_path, monkeypatch):
    real = experiment.make_plan

    def too_little_noise(*args, **kwargs):
        plan = real(*args, **kwargs)
        plan.sigma *= 0.5
        return plan
    monkeypatch.setattr(experiment, "make_plan", too_little_noise)
    s = run(hydra_cfg("method=dpzero"), tmp_path)
    p = s["privacy"]
    assert s["status"] == "failed" and s["failure"].startswith("over_budget: epsilon spent")
    assert p["over_budget"] is True and not p["within_budget"] and not p["guarantee_holds"]
    assert p["epsilon_spent"] > p["target_epsilon"]
    assert s["final_test_accuracy"] is None  # no result is reported as if the run were valid
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["privacy"]["over_budget"] is True


@pytest.mark.slow   # a run in a subprocess (about 17 s); in the quick suite the same run in-process:
# test_over_budget_run_ends_failed_and_says_so
def test_over_budget_run_exits_1_from_the_command_line(tmp_path):
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", HALVE_SIGMA, "method=dpzero", "train.steps=4", "device=cpu",
                          "logger.mode=disabled", f"hydra.run.dir={tmp_path / 'run'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "FAILED (over_budget: epsilon spent" in out.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["privacy"]["over_budget"] is True
