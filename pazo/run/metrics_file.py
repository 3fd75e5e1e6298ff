"""The one reader of a run's `metrics.jsonl`, and its one rule for a line that is not a row.

A row is a JSON object with an integer `step`, on a line of its own. The recorder writes a row and
its newline in one go and takes back a write the disk refuses (`pazo.run.recorder`), so the only damage
a run leaves is its LAST line cut short: a process killed while writing it (or a row still being
written when a report reads the file). Hence, for every reader (the reports, the recorder resuming
an attempt, a relaunch):

- the last line, when it is not a whole row (no newline at its end, or not a row), is torn: it is
  left out, and counted (`MetricRows.torn`), so a report can say so;
- any other line that is not a row is corruption (the file was edited or damaged): the file is
  refused with that line's number (`CorruptMetrics`), never read in part;
- blank lines hold nothing and are passed over.

A step with more than one row (written again by an older resumed run) counts once: its last row."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pazo.files.file_kinds import read_regular_bytes

FILE = "metrics.jsonl"


class CorruptMetrics(ValueError):
    """A line before the last that is not a row: the file was edited or damaged."""


@dataclass(frozen=True)
class MetricRows:
    """What a metrics file holds: its rows, one per step in step order, and whether its last line
    was torn (left out)."""

    rows: list[dict] = field(default_factory=list)
    torn: bool = False


def parse_row(line: bytes | str) -> dict:
    """The row a line holds (its newline, if any, aside); a ValueError saying why it is not one."""
    try:
        row = json.loads(line[:-1] if line[-1:] in (b"\n", "\n") else line)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON: {err.msg.removesuffix(' at')} at column {err.colno}") from None
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise ValueError(f"its step is {step!r}, not an integer")
    return row


def whole_row(line: bytes) -> dict | None:
    """The row `line` holds if it is whole: ends with its newline and parses as a row (else None)."""
    if not line.endswith(b"\n"):
        return None
    try:
        return parse_row(line)
    except ValueError:
        return None


def lines_of(data: bytes) -> list[bytes]:
    """`data`'s lines, each with its newline (the last without one if the file does not end with one);
    split at newlines only, as the recorder writes them."""
    parts = data.split(b"\n")
    return [part + b"\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def read_metric_rows(path: Path) -> MetricRows:
    """The rows of a metrics file by the module's rule: a torn last line left out and counted, a bad
    line before it a CorruptMetrics naming the file and the line. OSError where it cannot be read."""
    by_step: dict[int, dict] = {}
    lines = [(number, line) for number, line in enumerate(lines_of(read_regular_bytes(path)), 1) if line.strip()]
    for number, line in lines[:-1]:
        try:
            row = parse_row(line)
        except ValueError as err:
            raise CorruptMetrics(f"{path} line {number} is not a metrics row ({err}): the file is corrupt "
                                 "(only its last line may be cut short, as a killed run leaves it)") from None
        by_step[row["step"]] = row
    last = whole_row(lines[-1][1]) if lines else None
    if last is not None:
        by_step[last["step"]] = last
    return MetricRows([by_step[step] for step in sorted(by_step)], torn=bool(lines) and last is None)


def torn_note(path: Path) -> str:
    """The line a report prints on stderr for a torn last row it left out."""
    return (f"pazo: {path}: its last line is not a whole row (cut short by a run killed while writing it, or "
            "still being written): left out")
