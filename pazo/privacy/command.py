"""`pazo-privacy`: the console script's first module. Standard library only, so that a Ctrl-C while
numpy and the accountants load is one line and exit 130 (`pazo.commands.interrupts`); the command itself is
`pazo.privacy.cli`."""
from __future__ import annotations

import sys

from pazo.commands.start import quiet_when_the_reader_leaves
from pazo.commands.interrupts import until_work_starts, work_starts


@quiet_when_the_reader_leaves
def cli() -> None:
    until_work_starts("before pazo-privacy started: nothing was computed")
    from pazo.privacy.cli import main

    work_starts()   # (main says an interrupt in its own line)
    sys.exit(main())


if __name__ == "__main__":
    cli()
