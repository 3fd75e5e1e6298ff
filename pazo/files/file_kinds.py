"""pazo reads and writes regular files only.

A path that is a FIFO, a device, a socket or a directory where pazo expects a file is never
replaced (an output given as `--out /dev/full` would otherwise be renamed over: the atomic write is
a rename) and never opened to read (a FIFO named `summary.json` would block the reader for good):
`NotRegularFile`, an OSError naming the path and its kind, which readers treat as any unreadable
file and the commands report in one line (exit 2)."""
from __future__ import annotations

import argparse
import errno
import os
import stat
from pathlib import Path

#: a file type's test and the name a user reads
_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISSOCK, "socket"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"))


class NotRegularFile(OSError):
    """A path that exists and is not a regular file, where pazo reads or writes one."""

    def __init__(self, path: Path | str, kind: str):
        super().__init__(errno.EISDIR if kind == "directory" else errno.EINVAL,
                         f"it is a {kind}, not a regular file", str(path))
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def kind_of(mode: int) -> str | None:
    """The kind of a file of `mode` (st_mode) when it is not a regular file, else None."""
    return next((name for test, name in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "special file")


def special_kind(path: Path | str) -> str | None:
    """What `path` is when it exists and is not a regular file (symbolic links followed); None for a
    regular file or a path that is not there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return kind_of(mode)


def refuse_special(path: Path | str) -> None:
    """A NotRegularFile when `path` exists and is not a regular file: an output pazo must not replace."""
    kind = special_kind(path)
    if kind is not None:
        raise NotRegularFile(path, kind)


#: every pazo command's word for an empty path ('' is the current folder to the OS, never what was meant)
EMPTY_PATH = "the path is empty: give a folder or file"


def path_argument(text: str) -> str:
    """argparse's `type` for every path a pazo command takes: an empty one is refused while the
    command line is parsed (`Path("")` is `.`, so it would read or write the current folder)."""
    if text == "":
        raise argparse.ArgumentTypeError(EMPTY_PATH)
    return text


def output_file(text: str) -> Path:
    """argparse's `type` for an output file (`--out`): refused while the command line is parsed, before
    anything is computed, when it is empty or names something that is not a regular file."""
    path_argument(text)
    try:
        refuse_special(text)
    except NotRegularFile as err:
        raise argparse.ArgumentTypeError(f"{err}; give the path of a file to write") from None
    return Path(text)


def read_regular_bytes(path: Path | str) -> bytes:
    """`path`'s bytes, read only when it is a regular file: opened without blocking (a FIFO's open
    would wait for a writer) and checked before and on the open file (a socket cannot be opened; a
    FIFO swapped in between is caught on the open file)."""
    refuse_special(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        kind = kind_of(os.fstat(fd).st_mode)
        if kind is not None:
            raise NotRegularFile(path, kind)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    finally:
        os.close(fd)


def read_regular_text(path: Path | str) -> str:
    """`read_regular_bytes` as UTF-8 text (a UnicodeDecodeError, a ValueError, where it is not)."""
    return read_regular_bytes(path).decode()
