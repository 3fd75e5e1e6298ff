"""Signals and concurrency (issue family 5): a second (and third) Ctrl-C during the shutdown, two
launches into one run directory at once, and a relaunch into a finished, running or failed run's
directory with other overrides. The shutdown completes and the summary says how the run ended,
with no traceback; the second launch is refused before training in one line naming the directory
and the holder; a refused launch or one with nothing to do leaves the directory's files, its
`.hydra/` record included, as they were."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pazo.run.launch
import pazo.train
from conftest import ROOT
from fault_runtime_helpers import TINY, error_lines, one_error_line, run_cli, snapshot
from pazo.run.checkpoint import checkpoint_path, StopRequests, read_checkpoint
from pazo.errors import ConfigError
from pazo.methods.two_point import TwoPointMethod
from pazo.run.recorder import Recorder
from pazo.files.rundir import LOCK, RunDirLock, staging_subdir
from pazo.train import run

CFG = [*TINY, "train.steps=6", "train.checkpoint_every=2"]


def _sigint_at_step(monkeypatch, at: int) -> list:
    """The first Ctrl-C, during step `at` (honoured after it); the list returned is filled then."""
    original, fired = TwoPointMethod.step, []

    def step(self, x, y, t):
        out = original(self, x, y, t)
        if t == at:
            fired.append(t)
            os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(TwoPointMethod, "step", step)
    return fired


@pytest.fixture
def sigint_is_ours():
    """Ctrl-C as `pazo.train.main` sets it (a KeyboardInterrupt unless the run's handler is in place)."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, saved)


# --- the second Ctrl-C --------------------------------------------------------------------------------

@pytest.mark.parametrize("during", ["checkpoint", "finish"])
def test_a_second_ctrl_c_during_the_shutdown_is_ignored_until_the_files_are_written(during, hydra_cfg, tmp_path,
                                                                                    monkeypatch, capfd,
                                                                                    sigint_is_ours):
    fired = _sigint_at_step(monkeypatch, 3)
    original = getattr(Recorder, during)

    def impatient(self, *a, **k):
        if fired:   # the user presses Ctrl-C again, twice, while the stop's files are written
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, *a, **k)

    monkeypatch.setattr(Recorder, during, impatient)
    summary = run(hydra_cfg(*CFG), tmp_path)
    assert summary["status"] == "interrupted" and summary["stopped_at_step"] == 3
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "interrupted"
    assert read_checkpoint(checkpoint_path(tmp_path))["loop"]["step"] == 3
    err = capfd.readouterr().err
    assert err.count("already stopping") == 1 and "Traceback" not in err


def test_a_ctrl_c_while_a_finished_run_writes_its_files_keeps_it_finished(hydra_cfg, tmp_path, monkeypatch,
                                                                         sigint_is_ours):
    original = Recorder.finish

    def impatient(self, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)
        return original(self, *a, **k)

    monkeypatch.setattr(Recorder, "finish", impatient)
    summary = run(hydra_cfg(*TINY), tmp_path)
    assert summary["status"] == "finished" and (tmp_path / "model.safetensors").exists()


