"""Ctrl-C or SIGTERM before a command's work starts: one line and exit status 130 or 143 (the
shell's status for SIGINT, SIGTERM), never a KeyboardInterrupt traceback out of an import, a
plugin's module or Hydra's composition of the config, nor a silent death that leaves a folder.

Every entry point calls `until_work_starts(...)` first, before it imports anything heavy or loads
a plugin, and `work_starts()` where its own handling of an interrupt takes over (a training run
records it and says how to resume, a benchmark says that nothing was written). From there until the
command's own handling of SIGTERM (a training run's loop records `preempted`), a SIGTERM raises
`Terminated`, a KeyboardInterrupt: it takes Ctrl-C's way out (the same `except` clauses, which drop
what was staged), with its own word and status (`stop_word`, `stop_status`). SIGTERM is what a
`kill`, `timeout`, torchrun and SLURM send. Standard library only (and `pazo.errors`, as light):
this module is imported in the first milliseconds of a command, where a Ctrl-C would otherwise meet
Python's default handler."""
from __future__ import annotations

import os
import signal
import threading

from pazo.errors import PazoExit

#: the exit status of a command ended by Ctrl-C (128 + SIGINT, what a shell reports)
INTERRUPTED = 130
#: the exit status of a command ended by SIGTERM before its own handling of it (128 + SIGTERM)
TERMINATED = 143
#: how a command ended by each signal says so, and its status
_ENDINGS = {signal.SIGINT: ("interrupted", INTERRUPTED), signal.SIGTERM: ("terminated", TERMINATED)}


class StoppedBeforeWork(PazoExit):
    """The exit a Ctrl-C or SIGTERM before the work starts raises (status 130 or 143): an exit of
    pazo's own, told apart from a `sys.exit` in a plugin's module (`pazo.plugins`) by its class."""


class Terminated(KeyboardInterrupt):
    """A SIGTERM after `work_starts()`, before the command handles SIGTERM itself: a KeyboardInterrupt,
    so that every clause that ends the command on a Ctrl-C (one line, nothing half-written) ends it
    on a SIGTERM too, saying `terminated` and exiting 143."""


def stop_signal(stop: KeyboardInterrupt) -> signal.Signals:
    """The signal that ended a command with `stop`: SIGTERM (`Terminated`) or SIGINT (Ctrl-C)."""
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT


def stop_word(stop: KeyboardInterrupt) -> str:
    """How a command ended by `stop` says it: `interrupted` (Ctrl-C) or `terminated` (SIGTERM)."""
    return _ENDINGS[stop_signal(stop)][0]


def stop_status(stop: KeyboardInterrupt) -> int:
    """The exit status of a command ended by `stop`: 130 (Ctrl-C) or 143 (SIGTERM)."""
    return _ENDINGS[stop_signal(stop)][1]


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()   # (signals can be set only there)


def until_work_starts(what: str) -> dict | None:
    """From now until `work_starts()`, a Ctrl-C prints `pazo: interrupted <what>` and ends the
    process with status 130, a SIGTERM `pazo: terminated <what>` and 143 (unless SIGTERM was
    ignored when the process started: it stays ignored). The SystemExit it raises passes `except
    Exception` on the way out, so no library on the stack turns it into a traceback. Returns the
    handlers it replaced (for a caller in a longer-lived process, `restore`)."""
    def stop(signum, frame):
        word, status = _ENDINGS[signum]
        os.write(2, f"pazo: {word} {what}\n".encode())   # (no print or logging in a handler: they take locks)
        raise StoppedBeforeWork(status)
    stop.before_work = True   # (`work_starts` recognises it)

    if not _in_main_thread():
        return None
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, stop)}
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, stop)
    return previous


def restore(previous: dict | None) -> None:
    """Put back the handlers `until_work_starts` replaced (None: it replaced none)."""
    if previous is None or not _in_main_thread():
        return
    for signum, handler in previous.items():
        if handler is not None:   # (None: one set outside Python, which cannot be put back from here)
            signal.signal(signum, handler)


def _raise_terminated(signum, frame):
    raise Terminated


def work_starts() -> None:
    """Hand Ctrl-C back to Python (a KeyboardInterrupt), and a SIGTERM that `until_work_starts` would
    have ended to `Terminated`: the command's own handling of an interrupt applies from here. (A
    SIGTERM handler of another, e.g. a multirun's between its jobs, is kept.)"""
    if _in_main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if getattr(signal.getsignal(signal.SIGTERM), "before_work", False):
            signal.signal(signal.SIGTERM, _raise_terminated)


def sigterm_handled_from_now() -> None:
    """The command handles SIGTERM itself from now (a training run's loop: `preempted`, which puts
    back the handler it found when it ends): pazo's `Terminated` is done, and Python's default is
    back (after the loop the run's files are written, and a SIGTERM ends the process as it always
    did). A SIGTERM handler of another (a multirun's) is kept."""
    if _in_main_thread() and signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
