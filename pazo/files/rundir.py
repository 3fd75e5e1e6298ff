"""The run directory as a place to write.

- Checked before any compute (`check_output_dir`): a file where the directory should be, a parent
  or directory without write access, a read-only file system or a full disk is one line.
- Held by one launch at a time (`RunDirLock`): an exclusive lock on `<run dir>/.pazo.lock`, which
  names the holder (pid, host); a second launch into the same directory is refused before training.
- Every file a run writes is whole or not at all (`write_atomic`: a temporary file, flushed to disk,
  renamed over the old one): a full disk or a kill during a write leaves the previous good file.
  A write the machine refuses becomes a `WriteFault` naming the file and the reason.
- Hydra's record of a launch (`.hydra/config.yaml`, `hydra.yaml`, `overrides.yaml`) is written by
  `pazo-train` into `.hydra/launch-<pid>-<token>/` and moved into `.hydra/` only once the launch is
  accepted (`settle_hydra_record`): a launch that is refused, or that finds the run finished, leaves
  the directory's record as it was.
"""
from __future__ import annotations

import errno
import fcntl
import io
import os
import secrets
import shutil
import socket
import tempfile
from contextlib import contextmanager
from pathlib import Path

from pazo.errors import ConfigError
from pazo.files.file_kinds import refuse_special

LOCK = ".pazo.lock"
HYDRA = ".hydra"
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")
STAGING_PREFIX = "launch-"
#: a finished run's trained weights (safetensors: read without running code), and the file runs
#: written before it held them in (a pickled torch state dict), which `pazo.load_run` still reads
MODEL_FILE = "model.safetensors"
OLD_MODEL_FILE = "model.pt"
#: flock's errors on a file system that does not lock (some network and FUSE file systems)
UNLOCKABLE = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)
#: errors of the machine, not of the run: what `WriteFault` explains
_REASONS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
            errno.EACCES: "no permission to write there", errno.EPERM: "no permission to write there",
            errno.EROFS: "the file system is read-only", errno.EIO: "an input/output error of the disk"}


class WriteFault(OSError):
    """A write into the run directory that the machine refused (disk full, no permission, a
    read-only file system, an I/O error): one line naming the file and the reason."""

    def __init__(self, path: Path | str, err: OSError):
        super().__init__(err.errno, err.strerror)
        self.path, self.cause = Path(path), err

    @property
    def reason(self) -> str:
        plain = _REASONS.get(self.errno)
        detail = f"{self.strerror or self.cause}" + (f" [{errno.errorcode.get(self.errno)}]" if self.errno else "")
        return f"{plain} ({detail})" if plain else detail

    def __str__(self) -> str:
        return f"could not write {self.path}: {self.reason}"


@contextmanager
def writing(path: Path | str):
    """Turn an OSError raised while writing `path` into a WriteFault naming it."""
    try:
        yield
    except WriteFault:
        raise
    except OSError as err:
        raise WriteFault(path, err) from err


def write_atomic(path: Path | str, content, mode: int | None = None, shared: bool = False) -> None:
    """`path` holds `content` whole, or keeps what it held: written to `<path>.tmp`, flushed to the
    disk and renamed over `path`; the temporary file never stays behind. `content`: bytes, or a
    function that writes into the open binary file (e.g. `lambda f: torch.save(state, f)`). `mode`:
    the new file's permission bits (e.g. 0o600), set before any byte is written. `shared`: other
    processes may write `path` at the same moment (a cache shared by a sweep's jobs), so the
    temporary file gets a name of its own. A `path` that is not a regular file (a device, a FIFO, a
    directory) is never replaced: `pazo.files.file_kinds.NotRegularFile`."""
    path = Path(path)
    refuse_special(path)
    with writing(path):
        if shared:
            fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            tmp = Path(name)
        else:
            tmp = path.with_name(path.name + ".tmp")
        try:
            with open_file(tmp, mode) as f:
                sink = _Sink(f)
                try:
                    content(sink) if callable(content) else sink.write(content)
                except Exception:
                    if sink.error is not None:  # torch.save reports a failed write as a RuntimeError
                        raise sink.error from None
                    raise
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path | str, text: str) -> None:
    """A text output (a table, a csv, a report) written whole or not at all (`write_atomic`)."""
    write_atomic(path, text.encode())


