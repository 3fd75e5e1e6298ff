"""A training step made to fail at a chosen step: for the tests of what a crash or an interrupt
in the middle of a run leaves behind (records, checkpoints, a refused relaunch)."""
from __future__ import annotations


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
