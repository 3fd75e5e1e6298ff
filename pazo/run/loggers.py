"""The loggers a run's rows are mirrored to besides W&B (`logger.report_to`): TensorBoard's event
files under `tensorboard/` and `metrics.csv`, both in the run directory.

A logger only formats: the recorder hands every logger the same released row, which
`pazo.run.outlets` alone decides (the row W&B gets), so no logger has a filter of its own. A logger
writes each step once: it continues past the last step its files already hold (a resumed attempt
computes the steps after its checkpoint again) and is handed the rows an earlier attempt released
in metrics.jsonl that it lacks (`Recorder`), never a row computed twice.

- CSV: a header (`step`, then every released key in the order it first came), one line per row,
  appended in one write and flushed, so a kill leaves at worst its last line cut short (cut off
  when the file is continued); a row with a key the header lacks rewrites the file whole with the
  longer header (`pazo.files.rundir.write_atomic`). A value a row lacks is an empty cell.
- TensorBoard: each numeric key a scalar tag at the row's step (`step` is the axis; a value that
  is not a number has no scalar to be), flushed after each row. Read back with TensorBoard's own
  reader (`tensorboard_step`), which `pazo.run.releases` uses too.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

from pazo.run import gate
from pazo.files.file_kinds import read_regular_text
from pazo.files.rundir import writing

CSV_FILE = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"
#: TensorBoard's event files (`events.out.tfevents.<time>.<host>.<pid>.<n>`)
EVENT_FILES = "events.out.tfevents.*"
#: the start of a CSV row: its step, the first cell (a line cut short or edited still shows it)
CSV_ROW_START = re.compile(rb"^\s*(\d+)\s*(?:,|\r?\n|$)")
#: a line longer than this is read in pieces: memory stays bounded
MAX_PIECE = 1 << 20


def csv_cell(value) -> str:
    """A value as its CSV cell: numbers as Python writes them (floats round-trip), lists and dicts as JSON."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def csv_line(cells) -> bytes:
    """One CSV line (quoted where a cell needs it), with its newline."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue().encode()


def csv_step(path: Path) -> int:
    """The highest step of a metrics.csv's rows (0: none), line by line, in bounded memory."""
    best = 0
    with open(path, "rb") as f:
        while piece := f.readline(MAX_PIECE):
            match = CSV_ROW_START.match(piece)
            best = max(best, int(match.group(1)) if match else 0)
    return best


def read_csv(path: Path) -> tuple[list[str], list[dict]]:
    """The header and the whole rows of a metrics.csv (a last line cut short left out)."""
    text = read_regular_text(path)
    whole = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(whole))
    rows = [row for row in reader if CSV_ROW_START.match((row.get("step") or "").encode())]
    return list(reader.fieldnames or []), rows


def write_csv(path: Path, header: list[str], rows: list[dict]) -> None:
    """A metrics.csv holding `rows` under `header`, written whole or not at all."""
    lines = [csv_line(header), *(csv_line(csv_cell(row.get(key, "")) for key in header) for row in rows)]
    gate.write_released(path, b"".join(lines))


class CsvLogger:
    """metrics.csv: the released rows, one line each."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / CSV_FILE
        self.header: list[str] = ["step"]
        self.last_step, self._file, self._has_header = 0, None, False
        with writing(self.path):
            if self.path.exists():
                self._continue()

    def _continue(self) -> None:
        """An earlier attempt's file: its last line cut off if a kill left it short, then appended to."""
        header, rows = read_csv(self.path)
        self.header, self._has_header = header or self.header, bool(header)
        gate.cut_back(self.path, self.path.read_bytes().rfind(b"\n") + 1)
        self.last_step = max((int(row["step"]) for row in rows), default=0)

    def write(self, row: dict) -> None:
        if row["step"] <= self.last_step:
            return
        with writing(self.path):
            new = [key for key in row if key not in self.header]
            if new or not self._has_header:
                self._rewrite([*self.header, *new], row)
            else:
                self._opened().write(csv_line(csv_cell(row.get(key, "")) for key in self.header))
        self.last_step = row["step"]

    def _rewrite(self, header: list[str], row: dict) -> None:
        """The file whole with a longer header (a key no earlier row had) and `row` last."""
        rows = read_csv(self.path)[1] if self._has_header else []
        self.close()
        write_csv(self.path, header, [*rows, row])
        self.header, self._has_header = header, True

    def _opened(self):
        if self._file is None:
            self._file = gate.open_released(self.path, append=True)   # (unbuffered: each line is one write)
        return self._file

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardLogger:
    """tensorboard/: the released rows' numbers as scalars, through torch's SummaryWriter."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter   # (imports tensorboard: only where asked for)

        self.folder = Path(run_dir) / TENSORBOARD_DIR
        with writing(self.folder):
            self.last_step = max(map(tensorboard_step, event_files(self.folder)), default=0)
            self.writer = SummaryWriter(log_dir=str(self.folder))

    def write(self, row: dict) -> None:
        step = row["step"]
        if step <= self.last_step:
            return
        with writing(self.folder):
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, float(value), global_step=step)
            self.writer.flush()
        self.last_step = step

    def close(self) -> None:
        writer, self.writer = self.writer, None   # (closed once, even where its last flush fails)
        if writer is not None:
            with writing(self.folder):
                writer.close()


#: the loggers besides W&B, by their name in `logger.report_to`
WRITERS = {"tensorboard": TensorBoardLogger, "csv": CsvLogger}


def event_files(folder: Path) -> list[Path]:
    """TensorBoard's event files in `folder` (none where it is absent)."""
    return sorted(folder.glob(EVENT_FILES)) if folder.is_dir() else []


def tensorboard_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard event file (or folder), as (step, value) per tag, read with
    TensorBoard's own reader: all of them (no sampling), none purged for a step that goes back."""
    from tensorboard.backend.event_processing import event_accumulator

    reader = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0},
                                                purge_orphaned_data=False)
    reader.Reload()
    return {tag: [(event.step, event.value) for event in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


def tensorboard_step(path: Path) -> int:
    """The highest step of the scalars in a TensorBoard event file (0: none)."""
    return max((step for points in tensorboard_scalars(path).values() for step, _ in points), default=0)
