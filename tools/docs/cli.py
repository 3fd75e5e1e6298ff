"""The command-line reference (docs/reference/cli.md) and the parsers behind it: every console
entry point of pyproject.toml, every `pazo-bench` / `pazo-report` command with its argparse help,
and, for the Hydra entry points, their config groups and examples.

`command_parser(words)` gives the real argparse parser of a command line such as `pazo-bench
methods --iters 5` without running it: the command's `cli()` is called with
`ArgumentParser.parse_args` (and its variants) replaced by a capture that stops at the first
parse. The docs' command check parses the documented arguments with it."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
import tomllib
from dataclasses import dataclass

from pazo import CONFIG_DIR, REPO_ROOT

#: the entry points whose command line is a Hydra config (composed, not parsed) -> their config name
HYDRA_APPS = {"pazo-train": "config", "pazo-audit": "audit"}
#: modules run as `python -m <module>` -> the console script they are
MODULES = {"pazo.train": "pazo-train", "pazo.audit": "pazo-audit", "pazo.audit.run": "pazo-audit",
           "pazo.sweep": "pazo-sweep", "pazo.bench": "pazo-bench", "pazo.report": "pazo-report"}
#: how the docs call every pazo tool: the venv's entry point, from the clone's root
#: (`tests/docs/test_doc_commands.py` holds every documented command to it)
TOOL = ".venv/bin/{name}"
#: the example command lines shown for each entry point (a test composes or parses every one)
EXAMPLES = {
    "pazo-train": ["", "method=dpzero privacy.epsilon=0.5",
                   "experiment=cifar10 method=pazo_p privacy.epsilon=2 device=cuda",
                   "method=dpsgd privacy=none train.epochs=5"],
    "pazo-audit": ["method=dpsgd privacy.epsilon=1 audit.threat=white_box train.epochs=2"],
    "pazo-sweep": ["demo --dry-run", "table1_cifar10 --launcher slurm --set partition=gpu"],
}


def console_scripts() -> dict[str, str]:
    """pyproject.toml's [project.scripts]: name -> `module:function`."""
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def subcommands(script: str) -> dict[str, tuple[str, str]]:
    """`pazo-bench` / `pazo-report`'s commands: name -> (module, summary); {} for other scripts."""
    module = console_scripts()[script].split(":")[0]
    return getattr(importlib.import_module(module), "COMMANDS", {})


class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser, args: list[str] | None):
        super().__init__(parser.prog)
        self.parser, self.args = parser, args


@contextlib.contextmanager
def _capturing():
    names = ("parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args")
    saved = {n: getattr(argparse.ArgumentParser, n) for n in names}

    def capture(self, args=None, namespace=None):
        raise _Captured(self, sys.argv[1:] if args is None else list(args))

    for name in names:
        setattr(argparse.ArgumentParser, name, capture)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(argparse.ArgumentParser, name, fn)


@dataclass
class Parsed:
    parser: argparse.ArgumentParser
    args: list[str]
    method: str          # the parse method the command calls (parse_args or parse_intermixed_args)


def command_parser(script: str, argv: list[str]) -> Parsed:
    """The argparse parser `script argv...` would parse its arguments with, and those arguments
    (for `pazo-bench <name>`, what follows the name). Raises LookupError for an unknown command."""
    if script in ("pazo-bench", "pazo-report"):
        commands = subcommands(script)
        if not argv or argv[0] not in commands:
            raise LookupError(f"{script} has no command {argv[0] if argv else '(none)'!r}; "
                              f"choices: {', '.join(commands)}")
        module, prog, rest = commands[argv[0]][0], f"{script} {argv[0]}", argv[1:]
    elif script in console_scripts() and script not in HYDRA_APPS:
        module, prog, rest = console_scripts()[script].split(":")[0], script, argv
    else:
        raise LookupError(f"{script} is not an argparse command")
    saved = sys.argv
    sys.argv = [prog, *rest]
    try:
        with _capturing(), contextlib.redirect_stdout(io.StringIO()):
            mod = importlib.import_module(module)
            entry = getattr(mod, "cli", None) or getattr(mod, "main")
            entry()
    except _Captured as got:
        method = "parse_intermixed_args" if script == "pazo-sweep" else "parse_args"
        got.parser.prog = prog
        return Parsed(got.parser, got.args, method)
    finally:
        sys.argv = saved
    raise LookupError(f"{prog} parsed no command line")


