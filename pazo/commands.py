"""One console entry point over several modules: `pazo-bench <name> [args]` and
`pazo-report <name> [args]` run module `<name>`'s `cli()` with `[args]` as its command line.

`--help` lists the names, one line each, without importing them; an unknown name is one line
`pazo: error: ...` and exit 2. The module then sees `sys.argv == ["<prog> <name>", *args]`: its
argparse usage says `pazo-bench methods`, and its result file's command is the one typed."""
from __future__ import annotations

import argparse
import importlib
import sys


def usage(prog: str, title: str, commands: dict[str, tuple[str, str]]) -> str:
    width = max(map(len, commands))
    lines = [f"usage: {prog} <name> [args]     ({prog} <name> --help: the arguments of one)", "", f"{title}:"]
    lines += [f"  {name:{width}s}  {summary}" for name, (_, summary) in commands.items()]
    return "\n".join(lines)


def dispatch(prog: str, title: str, commands: dict[str, tuple[str, str]], argv: list[str] | None = None) -> int:
    """Run the command `argv[0]` names (`commands`: name -> (module, one-line summary)) with the
    rest of `argv` (default: `sys.argv[1:]`); its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage(prog, title, commands))
        return 0
    if not argv:
        print(f"pazo: error: {prog} needs a command: {', '.join(commands)} ({prog} --help)", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"pazo: error: unknown {prog} command {name!r}; choices: {', '.join(commands)}", file=sys.stderr)
        return 2
    module = importlib.import_module(commands[name][0])
    saved, sys.argv = sys.argv, [f"{prog} {name}", *rest]
    try:
        module.cli()
    except SystemExit as stop:
        code = stop.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)   # sys.exit("message"): the message and status 1, as Python does
        return 1
    finally:
        sys.argv = saved
    return 0


def summary_of(doc: str | None) -> str:
    """A module docstring's first paragraph as one sentence for argparse's description (its first
    line alone stops mid-sentence where the paragraph wraps)."""
    paragraph = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors (an unknown option, a bad value) are one line,
    `pazo: error: <what>`, and exit 2, as every other mistake of a pazo command line."""

    def error(self, message: str):
        self.exit(2, f"pazo: error: {message}\n")
