"""Resume after preemption: a run stopped by a signal, or killed outright, and relaunched into its
directory ends with the same parameters, metrics and epsilon as an uninterrupted one; one run,
one directory; a finished run is not re-run."""
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import ROOT
from pazo.run import gate
from pazo.run.checkpoint import checkpoint_path, effective_status
from pazo.methods import method_info
from pazo.methods.two_point import TwoPointMethod
from pazo.train import run
from pazo.run.weights import read_weights
from step_faults import fail_at_step, signalled_at_step


def rows(run_dir):
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "s_per_iter"} for line in lines]


def same_outcome(a: Path, b: Path) -> None:
    assert rows(a) == rows(b)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    assert sa["status"] == sb["status"] == "finished"
    for key in ("final_test_accuracy", "best_test_accuracy", "steps_done"):
        assert sa[key] == sb[key], key
    assert sa["privacy"]["epsilon_spent"] == sb["privacy"]["epsilon_spent"]
    ma, mb = (read_weights(d / "model.safetensors") for d in (a, b))
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


@pytest.mark.parametrize("method,signum,status", [("pazo_s", signal.SIGTERM, "preempted"),
                                                   ("dpsgd", signal.SIGUSR1, "preempted"),
                                                   ("pazo_p", signal.SIGINT, "interrupted")])
def test_a_signal_checkpoints_and_the_relaunch_continues_exactly(method, signum, status, hydra_cfg, tmp_path,
                                                                 monkeypatch):
    cfg = hydra_cfg(f"method={method}", "train.steps=12", "train.log_every=2", "train.checkpoint_every=5")
    run(cfg, tmp_path / "whole")

    owner = method_info(method).cls
    original = owner.step
    monkeypatch.setattr(owner, "step", signalled_at_step(original, 7, signum))  # arrives mid-run; honoured after it
    stopped = run(cfg, tmp_path / "split")
    assert stopped["status"] == status and stopped["steps_done"] == 7 and stopped["stopped_at_step"] == 7
    assert stopped["privacy"]["epsilon_spent"] > 0  # the steps done were spent, and say so
    assert checkpoint_path(tmp_path / "split").exists()
    monkeypatch.setattr(owner, "step", original)
    resumed = run(cfg, tmp_path / "split")
    assert resumed["resumed_from_step"] == 7 and resumed["attempt"] == 2
    same_outcome(tmp_path / "whole", tmp_path / "split")
    assert not checkpoint_path(tmp_path / "split").exists()  # it holds the noise stream: gone when finished


def preempted_after(step_number: int, cfg, run_dir: Path, monkeypatch) -> dict:
    """The run of `cfg` in `run_dir` sent SIGTERM during its step `step_number` (honoured after that
    step, with a checkpoint); its summary."""
    owner = method_info(cfg.method.name).cls
    original = owner.step
    monkeypatch.setattr(owner, "step", signalled_at_step(original, step_number))
    try:
        return run(cfg, run_dir)
    finally:
        monkeypatch.setattr(owner, "step", original)


def to_old_layout(run_dir: Path) -> None:
    """The run directory as an earlier pazo left it: the checkpoint and the private record beside
    summary.json, no private/ workspace."""
    workspace = run_dir / gate.WORKSPACE
    for path in workspace.iterdir():
        path.rename(run_dir / path.name)
    workspace.rmdir()


