"""Ctrl-C before a command's work starts: one line and exit status 130 (the shell's status for
SIGINT), never a KeyboardInterrupt traceback out of an import, a plugin's module or Hydra's
composition of the config.

Every entry point calls `until_work_starts(...)` first, before it imports anything heavy or loads
a plugin, and `work_starts()` where its own handling of an interrupt takes over (a training run
records it and says how to resume, a benchmark says that nothing was written). Standard library
only (and `pazo.errors`, as light): this module is imported in the first milliseconds of a command,
where a Ctrl-C would otherwise meet Python's default handler."""
from __future__ import annotations

import os
import signal
import threading

from pazo.errors import PazoExit

#: the exit status of a command ended by Ctrl-C (128 + SIGINT, what a shell reports)
INTERRUPTED = 130


class StoppedBeforeWork(PazoExit):
    """The exit a Ctrl-C before the work starts raises (status 130): an exit of pazo's own, told
    apart from a `sys.exit` in a plugin's module (`pazo.plugins`) by its class."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()   # (signals can be set only there)


def until_work_starts(what: str):
    """From now until `work_starts()`, a Ctrl-C prints `pazo: interrupted <what>` and ends the
    process with status 130. The SystemExit it raises passes `except Exception` on the way out, so
    no library on the stack turns it into a traceback. Returns the handler it replaced (for a caller
    in a longer-lived process, `restore`)."""
    line = f"pazo: interrupted {what}\n".encode()

    def stop(signum, frame):
        os.write(2, line)   # (no print or logging in a handler: they take locks the interrupted code may hold)
        raise StoppedBeforeWork(INTERRUPTED)

    return signal.signal(signal.SIGINT, stop) if _in_main_thread() else None


def restore(previous) -> None:
    """Put back the handler `until_work_starts` replaced (None: it replaced none)."""
    if previous is not None and _in_main_thread():
        signal.signal(signal.SIGINT, previous)


def work_starts() -> None:
    """Hand Ctrl-C back to Python (a KeyboardInterrupt): the command's own handling of an interrupt
    applies from here."""
    if _in_main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
