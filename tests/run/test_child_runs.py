"""A Ctrl-C during a sweep's runs (pazo.sweep.child_runs): each run in progress gets it once and stops as it
would alone (its checkpoint and summary written), no other run starts, and the sweep ends in one
line, exit 130, no traceback; the same command then resumes it. Fast tests with stand-in runs (a
real SIGINT to this process while `launch` runs them), slow ones with a real `pazo-sweep` subprocess
on tiny digits runs, for the ordinary grid and a private selection, with either local launcher."""
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pazo.sweep.command as sweep
from pazo.sweep.spec import PlannedRun
from pazo.sweep import launchers
from pazo.sweep.child_runs import EXIT_INTERRUPTED, Interrupted
from pazo.commands.interrupts import Terminated

#: a stand-in run: records that it started, then waits (a minute at most) for Ctrl-C, which it counts
#: and answers as pazo.train does (a summary saying interrupted, exit 130)
STAND_IN = """
import json, signal, sys, time
from pathlib import Path
run_dir = Path(sys.argv[1])
seen = []
signal.signal(signal.SIGINT, lambda *a: seen.append(1))
(run_dir / "started").write_text("")
deadline = time.monotonic() + 60
while not seen and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.3)   # (a second Ctrl-C passed on now would be counted too)
status = "interrupted" if seen else "finished"
(run_dir / "summary.json").write_text(json.dumps({"status": status, "ctrl_c": len(seen)}))
sys.exit(130 if seen else 0)
"""


def stand_in_runs(tmp_path: Path, n: int) -> list:
    runs = []
    for i in range(n):
        run = PlannedRun("mini", "digits", None, "dpsgd", 1.0, 0, (("method.lr", 0.1 * (i + 1)),))
        run_dir = tmp_path / f"run{i}"
        runs.append((run, run_dir, [sys.executable, "-c", STAND_IN, str(run_dir)]))
    return runs


def ctrl_c_once_started(run_dirs: list[Path], started: int, signum: int = signal.SIGINT) -> threading.Thread:
    """Send this process SIGINT (as a terminal's Ctrl-C reaches the sweep), or `signum`, once `started`
    runs have started: the launcher's handler is in place by then."""
    def wait_and_send():
        deadline = time.monotonic() + 120
        while sum((d / "started").exists() for d in run_dirs) < started and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signum)
    thread = threading.Thread(target=wait_and_send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("launcher, quiet", [({"launcher": "sequential"}, False),
                                             ({"launcher": "joblib", "jobs": 2}, False),
                                             ({"launcher": "joblib", "jobs": 2}, True)])
def test_a_ctrl_c_stops_the_runs_in_progress_once_and_starts_no_other(tmp_path, caplog, launcher, quiet):
    caplog.set_level(logging.INFO, logger="pazo.sweep")
    todo = stand_in_runs(tmp_path, 5)
    in_parallel, handler = launcher.get("jobs", 1), signal.getsignal(signal.SIGINT)
    thread = ctrl_c_once_started([d for _, d, _ in todo], in_parallel)
    with pytest.raises(Interrupted) as stopped:
        sweep.launch(todo, launcher, tmp_path, quiet=quiet)
    thread.join()
    summaries = [json.loads((d / "summary.json").read_text()) for _, d, _ in todo if (d / "summary.json").exists()]
    assert len(summaries) == in_parallel                           # the runs in progress; no other started
    assert all(s == {"status": "interrupted", "ctrl_c": 1} for s in summaries)   # each got the Ctrl-C once
    assert not any((d / "started").exists() for _, d, _ in todo[in_parallel:])
    said = str(stopped.value)
    assert ("runs finished" in said) != quiet                      # a selection's runs are not counted
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("[")]
    assert len(lines) == (0 if quiet else in_parallel)              # a line for each run that ran, no other
    assert signal.getsignal(signal.SIGINT) is handler