def test_a_third_ctrl_c_while_the_interruption_is_recorded_does_not_break_the_record(hydra_cfg, tmp_path,
                                                                                    monkeypatch, sigint_is_ours):
    original = TwoPointMethod.step

    def step(self, x, y, t):
        if t == 3:
            os.kill(os.getpid(), signal.SIGINT)   # the first: a stop after this step
            os.kill(os.getpid(), signal.SIGINT)   # the second, during the step: interrupt at once
        return original(self, x, y, t)

    fail = Recorder.fail

    def impatient(self, *a, **k):
        os.kill(os.getpid(), signal.SIGINT)   # the third, while the interruption is written down
        return fail(self, *a, **k)

    monkeypatch.setattr(TwoPointMethod, "step", step)
    monkeypatch.setattr(Recorder, "fail", impatient)
    with pytest.raises(KeyboardInterrupt):
        run(hydra_cfg(*CFG), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["failure"].startswith("interrupted at step 3")
    assert read_checkpoint(checkpoint_path(tmp_path))["loop"]["step"] == 2   # the last periodic one, kept: relaunch


def test_stop_requests_turn_signals_into_a_stop_then_an_interrupt_then_silence(capfd):
    with StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.reason == "preempted"
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.reason == "preempted"   # the first reason stands
    with StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.reason == "interrupted"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert stop.shielded
        os.kill(os.getpid(), signal.SIGINT)   # shielded: ignored
        os.kill(os.getpid(), signal.SIGTERM)
    assert capfd.readouterr().err.count("already stopping") == 1


def test_after_the_run_a_ctrl_c_exits_quietly_with_the_runs_status(sigint_is_ours, monkeypatch):
    ended = []
    monkeypatch.setattr(pazo.train, "_leave", ended.append)   # (the real one ends the process: os._exit)
    pazo.train._quiet_from_now(3)
    os.kill(os.getpid(), signal.SIGINT)
    assert ended == [3]


@pytest.mark.slow   # four real runs (about a minute); in the quick suite: the test above and
# test_a_ctrl_c_while_a_finished_run_writes_its_files_keeps_it_finished
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.15, 0.3])
def test_two_ctrl_c_as_a_real_run_finishes_end_it_with_its_status_and_no_traceback(delay, tmp_path):
    """Two Ctrl-C pressed as a real run writes its last files, or while the interpreter shuts
    down: the process exits 0 (finished), not by SIGINT, with its files whole and no traceback."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(pazo.train.__file__).parents[1]), "WANDB_SILENT": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "pazo.train", "method=dpzero", "train.steps=200",
                             "train.log_every=50", "logger.mode=disabled", "device=cpu", f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    rows = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if rows.exists() and '"step": 200' in rows.read_text():
            break
        time.sleep(0.005)
    time.sleep(delay)
    for _ in range(2):
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            time.sleep(0.02)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, (proc.returncode, err[-2000:])
    assert "Traceback" not in err
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert (run_dir / "model.safetensors").exists() and not list(run_dir.glob("*.tmp"))


@pytest.mark.slow   # a real run in a subprocess (about a minute on 2 loaded cores); in the quick suite the same
# path runs in-process: test_a_third_ctrl_c_while_the_interruption_is_recorded_does_not_break_the_record
def test_ctrl_c_three_times_in_a_real_run_ends_interrupted_without_traceback(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen([sys.executable, "-m", "pazo.train", "method=dpzero", "train.steps=3000",
                             "train.log_every=5", "train.checkpoint_every=50", "logger.mode=disabled", "device=cpu",
                             f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text():
        assert proc.poll() is None and time.time() < deadline, proc.stderr.read() if proc.poll() is not None else ""
        time.sleep(0.05)
    for _ in range(3):   # an impatient user
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Error" not in err
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert not list(run_dir.glob("*.tmp"))


# --- two launches into one directory ------------------------------------------------------------------

def test_a_launch_into_a_locked_directory_is_refused_before_compute(hydra_cfg, tmp_path, monkeypatch):
    monkeypatch.setattr(pazo.run.launch, "build_run", lambda *a, **k: pytest.fail("compute started"))
    with RunDirLock(tmp_path):
        with pytest.raises(ConfigError, match=f"run directory {tmp_path} is in use by another launch") as caught:
            run(hydra_cfg(*TINY), tmp_path)
    assert f"pid {os.getpid()}" in str(caught.value)
    assert not (tmp_path / LOCK).exists()   # released by its holder


def test_the_lock_is_released_whatever_the_run_ends_with(hydra_cfg, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise RuntimeError("the data loader crashed")

    monkeypatch.setattr(pazo.run.launch, "build_run", broken)
    with pytest.raises(RuntimeError):
        run(hydra_cfg(*TINY), tmp_path)
    assert not (tmp_path / LOCK).exists()
    monkeypatch.undo()
    assert run(hydra_cfg(*TINY), tmp_path)["status"] == "finished"
    assert not (tmp_path / LOCK).exists()
    with RunDirLock(tmp_path):   # free again
        pass


def test_a_lock_file_left_by_a_killed_process_does_not_block(tmp_path):
    (tmp_path / LOCK).write_text("pid 999999 on a-host-long-gone\n")   # the file stays, the kernel's lock does not
    with RunDirLock(tmp_path) as lock:
        assert f"pid {os.getpid()}" in (tmp_path / LOCK).read_text() and lock.path.exists()


def test_a_file_system_without_locks_still_runs(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with RunDirLock(tmp_path) as lock:
        assert lock.locked is False and (tmp_path / LOCK).exists()
    assert not (tmp_path / LOCK).exists()


def test_a_lock_held_by_another_process_names_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from pazo.files.rundir import RunDirLock; lock = RunDirLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(60)"), str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid} on"):
            RunDirLock(tmp_path).acquire()
    finally:
        holder.kill()
        holder.wait()
    with RunDirLock(tmp_path):   # its lock went with it
        pass


@pytest.mark.slow   # two real runs in subprocesses (about a minute on 2 loaded cores); in the quick suite the lock's
# path: test_a_launch_into_a_locked_directory_is_refused_before_compute, test_a_lock_held_by_another_process_names_it
def test_two_launches_at_once_into_one_directory_one_trains_the_other_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(tmp_path / "cache")}
    cmds = [[sys.executable, "-m", "pazo.train", "method=dpzero", "train.steps=60", "logger.mode=disabled",
             "device=cpu", f"train.log_every={every}", f"hydra.run.dir={run_dir}"] for every in (5, 6)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd in cmds]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    winner = next(i for i, (code, _, _) in enumerate(results) if code == 0)
    loser_err = next(err for code, _, err in results if code == 2)
    line = one_error_line(loser_err)
    assert str(run_dir) in line and ("in use by another launch" in line or "finished run of another config" in line)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and not (run_dir / "attempts").exists()
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert f"train.log_every={(5, 6)[winner]}" in overrides   # the record is the launch that ran
    assert not list((run_dir / ".hydra").glob("launch-*"))


# --- relaunches into a run directory with other overrides ---------------------------------------------

@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished run made by the command line (with its .hydra/ record)."""
    folder = tmp_path_factory.mktemp("finished")
    saved_cache = os.environ.get("PAZO_CACHE_DIR")
    os.environ["PAZO_CACHE_DIR"] = str(folder / "cache")

    class Quiet:
        def readouterr(self):
            return "", ""

    try:
        code, _, _ = run_cli([*TINY, f"hydra.run.dir={folder / 'run'}"], Quiet())
    finally:
        if saved_cache is None:
            os.environ.pop("PAZO_CACHE_DIR", None)
        else:
            os.environ["PAZO_CACHE_DIR"] = saved_cache
    assert code == 0 and (folder / "run" / ".hydra" / "overrides.yaml").exists()
    return folder / "run"


