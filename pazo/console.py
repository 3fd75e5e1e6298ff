"""Run messages on the terminal. pazo's modules log through `logging.getLogger(__name__)`; this
handler shows their lines plain (`%(message)s`): info on stdout, warnings and errors on stderr.

`pazo-train` / `python -m pazo.train` get it from Hydra's job logging
(`configs/hydra/job_logging/pazo.yaml`, which also writes the lines, with timestamps, to the run
directory's `train.log`); entry points without Hydra (`pazo-sweep`) call `use_console()`."""
from __future__ import annotations

import logging
import sys


class ConsoleHandler(logging.StreamHandler):
    """Info and below to the current `sys.stdout`, warnings and up to the current `sys.stderr`,
    looked up at each record (so that redirections made after set-up, e.g. pytest's, apply)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        super().emit(record)


def use_console(name: str = "pazo") -> None:
    """Show the INFO lines of logger `name` (and its children) on the terminal; adds no second
    handler where one is already in place (an earlier call, or Hydra's job logging on the root)."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    if not any(isinstance(h, ConsoleHandler) for h in logger.handlers + logging.getLogger().handlers):
        logger.addHandler(ConsoleHandler())