def save_figure_atomic(fig, path: Path | str, **savefig_kwargs) -> None:
    """A matplotlib figure saved whole or not at all: drawn into memory in the format of `path`'s
    suffix, then written by `write_atomic`, so a kill or a full disk never leaves a 0-byte image."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip("."), **savefig_kwargs)
    write_atomic(path, buffer.getvalue())


class _Sink:
    """A file's `write` and `flush` that remember the first OSError (which a writer such as
    torch.save may turn into another exception)."""

    def __init__(self, f):
        self._f, self.error = f, None

    def write(self, data) -> int:
        view, done = memoryview(data).cast("B"), 0
        try:
            while done < len(view):   # an unbuffered write may be short (a disk filling up)
                done += self._f.write(view[done:])
        except OSError as err:
            self.error = self.error or err
            raise
        return done

    def flush(self) -> None:
        self._f.flush()


def open_file(path: Path | str, mode: int | None = None, append: bool = False):
    """`path` opened for binary writing (from empty, or at its end with `append`), unbuffered, with
    permission bits `mode` for a new file (None: the umask's). Every file of a run is opened here."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o666 if mode is None else mode)
    if mode is not None:
        os.fchmod(fd, mode)  # also when an earlier file was left with other bits
    return os.fdopen(fd, "wb", buffering=0)


def blocking_file(folder: Path | str) -> Path | None:
    """The file (not a folder) that stands where `folder` or one of its parents would be, or None."""
    folder = Path(folder)
    return next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), None)


def output_folder_problem(folder: Path | str, option: str = "--out") -> str | None:
    """Why output folder `folder` (set by `option`) cannot be made, found before any work and
    without making it: a file where it or a parent folder would be; None where nothing is in the way."""
    blocker = blocking_file(folder)
    if blocker is None:
        return None
    return f"{option} {folder}: {blocker} is a file, not a folder; give another {option}"


def check_output_dir(run_dir: Path | str, what: str = "the run directory", option: str = "hydra.run.dir") -> Path:
    """Create `run_dir` (and its parents) if needed and check that it is a directory a run can
    write to: a ConfigError (one line, before any compute) when it is a file, cannot be created
    or is not writable; a WriteFault when the disk is full. (`what` and `option` name the folder
    and the option that sets it in the line: a sweep's `--out`.)"""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"{what} {run_dir} is a file, not a directory; give another {option}")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = blocking_file(run_dir) or run_dir
        raise ConfigError(f"cannot create {what} {run_dir}: {blocker} is a file, not a directory; "
                          f"give another {option}") from None
    except OSError as err:
        _refuse(run_dir, err, f"create {what}", option)
    probe = run_dir / f".pazo-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        with open_file(probe) as f:
            f.write(b"pazo")
            os.fsync(f.fileno())
    except OSError as err:
        _refuse(run_dir, err, f"write into {what}", option)
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    return run_dir


def _refuse(run_dir: Path, err: OSError, doing: str, option: str):
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        raise WriteFault(run_dir, err) from None
    said = err.strerror or str(err)
    reason = f"{_REASONS[err.errno]} ({said})" if err.errno in _REASONS else said
    raise ConfigError(f"cannot {doing} {run_dir}: {reason}; give a {option} you can write to") from None


class RunDirLock:
    """An exclusive lock on `run_dir`, held from before the run directory is read until the run's
    last file is written. A second launch into the same directory meanwhile is a ConfigError that
    names the directory and the holder. The lock is the kernel's (flock), so it goes with the
    process: a killed run leaves no stale lock, only the file, which the next launch reuses."""

    def __init__(self, run_dir: Path | str):
        self.path = Path(run_dir) / LOCK
        self._fd: int | None = None
        #: False on a file system that has no locks (then only the summary's heartbeat tells a live run)
        self.locked = True

    def acquire(self) -> RunDirLock:
        while True:
            with writing(self.path):
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in UNLOCKABLE:  # a file system without locks: the heartbeat check remains
                    self.locked = False
                    break
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                    raise WriteFault(self.path, err) from err
                raise ConfigError(f"run directory {self.path.parent} is in use by another launch ({self.holder()} "
                                  f"holds {self.path}); wait for it to end, or give another hydra.run.dir") from None
            try:  # the file may have been removed by the holder that just released it: lock the current one
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        self._fd = fd
        try:
            with writing(self.path):
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
        except WriteFault:
            self.release()
            raise
        return self

    def holder(self) -> str:
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return f"process {text}" if text else "another process"

    def release(self) -> None:
        if self._fd is not None:
            try:
                self.path.unlink(missing_ok=True)  # while still held: no one locks the old file after us
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def __exit__(self, *exc) -> bool:
        self.release()
        return False