def parse_error(parsed: Parsed) -> str | None:
    """The one-line argparse error the command's arguments give, or None when they parse."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            getattr(parsed.parser, parsed.method)(parsed.args)
    except SystemExit as stop:
        if stop.code in (0, None):       # --help
            return None
        return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {stop.code}"
    return None


def help_text(parsed: Parsed) -> str:
    """The parser's --help at a fixed width, with the checkout's own path written as <repo>."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        text = parsed.parser.format_help()
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return text.replace(str(REPO_ROOT), "<repo>").rstrip()


def _group_options(group: str) -> str:
    names = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
    return ", ".join(f"`{n}`" for n in names)


def cli_page() -> str:
    scripts = console_scripts()
    lines = ["# Command lines", "",
             "Generated by `make docs-pages` from pyproject.toml's console scripts and their "
             "parsers. The docs call each command as the venv's entry point from the clone's root "
             f"(`{TOOL.format(name='pazo-train')} ...`); with the venv activated it is its name alone "
             "(`pazo-train ...`). Each `pazo-<name>` also runs as `python -m pazo.<name>` (for `pazo-audit`, "
             "`python -m pazo.audit`); `pazo-bench <name>` and `pazo-report <name>` as "
             "`python -m pazo.bench <name>` and `python -m pazo.report <name>`.", "",
             "| command | runs |", "|---|---|"]
    lines += [f"| [`{name}`](#{name}) | `{target}` |" for name, target in scripts.items()]
    lines.append("")
    for name in scripts:
        lines += [f"## {name}", ""]
        if name in HYDRA_APPS:
            lines += hydra_section(name)
        elif subcommands(name):
            lines += dispatch_section(name)
        else:
            parsed = command_parser(name, [])
            lines += ["```text", help_text(parsed), "```", ""]
        if name in EXAMPLES:
            examples = [f"{TOOL.format(name=name)} {args}".rstrip() for args in EXAMPLES[name]]
            lines += ["Examples:", "", "```bash", *examples, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def hydra_section(name: str) -> list[str]:
    config = HYDRA_APPS[name]
    what = ("One training run, configured by Hydra from `configs/config.yaml`"
            if config == "config" else
            "A privacy audit: the training run of the same overrides with canaries, configured by Hydra "
            "from `configs/audit.yaml` (every training config group applies)")
    lines = [f"{what}: arguments are overrides, `key=value` for a key and `group=option` for a config "
             "group, composed and checked before anything starts (a wrong key or value is one "
             "`pazo: error:` line). `-m` with comma-separated values runs a Hydra multirun. Every key "
             "and its default: [the configuration reference](configs.md).", "",
             "| config group | options |", "|---|---|"]
    lines += [f"| `{g}` | {_group_options(g)} |" for g in ("dataset", "model", "method", "privacy", "experiment")]
    return lines + [""]


def dispatch_section(name: str) -> list[str]:
    commands = subcommands(name)
    lines = [f"`{name} <name> [args]` runs one of these commands (`{name} --help` lists them):", "",
             "| name | what |", "|---|---|"]
    lines += [f"| [`{c}`](#{name}-{c}) | {summary} |" for c, (_, summary) in commands.items()]
    lines.append("")
    for c in commands:
        parsed = command_parser(name, [c])
        lines += [f"### {name} {c}", "", "```text", help_text(parsed), "```", ""]
    return lines
