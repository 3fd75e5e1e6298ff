"""The runs a sweep starts as subprocesses, and what a Ctrl-C (or a SIGTERM, a SIGHUP) does to them.

While a sweep's local launcher (sequential or joblib) runs them (`passing_on_interrupts`), each run
is a subprocess in its own process group, so a Ctrl-C at the terminal (SIGINT to the foreground
group) reaches the sweep alone. The sweep passes each Ctrl-C on, once, to every run in progress: a
run stops after its step in progress and writes its checkpoint and summary (`pazo.run.checkpoint`), a
second Ctrl-C stops it at once, as for `pazo-train` itself. No new run starts after the first; the
launcher waits for the runs in progress to end, and the sweep then ends with one line and exit
status 130 (`Interrupted`), nothing written lost, and the same command resumes it. A SIGTERM (a `kill`, a
scheduler's time limit) is passed on as it came, and a SIGHUP (the terminal gone) as a SIGTERM, the
signal a run answers by saving its checkpoint and ending `preempted`: the sweep then ends the same
way, with the exit status of the signal it got (143 for SIGTERM, 129 for SIGHUP). The runs' stdin
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
#: the signals a sweep passes on to its runs, and the signal each run gets for it (a run saves its
#: checkpoint on SIGINT and SIGTERM; SIGHUP would end it at once)
PASSED_ON = {signal.SIGINT: signal.SIGINT, signal.SIGTERM: signal.SIGTERM, signal.SIGHUP: signal.SIGTERM}
STOPPING = (b"pazo: stopping: each run in progress stops after its step and writes its checkpoint; no new run "
            b"starts (Ctrl-C again stops the runs at once)\n")


def stopping_line(signum: int) -> bytes:
    """What the sweep says when the first signal arrives."""
    if signum == signal.SIGINT:
        return STOPPING
    return (f"pazo: stopping ({signal.Signals(signum).name}): each run in progress stops after its step and "
            "writes its checkpoint; no new run starts\n").encode()


def exit_status(signum: int | None) -> int:
    """A sweep's exit status once stopped by `signum` (128 + the signal, as a shell reports it)."""
    return EXIT_INTERRUPTED if signum is None else 128 + int(signum)


class Interrupted(Exception):
    """The sweep's runs were stopped by a Ctrl-C (or a SIGTERM, a SIGHUP: `signum`); the message says
    what was done."""

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return exit_status(self.signum)

    @property
    def how(self) -> str:
        """`interrupted`, or for another signal than SIGINT `interrupted by SIGTERM`."""
        return "interrupted" if self.signum == signal.SIGINT else f"interrupted by {signal.Signals(self.signum).name}"


class ChildRuns:
    """The subprocesses started and not yet ended, and whether a Ctrl-C asked the sweep to stop."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._own_groups = False
        self.stopping = False
        self.signum: int | None = None   # the first signal that stopped the sweep

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
            _interrupt(process, self.signum)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def _on_signal(self, signum, frame) -> None:
        """A Ctrl-C, SIGTERM or SIGHUP: no run starts from now, and each run in progress gets it
        (`PASSED_ON`). (No lock and no logging here: the handler runs between two bytecodes of the
        main thread, which may hold either.)"""
        if not self.stopping:
            self.signum = signum
            with contextlib.suppress(OSError):   # (after a SIGHUP the terminal may be gone)
                os.write(2, stopping_line(signum))
        self.stopping = True
        for process in tuple(self._running):
            _interrupt(process, signum)


def _interrupt(process: subprocess.Popen, signum: int | None) -> None:
    with contextlib.suppress(ProcessLookupError, OSError):
        process.send_signal(PASSED_ON.get(signum, signal.SIGINT))


#: the runs of this process's sweep
CHILDREN = ChildRuns()


@contextlib.contextmanager
def passing_on_interrupts(children: ChildRuns = CHILDREN):
    """While the launcher runs: each run in its own process group, each Ctrl-C, SIGTERM or SIGHUP passed
    on to the runs in progress (`PASSED_ON`), no run started after one. On leaving, the previous
    handlers are back and the stop is forgotten (a later launch, or a run started by hand in the same
    process, starts); the caller reads `children.stopping` (and `children.signum`) inside the block to
    know whether and how the runs were stopped. (Off the main thread, where no handler can be set, the
    runs are started as usual.)"""
    if threading.current_thread() is not threading.main_thread():
        yield children
        return
    children.stopping, children.signum, children._own_groups = False, None, True
    previous = {signum: signal.signal(signum, children._on_signal) for signum in PASSED_ON}
    try:
        yield children
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        children.stopping, children.signum, children._own_groups = False, None, False
