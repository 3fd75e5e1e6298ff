"""Run messages on the terminal. pazo's modules log through `logging.getLogger(__name__)`; this
handler shows their lines plain (`%(message)s`): info on stdout, warnings and errors on stderr.

`pazo-train` / `python -m pazo.train` get it from Hydra's job logging
(`configs/hydra/job_logging/pazo.yaml`, which also writes the lines, with timestamps, to the run
directory's `train.log` through `RunLogFile`); entry points without Hydra (`pazo-sweep`) call
`use_console()`."""
from __future__ import annotations

import logging
import sys


#: `extra=` of a line written to train.log but not shown on the terminal, which has shown it already
#: (a multirun's header lines that its jobs share)
LOG_FILE_ONLY = {"pazo_on_console": True}
#: `extra=` of a line shown on the terminal but not written to train.log (a multirun's line for a job)
CONSOLE_ONLY = {"pazo_console_only": True}


class ConsoleHandler(logging.StreamHandler):
    """Info and below to the current `sys.stdout`, warnings and up to the current `sys.stderr`,
    looked up at each record (so that redirections made after set-up, e.g. pytest's, apply). A
    record is shown once however many console handlers it reaches: in one process an entry point's
    job logging (a console on the root) can come after `use_console` (a sweep's, the library's)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "pazo_on_console", False):
            return   # a console handler lower on its way up showed it (`use_console`'s, then Hydra's on the root)
        record.pazo_on_console = True
        self.stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        super().emit(record)


def use_console(name: str = "pazo") -> None:
    """Show the INFO lines of logger `name` (and its children) on the terminal; adds no second
    handler where one already shows them (an earlier call for it or a logger above it, whose
    handlers its lines reach too, or Hydra's job logging on the root)."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    if _shown_on_console(logger):
        return
    logger.addHandler(ConsoleHandler())
    for below in list(logging.root.manager.loggerDict.values()):   # (their lines now reach this one)
        if isinstance(below, logging.Logger) and below.name.startswith(f"{name}.") and below.propagate \
                and _shown_on_console(below.parent):
            below.handlers[:] = [h for h in below.handlers if not isinstance(h, ConsoleHandler)]


def _shown_on_console(logger: logging.Logger) -> bool:
    """Whether a ConsoleHandler on `logger` or on a logger its records propagate to shows them."""
    while logger is not None:
        if any(isinstance(h, ConsoleHandler) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def spare_absl_stream() -> None:
    """absl (which dp-accounting imports) makes one handler at its import, on the `sys.stderr` of that
    moment, and closes that stream when the handler is closed unless it is then `sys.stderr` or
    `sys.stdout`. Hydra's logging set-up (logging.config) closes every handler the process ever made,
    so a run started in-process after stderr was put back (pytest's capture, a notebook's stream,
    `contextlib.redirect_stderr`) closed the stream absl came in under. Pointed at `sys.__stderr__`,
    which absl never closes; it writes its records to the current `sys.stderr` all the same."""
    absl_logging = sys.modules.get("absl.logging")
    handler = absl_logging and absl_logging.get_absl_handler()
    if handler is not None and sys.__stderr__ is not None:
        handler.python_handler.stream = sys.__stderr__


class RunLogFile(logging.FileHandler):
    """The run directory's `train.log`, opened at its first line. A write the machine refuses (a
    full disk, a read-only directory) is said once on stderr, and the lines go on to the terminal
    only: never a "Logging error" traceback per line.

    `held=True` (a run's, `configs/hydra/job_logging/pazo.yaml`): the lines are kept in memory, the
    file unopened, until the launch is accepted (`open_run_logs`), so that a launch refused before
    then leaves no train.log in a new directory and an existing directory's train.log as it was
    (the terminal has shown the lines). At most `HELD_LINES` are kept; the rest are counted."""

    #: the most lines held before the launch is accepted (a set-up never says nearly as many)
    HELD_LINES = 10_000

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = None, delay: bool = True,
                 held: bool = False) -> None:
        super().__init__(filename, mode, encoding, delay=True)
        self.failed = False
        self.held: list[logging.LogRecord] | None = [] if held else None
        self.not_kept = 0

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed or getattr(record, "pazo_console_only", False):
            return
        if self.held is not None:
            if len(self.held) < self.HELD_LINES:
                self.held.append(record)
            else:
                self.not_kept += 1
            return
        try:
            super().emit(record)   # (FileHandler opens the file outside its own error handling)
        except OSError as err:
            self._give_up(err)

    def start_writing(self) -> None:
        """The launch is accepted: write the lines held so far, and every line from now on."""
        held, self.held = self.held, None
        for record in held or []:
            self.emit(record)
        if self.not_kept:
            self.emit(logging.makeLogRecord({"name": "pazo", "levelno": logging.INFO, "levelname": "INFO",
                                             "msg": f"({self.not_kept} more lines of the set-up not kept here)"}))
            self.not_kept = 0

    def handleError(self, record: logging.LogRecord) -> None:
        self._give_up(sys.exc_info()[1])

    def _give_up(self, err) -> None:
        if not self.failed:
            self.failed = True
            sys.stderr.write(f"pazo: {self.baseFilename} could not be written ({err}); the run's lines go to the "
                             "terminal only from here\n")
        try:
            if self.stream is not None:
                self.stream.close()
        except OSError:
            pass
        self.stream = None

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # the last flush on a full disk
            pass


def open_run_logs() -> None:
    """The launch is accepted: every held `RunLogFile` (on the root logger, where Hydra's job logging
    puts it, or on any other) writes its lines from now on."""
    loggers = [logging.root, *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, RunLogFile):
                handler.start_writing()
