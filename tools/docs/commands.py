"""The commands shown in README.md and the docs, checked without running them: a renamed config key,
config group option, command or flag makes the page wrong, and this says where.

A command is a line of a `bash` / `sh` / `shell` / `console` code block (in a block with `$ `
prompts, only the prompted lines; backslash continuations joined; `a && b`, `a; b`, `a | b` split;
leading `VAR=value` assignments dropped). Then:

- `pazo-train`, `python -m pazo.train`, `make run ARGS="..."`: the overrides are composed with
  Hydra's compose API against configs/config.yaml (`pazo-audit`, `python -m pazo.audit`: audit.yaml),
  as the entry point does before it starts, then again with Hydra's own config, whose run and
  sweep directories are resolved (a resolver the entry point does not register fails here); with
  `-m`, each value of a comma-separated sweep is composed in turn;
- `pazo-sweep`, `python -m pazo.sweep`, `make demo`: the arguments are parsed by the sweep's parser,
  the spec and launcher loaded, and one run per setting and method composed and validated with the
  command's overrides (`pazo.sweep.checks.check`, which `--dry-run` runs over every run);
- `pazo-bench <name>`, `pazo-report <name>`, `python -m pazo.bench[.<module>]`, `python
  scripts/<launcher>.py`: the arguments are parsed by the command's own argparse parser;
- `torchrun [options] -m <module> ...`: the module's command, checked as above (`-m pazo.train`:
  its overrides composed);
- `make <target>`: the target exists in the Makefile;
- anything else (pip, git, cd, wandb ...) is not pazo's and is left alone.

A placeholder value such as `method=<name>` is not composed; its key must still exist. A command
that should not be checked belongs in a `text` block. Running the commands is `docs_run`'s. The
pages call every pazo tool one way, `.venv/bin/pazo-<name>` (`called_another_way` names the others,
in shell blocks and in the lines of other blocks that start with a tool, `tool_lines`; the other
forms are still read and checked here, for pages written before)."""
from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from pazo import CONFIG_DIR, REPO_ROOT

