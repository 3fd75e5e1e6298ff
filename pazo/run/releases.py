"""What earlier attempts in a run directory released: the highest step that any outlet a run writes
there shows, so that deleting, truncating or editing one file does not hide a release that another
still shows (`pazo.run.attempts` decides a relaunch on it, and the summary's epsilon covers it).

The outlets read, in the directory and in each archived attempt under `attempts/<n>/`:

- `metrics.jsonl`: every row (a row cut short or edited still shows its step where `{"step": N`
  can be read);
- `summary.json`: the steps done, where a run stopped, where it resumed, and the steps released;
- W&B's local folders (`wandb/offline-run-*`, `wandb/run-*`): the history and summary records of
  its transaction log (`run-<id>.wandb`; wandb no longer ships a Python reader of it, so it is read
  here, record by record, with W&B's own protobuf `Record`), its `files/wandb-summary.json` and the
  console lines it captured (`files/output.log`);
- the other loggers' files (`pazo.run.loggers`): every row of `metrics.csv` (a row cut short or edited
  still shows its step where its first cell can be read) and the scalars of each TensorBoard event
  file under `tensorboard/`, read with TensorBoard's own reader (which stops at a damaged record:
  what it read before counts);
- the run's ledger, `private/released_steps` (`pazo.run.gate.LEDGER`): the step of each row, written
  before the row goes to metrics.jsonl or any logger; a kill can keep W&B from writing the rows it
  sent to its local log (it writes that log by 32 KiB blocks), and a user can delete metrics.jsonl;
- the console lines a run prints (`train.log`, which keeps every attempt's lines, and a sweep's
  `stdout.log`): the progress line, the epsilon line of the summary and the resume line.

Every file is read line by line or block by block (bounded memory, time linear in its size).
Where every trace of a release is gone nothing can be known, and nothing more is promised."""
from __future__ import annotations

import contextlib
import json
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pazo.run.checkpoint import read_summary
from pazo.errors import ConfigError
from pazo.run.gate import LEDGER
from pazo.run.loggers import CSV_FILE, TENSORBOARD_DIR, csv_step, event_files, tensorboard_step

#: the keys of a summary (summary.json's top level and its privacy block, W&B's run summary) that
#: count steps an attempt ran; `_step` is W&B's own
SUMMARY_STEPS = ("steps_done", "stopped_at_step", "resumed_from_step", "steps_released", "_step")
#: the console lines that name a step: `Progress.update`'s, `print_summary`'s epsilon line and the
#: resume line of `pazo.train` (with or without train.log's timestamp before them)
CONSOLE_STEPS = (re.compile(rb"progress: step (\d+)/\d+ \("),
                 re.compile(rb"epsilon spent \S+ / target \S+ \(delta \S+, sigma \S+, (\d+) steps"
                            rb"(?:, (\d+) released by earlier attempts)?\)"),
                 re.compile(rb"resumed: .* from its checkpoint at step (\d+) of \d+"))
#: the start of a row of metrics.jsonl as the recorder writes it (a row cut short still shows it)
ROW_START = re.compile(rb'^\s*\{\s*"step"\s*:\s*(\d+)')
#: a line (or a W&B record) longer than this is read in pieces: memory stays bounded
MAX_PIECE = 1 << 20
MAX_RECORD = 1 << 24
#: W&B's transaction log: a 7-byte header (":W&B", magic, version), then LevelDB-log blocks of chunks
#: (crc32 4, length 2, type 1: full 1, first 2, middle 3, last 4)
WANDB_BLOCK, WANDB_HEADER, CHUNK_HEADER = 32768, 7, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass(frozen=True)
class Release:
    """The highest step an outlet of the directory shows released (0: none shows any), and that
    outlet's file, relative to the run directory."""

    step: int = 0
    shown_by: str = ""

    def __bool__(self) -> bool:
        return self.step > 0

    def said(self) -> str:
        """`through step N, as FILE shows` (for the lines that refuse a launch)."""
        return f"through step {self.step}, as {self.shown_by} shows"


def earlier_releases(run_dir: Path) -> Release:
    """What the attempts in `run_dir` released: the highest step any of its outlets shows (the one
    answer every caller uses). An outlet's file that exists but cannot be read is a ConfigError."""
    run_dir, best = Path(run_dir), Release()
    for path, read in outlet_files(run_dir):
        try:
            step = read(path)
        except FileNotFoundError:   # deleted while read: shows nothing
            continue
        except OSError as err:
            why = err.strerror or type(err).__name__
            raise ConfigError(f"{path} cannot be read ({why}), so what an earlier attempt released cannot be "
                              "told; make it readable, or give another hydra.run.dir") from None
        if step > best.step:
            best = Release(step, str(path.relative_to(run_dir)))
    return best


def outlet_files(run_dir: Path) -> Iterator[tuple[Path, object]]:
    """Each outlet's file in `run_dir` and in its archived attempts, with its reader."""
    attempts = run_dir / "attempts"
    archived = sorted(p for p in attempts.iterdir() if p.name.isdigit() and p.is_dir()) if attempts.is_dir() else []
    for where in (run_dir, *archived):
        yield where / "metrics.jsonl", rows_step
        yield where / "summary.json", summary_file_step
        yield where / CSV_FILE, csv_file_step
        yield from ((events, tensorboard_file_step) for events in event_files(where / TENSORBOARD_DIR))
        for folder in wandb_folders(where / "wandb"):
            yield from ((log, wandb_log_step) for log in sorted(folder.glob("*.wandb")))
            yield folder / "files" / "wandb-summary.json", summary_file_step
            yield folder / "files" / "output.log", console_step
    yield run_dir / LEDGER, ledger_step
    yield run_dir / "train.log", console_step
    yield run_dir / "stdout.log", console_step