@pytest.fixture
def finished_copy(finished, tmp_path):
    import shutil

    shutil.copytree(finished, tmp_path / "run")
    return tmp_path / "run"


@pytest.mark.parametrize("change", ["method.lr=0.5", "seed=3", "train.steps=5", "method=pazo_m",
                                    "privacy.epsilon=8"])
def test_a_relaunch_into_a_finished_run_with_other_overrides_is_refused_and_rewrites_nothing(change, finished_copy,
                                                                                             capsys):
    before = snapshot(finished_copy)
    overrides = [o for o in TINY if o.split("=")[0] != change.split("=")[0]] + [change]
    code, _, err = run_cli([*overrides, f"hydra.run.dir={finished_copy}"], capsys)
    line = one_error_line(err)
    assert code == 2 and "holds a finished run of another config" in line and str(finished_copy) in line
    after = snapshot(finished_copy)
    assert {k: v for k, v in after.items() if k != "train.log"} == {k: v for k, v in before.items()
                                                                     if k != "train.log"}
    assert not list((finished_copy / ".hydra").glob("launch-*"))


@pytest.mark.parametrize("change", [[], ["train.eval_batch_size=256"], ["train.checkpoint_every=3"]])
def test_a_relaunch_of_the_same_run_has_nothing_to_do_and_keeps_the_record(change, finished_copy, capsys):
    before = snapshot(finished_copy)
    code, out, err = run_cli([*TINY, *change, f"hydra.run.dir={finished_copy}"], capsys)
    assert code == 0 and "holds a finished run; nothing to do" in out + err
    accuracy = json.loads((finished_copy / "summary.json").read_text())["final_test_accuracy"]
    assert f"(final test accuracy {accuracy:.4f})" in out + err    # as the summary prints it (was every digit)
    after = snapshot(finished_copy)
    assert {k: v for k, v in after.items() if k != "train.log"} == {k: v for k, v in before.items()
                                                                     if k != "train.log"}


def test_a_relaunch_into_a_running_run_keeps_its_record(finished_copy, capsys):
    summary = json.loads((finished_copy / "summary.json").read_text())
    summary.update(status="running", heartbeat=time.time(), host="another-host", pid=1)
    (finished_copy / "summary.json").write_text(json.dumps(summary))
    before = snapshot(finished_copy)
    code, _, err = run_cli([*TINY, "method.lr=0.3", f"hydra.run.dir={finished_copy}"], capsys)
    assert code == 2 and "is in use" in one_error_line(err)
    assert {k: v for k, v in snapshot(finished_copy).items() if k != "train.log"} == \
        {k: v for k, v in before.items() if k != "train.log"}


def test_a_start_over_keeps_the_earlier_record_in_its_attempt(finished_copy, capsys):
    """A failed attempt replayed by the same seeded config (a how-key, the logger, may change)
    keeps the earlier record in attempts/1; another config is refused with the record kept
    (was: accepted with `method.lr=0.3`, its releases uncounted)."""
    summary = json.loads((finished_copy / "summary.json").read_text())
    (finished_copy / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    earlier = (finished_copy / ".hydra" / "overrides.yaml").read_text()
    before = snapshot(finished_copy)
    code, _, err = run_cli([*TINY, "method.lr=0.3", f"hydra.run.dir={finished_copy}"], capsys)
    assert code == 2 and "method.lr: " in one_error_line(err)
    assert {k: v for k, v in snapshot(finished_copy).items() if k != "train.log"} == \
        {k: v for k, v in before.items() if k != "train.log"}
    code, _, err = run_cli([*TINY, "logger.private_diagnostics=true", f"hydra.run.dir={finished_copy}"], capsys)
    assert code == 0, err
    assert (finished_copy / "attempts" / "1" / ".hydra" / "overrides.yaml").read_text() == earlier
    assert "logger.private_diagnostics=true" in (finished_copy / ".hydra" / "overrides.yaml").read_text()
    assert not list((finished_copy / ".hydra").glob("launch-*"))


def test_the_staging_folder_is_inside_hydra_and_names_the_launch():
    where = Path(staging_subdir())
    assert where.parent.name == ".hydra" and where.name.startswith(f"launch-{os.getpid()}-")


def test_one_error_line_helper_ignores_progress_bars():
    assert error_lines("dpzero:  50%|##   | 2/4 [00:01<00:01, 2.00it/s]\npazo: error: x\n") == ["pazo: error: x"]