SHELL_FENCES = {"bash", "sh", "shell", "console", "shell-session", "zsh"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`{]*)")
PLACEHOLDER = re.compile(r"<[^<>=]+>|\.\.\.")
PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")


@dataclass
class Command:
    path: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        try:
            rel = self.path.resolve().relative_to(REPO_ROOT)
        except ValueError:
            rel = self.path
        return f"{rel}:{self.line}"


def extract(path: Path, every_fence: bool = False) -> list[Command]:
    """The shell commands in a Markdown file's shell code blocks, each with the line it starts on;
    with `every_fence`, also the `$ `-prompted lines of its other code blocks (a terminal session
    shown as text: the command typed, then what it printed)."""
    lines = path.read_text().splitlines()
    out: list[Command] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info = match["fence"], match["info"].lower()
        body_start = i + 1
        j = body_start
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        body = lines[body_start:j]
        if info in SHELL_FENCES or every_fence and any(line.lstrip().startswith("$ ") for line in body):
            out += _commands(path, body, body_start + 1, match["indent"])
        i = j + 1
    return out


def tool_lines(path: Path) -> list[Command]:
    """The lines of a Markdown file's code blocks other than shell and Python ones (`text`, a
    terminal session) that start with a pazo tool (`calls_a_tool`, a `$ ` prompt aside): commands
    shown, not checked by composing (e.g. a plugin's, from a folder of the reader's own)."""
    lines = path.read_text().splitlines()
    out, info = [], None
    for number, line in enumerate(lines, 1):
        fence = FENCE.match(line)
        if fence:
            info = None if info is not None else fence["info"].lower()
            continue
        text = line.strip().removeprefix("$ ")
        if info is not None and info not in SHELL_FENCES | {"python", "py", "pycon"} and text:
            words = text.split()
            if calls_a_tool(words):
                out.append(Command(path, number, text.rstrip("\\").strip()))
    return out


def _commands(path: Path, body: list[str], first_line: int, indent: str) -> list[Command]:
    body = [line[len(indent):] if line.startswith(indent) else line for line in body]
    prompted = any(line.lstrip().startswith("$ ") for line in body)
    out, current, start = [], "", 0
    for k, raw in enumerate(body):
        line = raw.strip()
        if not current:
            if prompted:
                if not line.startswith("$ "):
                    continue
                line = line[2:].strip()
            if not line or line.startswith("#"):
                continue
            start = first_line + k
        if line.endswith("\\"):
            current += line[:-1].rstrip() + " "
            continue
        current += line
        out.append(Command(path, start, current.strip()))
        current = ""
    if current:
        out.append(Command(path, start, current.strip()))
    return out


def split(text: str) -> list[list[str]]:
    """A command line's simple commands (`&&`, `||`, `;`, `|` split; comments and leading `VAR=x` dropped)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    parts, current = [], []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            parts.append(current)
            current = []
        else:
            current.append(token)
    parts.append(current)
    out = []
    for words in parts:
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]
        if words:
            out.append(words)
    return out


# ---------------------------------------------------------------------------------- what a page says about them

DIRECTIVE = re.compile(r"^[ \t]*<!--\s*docs-run(?:\s+`(?P<select>[^`]+)`)?\s*:\s*(?P<what>.*?)\s*-->", re.S | re.M)
SPREAD = re.compile(r"^output below(?:,\s*within\s+(?P<spread>[0-9.eE+-]+))?$")
STATUS = re.compile(r"^exit (?P<status>\d+)$")
#: the spread allowed on a shown number when the comment states none
DEFAULT_SPREAD = 0.0
#: what the docs' generated pages (docs/reference/) cannot carry as a comment: page -> [(selector, what)]
GENERATED: dict[str, list[tuple[str | None, str]]] = {
    "docs/reference/cli.md": [
        ("pazo-train", "train.steps=5"),
        ("pazo-audit", "train.steps=5 audit.canaries=50"),
        ("experiment=cifar10", "error"),                        # CIFAR-10 is not bundled: its one line
        ("--launcher slurm", "skip because it submits to a SLURM cluster"),
    ],
}


@dataclass
class Documented:
    """One documented command line and what its page says about running it."""
    command: Command
    sizes: list[str] = field(default_factory=list)
    skip: str | None = None
    error: bool = False
    status: int | None = None          # the exit status the page says it ends with (`exit N`), if not 0
    output: list[str] | None = None
    spread: float = DEFAULT_SPREAD

    @property
    def where(self) -> str:
        return self.command.where

    @property
    def plan(self) -> str:
        if self.skip:
            return f"skip: {self.skip}"
        expected = "error line expected" if self.error else f"exit {self.status} expected" if self.status else "run"
        return expected + (
            f", output compared within {self.spread:g}" if self.output is not None else "")


def read_page(path: Path) -> list[Documented]:
    """The page's commands (as `docs_commands.extract` finds them) with the comments before their blocks."""
    lines = path.read_text().splitlines()
    text = "\n".join(lines)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    comments = [(text.count("\n", 0, m.end()), m["select"], m["what"].strip()) for m in DIRECTIVE.finditer(text)]
    try:
        rel = str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        rel = path.name
    generated = GENERATED.get(rel, [])
    out: list[Documented] = []
    pending: list[tuple[str | None, str]] = []
    last_block_end, i = 0, 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        pending = [(sel, what) for at, sel, what in comments if last_block_end <= at < i] + generated
        fence, info = match["fence"], match["info"].lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence[0] * len(fence)):
            j += 1
        body = lines[i + 1:j]
        if info in SHELL_FENCES:
            shown = transcript(body, i + 2, match["indent"])
            for command in _commands(path, body, i + 2, match["indent"]):
                out.append(_documented(command, pending))
                out[-1].output = shown.get(command.line)
        for sel, what in pending:
            spread = SPREAD.match(what)
            if spread and info not in SHELL_FENCES:
                target = _select(out, sel)
                if target is None:
                    raise ValueError(f"{rel}:{i + 1}: no command above matches {sel!r} for its output")
                target.output = [line for line in body if line.strip()]
                target.spread = float(spread["spread"] or DEFAULT_SPREAD)
        last_block_end, i = j + 1, j + 1
    return out


def transcript(body: list[str], first_line: int, indent: str = "") -> dict[int, list[str]]:
    """In a block with `$ ` prompts, each command's shown output: the non-empty lines after it (and
    after its continuation lines) up to the next prompt, by the line the command starts on."""
    shown: dict[int, list[str]] = {}
    current, continued = None, False
    for k, raw in enumerate(body):
        line = (raw[len(indent):] if raw.startswith(indent) else raw).rstrip()
        if line.lstrip().startswith("$ "):
            current, continued = first_line + k, line.endswith("\\")
            shown[current] = []
        elif continued:
            continued = line.endswith("\\")
        elif current is not None and line.strip():
            shown[current].append(line)
    return {start: lines for start, lines in shown.items() if lines}


def _select(documented: list[Documented], selector: str | None) -> Documented | None:
    for d in reversed(documented):
        if selector is None or selector in d.command.text:
            return d
    return None


def _documented(command: Command, comments: list[tuple[str | None, str]]) -> Documented:
    d = Documented(command)
    for selector, what in comments:
        if selector is not None and selector not in command.text:
            continue
        if SPREAD.match(what):
            continue
        if what.startswith("skip"):
            reason = what.removeprefix("skip").strip().removeprefix("because").strip()
            d.skip = d.skip or reason or "no reason given"
        elif what == "error":
            d.error = True
        elif STATUS.match(what):
            d.status = int(STATUS.match(what)["status"]) if d.status is None else d.status
        else:
            d.sizes.append(what)
    return d


# ---------------------------------------------------------------------------------- what a command is

def classify(words: list[str]) -> tuple[str, list[str]] | None:
    """(checker, arguments) for a pazo command, None for another program's."""
    head, rest = words[0].rsplit("/", 1)[-1], words[1:]     # .venv/bin/pazo-train is pazo-train
    if PYTHON.match(head):
        if rest[:1] == ["-m"] and len(rest) > 1:
            module, args = rest[1], rest[2:]
            return _module(module, args)
        if rest and rest[0].startswith("scripts/") and rest[0].endswith(".py"):
            return _launcher(rest[0], rest[1:])
        return None
    if head in ("pazo-train", "pazo-audit", "pazo-sweep", "pazo-bench", "pazo-report"):
        return head, rest
    if head == "torchrun":
        return _torchrun(rest)
    if head == "make":
        return "make", rest
    return None


def _module(module: str, args: list[str]):
    from tools.docs.cli import MODULES

    if module in MODULES:
        return MODULES[module], args
    for script in ("pazo-bench", "pazo-report"):
        from tools.docs.cli import subcommands

        for name, (target, _) in subcommands(script).items():
            if target == module:
                return script, [name, *args]
    if module.startswith("pazo"):
        return "unknown", [module]
    return None


def _torchrun(args: list[str]):
    """torchrun's options, then `-m <module>` and the module's arguments: that module's command (a
    script path instead of `-m`: not pazo's to check)."""
    flags = [k for k, word in enumerate(args) if word in ("-m", "--module")]
    if not flags or flags[0] + 1 >= len(args):
        return None
    return _module(args[flags[0] + 1], args[flags[0] + 2:])


def _launcher(script: str, args: list[str]):
    path = REPO_ROOT / script
    if not path.is_file():
        return "unknown", [script]
    match = re.search(r"from (pazo\.[\w.]+) import", path.read_text())
    return _module(match[1], args) if match else ("unknown", [script])


# ---------------------------------------------------------------------------------- the checks

def check(command: Command) -> list[str]:
    """What is wrong with a documented command line (empty when every pazo command in it checks)."""
    try:
        parts = split(command.text)
    except ValueError as err:
        return [f"cannot split the command line: {err}"]
    problems = []
    for words in parts:
        kind = classify(words)
        if kind is None:
            continue
        checker, args = kind
        try:
            problem = CHECKERS[checker](args) if checker in CHECKERS else _argparse(checker, args)
        except Exception as err:     # a checker's own failure is the page's problem too, named
            problem = f"{type(err).__name__}: {err}"
        if problem:
            problems.append(f"{' '.join(words)}: {problem}")
    return problems


def _unknown(args: list[str]) -> str:
    return f"no such pazo module or launcher {args[0]!r}"


def _argparse(script: str, args: list[str]) -> str | None:
    from tools.docs.cli import command_parser, parse_error

    try:
        parsed = command_parser(script, args)
    except LookupError as err:
        return str(err)
    return parse_error(parsed)


def _make(args: list[str]) -> str | None:
    targets = [a for a in args if "=" not in a and not a.startswith("-")]
    variables = dict(a.split("=", 1) for a in args if "=" in a and not a.startswith("-"))
    known = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO_ROOT / "Makefile").read_text(), re.M))
    missing = [t for t in targets if t not in known]
    if missing:
        return f"no make target {', '.join(missing)} (the Makefile has {', '.join(sorted(known))})"
    extra = shlex.split(variables.get("ARGS", ""))
    if "run" in targets or not targets and extra:
        return _hydra("config", extra)
    if "demo" in targets:
        return _sweep(["demo", "--launcher", "joblib", "logger.mode=disabled", *extra])
    return None


