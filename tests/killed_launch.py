"""Launches of `pazo.train.run` in this process, stopped after a few steps by a kill: shared by the
relaunch walks (tests/faults/test_fault_relaunches.py) and the loggers' tests (tests/run/test_loggers.py).

A SIGKILL is played by an exception (`Killed`) that skips every write the killed process could not
have made, and the pid of a process that has ended in its summary.json; SIGTERM and SIGINT are real
signals, honoured after the step; a crash is an exception from the step."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pazo.run.loop as training_loop
import pazo.train as train
from pazo.errors import ConfigError
from pazo.run.recorder import Recorder

class Killed(BaseException):
    """A SIGKILL: the process ends at once, writing nothing more."""


def dead_pid() -> int:
    """The pid of a process that has ended (a killed launch's summary names one)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def killed_recorder_fail(closes_outlets: bool):
    """`Recorder.fail` for a SIGKILL: no summary, nothing recorded. `closes_outlets`: metrics.jsonl
    is closed and W&B finished, as what W&B was sent reaches it (its service flushes after the kill);
    otherwise nothing is closed, so the loggers' files stay as a kill leaves them."""
    def fail(self, summary):
        if not closes_outlets:
            return None
        self._metrics.close()
        if self.wandb is not None:
            self.wandb.finish(exit_code=1)
            self.wandb = None
        return None
    return fail


def stopping_step(real_step, kill: str | None, after: int):
    """`pazo.run.loop.timed_step` that stops the launch by `kill` after its `after`-th step."""
    done = []

    def step(r, sampler, loop, t):
        stats = real_step(r, sampler, loop, t)
        done.append(t)
        if kill is not None and len(done) == after:
            if kill == "SIGKILL":
                raise Killed
            if kill == "crash":
                raise RuntimeError("injected crash")
            os.kill(os.getpid(), getattr(signal, kill))   # honoured after this step
        return stats
    return step


def launch(cfg, run_dir: Path, kill: str | None, after: int, monkeypatch, closes_outlets: bool = False) -> str:
    """Run `cfg` into `run_dir`, stopped by `kill` ("SIGKILL", "SIGTERM",
    "SIGINT" or "crash") after `after` steps of this
    launch (None: to its end); returns how it ended: "refused", "ran" or the kill.
    `closes_outlets`: see `killed_recorder_fail`."""
    with monkeypatch.context() as patch:
        patch.setattr(training_loop, "timed_step", stopping_step(training_loop.timed_step, kill, after))
        if kill == "SIGKILL":
            patch.setattr(Recorder, "fail", killed_recorder_fail(closes_outlets))
        try:
            train.run(cfg, run_dir)
        except ConfigError:
            return "refused"
        except Killed:
            summary = json.loads((run_dir / "summary.json").read_text())
            (run_dir / "summary.json").write_text(json.dumps({**summary, "pid": dead_pid()}))
            return kill
        except (RuntimeError, KeyboardInterrupt):
            return kill
    return "ran"
