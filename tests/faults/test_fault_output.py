"""Where output goes (issue family 4): a run directory that is a file or cannot be written, and a
disk that is full at the start, fills up mid-run or at the final model save. A user's mistake is
one line before any compute; a fault of the machine is one line and status `fault` in
summary.json where the disk still takes it; every file already written stays whole (no
truncated summary, checkpoint or row, no `.tmp` left), and the run resumes once the disk has room."""
import errno
import json
import logging
import os
from pathlib import Path

import pytest
import torch

import pazo.run.launch
import pazo.train
from fault_runtime_helpers import TINY, Disk, leftovers, one_error_line, run_cli, snapshot
from pazo.run.checkpoint import CHECKPOINT, checkpoint_path, read_checkpoint
from pazo.commands.console import RunLogFile
from pazo.errors import ConfigError
from pazo.files.rundir import WriteFault, check_output_dir, write_atomic
from pazo.train import run
from pazo.run.weights import read_weights


@pytest.fixture
def no_compute(monkeypatch):
    """Fails the test if the run reaches its data, model or calibration."""
    monkeypatch.setattr(pazo.run.launch, "build_run", lambda *a, **k: pytest.fail("compute started"))


def assert_whole(run_dir: Path) -> None:
    """Every file a run wrote is whole: JSON files parse, every row of metrics.jsonl parses, a
    checkpoint reads back, and no temporary file is left."""
    assert not leftovers(run_dir)
    for path in run_dir.glob("*.json"):
        json.loads(path.read_text())
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        text = metrics.read_text()
        assert text == "" or text.endswith("\n")
        [json.loads(line) for line in text.splitlines()]
    if checkpoint_path(run_dir).exists():
        read_checkpoint(checkpoint_path(run_dir))
        assert checkpoint_path(run_dir).stat().st_mode & 0o777 == 0o600
    if (run_dir / "model.safetensors").exists():
        read_weights(run_dir / "model.safetensors")


# --- the run directory itself: refused before any compute ---------------------------------------------

@pytest.mark.parametrize("layout", ["is_a_file", "parent_is_a_file", "grandparent_is_a_file"])
def test_a_run_directory_that_is_a_file_is_refused_before_compute(layout, hydra_cfg, tmp_path, no_compute):
    blocker = tmp_path / "taken"
    blocker.write_text("someone's notes\n")
    run_dir = {"is_a_file": blocker, "parent_is_a_file": blocker / "run",
               "grandparent_is_a_file": blocker / "a" / "run"}[layout]
    with pytest.raises(ConfigError, match="is a file, not a directory") as caught:
        run(hydra_cfg(*TINY), run_dir)
    assert str(blocker) in str(caught.value)
    assert blocker.read_text() == "someone's notes\n"


@pytest.mark.parametrize("code,words", [(errno.EACCES, "no permission"), (errno.EPERM, "no permission"),
                                        (errno.EROFS, "read-only")])
def test_a_parent_that_cannot_be_written_is_refused_before_compute(code, words, hydra_cfg, tmp_path, monkeypatch,
                                                                   no_compute):
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **k):
        if self.name == "run":
            raise OSError(code, os.strerror(code))
        return real_mkdir(self, *a, **k)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(ConfigError, match=f"cannot create the run directory .*{words}.*you can write to"):
        run(hydra_cfg(*TINY), tmp_path / "run")


@pytest.mark.parametrize("code,words", [(errno.EACCES, "no permission"), (errno.EROFS, "read-only")])
def test_a_run_directory_without_write_access_is_refused_and_left_as_it_was(code, words, hydra_cfg, tmp_path,
                                                                          monkeypatch, no_compute):
    (tmp_path / "notes.txt").write_text("kept\n")
    before = snapshot(tmp_path)
    Disk(monkeypatch, refuse=code)
    with pytest.raises(ConfigError, match=f"cannot write into the run directory .*{words}"):
        run(hydra_cfg(*TINY), tmp_path)
    assert snapshot(tmp_path) == before and not leftovers(tmp_path)


def test_a_full_disk_at_the_start_is_a_fault_before_compute(hydra_cfg, tmp_path, monkeypatch, no_compute):
    Disk(monkeypatch, free=0)
    with pytest.raises(WriteFault, match="the disk is full"):
        run(hydra_cfg(*TINY), tmp_path / "run")
    assert not leftovers(tmp_path / "run") and not (tmp_path / "run" / "summary.json").exists()


def test_check_output_dir_creates_parents_and_accepts_an_existing_directory(tmp_path):
    made = check_output_dir(tmp_path / "a" / "b")
    assert made.is_dir() and check_output_dir(made) == made and list(made.iterdir()) == []


# --- a disk that fills up mid-run: the status recorded, the earlier files whole ----------------------

LONGER = [*TINY, "train.steps=6", "train.checkpoint_every=2"]