def _train(args: list[str]) -> str | None:
    """pazo-train's overrides composed as Hydra does; `--plan` (read before Hydra, `pazo.train`'s
    PLAN_FLAG) plans the run the same overrides describe."""
    from pazo.train import PLAN_FLAG

    return _hydra("config", [a for a in args if a != PLAN_FLAG])


def _audit(args: list[str]) -> str | None:
    return _hydra("audit", args)


def _hydra(config_name: str, args: list[str]) -> str | None:
    """Compose `args` (Hydra overrides) as the entry point would: None, or the error."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    import pazo.methods  # noqa: F401  (registers the methods' config schemas)

    flags = [a for a in args if a.startswith("-")]
    multirun = any(f in ("-m", "--multirun") for f in flags)
    if any(f in ("--help", "-h", "--hydra-help", "--info", "-i") for f in flags):
        return None
    others = [f for f in flags if f not in ("-m", "--multirun", "--cfg", "-c", "--resolve")]
    if others:
        return f"unknown flag(s) {', '.join(others)} (overrides are key=value)"
    overrides = [a for a in args if not a.startswith("-") and a not in ("job", "hydra", "all")]
    placeholders = [o for o in overrides if PLACEHOLDER.search(o.partition("=")[2])]
    concrete = [o for o in overrides if o not in placeholders and not o.startswith("hydra.")]
    parser = OverridesParser.create()
    try:
        parsed = parser.parse_overrides(concrete)
    except Exception as err:
        return f"not a Hydra override: {str(err).splitlines()[0]}"
    variants = [concrete]
    sweeps = [(k, o) for k, o in enumerate(parsed) if o.is_sweep_override()]
    if sweeps:
        if not multirun:
            return f"{sweeps[0][1].input_line!r} sweeps values: needs -m"
        variants = []
        for k, o in sweeps:
            for value in o.sweep_string_iterator():
                variants.append([f"{o.get_key_element()}={value}" if i == k else
                                 (f"{p.get_key_element()}={next(iter(p.sweep_string_iterator()))}"
                                  if p.is_sweep_override() else concrete[i]) for i, p in enumerate(parsed)])
    for variant in variants:
        problem = _compose(config_name, variant, placeholders)
        if problem:
            return problem
    return None


def _compose(config_name: str, overrides: list[str], placeholders: list[str]) -> str | None:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from pazo.run.cli import check_overrides

    problem = check_overrides(overrides, config_name=config_name) or resolve_hydra(config_name, overrides)
    if problem or not placeholders:
        return problem
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name=config_name, overrides=overrides)
    for line in placeholders:
        key = line.partition("=")[0].lstrip("+~")
        if (CONFIG_DIR / key).is_dir():
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if not (OmegaConf.is_dict(node) and leaf in node) and not line.startswith("+"):
            return f"unknown key {key!r} in {line!r}"
    return None


#: what each config's entry point imports before Hydra composes it (it registers the resolvers)
ENTRY_MODULES = {"config": "pazo.train", "audit": "pazo.audit"}
#: the keys of Hydra's own config an entry point resolves before the job starts (a run's directory,
#: a multirun's directory and each job's subdirectory)
HYDRA_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir", "hydra.job.name")


def resolve_hydra(config_name: str, overrides: list[str], config_dir: Path = CONFIG_DIR) -> str | None:
    """Compose `overrides` with Hydra's own config (`return_hydra_config=True`), as the entry point
    does, and resolve its run and sweep directories and the job's config: an interpolation whose
    resolver no one registered, or that points nowhere, is the error (the override check leaves
    `hydra.*` out, so it never sees one)."""
    import importlib

    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    importlib.import_module(ENTRY_MODULES.get(config_name, "pazo.run.cli"))
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        for key in HYDRA_KEYS:
            OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
        OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"does not resolve with Hydra's config: {type(err).__name__}: {first}"
    return None


def _sweep(args: list[str]) -> str | None:
    from pazo.errors import ConfigError
    from pazo.sweep.checks import check
    from pazo.sweep.launchers import check_launcher, parse_sets
    from pazo.sweep.spec import SWEEPS, enumerate_runs, load_spec, load_yaml, select_methods
    from tools.docs.cli import command_parser, parse_error

    parsed = command_parser("pazo-sweep", args)
    problem = parse_error(parsed)
    if problem:
        return problem
    ns = parsed.parser.parse_intermixed_args(parsed.args)
    if ns.spec and PLACEHOLDER.search(ns.spec):
        return None
    try:
        spec = load_spec(ns.spec)
        if ns.methods is not None:
            spec = {**spec, "methods": select_methods(spec, ns.methods)}
        runs = enumerate_runs(spec)
        launcher = {**load_yaml(ns.launcher, SWEEPS / "launchers", "launcher"),
                    **parse_sets(ns.set)}
        check_launcher(launcher)
        import pazo.methods  # noqa: F401
        check(representatives(runs), ns.overrides, spec["entry"])
    except ConfigError as err:
        return str(err)
    return None


def representatives(runs: list) -> list:
    """One run per (setting, method, private or not): the documented command's spec, flags and
    overrides are what is checked, with one composition each rather than every grid point's (the
    sweep's own `--dry-run` checks those)."""
    firsts = {}
    for run in runs:
        firsts.setdefault((run.setting, run.method, run.epsilon is None), run)
    return list(firsts.values())