def test_a_run_stopped_in_the_old_layout_resumes_exactly_into_the_private_workspace(hydra_cfg, tmp_path,
                                                                                   monkeypatch):
    """A run directory of an earlier pazo (no private/) is read: its relaunch resumes from the old
    checkpoint, ends as an uninterrupted run does, and leaves its secrets only in private/ (0700)."""
    cfg = hydra_cfg("method=dpzero", "train.steps=8", "train.log_every=2", "train.checkpoint_every=2",
                    "train.keep_checkpoint=true")
    run(cfg, tmp_path / "whole")
    assert preempted_after(5, cfg, tmp_path / "old", monkeypatch)["status"] == "preempted"
    to_old_layout(tmp_path / "old")
    assert checkpoint_path(tmp_path / "old") == tmp_path / "old" / "checkpoint.pt"
    resumed = run(cfg, tmp_path / "old")
    assert resumed["resumed_from_step"] == 5
    same_outcome(tmp_path / "whole", tmp_path / "old")
    assert not (tmp_path / "old" / "checkpoint.pt").exists()
    assert not (tmp_path / "old" / "private_computation.json").exists()
    workspace = tmp_path / "old" / gate.WORKSPACE
    assert {p.name for p in workspace.iterdir()} == {"checkpoint.pt", "private_computation.json", "released_steps"}
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700


@pytest.mark.parametrize("how,resumed_from", [("kill", 4), ("crash", None)])
def test_a_later_attempt_keeps_the_rows_an_earlier_one_released(hydra_cfg, tmp_path, monkeypatch, how,
                                                                  resumed_from):
    """Rows an attempt wrote left the process: a later attempt that computes those steps again, by
    resuming the checkpoint at step 4 (after a kill) or by replaying from step 1 (after a crash), and
    is stopped before it passes them keeps them as the directory's last rows and counts them in its
    epsilon; one that goes on does not write them twice (the same noise gives the same rows)."""
    cfg = hydra_cfg("method=dpzero", "train.steps=12", "train.log_every=1", "train.checkpoint_every=4")
    run(cfg, tmp_path / "whole")
    whole = rows(tmp_path / "whole")
    original = TwoPointMethod.step

    def stopping_at(when, how):
        def step(self, x, y, t):
            if t == when and how == "kill":   # a second Ctrl-C: no checkpoint written, the one at step 4 stays
                raise KeyboardInterrupt
            if t == when and how == "crash":  # status failed: the relaunch replays from step 1
                raise RuntimeError("a crash at step 7")
            out = original(self, x, y, t)
            if t == when:
                os.kill(os.getpid(), signal.SIGTERM)   # honoured after this step
            return out
        return step

    monkeypatch.setattr(TwoPointMethod, "step", stopping_at(7, how))
    with pytest.raises(KeyboardInterrupt if how == "kill" else RuntimeError):
        run(cfg, tmp_path / "split")
    assert rows(tmp_path / "split") == whole[:6]            # steps 5 and 6 released after the checkpoint
    monkeypatch.setattr(TwoPointMethod, "step", stopping_at(5, "sigterm"))
    stopped = run(cfg, tmp_path / "split")
    assert stopped["resumed_from_step"] == resumed_from and stopped["steps_done"] == 5
    assert rows(tmp_path / "split") == whole[:6]            # step 6's row stays, step 5's not written twice
    assert stopped["privacy"]["steps_released"] == 6
    assert stopped["privacy"]["epsilon_spent"] == pytest.approx(whole[5]["epsilon"], rel=1e-12)
    monkeypatch.setattr(TwoPointMethod, "step", original)
    run(cfg, tmp_path / "split")
    same_outcome(tmp_path / "whole", tmp_path / "split")