#: a stand-in run that answers SIGINT and SIGTERM as pazo.train does (its summary says which it got)
STAND_IN_SIGNALS = """
import json, signal, sys, time
from pathlib import Path
run_dir = Path(sys.argv[1])
seen = []
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda signum, frame: seen.append(signal.Signals(signum).name))
(run_dir / "started").write_text("")
deadline = time.monotonic() + 60
while not seen and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.3)
status = {"SIGINT": "interrupted", "SIGTERM": "preempted"}.get(seen[0] if seen else "", "finished")
(run_dir / "summary.json").write_text(json.dumps({"status": status, "signals": seen}))
sys.exit({"interrupted": 130, "preempted": 3}.get(status, 0))
"""


@pytest.mark.parametrize("launcher", [{"launcher": "sequential"}, {"launcher": "joblib", "jobs": 2}])
@pytest.mark.parametrize("sent, passed_on, exit_status", [(signal.SIGINT, "SIGINT", 130),
                                                          (signal.SIGTERM, "SIGTERM", 143),
                                                          (signal.SIGHUP, "SIGTERM", 129)])
def test_every_stopping_signal_reaches_the_runs_in_progress_and_sets_the_sweeps_exit(tmp_path, launcher, sent,
                                                                                    passed_on, exit_status):
    """A SIGTERM to the sweep (a `kill`, a time limit) used to leave its runs, each in its own process
    group, running to their end: each signal that stops the sweep reaches each run in progress once,
    as the signal a run checkpoints on, and the sweep's exit status is the shell's for what it got."""
    todo = [(run, run_dir, [sys.executable, "-c", STAND_IN_SIGNALS, str(run_dir)])
            for run, run_dir, _ in stand_in_runs(tmp_path, 4)]
    in_parallel = launcher.get("jobs", 1)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    thread = ctrl_c_once_started([d for _, d, _ in todo], in_parallel, sent)
    with pytest.raises(Interrupted) as stopped:
        sweep.launch(todo, launcher, tmp_path)
    thread.join()
    summaries = [json.loads((d / "summary.json").read_text()) for _, d, _ in todo if (d / "summary.json").exists()]
    assert len(summaries) == in_parallel and all(s["signals"] == [passed_on] for s in summaries)
    assert stopped.value.exit_status == exit_status and stopped.value.signum == sent
    assert {s: signal.getsignal(s) for s in handlers} == handlers
    # the stop ends with the launch: a run started afterwards in the same process (a later sweep, a
    # test) runs rather than being taken for one of the stopped sweep's
    later = tmp_path / "later"
    assert launchers.run_one([sys.executable, "-c", "print('ran')"], str(later)) == 0
    assert "ran" in (later / "stdout.log").read_text()


def test_the_sweep_ends_an_interrupt_in_one_line_with_exit_130(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise Interrupted("1 of 2 runs finished; the runs in progress stopped and recorded where")
    monkeypatch.setattr(sweep, "launch", interrupted)
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\nextra: {train.steps: [2]}\n")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == EXIT_INTERRUPTED == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pazo: interrupted: 1 of 2 runs finished; the runs in progress stopped and recorded where; "
                   "the same command resumes the sweep"]


def test_a_sweep_stopped_by_sigterm_says_so_in_one_line_with_exit_143(tmp_path, monkeypatch, capsys):
    def terminated(*args, **kwargs):
        raise Interrupted("1 of 2 runs finished; the runs in progress stopped", signal.SIGTERM)
    monkeypatch.setattr(sweep, "launch", terminated)
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\nextra: {train.steps: [2]}\n")
    assert sweep.main([str(spec), "--out", str(tmp_path / "out")]) == 143
    assert capsys.readouterr().err.strip().splitlines() == [
        "pazo: interrupted by SIGTERM: 1 of 2 runs finished; the runs in progress stopped; the same command "
        "resumes the sweep"]


# --- a real pazo-sweep, real runs ---------------------------------------------------------------------

