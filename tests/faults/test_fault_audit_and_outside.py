"""The audit's own faults and commands typed outside the checkout (round two): `pazo-audit` into a
run directory that is a file, or onto a full disk, is one line before Hydra writes; a non-private
method is refused with the audit's own reason (not a training run's advice to use privacy=none,
which the audit then refuses); `pazo-train` typed from a directory outside the checkout without
hydra.run.dir writes below that directory."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from conftest import run_cache
from fault_inputs_helpers import assert_one_error, run_entry
from fault_runtime_helpers import Disk

from pazo import REPO_ROOT
from pazo.audit import command as audit_command
from pazo.audit import run as audit_run
from pazo.methods import METHODS, method_info
from pazo.files.rundir import WriteFault

NON_PRIVATE = sorted(n for n in METHODS.names() if not method_info(n).private)


@pytest.mark.parametrize("method", NON_PRIVATE)
def test_the_audit_refuses_a_non_private_method_with_its_own_reason(method, capsys):
    code, _, err = run_entry(audit_command.cli, [f"method={method}"], capsys)
    line = assert_one_error(code, err, method, "non-private", "audit")
    assert code == 2 and "privacy=none" not in line, line


def test_an_audit_into_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    code, _, err = run_entry(audit_command.cli, ["method=dpzero", f"hydra.run.dir={target}"], capsys)
    assert_one_error(code, err, str(target))
    assert code == 2 and target.read_text() == "mine"


def test_an_audit_onto_a_full_disk_is_one_line_before_hydra_writes(tmp_path, capsys, monkeypatch):
    Disk(monkeypatch, free=0)
    run_dir = tmp_path / "audit"
    code, _, err = run_entry(audit_command.cli, ["method=dpzero", f"hydra.run.dir={run_dir}"], capsys)
    assert_one_error(code, err, "disk is full")
    assert code == 75 and not (run_dir / ".hydra").exists()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_an_audit_whose_own_files_the_disk_refuses_is_one_line(code, tmp_path, capsys, monkeypatch):
    """The disk fills up (or turns read-only) after Hydra's record, while the audit writes its own
    files: one line, exit 75, no traceback."""
    def refused(cfg, run_dir, hydra_record=None, last=None):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(audit_run, "run_audit", refused)
    code_, _, err = run_entry(audit_command.cli, ["method=dpzero", f"hydra.run.dir={tmp_path / 'audit'}"], capsys)
    assert_one_error(code_, err, "the audit wrote no result")
    assert code_ == 75 and "Traceback" not in err


@given(st.sampled_from(sorted(errno.errorcode)))
def test_only_a_disk_that_refuses_writes_is_called_a_disk_fault(code):
    """A data file the audit cannot read (EACCES, ENOENT, EIO on a read, ...) is not reported as a
    disk that refused a write; a full, over-quota or read-only disk, or a WriteFault, is."""
    err = OSError(code, os.strerror(code))
    fault = audit_run.disk_fault(err, "/runs/a")
    assert (fault is not None) == (code in (errno.ENOSPC, errno.EDQUOT, errno.EROFS))
    wrapped = WriteFault("/runs/a/audit.json", err)
    assert audit_run.disk_fault(wrapped, "/runs/a") is wrapped


@pytest.mark.slow
def test_a_run_typed_outside_the_checkout_without_a_run_dir_writes_below_the_working_directory(tmp_path):
    env = {**os.environ, "WANDB_SILENT": "true", "PAZO_CACHE_DIR": str(run_cache(tmp_path / "cache")),
           "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "pazo.train", "method=dpzero", "train.steps=1", "device=cpu",
                           "logger.mode=disabled"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    runs = list((tmp_path / "outputs" / "runs").glob("digits/dpzero/*/summary.json"))
    assert len(runs) == 1


def test_a_sweeps_outputs_default_to_the_working_directory(tmp_path, monkeypatch, capsys):
    from pazo.sweep import command as sweep
    monkeypatch.chdir(tmp_path)
    code, out, err = run_entry(sweep.main, ["demo", "--dry-run"], capsys)
    assert code == 0, err
    assert f"in {tmp_path / 'outputs' / 'sweeps' / 'demo'}" in out + err, out + err


@pytest.mark.parametrize("argv,word", [(["device=cuda"], "CUDA is not available"),
                                       (["--launcher", "slurm"], "sbatch")])
def test_a_sweep_that_cannot_run_here_is_one_line_before_the_first_run(argv, word, tmp_path, capsys, monkeypatch):
    import shutil

    import torch

    from pazo.sweep import command as sweep
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sweep, "launch", lambda *a, **k: pytest.fail("a run was launched"))
    code, _, err = run_entry(sweep.main, ["demo", "--out", str(tmp_path), *argv], capsys)
    assert code == 2
    assert_one_error(code, err, word, "no run was started")


def test_a_sweep_whose_data_are_missing_is_one_line_before_the_first_run(tmp_path, capsys, monkeypatch):
    """Without `skip_missing_data` in the spec, a setting whose data are absent refuses the sweep
    before any run starts (the loader's own line: what is missing, where, how to get it); a dry run
    shows the plan and says which settings cannot run here."""
    from pazo.sweep import command as sweep
    monkeypatch.setattr(sweep, "launch", lambda *a, **k: pytest.fail("a run was launched"))
    argv = ["table1_cifar10", "--methods", "dpzero", "--out", str(tmp_path / "sweeps"),
            f"dataset.root={tmp_path / 'nodata'}"]
    code, _, err = run_entry(sweep.main, argv, capsys)
    line = assert_one_error(code, err, "CIFAR-10 is missing", str(tmp_path / "nodata"), "no run was started",
                            "skip_missing_data")
    assert code == 2 and ".;" not in line and not (tmp_path / "sweeps").exists()
    code, out, err = run_entry(sweep.main, [*argv, "--dry-run"], capsys)
    assert code == 0 and "setting cifar10 cannot run here" in out + err