def _cli(run_dir, *extra):
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(Path(run_dir).parent / "cache")}
    return subprocess.Popen([sys.executable, "-m", "pazo.train", "method=dpzero", "train.steps=300",
                             "train.log_every=5", "train.checkpoint_every=20", "logger.mode=disabled",
                             "device=cpu", f"hydra.run.dir={run_dir}", *extra],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow   # two real runs in subprocesses, one killed (about 25 CPU-s); in the quick suite the same resume
# path: test_a_signal_checkpoints_and_the_relaunch_continues_exactly, and tests/faults/test_fault_checkpoints.py's
# test_a_kill_during_a_checkpoint_write_leaves_the_previous_one_and_the_run_resumes
def test_sigkill_then_relaunch_gives_the_uninterrupted_run(tmp_path):
    whole = _cli(tmp_path / "whole")
    killed = _cli(tmp_path / "killed")
    ckpt = checkpoint_path(tmp_path / "killed")
    deadline = time.time() + 300
    while not ckpt.exists() and killed.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert killed.poll() is None, "the run ended before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    summary = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert summary["status"] == "running" and effective_status(summary) == "killed"  # recognisable
    assert whole.wait(timeout=600) == 0, whole.stderr.read()
    again = _cli(tmp_path / "killed")
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert "resumed:" in out
    same_outcome(tmp_path / "whole", tmp_path / "killed")


def test_a_finished_run_is_not_rerun_and_a_failed_one_keeps_its_files(hydra_cfg, tmp_path):
    cfg = hydra_cfg("method=dpzero")
    first = run(cfg, tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    again = run(cfg, tmp_path)
    assert again["status"] == "finished" and (tmp_path / "metrics.jsonl").read_text() == before  # no new rows
    assert again["final_test_accuracy"] == first["final_test_accuracy"]

    bad = hydra_cfg("method=pazo_m", "method.lr=1e30", "train.steps=6", "train.log_every=1")
    failed = run(bad, tmp_path / "f")
    assert failed["status"] == "failed"
    retried = run(bad, tmp_path / "f")
    assert retried["earlier_attempt_moved_to"].endswith("attempts/1")
    # the earlier attempt's rows are kept aside; the retry (same seed, same divergence) wrote its own afresh
    assert rows(tmp_path / "f" / "attempts" / "1") == rows(tmp_path / "f")


def test_a_live_run_directory_is_refused(hydra_cfg, tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(
        {"status": "running", "heartbeat": time.time(), "host": "another-host", "pid": 1}))
    with pytest.raises(ValueError, match="is in use"):
        run(hydra_cfg("method=dpzero"), tmp_path)


def test_resuming_with_another_config_is_refused(hydra_cfg, tmp_path, monkeypatch):
    cfg = hydra_cfg("method=dpzero", "train.steps=10", "train.checkpoint_every=2")
    original = TwoPointMethod.step
    monkeypatch.setattr(TwoPointMethod, "step", signalled_at_step(original, 3))
    assert run(cfg, tmp_path)["status"] == "preempted"
    monkeypatch.setattr(TwoPointMethod, "step", original)
    with pytest.raises(ValueError, match="another config"):
        run(hydra_cfg("method=dpzero", "train.steps=10", "train.checkpoint_every=2", "method.lr=0.5"), tmp_path)


def test_how_the_public_gradients_are_taken_is_not_part_of_a_runs_identity(hydra_cfg):
    """A run may resume with `method.public_grads_together` changed (auto, true or false: on a
    smaller GPU, or after the default changed), and a checkpoint from before the key existed still
    matches its run's config; lr still tells runs apart."""
    from omegaconf import OmegaConf

    from pazo.run.fingerprint import config_fingerprint
    default = hydra_cfg("method=pazo_p")
    together = hydra_cfg("method=pazo_p", "method.public_grads_together=true")
    apart = hydra_cfg("method=pazo_p", "method.public_grads_together=false")
    older = OmegaConf.create(OmegaConf.to_container(together))
    del older.method["public_grads_together"]
    assert default.method.public_grads_together == "auto"
    assert len({config_fingerprint(c) for c in (default, together, apart, older)}) == 1
    assert config_fingerprint(default) != config_fingerprint(hydra_cfg("method=pazo_p", "method.lr=0.5"))


@pytest.mark.slow   # two runs in subprocesses (about 20 CPU-s); in the quick suite the resolver that keeps them
# apart: tests/run/test_entry_points.py's test_each_hydra_entry_point_resolves_its_own_run_dir
def test_two_runs_started_together_get_two_directories(tmp_path):
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "pazo.train", "train.steps=2", "logger.mode=disabled", "device=cpu",
           f"hydra.run.dir={tmp_path}/runs/" + "${now:%Y-%m-%d_%H-%M-%S}_${pazo_unique:}"]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for _ in range(2)]
    assert all(p.wait(timeout=600) == 0 for p in procs)
    dirs = sorted((tmp_path / "runs").iterdir())
    assert len(dirs) == 2 and all(len(rows(d)) == 1 for d in dirs)