def wandb_folders(wandb_dir: Path) -> list[Path]:
    """W&B's local run folders (offline and online), not the `latest-run` link to one of them."""
    if not wandb_dir.is_dir():
        return []
    return sorted(p for p in wandb_dir.iterdir()
                  if p.name.startswith(("offline-run-", "run-")) and p.is_dir() and not p.is_symlink())


def present(path: Path) -> bool:
    """Whether the outlet's file is there to read (an OSError where something else stands in its place)."""
    if path.is_file():
        return True
    if path.exists() or path.is_symlink():
        raise OSError(0, "not a regular file", str(path))
    return False


def pieces(path: Path) -> Iterator[bytes]:
    """The lines of `path`, a line longer than MAX_PIECE in pieces; nothing when it is absent."""
    if not present(path):
        return
    with open(path, "rb") as f:
        while piece := f.readline(MAX_PIECE):
            yield piece


def rows_step(path: Path) -> int:
    """The highest step of the rows of a metrics.jsonl."""
    best = 0
    for line in pieces(path):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):   # cut short or edited: its start may still say the step
            match = ROW_START.match(line)
            step = int(match.group(1)) if match else None
        best = max(best, as_step(step))
    return best


def ledger_step(path: Path) -> int:
    """The highest step of a run's ledger (`pazo.run.gate.LEDGER`: a step a line, each written before its row left)."""
    best = 0
    for line in pieces(path):
        with contextlib.suppress(ValueError):
            best = max(best, as_step(int(line)))
    return best


def csv_file_step(path: Path) -> int:
    """The highest step of the rows of a metrics.csv."""
    return csv_step(path) if present(path) else 0


def tensorboard_file_step(path: Path) -> int:
    """The highest step of a TensorBoard event file's scalars; one that cannot be opened is an OSError."""
    if not present(path):
        return 0
    with open(path, "rb"):   # (TensorBoard's reader passes over a file it cannot open: that must not hide it)
        pass
    return tensorboard_step(path)


def summary_file_step(path: Path) -> int:
    """The highest step a summary file (summary.json, W&B's wandb-summary.json) counts."""
    if not present(path) or path.stat().st_size > MAX_RECORD:   # (no pazo or W&B summary is that long)
        return 0
    return summary_step(read_summary(path))


def summary_step(summary: dict | None) -> int:
    """The highest step a summary (as read; None: unreadable) counts, its privacy block's included."""
    summary = summary if isinstance(summary, dict) else {}
    privacy = summary.get("privacy") if isinstance(summary.get("privacy"), dict) else {}
    return max(as_step(block.get(key)) for block in (summary, privacy) for key in SUMMARY_STEPS)


def console_step(path: Path) -> int:
    """The highest step the console lines of a log name."""
    best = 0
    for line in pieces(path):
        for pattern in CONSOLE_STEPS:
            for match in pattern.finditer(line):
                best = max(best, *(int(n) for n in match.groups() if n is not None))
    return best


def as_step(value) -> int:
    """`value` as a step count (an int, not a bool; anything else counts none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def wandb_log_step(path: Path) -> int:
    """The highest step the history and summary records of a W&B transaction log hold. A record
    whose checksum fails is read all the same: an edit must not hide a release."""
    from wandb.proto import wandb_internal_pb2   # (imports wandb: only where W&B wrote a log)
    from google.protobuf.message import DecodeError

    best = 0
    if not present(path):
        return best
    for data in wandb_log_records(path):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(data)
        except DecodeError:
            continue
        kind = record.WhichOneof("record_type")
        if kind == "history":
            best = max(best, as_step(record.history.step.num), items_step(record.history.item))
        elif kind == "summary":
            best = max(best, items_step(record.summary.update))
    return best


def items_step(items) -> int:
    """The highest step among W&B's items (key, JSON value) whose key counts steps."""
    best = 0
    for item in items:
        if item.key in SUMMARY_STEPS:
            try:
                best = max(best, as_step(json.loads(item.value_json)))
            except ValueError:
                continue
    return best


def wandb_log_records(path: Path) -> Iterator[bytes]:
    """The records of a W&B transaction log, block by block: a chunk whose header cannot be right
    (past its block, an unknown type) ends its block, and a record with a part missing is dropped."""
    with open(path, "rb") as f:
        block = f.read(WANDB_BLOCK)
        if block[:4] != b":W&B":
            return
        pos, record = WANDB_HEADER, None
        while block:
            while pos + CHUNK_HEADER <= len(block):
                _, length, kind = struct.unpack_from("<IHB", block, pos)
                end = pos + CHUNK_HEADER + length
                if kind not in (FULL, FIRST, MIDDLE, LAST) or end > len(block):
                    record = None   # padding at the block's end, or damage: go on at the next block
                    break
                data, pos = block[pos + CHUNK_HEADER:end], end
                if kind in (FULL, FIRST):
                    record = bytearray(data)
                elif record is not None and len(record) + len(data) <= MAX_RECORD:
                    record += data
                else:
                    record = None
                if kind in (FULL, LAST) and record is not None:
                    yield bytes(record)
                    record = None
            block, pos = f.read(WANDB_BLOCK), 0
