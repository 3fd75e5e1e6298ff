"""A Ctrl-C in an audit (`pazo.audit.command.main`) says what it left, as the audit's own summary
says: before the audit wrote its result, nothing (exit 130); after (while it logs its verdict, before
the process ends), its result, and the audit exits with its verdict's status (was: "did not finish
and wrote no result (run it again)", exit 130, beside the audit.json it had written)."""
import json
import logging
import os
import signal
from types import SimpleNamespace

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

import pazo.audit.command as audit_command
import pazo.audit.run as audit_run
from conftest import run_cache
from test_audit import audit_cfg


@pytest.mark.parametrize("pressed_in", ["attack", "log_audit"])
def test_a_ctrl_c_in_an_audit_says_whether_its_result_was_written(pressed_in, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    run_dir = tmp_path / "run"
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: SimpleNamespace(
        runtime=SimpleNamespace(output_dir=str(run_dir)), output_subdir=".hydra", mode=RunMode.RUN,
        job=SimpleNamespace(num=0), overrides=SimpleNamespace(task=[]))))
    original = getattr(audit_run, pressed_in)

    def pressed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)
    monkeypatch.setattr(audit_run, pressed_in, pressed)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stop:
            audit_command.main(audit_cfg("method=dpzero", "train.steps=4", "audit.canaries=20"))
    finally:
        signal.signal(signal.SIGINT, saved)
    [line] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    written = (run_dir / "audit.json").exists()
    assert written == (pressed_in == "log_audit")
    if written:
        verdict = json.loads((run_dir / "summary.json").read_text())["audit"]["exceeds_printed"]
        assert stop.value.code == (audit_command.NOT_AS_PRIVATE if verdict else 0)
        assert line == f"pazo: interrupted after the audit ended: {run_dir}/audit.json holds its result"
    else:
        assert stop.value.code == 130 and "did not finish and wrote no result" in line
