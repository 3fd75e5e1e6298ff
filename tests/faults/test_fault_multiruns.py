"""Multiruns (`pazo-train -m ...`), round two: every job's composed config is checked before the
first starts (one `pazo: error:` line naming the job, exit 2, nothing run or written); a signal in
one job stops the multirun, which says what finished and what did not, and the same command
continues it; a job that does not finish makes the multirun's exit non-zero."""
from __future__ import annotations

import json
import os
import signal

import pytest
from fault_runtime_helpers import TINY, one_error_line, run_cli
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import pazo.run.build
import pazo.run.launch
import pazo.train
from pazo.run.cli import multirun_jobs
from pazo.errors import DataMissingError
from pazo.methods.two_point import TwoPointMethod

BAD = {"method": ["sgd2", "dp_agzo"], "privacy.epsilon": ["0", "-1", "abc", "1000"], "train.steps": ["0", "x"],
       "seed": ["-1", "1.5"]}
GOOD = {"method": ["dpzero", "dp_aggzo", "dp_zo"], "privacy.epsilon": ["0.5", "1", "2"], "train.steps": ["1", "2", "3"],
        "seed": ["0", "1", "2"]}


@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])   # (no shrinking: each example composes configs)
@given(data=st.data(), key=st.sampled_from(sorted(BAD)))
def test_a_bad_value_among_good_ones_stops_the_multirun_before_any_job(data, key, tmp_path, capsys, monkeypatch):
    values = data.draw(st.lists(st.sampled_from(GOOD[key]), min_size=1, max_size=3, unique=True))
    at = data.draw(st.integers(0, len(values)))
    bad = data.draw(st.sampled_from(BAD[key]))
    values.insert(at, bad)
    monkeypatch.setattr(pazo.train, "run", lambda *a, **k: pytest.fail("a job was started"))
    other = [a for a in [*TINY, "train.steps=2"] if a.split("=")[0] != key and not a.startswith("method=")]
    method = [] if key == "method" else ["method=dpzero"]
    sweep_dir = tmp_path / "sweep"
    code, _, err = run_cli(["-m", *method, *other, f"{key}={','.join(values)}", f"hydra.sweep.dir={sweep_dir}"],
                           capsys)
    assert code == 2
    line = one_error_line(err)
    label = f"job={at}" if key == "seed" else f"{key}={bad}"   # (the seed is named by the job's number)
    assert f"job {at + 1} of {len(values)} ({label})" in line and "no job was started" in line, line
    assert not sweep_dir.exists()


def test_the_jobs_are_expanded_as_hydras_sweeper_numbers_them():
    jobs = multirun_jobs(["-m", "method=dpzero,mezo", "seed=range(0,2)", "train.steps=3"])
    assert [(j.num, j.label) for j in jobs] == [(0, "method=dpzero job=0"), (1, "method=dpzero job=1"),
                                                (2, "method=mezo job=2"), (3, "method=mezo job=3")]
    assert all("train.steps=3" in j.overrides for j in jobs)
    assert multirun_jobs(["-m", "seed=1,2"])[1].label == "job=1"
    assert multirun_jobs(["method=dpzero"]) is None and multirun_jobs(["-m", "--cfg", "job"]) is None


def _sigterm_in_call(monkeypatch, n: int) -> list:
    """SIGTERM (a scheduler's preemption) during the `n`-th step of the process, whichever job runs it."""
    original, calls = TwoPointMethod.step, []

    def step(self, x, y, t):
        out = original(self, x, y, t)
        calls.append(t)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(TwoPointMethod, "step", step)
    return calls


def test_a_signal_in_one_job_stops_the_multirun_and_a_relaunch_continues_it(tmp_path, capsys, monkeypatch):
    sweep_dir = tmp_path / "sweep"
    argv = ["-m", *TINY, "method.lr=0.01,0.02,0.03", "train.checkpoint_every=2", f"hydra.sweep.dir={sweep_dir}"]
    jobs = {i: sweep_dir / f"method.lr={lr},method=dpzero,train.checkpoint_every=2,train.log_every=2,train.steps=4"
            for i, lr in enumerate(("0.01", "0.02", "0.03"))}
    with monkeypatch.context() as m:
        _sigterm_in_call(m, 6)   # step 2 of the second job
        code, out, err = run_cli(argv, capsys)
    assert code == pazo.train.EXIT_CODES["preempted"], err
    report = [line for line in (out + err).splitlines() if line.startswith("pazo: multirun stopped")]
    assert len(report) == 1 and "Traceback" not in err, out + err
    assert "1 of 3 jobs finished (method.lr=0.01)" in report[0] and "method.lr=0.02 (preempted)" in report[0]
    assert "not started: method.lr=0.03" in report[0] and "the same command continues it" in report[0]
    assert json.loads((jobs[0] / "summary.json").read_text())["status"] == "finished"
    assert json.loads((jobs[1] / "summary.json").read_text())["status"] == "preempted"
    assert not jobs[2].exists()

    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    summaries = {i: json.loads((d / "summary.json").read_text()) for i, d in jobs.items()}
    assert all(s["status"] == "finished" for s in summaries.values())
    assert summaries[1]["resumed_from_step"] == 2 and summaries[0]["attempt"] == 1


def test_a_job_refused_at_its_start_makes_the_multirun_fail_and_says_which(tmp_path, capsys, monkeypatch):
    original = pazo.run.launch.build_run

    def build_run(cfg, **kwargs):
        if cfg.seed == 1:
            raise DataMissingError("digits data are not where we looked (a test)")
        return original(cfg, **kwargs)

    monkeypatch.setattr(pazo.run.launch, "build_run", build_run)
    code, out, err = run_cli(["-m", *TINY, "train.steps=1", "seed=0,1,2", f"hydra.sweep.dir={tmp_path / 's'}"],
                             capsys)
    assert code == 1, err
    lines = (out + err).splitlines()
    assert sum(line.startswith("pazo: error:") for line in lines) == 1
    ended = [line for line in lines if line.startswith("pazo: multirun ended")]
    assert len(ended) == 1 and "2 of 3 jobs finished (job=0, job=2)" in ended[0] and "job=1 (refused)" in ended[0]
    assert "seed=" not in ended[0]   # the seed goes to config.yaml only


def test_a_multirun_prints_the_header_its_jobs_share_once_and_a_line_per_job(tmp_path, capsys):
    """The terminal: the first job's header whole, then one line per later job naming the lines of
    its header that differ (here its privacy line); each job's train.log: its whole header (was: the
    four header lines again for every job)."""
    sweep_dir = tmp_path / "sweep"
    code, out, err = run_cli(["-m", *TINY, "train.steps=1", "privacy.epsilon=1,2", f"hydra.sweep.dir={sweep_dir}"],
                             capsys)
    assert code == 0, err
    said = (out + err).splitlines()
    assert sum(line.startswith("assumes: ") for line in said) == 1
    assert sum(line.startswith("privacy: ") for line in said) == 1
    [second] = [line for line in said if line.startswith("job 2 of 2 (privacy.epsilon=2): ")]
    assert "privacy: (epsilon, delta)-DP, target epsilon=2.0" in second and "the rest as job 1's" in second
    for log in sorted(sweep_dir.glob("*/train.log")):
        text = log.read_text()
        assert text.count("] - privacy: ") == 1 and text.count("] - assumes: ") == 1 and "job 2 of 2" not in text
