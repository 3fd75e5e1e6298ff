"""The runs a sweep starts as subprocesses, and what a Ctrl-C does to them.

While a sweep's local launcher (sequential or joblib) runs them (`passing_on_interrupts`), each run
is a subprocess in its own process group, so a Ctrl-C at the terminal (SIGINT to the foreground
group) reaches the sweep alone. The sweep passes each Ctrl-C on, once, to every run in progress: a
run stops after its step in progress and writes its checkpoint and summary (`pazo.checkpoint`), a
second Ctrl-C stops it at once, as for `pazo-train` itself. No new run starts after the first; the
launcher waits for the runs in progress to end, and the sweep then ends with one line and exit
status 130 (`Interrupted`), nothing written lost, and the same command resumes it. The runs' stdin
is closed: a run in a background process group that read the terminal would be stopped for good.

Outside that context (a SLURM job's run) a run is a plain subprocess in the caller's process group.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading

#: a sweep's exit status once interrupted (128 + SIGINT, as a shell reports a Ctrl-C)
EXIT_INTERRUPTED = 130
STOPPING = (b"pazo: stopping: each run in progress stops after its step and writes its checkpoint; no new run "
            b"starts (Ctrl-C again stops the runs at once)\n")


class Interrupted(Exception):
    """The sweep's runs were stopped by a Ctrl-C; the message says what was done."""


class ChildRuns:
    """The subprocesses started and not yet ended, and whether a Ctrl-C asked the sweep to stop."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._own_groups = False
        self.stopping = False

    def run(self, cmd: list[str], **popen) -> int | None:
        """Run `cmd` to its end and return its exit status; None, and nothing started, once the
        sweep is stopping."""
        with self._lock:
            if self.stopping:
                return None
            extra = {"process_group": 0, "stdin": subprocess.DEVNULL} if self._own_groups else {}
            process = subprocess.Popen(cmd, **popen, **extra)
            self._running.add(process)
        if self.stopping:   # a Ctrl-C came while it started, after the handler had looked at the runs
            _interrupt(process)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def _on_sigint(self, signum, frame) -> None:
        """A Ctrl-C: no run starts from now, and each run in progress gets it. (No lock and no logging
        here: the handler runs between two bytecodes of the main thread, which may hold either.)"""
        if not self.stopping:
            os.write(2, STOPPING)
        self.stopping = True
        for process in tuple(self._running):
            _interrupt(process)


def _interrupt(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, OSError):
        process.send_signal(signal.SIGINT)


#: the runs of this process's sweep
CHILDREN = ChildRuns()


@contextlib.contextmanager
def passing_on_interrupts(children: ChildRuns = CHILDREN):
    """While the launcher runs: each run in its own process group, each Ctrl-C passed on to the runs
    in progress, no run started after one. On leaving, the previous SIGINT handler is back; the
    caller reads `children.stopping` to know whether the runs were interrupted. (Off the main thread,
    where no handler can be set, the runs are started as usual.)"""
    if threading.current_thread() is not threading.main_thread():
        yield children
        return
    children.stopping, children._own_groups = False, True
    previous = signal.signal(signal.SIGINT, children._on_sigint)
    try:
        yield children
    finally:
        signal.signal(signal.SIGINT, previous)
        children._own_groups = False
