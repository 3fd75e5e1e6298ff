"""Shared by the fault suites (tests/faults/test_fault_*.py): a disk that fills up or refuses
writes, the command line run in this process, and snapshots of a run directory."""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import signal
import sys
from pathlib import Path

import pazo.files.rundir

#: the tiny run every fault case starts from (digits, a few steps, no W&B)
TINY = ["method=dpzero", "train.steps=4", "train.log_every=2", "logger.mode=disabled", "device=cpu"]


class Disk:
    """Files the run opens (`pazo.files.rundir.open_file`, through which every run file is written) on a
    disk that fills up: after the first `opens_ok` opens and `writes_ok` writes of the files
    `only` names (None: every file), `free` bytes are left; a write past them writes what fits
    and then fails with ENOSPC, as a full disk does. `refuse=errno.EACCES` (or EROFS, ...) fails
    those writes with that error instead (a read-only directory, which root, who runs CI, cannot
    make). `fill()` fills the disk from now on."""

    def __init__(self, monkeypatch, free: int = 0, refuse: int | None = None, only: tuple[str, ...] | None = None,
                 opens_ok: int = 0, writes_ok: int = 0):
        self.free, self.refuse, self.only = free, refuse, only
        self.opens_ok, self.writes_ok = opens_ok, writes_ok
        self.refused: list[str] = []
        real = pazo.files.rundir.open_file

        def open_file(path, mode=None, append=False):
            f = real(path, mode, append)
            name = Path(path).name.removesuffix(".tmp")
            if self.only is not None and name not in self.only:
                return f
            if self.opens_ok > 0:
                self.opens_ok -= 1
                return f
            return _Limited(f, self, name)

        monkeypatch.setattr(pazo.files.rundir, "open_file", open_file)

    def fill(self) -> None:
        self.free, self.opens_ok, self.writes_ok = 0, 0, 0


class _Limited(io.RawIOBase):
    def __init__(self, f, disk: Disk, name: str):
        self._f, self._disk, self._name = f, disk, name

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._f.fileno()

    def write(self, data) -> int:
        data, disk = bytes(data), self._disk
        if disk.writes_ok > 0:
            disk.writes_ok -= 1
            return self._f.write(data)
        if disk.refuse is not None:
            disk.refused.append(self._name)
            raise OSError(disk.refuse, os.strerror(disk.refuse))
        if len(data) > disk.free:
            fits, disk.free = data[:disk.free], 0
            if fits:
                return self._f.write(fits)   # a short write, as the disk fills up; the next one fails
            disk.refused.append(self._name)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        disk.free -= len(data)
        return self._f.write(data)

    def flush(self) -> None:
        if not self._f.closed:
            self._f.flush()

    def close(self) -> None:
        self._f.close()
        super().close()


def snapshot(folder: Path) -> dict[str, str]:
    """Every file below `folder` (but the lock) by relative path: the sha256 of its bytes; a link by
    where it points (W&B's `logs/debug-core.log` links to its service's log outside the run, which
    the service, shared by every run of the process, goes on writing)."""
    return {str(p.relative_to(folder)): f"-> {os.readlink(p)}" if p.is_symlink()
            else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and p.name != pazo.files.rundir.LOCK}


def leftovers(folder: Path) -> list[str]:
    """Temporary files a write left behind (there must be none)."""
    return [str(p) for p in Path(folder).rglob("*") if p.name.endswith(".tmp") or ".pazo-probe-" in p.name]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`python -m pazo.train <argv>` in this process: (exit status, stdout, stderr). Hydra's global
    state, sys.argv, the signal handlers and the root logger's handlers are restored afterwards;
    a console handler an earlier in-process command left on the `pazo` logger is set aside meanwhile
    (with Hydra's own on the root, it would print every line twice)."""
    import logging

    from hydra.core.global_hydra import GlobalHydra

    from pazo.train import cli

    saved_argv, saved_int = sys.argv, signal.getsignal(signal.SIGINT)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    pazo_logger = logging.getLogger("pazo")
    saved_pazo = list(pazo_logger.handlers)
    pazo_logger.handlers[:] = []
    sys.argv = ["pazo-train", *argv]
    capsys.readouterr()
    code = 0
    out_buf, err_buf = io.StringIO(), io.StringIO()
    try:
        # the command writes to buffers of its own, never to pytest's capture files (which an
        # in-process command's logging set-up could otherwise leave closed for the next test)
        with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
            cli()
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved_argv
        signal.signal(signal.SIGINT, saved_int)
        for handler in root.handlers:
            if handler not in saved_handlers:
                with contextlib.suppress(Exception):
                    handler.close()
        root.handlers[:], root.level = saved_handlers, saved_level
        pazo_logger.handlers[:] = saved_pazo
        GlobalHydra.instance().clear()
    out, err = capsys.readouterr()
    return code, out_buf.getvalue() + out, err_buf.getvalue() + err


def error_lines(stderr: str) -> list[str]:
    """The lines a user reads on stderr, progress bars aside."""
    return [line for line in stderr.splitlines() if line.strip() and "it/s]" not in line and "s/it]" not in line]


def one_error_line(stderr: str) -> str:
    """The single `pazo: error:` line of `stderr`, asserting there is no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in error_lines(stderr) if line.startswith("pazo: error:")]
    assert len(lines) == 1, stderr
    return lines[0]