#: pazo's console scripts, as pyproject.toml's [project.scripts] names them
ENTRY_POINTS = tuple(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"])
#: the one way the docs call a pazo tool: the venv's entry point, from the clone's root (what
#: `make run` installs and `docs_run` runs; `python -m pazo.<x>` and a bare `pazo-<x>` are the same
#: code, shown nowhere so that a reader meets one form)
TOOL_CALL = re.compile(rf"(?:\S*/)?\.venv/bin/(?:{'|'.join(ENTRY_POINTS)})")
#: torchrun, which starts a module (`-m pazo.train`) in each of its processes: the one way to run one under it
TORCHRUN = re.compile(r"(?:\S*/)?torchrun")


def called_another_way(text: str) -> list[str]:
    """The pazo tools a command line calls other than as `.venv/bin/pazo-<name>`: each as it is
    written (`python -m pazo.train`, `pazo-sweep`, `python scripts/make_tables.py` ...); `make`
    targets are the Makefile's own way and stay."""
    out = []
    for words in split(text):
        kind = classify(words)
        tool = calls_a_tool(words) or kind is not None and kind[0] != "make"
        if tool and not (TOOL_CALL.fullmatch(words[0]) or TORCHRUN.fullmatch(words[0])):
            out.append(" ".join(words[:3] if PYTHON.match(words[0].rsplit("/", 1)[-1]) else words[:1]))
    return out


def calls_a_tool(words: list[str]) -> bool:
    """Whether a command's words call a pazo tool, in any form: one of its console scripts
    (`ENTRY_POINTS`, whatever the folder), or Python running a module of the package."""
    head = words[0].rsplit("/", 1)[-1] if words else ""
    if PYTHON.match(head):
        return words[1:2] == ["-m"] and len(words) > 2 and words[2].split(".")[0] == "pazo"
    return head in ENTRY_POINTS


CHECKERS = {"pazo-train": _train, "pazo-audit": _audit, "pazo-sweep": _sweep, "make": _make, "unknown": _unknown}


def documented_pages(root: Path = REPO_ROOT) -> list[Path]:
    """README.md and every Markdown page under docs/ (whatever pages exist)."""
    return [p for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))] if p.is_file()]


def check_pages(paths: list[Path]) -> tuple[int, list[str]]:
    """(commands checked, one message per problem: `file:line: command: what is wrong`). A command
    its page shows failing (`<!-- docs-run: error -->`, `exit N`) is not held to composing: running
    it (`docs_run`) checks that it fails as shown."""
    count, problems = 0, []
    for path in paths:
        failing = {d.command.line for d in read_page(path) if d.error or d.status}
        for command in extract(path):
            count += 1
            if command.line not in failing:
                problems += [f"{command.where}: {p}" for p in check(command)]
    return count, problems
