"""What every benchmark shares besides its settings (`pazo.bench.settings`) and its timing
(`pazo.bench.timing`): where results go, the command and commit recorded with a result, the result
file written whole, and the command line's integer checks and Ctrl-C / SIGTERM handling.

The standard library only: `pazo-bench calibration` and `memory` (whose measured subprocesses
import no more than they need) use it without torch."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from pazo import REPO_ROOT
from pazo.commands.start import at_least as at_least   # (every command's argparse type, named here too)
from pazo.errors import unknown_choice
from pazo.files.rundir import write_text_atomic

#: where the benchmarks write their result files by default (data, not code: beside the launchers)
RESULTS_DIR = REPO_ROOT / "scripts" / "results"


def git_commit() -> str | None:
    """The checkout's commit (with "+dirty" when tracked files other than scripts/results/ differ
    from it: a results file rewritten by the same run does not count), recorded with the results."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)scripts/results"], cwd=REPO_ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def command_line() -> str:
    """The command that started this process, for its result file: `python scripts/<script>.py ...`
    as typed (a launcher), `python -m pazo.bench.<module> ...`, or `pazo-bench <name> ...` (the
    entry point names the command in `sys.argv[0]`). The arguments are quoted as a shell reads
    them, so the recorded command runs again as written (`--note 'a shared machine'`)."""
    arguments = shlex.join(sys.argv[1:])
    if sys.argv[0].startswith(("pazo-bench ", "pazo-report ")):
        return f"{sys.argv[0]} {arguments}".rstrip()
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name.startswith("pazo."):
        return f"python -m {spec.name} {arguments}".rstrip()
    return f"python {shlex.join(sys.argv)}"


#: what every result file under scripts/results/ records first (tests/docs checks it; `null` where unknown)
PROVENANCE = ("command", "commit", "date", "machine")


def utc_now() -> str:
    """The date and time of a measurement, in UTC to the second (ISO 8601)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def machine_details(**device) -> dict:
    """The machine a result was measured on: platform, CPU count, Python and (when the process has
    imported it) torch's version, with the benchmark's own device details (`device`, `threads`...)."""
    details = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}
    torch = sys.modules.get("torch")
    if torch is not None:
        details["torch"] = torch.__version__
    return {**details, **device}


def with_provenance(result: dict) -> dict:
    """`result` led by its command, commit, date and machine: the ones it gives win (a `machine` dict
    is merged into this machine's details), the others are this process's."""
    given = result.get("machine")
    machine = {**machine_details(), **given} if isinstance(given, dict) else machine_details()
    head = {"command": result.get("command") or command_line(),
            "commit": result["commit"] if "commit" in result else git_commit(),
            "date": result.get("date") or utc_now(), "machine": machine}
    return {**head, **{k: v for k, v in result.items() if k not in PROVENANCE}}


def write_result(out: Path, result: dict) -> None:
    """The benchmark's result file, led by its provenance (`with_provenance`), written whole or not
    at all (a temporary file renamed over it), so that an interrupted write leaves an earlier result
    as it was."""
    result = with_provenance(result)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


class Terminated(BaseException):
    """SIGTERM (a `kill`, `timeout`, or a scheduler's time limit), raised in the main thread: the
    job subprocess `subprocess.run` is waiting on is then killed on the way out, not left running.
    (A BaseException, as KeyboardInterrupt is: no `except Exception` on the way swallows it.)"""


def _raise_terminated(signum, frame):
    raise Terminated


def run_main(name: str, main) -> None:
    """`main()`, with Ctrl-C one line and exit 130, SIGTERM one line and exit 143: a benchmark
    writes its file only at the end, so an interrupted one has written nothing."""
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        main()
    except (KeyboardInterrupt, Terminated) as stop:
        how, code = ("interrupted", 130) if isinstance(stop, KeyboardInterrupt) else ("terminated", 143)
        print(f"{name}: {how}; nothing written (an earlier result file is as it was)", file=sys.stderr)
        sys.exit(code)
    finally:
        signal.signal(signal.SIGTERM, previous)



def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0 (else argparse's one-line error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def comma_separated(item):
    """An argparse type: a comma-separated list of `item` (an argparse type), none of them empty;
    a bad element is argparse's one-line error naming it."""
    def items(text: str) -> list:
        parts = text.split(",")
        if not text.strip() or any(not p.strip() for p in parts):
            raise argparse.ArgumentTypeError(f"an empty element in {text!r} (comma-separated values)")
        out = []
        for part in parts:
            try:
                out.append(item(part.strip()))
            except (argparse.ArgumentTypeError, ValueError) as err:
                raise argparse.ArgumentTypeError(f"{part.strip()!r} in {text!r}: {err}") from None
        return out
    return items


def one_of(choices):
    """An argparse type: one of `choices` (for an element of a comma-separated list)."""
    def choice(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(unknown_choice("name", text, choices))
        return text
    return choice