def test_a_ctrl_c_says_what_it_left(tmp_path):
    """The message names what is on disk: the loop's record of the steps done (the summary this launch
    wrote), or nothing trained (a Ctrl-C while data, model or calibration are set up, before any
    summary), or the earlier attempt's record (a resume interrupted in its set-up, whatever it says)."""
    from pazo.train import _interrupted_where

    assert "set-up, before the first step: nothing was trained" in _interrupted_where(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "preempted"}))
    assert "earlier attempt's (status preempted)" in _interrupted_where(tmp_path)
    mine = {"status": "interrupted", "steps_done": 3}
    (tmp_path / "summary.json").write_text(json.dumps(mine))
    assert "earlier attempt's (status interrupted)" in _interrupted_where(tmp_path)
    assert _interrupted_where(tmp_path, mine=mine).startswith("interrupted; ") and "records the steps done" in \
        _interrupted_where(tmp_path, mine=mine)


def test_a_run_with_a_schedule_and_adam_resumes_exactly(hydra_cfg, tmp_path, monkeypatch):
    """Adam's moments are in the checkpoint and the step size follows the step number: a run
    stopped after step 7 and resumed ends as the uninterrupted one (parameters, rows, epsilon); its
    summary and rows name the rule."""
    cfg = hydra_cfg("method=dpzero", "schedule=cosine", "schedule.warmup_steps=3", "optimizer=adam",
                    "train.steps=12", "train.log_every=2", "train.checkpoint_every=5")
    whole = run(cfg, tmp_path / "whole")
    assert whole["update_rule"]["schedule"] == {"name": "cosine", "warmup_steps": 3, "final": 0.0}
    assert whole["update_rule"]["optimizer"]["name"] == "adam"
    assert [r["lr"] for r in rows(tmp_path / "whole")][:2] == [cfg.method.lr * 2 / 3, cfg.method.lr]
    assert preempted_after(7, cfg, tmp_path / "split", monkeypatch)["steps_done"] == 7
    assert run(cfg, tmp_path / "split")["resumed_from_step"] == 7
    same_outcome(tmp_path / "whole", tmp_path / "split")


def test_a_replay_of_an_attempt_whose_private_record_lacks_a_key_is_refused(hydra_cfg, tmp_path, monkeypatch):
    """A seeded replay from step 1 draws the earlier attempt's noise again only if its key is the
    same: a record without one of the keys this launch keys with (a run from before the public data
    and the initial parameters keyed the secret streams) cannot tell, and is refused, whichever key
    is missing, with the directory's files as they were."""
    from pazo.errors import ConfigError

    cfg = hydra_cfg("method=dpzero", "train.steps=6", "train.log_every=1")
    original = fail_at_step(monkeypatch, TwoPointMethod, "step", 3, RuntimeError("a crash at step 3"))
    with pytest.raises(RuntimeError):
        run(cfg, tmp_path / "run")
    monkeypatch.setattr(TwoPointMethod, "step", original)
    record_path = tmp_path / "run" / "private" / "private_computation.json"
    record = json.loads(record_path.read_text())
    for key in record:
        record_path.write_text(json.dumps({k: v for k, v in record.items() if k != key}))
        before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
        with pytest.raises(ConfigError, match=f"lacks {key}"):
            run(cfg, tmp_path / "run")
        assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    record_path.write_text(json.dumps(record))
    assert run(cfg, tmp_path / "run")["status"] == "finished"   # the full record replays