def sweep_process(spec: Path, out: Path, *args: str) -> subprocess.Popen:
    """`python -m pazo.sweep` in its own session, as a terminal's foreground job (Ctrl-C: SIGINT to its group)."""
    env = {**os.environ, "PYTHONPATH": str(Path(sweep.__file__).parents[2])}
    return subprocess.Popen([sys.executable, "-m", "pazo.sweep", str(spec), "--out", str(out), *args,
                             "device=cpu", "logger.mode=disabled"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def wait_for_a_step(out: Path, process: subprocess.Popen) -> Path:
    """The first run directory whose run has written a row (it is in its steps), once there is one."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:
        rows = [p for p in out.rglob("metrics.jsonl") if p.stat().st_size > 0]
        if rows:
            return rows[0].parent
        time.sleep(0.2)
    pytest.fail(f"no run reached a row (sweep exit {process.poll()})")


@pytest.mark.slow
@pytest.mark.parametrize("selection, launcher, sent", [("grid", "sequential", signal.SIGINT),
                                                       ("grid", "joblib", signal.SIGINT),
                                                       ("private", "sequential", signal.SIGINT),
                                                       ("private", "joblib", signal.SIGINT),
                                                       ("grid", "sequential", signal.SIGTERM)])
def test_ctrl_c_during_a_real_sweep_ends_in_one_line_and_the_same_command_resumes(tmp_path, selection, launcher,
                                                                                  sent):
    """(SIGTERM, as `kill` sends it to the sweep alone: its run saves its checkpoint and ends
    `preempted`, the sweep exits 143.)"""
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\n"
                    "extra: {train.steps: [150]}\ngrid: false\nseeds: [0, 1]\n"
                    f"selection: {selection}\nk: {{distribution: geometric, mean: 1.5}}\n")
    out, args = tmp_path / "out", ["--launcher", launcher, "train.log_every=1"]
    process = sweep_process(spec, out, *args)
    run_dir = wait_for_a_step(out, process)
    if sent == signal.SIGINT:
        os.killpg(process.pid, signal.SIGINT)        # Ctrl-C at the terminal: the sweep's process group
    else:
        process.send_signal(sent)                    # `kill`: the sweep alone
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 128 + sent, stderr
    assert "Traceback" not in stdout + stderr
    last = stderr.strip().splitlines()[-1]
    said = "interrupted" if sent == signal.SIGINT else "interrupted by SIGTERM"
    assert last.startswith(f"pazo: {said}: ") and last.endswith("the same command resumes the sweep")
    if selection == "private":
        assert "no selection was released" in last and "runs finished" not in last
    summary = json.loads((run_dir / "summary.json").read_text())
    ended = "interrupted" if sent == signal.SIGINT else "preempted"
    assert summary["status"] == ended and (run_dir / "private" / "checkpoint.pt").exists()
    process = sweep_process(spec, out, *args)
    stdout, stderr = process.communicate(timeout=1200)
    assert process.returncode == 0, stderr
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == summary["stopped_at_step"]
    if selection == "private":
        assert len(list((out / "mini" / "digits" / "dpsgd" / "eps=1").glob("selected,seed=*/model.safetensors"))) == 2


@pytest.mark.parametrize("stop, status", [(KeyboardInterrupt(), 130), (Terminated(), 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_submitit_submits_says_which_and_exits_with_its_status(stop, status, tmp_path, monkeypatch):
    """A Ctrl-C, or a SIGTERM before a launcher passes signals on (`Terminated`), while submitit submits
    or waits: the sweep stops saying the jobs go on under SLURM, with the signal's status (a SIGTERM
    was said as a Ctrl-C, 130)."""
    def submitting(*args, **kwargs):
        raise stop
    monkeypatch.setattr(launchers, "launch_submitit", submitting)
    with pytest.raises(Interrupted) as stopped:
        launchers.launch([], {"launcher": "submitit"}, tmp_path)
    assert stopped.value.exit_status == status and "go on under SLURM" in str(stopped.value)