def test_a_full_disk_at_a_checkpoint_keeps_the_previous_one_and_resumes(hydra_cfg, tmp_path, monkeypatch):
    cfg = hydra_cfg(*LONGER)
    disk = Disk(monkeypatch, only=(CHECKPOINT,), opens_ok=1)   # the checkpoint at step 2 fits, the one at 4 does not
    with pytest.raises(WriteFault, match=f"could not write .*{CHECKPOINT}: the disk is full"):
        run(cfg, tmp_path)
    assert set(disk.refused) == {CHECKPOINT}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "fault" and "the disk is full" in summary["failure"] and summary["steps_done"] == 4
    assert read_checkpoint(checkpoint_path(tmp_path))["loop"]["step"] == 2   # the previous good one
    assert_whole(tmp_path)
    disk.opens_ok, disk.free = 10**6, 10**9   # room again: the same run resumes from step 2
    again = run(cfg, tmp_path)
    assert again["status"] == "finished" and again["resumed_from_step"] == 2 and again["attempt"] == 2
    assert not checkpoint_path(tmp_path).exists()
    assert_whole(tmp_path)


def test_a_full_disk_at_a_row_takes_the_cut_row_back(hydra_cfg, tmp_path, monkeypatch):
    Disk(monkeypatch, only=("metrics.jsonl",), writes_ok=1, free=40)  # the second row is cut after 40 bytes
    with pytest.raises(WriteFault, match="metrics.jsonl: the disk is full"):
        run(hydra_cfg(*LONGER), tmp_path)
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and json.loads(rows[0])["step"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "fault"
    assert_whole(tmp_path)


def test_a_full_disk_at_the_model_save_records_fault_and_the_relaunch_finishes(hydra_cfg, tmp_path, monkeypatch):
    cfg = hydra_cfg(*LONGER)
    disk = Disk(monkeypatch, only=("model.safetensors",), free=100)
    with pytest.raises(WriteFault, match="model.safetensors: the disk is full"):
        run(cfg, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "fault" and summary["final_test_accuracy"] is None
    assert not (tmp_path / "model.safetensors").exists()      # never a truncated model
    assert read_checkpoint(checkpoint_path(tmp_path))["loop"]["step"] == 4
    assert_whole(tmp_path)
    disk.free = 10**9
    again = run(cfg, tmp_path)
    assert again["status"] == "finished" and again["resumed_from_step"] == 4
    read_weights(tmp_path / "model.safetensors")


def test_a_full_disk_at_the_last_summary_leaves_the_previous_one(hydra_cfg, tmp_path, monkeypatch):
    Disk(monkeypatch, only=("summary.json",), opens_ok=1)   # "running" is written, the final summary is not
    with pytest.raises(WriteFault, match="summary.json"):
        run(hydra_cfg(*TINY), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "running"   # the last good one; the pid is this process's: a relaunch sees it as killed
    assert_whole(tmp_path)


def test_a_directory_made_read_only_mid_run_is_a_fault(hydra_cfg, tmp_path, monkeypatch):
    Disk(monkeypatch, only=(CHECKPOINT,), refuse=errno.EACCES)
    with pytest.raises(WriteFault, match="no permission"):
        run(hydra_cfg(*LONGER), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "fault" and not checkpoint_path(tmp_path).exists()
    assert_whole(tmp_path)


@pytest.mark.parametrize("free", [300, 1500, 9000, 60000, 120000])
def test_wherever_the_disk_fills_every_file_stays_whole(free, hydra_cfg, tmp_path, monkeypatch):
    """The disk is full after `free` more bytes, wherever that falls (config, summary, a row, a
    checkpoint, the model): the run ends in a WriteFault or finishes, and every file is whole."""
    Disk(monkeypatch, free=free)
    try:
        summary = run(hydra_cfg(*LONGER), tmp_path / "run")
        assert summary["status"] == "finished"
    except WriteFault as fault:
        assert "the disk is full" in str(fault)
    assert_whole(tmp_path / "run")


def test_a_heartbeat_the_disk_refuses_does_not_stop_the_run(hydra_cfg, tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from pazo.config_schema import LoggerSchema
    from pazo.run.recorder import Recorder

    recorder = Recorder(tmp_path, OmegaConf.create({"seed": 0}), LoggerSchema(mode="disabled"))
    recorder.write_summary({"status": "running"})
    before = (tmp_path / "summary.json").read_text()
    Disk(monkeypatch, only=("summary.json",), free=10)
    recorder.beat()   # from the heartbeat thread: must not raise
    assert isinstance(recorder.beat_fault, WriteFault) and (tmp_path / "summary.json").read_text() == before
    assert not leftovers(tmp_path)
    recorder.close(failed=False)


# --- write_atomic: whole or not at all -----------------------------------------------------------------

@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt(),
                                   RuntimeError("writer crashed")])
def test_a_write_broken_off_keeps_the_old_file_and_leaves_no_tmp(error, tmp_path):
    path = tmp_path / "summary.json"
    path.write_text('{"status": "running"}')

    def writer(f):
        f.write(b'{"status": "fin')
        raise error

    with pytest.raises((WriteFault, KeyboardInterrupt, RuntimeError)):
        write_atomic(path, writer)
    assert path.read_text() == '{"status": "running"}' and not leftovers(tmp_path)


def test_write_atomic_sets_the_mode_before_any_byte(tmp_path):
    write_atomic(tmp_path / "secret.pt", b"x" * 10, mode=0o600)
    assert (tmp_path / "secret.pt").stat().st_mode & 0o777 == 0o600


def test_torch_save_on_a_full_disk_is_a_write_fault_naming_the_file(tmp_path, monkeypatch):
    Disk(monkeypatch, free=200)
    with pytest.raises(WriteFault, match="model.pt: the disk is full"):
        write_atomic(tmp_path / "model.pt", lambda f: torch.save({"w": torch.zeros(10000)}, f))
    assert not (tmp_path / "model.pt").exists() and not leftovers(tmp_path)


# --- train.log on a full disk --------------------------------------------------------------------------

def test_train_log_on_a_full_disk_says_so_once_and_carries_on(tmp_path, monkeypatch, capsys):
    handler = RunLogFile(str(tmp_path / "train.log"))

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(handler, "_open", full)
    log = logging.getLogger("pazo.fault-test")
    log.addHandler(handler)
    try:
        log.error("first")
        log.error("second")
    finally:
        log.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Logging error" not in err
    assert err.count("could not be written") == 1 and "No space left" in err


# --- the command line: one line and the exit status ----------------------------------------------------

def test_cli_run_directory_that_is_a_file(tmp_path, capsys):
    (tmp_path / "run").write_text("x")
    code, _, err = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 2 and "is a file, not a directory" in one_error_line(err)
    assert (tmp_path / "run").read_text() == "x"


def test_cli_default_output_folder_blocked_by_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").write_text("not a folder")
    code, _, err = run_cli(TINY, capsys)
    assert code == 2 and "outputs is a file" in one_error_line(err)


def test_cli_run_directory_without_write_access(tmp_path, capsys, monkeypatch):
    Disk(monkeypatch, refuse=errno.EACCES)
    code, _, err = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 2 and "you can write to" in one_error_line(err)
    assert not (tmp_path / "run" / ".hydra").exists()   # refused before Hydra wrote anything there


def test_cli_full_disk_at_the_start(tmp_path, capsys, monkeypatch):
    Disk(monkeypatch, free=0)
    code, _, err = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 75 and "the disk is full" in one_error_line(err) and "nothing was written" in err


def test_cli_full_disk_mid_run_says_what_is_recorded(tmp_path, capsys, monkeypatch):
    Disk(monkeypatch, only=(CHECKPOINT,), opens_ok=1)
    code, _, err = run_cli([*LONGER, f"hydra.run.dir={tmp_path}"], capsys)
    line = one_error_line(err)
    assert code == 75 and "records status fault after step 4" in line and "resumes from its checkpoint" in line
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "fault"
    assert (tmp_path / ".hydra" / "overrides.yaml").exists() and not list((tmp_path / ".hydra").glob("launch-*"))


@pytest.mark.parametrize("failing", ["config.yaml", "hydra.yaml", "overrides.yaml"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EIO])
def test_cli_hydras_own_record_writes_refused_are_one_line_and_leave_no_staging(failing, code, tmp_path, capsys,
                                                                               monkeypatch):
    """The disk fills up (or refuses) while Hydra writes the launch's record, after the check before
    the launch found room: one line, exit 75, and the directory keeps no staging folder."""
    import builtins

    import hydra.core.utils

    def refusing_open(path, *args, **kwargs):
        if Path(path).name == failing:
            raise OSError(code, os.strerror(code))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(hydra.core.utils, "open", refusing_open, raising=False)
    code_, _, err = run_cli([*TINY, f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    line = one_error_line(err)
    assert code_ == 75 and "Traceback" not in err
    assert f"could not write {tmp_path / 'run'}" in line and failing in line and "nothing of this launch" in line
    assert not list((tmp_path / "run" / ".hydra").glob("launch-*"))
    assert not (tmp_path / "run" / "summary.json").exists()


def test_every_file_of_a_run_that_holds_its_seed_is_readable_by_its_owner_only(tmp_path, capsys):
    """The guarantee assumes the seed secret: whatever file of the run directory holds it (the run's
    config.yaml, Hydra's record, a kept checkpoint) is 0600; the seed is in no file others may read."""
    import stat

    seed = 918273645
    code, _, err = run_cli([*TINY, f"seed={seed}", "train.keep_checkpoint=true", f"hydra.run.dir={tmp_path}"], capsys)
    assert code == 0, err
    holding = [p for p in tmp_path.rglob("*") if p.is_file() and (str(seed).encode() in p.read_bytes()
                                                                   or p.name == CHECKPOINT)]
    assert {p.relative_to(tmp_path).as_posix() for p in holding} >= {"config.yaml", ".hydra/config.yaml",
                                                                      ".hydra/overrides.yaml"}
    for p in holding:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
