"""Every command in README.md and the docs, run: the docs check (`docs_commands`) composes and
parses them; this runs them, as a new user would, and says which page and line fail.

    python -m tools.docs run [--only PAGE[:LINE] ...] [--list] [--keep] [--venv DIR] [--timeout S]

Each page's commands run in order, in one fresh temporary directory outside the checkout (a later
command may read what an earlier one wrote, as the page tells the reader; `--only PAGE:LINE` runs
the one command starting on that line, alone in its directory), through the installed
entry points (the venv's `bin/` first on PATH, `.venv` a link to it, copies of the checkout's
`Makefile`, `pyproject.toml`, requirements and `scripts/` beside it, so that `make run` and
`scripts/...` paths mean what they mean in a clone; `make` never re-installs the venv, as the copies
are dated before the venv's stamp). What a page
says about a command is an HTML comment on a line of its own between the previous block and its
code block (or the block of shown output), read here and invisible in the rendered page:

    <!-- docs-run: train.steps=5 -->                    appended to the block's pazo commands (its size)
    <!-- docs-run `make bench-gpu`: skip because needs CUDA -->     not run, with the reason
    <!-- docs-run `dataset.root=/data`: error -->       ends in its one `pazo: error:` line, exit 2
    <!-- docs-run `make run`: output below -->         the next block is that command's output (exactly;
                                                        `output below, within 0.003`: each number within 0.003)
    <!-- docs-run `audit.debug_break=no_clip`: exit 4 -->     ends with that exit status, no traceback

A backquoted selector limits a comment to the block's commands containing that text; several
comments may precede one block, and the first that matches a command (skip, error, output) wins
where they disagree, while every matching size override is appended. A size is appended to the
first pazo command of the line (inside `ARGS="..."` for `make`); a comment after the command (`#
...`) is dropped. Commands of generated pages (docs/reference/) take their comments from
`GENERATED`. A block with `$ ` prompts is a transcript: the lines after each command, up to the
next prompt, are that command's shown output, compared as a block of output is (a page that shows
what a command prints cannot drift from it unnoticed). Shown output is compared line by line:
every shown line must match a printed line with the same words, `...` and `<placeholder>`
matching anything, and each number within the stated spread (seeded float32 runs print the same
digits on one machine; another machine's BLAS may move the last of them)."""
from __future__ import annotations

import math
import os
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pazo import REPO_ROOT
from pazo.commands.start import ArgumentParser, command, summary_of
from tools.docs.commands import DIRECTIVE, Documented, classify, documented_pages, read_page

NUMBER = re.compile(r"[-+]?\d+\.\d+(?:[eE][-+]?\d+)?|[-+]?\d+(?:[eE][-+]?\d+)?")
WILDCARD = re.compile(r"\.\.\.|<[^<>\s][^<>]*>")
#: the files a clone has beside the commands that name them, copied (and dated before the venv's
#: stamp, so that `make` runs its target instead of re-installing the venv); `scripts/` is copied too
LINKED = ("Makefile", "pyproject.toml", "requirements.txt", "requirements-dev.txt", "requirements-bench.txt")


# ---------------------------------------------------------------------------------- reading a page


def problems_in_comments(path: Path) -> list[str]:
    """Comments that select no command or say nothing understood: a page edit that left them behind."""
    text = path.read_text()
    commands = [d.command.text for d in read_page(path)]
    problems = []
    for m in DIRECTIVE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m["select"] and not any(m["select"] in c for c in commands):
            problems.append(f"{path.name}:{line}: no command contains {m['select']!r}")
        if not m["what"].strip():
            problems.append(f"{path.name}:{line}: an empty docs-run comment")
    return problems


# ---------------------------------------------------------------------------------- the command line run

