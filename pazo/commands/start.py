"""One console entry point over several modules: `pazo-bench <name> [args]` and
`pazo-report <name> [args]` run module `<name>`'s `cli()` with `[args]` as its command line; each
module's `cli` is `command(main)`, the one start that `python -m pazo.<package>.<module>` and the
launchers in scripts/ run too (plugins, then `main`, ended by `finish`).

`--help` lists the names, one line each, without importing them; an unknown name is one line
`pazo: error: ...` and exit 2; a Ctrl-C is one line and exit 130 (a SIGTERM: 143), before the command starts
(`pazo.commands.interrupts`) and during it (a command with its own handling says more, e.g. a benchmark's).
The module then sees `sys.argv == ["<prog> <name>", *args]`: its argparse usage says `pazo-bench
methods`, and its result file's command is the one typed."""
from __future__ import annotations

import argparse
import errno
import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from pazo.errors import unknown_choice
from pazo.files.file_kinds import NotRegularFile
from pazo.commands.interrupts import restore, stop_status, stop_word, until_work_starts, work_starts
from pazo.plugins import load_plugins

#: an OSError that is the user's input, not the machine refusing a write: exit 2, not 75
_INPUT_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)


def usage(prog: str, title: str, commands: dict[str, tuple[str, str]]) -> str:
    width = max(map(len, commands))
    lines = [f"usage: {prog} <name> [args]     ({prog} <name> --help: the arguments of one)", "", f"{title}:"]
    lines += [f"  {name:{width}s}  {summary}" for name, (_, summary) in commands.items()]
    return "\n".join(lines)


def quiet_when_the_reader_leaves(entry):
    """A console entry point whose reader may go away (`pazo-train --help | head -1`): the output it
    did not read is dropped and the command ends quietly, with the status it was ending with, never
    a BrokenPipeError traceback (or Python's "Exception ignored" when stdout is flushed at exit). The
    output is flushed here for that reason, and stdout then points to the null device."""
    @functools.wraps(entry)
    def quiet(*args, **kwargs):
        status = 0
        try:
            try:
                return entry(*args, **kwargs)
            except SystemExit as stop:
                status = stop.code
                raise
            finally:
                sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (the exit's own flush would fail again)
            return status
    return quiet


@quiet_when_the_reader_leaves
def dispatch(prog: str, title: str, commands: dict[str, tuple[str, str]], argv: list[str] | None = None) -> int:
    """Run the command `argv[0]` names (`commands`: name -> (module, one-line summary)) with the
    rest of `argv` (default: `sys.argv[1:]`); its exit status. Ctrl-C is pazo's until the command
    starts, then the command's; the handler found is put back at the end (a caller in-process)."""
    previous = until_work_starts(f"before {prog} started: nothing was run")
    try:
        return _dispatch(prog, title, commands, sys.argv[1:] if argv is None else list(argv))
    finally:
        restore(previous)


def _dispatch(prog: str, title: str, commands: dict[str, tuple[str, str]], argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(usage(prog, title, commands))
        return 0
    if not argv:
        print(f"pazo: error: {prog} needs a command: {', '.join(commands)} ({prog} --help)", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"pazo: error: {unknown_choice(f'{prog} command', name, commands)}", file=sys.stderr)
        return 2
    load_plugins()   # (a plugin's methods, data sets and models are names the command may be given)
    module = importlib.import_module(commands[name][0])
    saved, sys.argv = sys.argv, [f"{prog} {name}", *rest]
    try:
        return finish(module.cli)
    finally:
        sys.argv = saved


def command(main: Callable[[], int | None]) -> Callable[[], NoReturn]:
    """The one start of a command module, `cli = command(main)`: what `pazo-bench <name>` and
    `pazo-report <name>` (`dispatch`), `python -m pazo.<package>.<module>` and the launcher in
    scripts/ run. It loads the plugins (their names are choices too), runs `main()` with the
    endings every command shares (`finish`) and exits with its status."""
    def cli() -> NoReturn:
        sys.exit(finish(main))
    return cli


def finish(main: Callable[[], int | None]) -> int:
    """`main()`'s exit status, ended as every pazo command ends: a Ctrl-C one line and 130 (a SIGTERM
    the command does not handle itself: 143); a `sys.exit("message")` the message and 1, as Python
    does; a reader gone (`| head`) 0; an output the machine refused (full disk, read-only folder) one
    line and 75, or 2 where it is the user's input. `sys.argv[0]` names the command in the
    interrupt's line."""
    load_plugins()
    work_starts()
    label = os.path.basename(sys.argv[0])
    try:
        code = main()
    except KeyboardInterrupt as stop:   # (a SIGTERM too, before the command handles it: `Terminated`)
        print(f"pazo: {stop_word(stop)}; {label} stopped", file=sys.stderr)
        return stop_status(stop)
    except SystemExit as stop:
        code = stop.code
        if not (code is None or isinstance(code, int)):
            print(code, file=sys.stderr)   # sys.exit("message"): the message and status 1, as Python does
            return 1
    except BrokenPipeError:   # the reader went away (`| head`): what it read was all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (the exit's own flush would fail again)
        return 0
    except OSError as err:  # an output the machine refused (full disk, read-only folder): one line, not a traceback
        print(f"pazo: error: {os_error_line(err)}", file=sys.stderr)
        return 2 if err.errno in _INPUT_ERRNOS or isinstance(err, NotRegularFile) else 75
    return code or 0


def summary_of(doc: str | None) -> str:
    """A module docstring's first paragraph as one sentence for argparse's description (its first
    line alone stops mid-sentence where the paragraph wraps)."""
    paragraph = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


def os_error_line(err: OSError) -> str:
    """An OSError as a user reads it: the file and the reason (a `pazo.files.rundir.WriteFault` says both)."""
    if err.filename is None or err.strerror is None:
        return str(err)
    return f"{err.filename}: {err.strerror}"


def at_least(low: int):
    """An argparse type: an integer >= low (else argparse's one-line error)."""
    def integer(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value
    return integer


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (an unknown option, a bad value) are one line,
    `pazo: error: <what>`, and exit 2, as every other mistake of a pazo command line."""

    def error(self, message: str):
        self.exit(2, f"pazo: error: {message}\n")
