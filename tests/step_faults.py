"""A training step made to fail, or to be signalled, at a chosen step: for the tests of what a
crash, an interrupt or a preemption in the middle of a run leaves behind (records, checkpoints, a
refused relaunch, a resumed run)."""
from __future__ import annotations

import os
import signal


def fail_at_step(monkeypatch, owner, name: str, at: int, error: BaseException):
    """Patch `owner.name`, a step whose last positional argument is the step number (a method's
    `step(x, y, t)`, the loop's `timed_step(r, sampler, loop, t)`), to raise `error` at step `at`
    and run as before at every other step; returns the original, to put back."""
    original = getattr(owner, name)

    def step(*args):
        if args[-1] == at:
            raise error
        return original(*args)
    monkeypatch.setattr(owner, name, step)
    return original


def signalled_at_step(original, at: int, signum: int = signal.SIGTERM):
    """`original`, a step whose last positional argument is the step number (as `fail_at_step`
    takes it), sending `signum` to this process once it has taken step `at`: a scheduler's
    preemption or a Ctrl-C arriving mid-run, honoured after that step."""
    def step(*args):
        out = original(*args)
        if args[-1] == at:
            os.kill(os.getpid(), signum)
        return out
    return step