def remove_broken_writes(run_dir: Path | str) -> list[Path]:
    """Delete what a kill during `write_atomic` left (`<run file>.tmp`; the run file itself is the
    previous whole one), in the directory or its private workspace (`private/`, `pazo.run.gate`). Called by
    the lock's holder, so no write of another launch is under way."""
    removed = []
    for path in [*Path(run_dir).glob("*.tmp"), *Path(run_dir).glob("private/*.tmp")]:
        if path.name.removesuffix(".tmp") in ("summary.json", "config.yaml", MODEL_FILE, OLD_MODEL_FILE,
                                               "checkpoint.pt", "audit.json", "private_computation.json"):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def staging_subdir() -> str:
    """Where `pazo-train` has Hydra write this launch's record: `.hydra/launch-<pid>-<token>`."""
    return f"{HYDRA}/{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(3)}"


def is_staging(output_subdir: str | None) -> bool:
    return bool(output_subdir) and Path(output_subdir).parent.name == HYDRA \
        and Path(output_subdir).name.startswith(STAGING_PREFIX)


def accept_hydra_record(run_dir: Path | str, staged: Path | str | None, archive_to: Path | str | None = None) -> None:
    """The launch's record (`staged`) replaces `.hydra/`'s files, now that the launch is accepted;
    the directory's earlier record goes to `archive_to/.hydra/` first (an earlier attempt's)."""
    if staged is None or not Path(staged).is_dir():
        return
    staged, hydra = Path(staged), Path(run_dir) / HYDRA
    with writing(hydra):
        if archive_to is not None and any((hydra / n).exists() for n in HYDRA_FILES):
            keep = Path(archive_to) / HYDRA
            keep.mkdir(parents=True, exist_ok=True)
            for name in HYDRA_FILES:
                if (hydra / name).exists():
                    shutil.copy2(hydra / name, keep / name)
        for name in HYDRA_FILES:
            if (staged / name).exists():
                os.replace(staged / name, hydra / name)
    drop_hydra_record(staged)


def drop_hydra_record(staged: Path | str | None) -> None:
    """Remove a launch's staged record (refused, or nothing to do): `.hydra/` keeps the record of
    the launch that wrote it."""
    if staged is not None:
        shutil.rmtree(staged, ignore_errors=True)


def existing_dirs(run_dir: Path | str) -> frozenset[Path]:
    """Which of `run_dir`, its `.hydra/` and its parents are directories now (absolute paths): what
    a launch found, so that it can tell the directories it makes from those it found."""
    run_dir = Path(os.path.abspath(run_dir))
    return frozenset(p for p in [run_dir / HYDRA, run_dir, *run_dir.parents] if p.is_dir())


def remove_created_dirs(run_dir: Path | str, existed: frozenset[Path]) -> list[Path]:
    """Remove `run_dir`'s `.hydra/`, `run_dir` and its parents, bottom up, while each is empty and
    was not in `existed` (`existing_dirs` before the launch): what a launch that wrote nothing made.
    rmdir only, so a directory with anything in it stays, with everything above it. The removed."""
    run_dir = Path(os.path.abspath(run_dir))
    removed = []
    for path in [run_dir / HYDRA, run_dir, *run_dir.parents]:
        if path in existed:
            break   # found there: it stays, and so does everything above it
        try:
            path.rmdir()
        except FileNotFoundError:
            continue   # (never made: Hydra stopped before it, or this is another moment's name)
        except OSError:
            break   # not empty (or not ours to remove): it stays, and so does everything above it
        removed.append(path)
    return removed