def command_line(d: Documented) -> str:
    """The documented line as it runs: its sizes appended to the first pazo command, its comment dropped."""
    if not d.sizes:
        return d.command.text
    lexer = shlex.shlex(d.command.text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split, lexer.commenters = True, "#"
    tokens = list(lexer)
    sizes = [w for s in d.sizes for w in shlex.split(s)]
    start = 0
    if sizes:
        for k in range(len(tokens) + 1):
            if k == len(tokens) or set(tokens[k]) <= set(";&|"):
                words = tokens[start:k]
                program = next((n for n, w in enumerate(words) if not re.match(r"^[A-Za-z_]\w*=", w)), None)
                if program is not None and classify(words[program:]) is not None:
                    tokens[start:k] = _sized(words, program, sizes)
                    break
                start = k + 1
    return " ".join(t if set(t) <= set(";&|") else shlex.quote(t) for t in tokens)


def _sized(words: list[str], program: int, sizes: list[str]) -> list[str]:
    if words[program].rsplit("/", 1)[-1] == "make":
        args = [k for k, w in enumerate(words) if w.startswith("ARGS=")]
        if args:
            k = args[0]
            return [*words[:k], f"{words[k]} {' '.join(sizes)}".replace("= ", "="), *words[k + 1:]]
        return [*words, "ARGS=" + " ".join(sizes)]
    return [*words, *sizes]


def workspace(venv: Path) -> Path:
    """A fresh directory outside the checkout laid out as a clone's root, for one page's commands."""
    root = Path(tempfile.mkdtemp(prefix="pazo-docs-run-"))
    (root / ".venv").symlink_to(venv)
    stamp = venv / ".installed"        # the Makefile's: the venv is newer than what it was installed from
    for name in LINKED:
        if (REPO_ROOT / name).exists():
            shutil.copy2(REPO_ROOT / name, root / name)
            if stamp.exists():
                older = min((root / name).stat().st_mtime, stamp.stat().st_mtime - 1)
                os.utime(root / name, (older, older))
    shutil.copytree(REPO_ROOT / "scripts", root / "scripts")
    return root


def environment(venv: Path) -> dict[str, str]:
    """The caller's environment with the venv first on PATH, the checkout importable first (an
    editable install points there anyway), no W&B network."""
    env = dict(os.environ)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("WANDB_MODE", "offline")
    env.pop("VIRTUAL_ENV", None)
    return env


@dataclass
class Outcome:
    documented: Documented
    status: int | None
    seconds: float
    problem: str | None
    cpu_seconds: float = 0.0


def run_one(d: Documented, cwd: Path, env: dict[str, str], timeout: float) -> Outcome:
    """Run one documented command in `cwd`; the problem (None when it did what the page says)."""
    line = command_line(d)
    start, cpu = time.monotonic(), _children_cpu()
    # a session of its own: a command past its time is stopped with every process it started
    # (make, python, a sweep's runs), not only its shell
    with subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return Outcome(d, None, time.monotonic() - start, f"still running after {timeout:g} s")
    seconds = time.monotonic() - start
    printed = stdout + stderr
    problem = judge(d, proc.returncode, stdout, stderr) or (
        compare_output(d.output, printed, d.spread) if d.output is not None else None)
    return Outcome(d, proc.returncode, seconds, problem, _children_cpu() - cpu)


def _children_cpu() -> float:
    """CPU seconds of the finished child processes: a command's cost on a loaded machine, where
    its wall time is not."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def judge(d: Documented, status: int, stdout: str, stderr: str) -> str | None:
    """What the exit status and output say against what the page promises."""
    tail = " | ".join((stdout + stderr).strip().splitlines()[-3:])
    if "Traceback (most recent call last)" in stdout + stderr:
        return f"exit {status} with a traceback: {tail}"
    if not d.error:
        wanted = d.status or 0
        return None if status == wanted else f"exit {status}" + (f", not {wanted}" if wanted else "") + f": {tail}"
    errors = [ln for ln in (stdout + stderr).splitlines() if ln.startswith("pazo: error:")]
    if status != 2 or len(errors) != 1:
        return f"expected one `pazo: error:` line and exit 2, got exit {status} and {len(errors)} such lines: {tail}"
    return None


def compare_output(shown: list[str], printed: str, spread: float) -> str | None:
    """None when every shown line matches a printed line (words the same, `...` and `<x>` anything,
    numbers within `spread`), else the first line that does not, with the nearest printed one."""
    lines = printed.splitlines()
    for want in shown:
        pattern, numbers = _pattern(want.strip())
        candidates = [m for ln in lines if (m := pattern.search(ln))]
        if not candidates:
            return f"the page shows {want.strip()!r}; nothing printed matches it"
        if not any(_close(numbers, [float(g) for g in m.groups()], spread) for m in candidates):
            got = candidates[0].group(0)
            return f"the page shows {want.strip()!r}, the command printed {got!r} (spread {spread:g})"
    return None


def _pattern(shown: str) -> tuple[re.Pattern, list[float]]:
    parts, numbers, pos = [], [], 0
    for m in re.finditer(f"{WILDCARD.pattern}|{NUMBER.pattern}", shown):
        parts.append(re.escape(shown[pos:m.start()]))
        if WILDCARD.fullmatch(m.group(0)):
            parts.append(r".*?")
        else:
            parts.append(r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
            numbers.append(float(m.group(0)))
        pos = m.end()
    parts.append(re.escape(shown[pos:]))
    return re.compile("".join(parts).replace(r"\ ", r"\s+")), numbers


def _close(want: list[float], got: list[float], spread: float) -> bool:
    return len(want) == len(got) and all(math.isclose(w, g, rel_tol=0, abs_tol=spread + 1e-12) or
                                         (w == int(w) and g == w) for w, g in zip(want, got))


def run_pages(pages: list[Path], venv: Path, timeout: float, keep: bool = False, say=print,
              lines: dict[Path, set[int]] | None = None) -> list[str]:
    """Run every command of `pages` (of a page in `lines`, only those starting on its lines); one
    `file:line: command: problem` per failure."""
    env = environment(venv)
    failures: list[str] = []
    for page in pages:
        documented = chosen_commands(page, (lines or {}).get(page))
        if not documented:
            continue
        cwd = workspace(venv)
        say(f"== {documented[0].command.where.split(':')[0]} ({len(documented)} commands) in {cwd}")
        try:
            for d in documented:
                if d.skip:
                    say(f"   skip  {d.where}: {d.command.text}  ({d.skip})")
                    continue
                outcome = run_one(d, cwd, env, timeout)
                mark = "FAIL" if outcome.problem else "ok"
                say(f"   {mark:4s}  {d.where} ({outcome.seconds:.0f} s, cpu {outcome.cpu_seconds:.0f} s): "
                    f"{command_line(d)}")
                if outcome.problem:
                    failures.append(f"{d.where}: {d.command.text}: {outcome.problem}")
                    say(f"         {outcome.problem}")
        finally:
            if not keep:
                shutil.rmtree(cwd, ignore_errors=True)
    return failures


def chosen_commands(page: Path, lines: set[int] | None) -> list[Documented]:
    """The page's commands, or only those starting on `lines` (None: all); a line where no command
    starts is a ValueError naming the lines where one does."""
    documented = read_page(page)
    if lines is None:
        return documented
    starts = {d.command.line for d in documented}
    if lines - starts:
        where = ", ".join(map(str, sorted(starts))) or "none"
        raise ValueError(f"no command of {page.name} starts on line {', '.join(map(str, sorted(lines - starts)))} "
                         f"(its commands start on lines {where})")
    return [d for d in documented if d.command.line in lines]


def _pages(only: list[str] | None) -> tuple[list[Path], dict[Path, set[int]]]:
    """The pages `--only` names (all without it), and for a page named as PAGE:LINE its lines."""
    pages = documented_pages()
    if not only:
        return pages, {}
    named: list[tuple[str, int | None]] = []
    for o in only:
        page, _, line = o.rpartition(":") if re.fullmatch(r".+:\d+", o) else (o, "", "")
        named.append((page, int(line) if line else None))

    def matches(p: Path, name: str) -> bool:
        return str(p).endswith(name) or p.name == name

    missing = [name for name, _ in named if not any(matches(p, name) for p in pages)]
    if missing:
        raise ValueError(f"no documented page {', '.join(missing)} (README.md or a page under docs/)")
    chosen = [p for p in pages if any(matches(p, name) for name, _ in named)]
    lines: dict[Path, set[int]] = {}
    for p in chosen:
        wanted = [line for name, line in named if matches(p, name)]
        if None not in wanted:  # a page named without a line runs whole
            lines[p] = set(wanted)
    return chosen, lines


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m tools.docs run", description=summary_of(__doc__))
    parser.add_argument("--only", action="append", metavar="PAGE[:LINE]",
                        help="only this page (README.md, getting-started.md, docs/guides/llm.md ...), or only its "
                             "command starting on LINE (docs/guides/auditing.md:23); repeatable")
    parser.add_argument("--list", action="store_true", help="list the commands and what will be done, run nothing")
    parser.add_argument("--keep", action="store_true", help="keep each page's temporary directory")
    parser.add_argument("--venv", type=Path, default=None,   # (sys.prefix: not shown, the page is the same anywhere)
                        help="the virtual environment whose entry points run (default: the one of the Python "
                             "running this command, sys.prefix)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one command may run (default 600)")
    args = parser.parse_args(argv)
    args.venv = args.venv or Path(sys.prefix)
    try:
        pages, lines = _pages(args.only)
        for page in pages:  # a line where no command starts is refused before anything runs
            chosen_commands(page, lines.get(page))
        if args.list:
            for page in pages:
                for d in chosen_commands(page, lines.get(page)):
                    print(f"{d.where}: {command_line(d)}  [{d.plan}]")
            return 0
    except ValueError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    if not (args.venv / "bin").is_dir():
        print(f"pazo: error: no virtual environment at {args.venv} (--venv)", file=sys.stderr)
        return 2
    start = time.monotonic()
    failures = run_pages(pages, args.venv.absolute(), args.timeout, args.keep, lines=lines)
    print(f"docs-run: {len(failures)} failing command(s) in {time.monotonic() - start:.0f} s")
    for failure in failures:
        print(f"  {failure}")
    return 1 if failures else 0


#: `python -m tools.docs run`, `python -m tools.docs.run`.
cli = command(main)


if __name__ == "__main__":
    cli()
