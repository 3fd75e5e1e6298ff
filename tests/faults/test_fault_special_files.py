"""Paths that are not regular files (issue 60, round three): an output that is a FIFO, a directory,
a socket or a device is refused in one line before anything is computed and never replaced (the
atomic write's rename would put a file in its place); a run file that is a FIFO is read as
unreadable, never opened (its open would block the reader for good). Tested on FIFOs, sockets and
directories made in tmp_path, never on a real device."""
import json
import os
import socket
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pazo.bench
import pazo.report
from pazo.file_kinds import NotRegularFile, read_regular_bytes
from pazo.rundir import write_atomic, write_text_atomic

KINDS = ("fifo", "directory", "socket")


def make_special(path: Path, kind: str) -> Path:
    """A FIFO, a directory or a bound Unix socket at `path` (a short name: a socket's path is short)."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    return path


def unchanged(path: Path, kind: str) -> bool:
    mode = path.lstat().st_mode
    return {"fifo": stat.S_ISFIFO, "directory": stat.S_ISDIR, "socket": stat.S_ISSOCK}[kind](mode)


#: a command with an output file, as typed (the run directory filled in by the test)
COMMANDS = {
    "report run": lambda run, out: pazo.report.main(["run", str(run), "--out", str(out)]),
    "bench methods": lambda run, out: pazo.bench.main(["methods", "--settings", "digits", "--out", str(out)]),
    "bench step-ops": lambda run, out: pazo.bench.main(["step-ops", "--out", str(out)]),
    "report audit-table": lambda run, out: pazo.report.main(["audit-table", str(run), "--out", str(out)]),
}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3)))
    return run


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), command=st.sampled_from(sorted(COMMANDS)), name=st.sampled_from(["o", "o.png"]))
@example(kind="fifo", command="report run", name="o.png")
@example(kind="fifo", command="bench methods", name="o")
def test_an_output_that_is_not_a_regular_file_is_refused_in_one_line_and_left_as_it_was(kind, command, name,
                                                                                         run_dir, capfd):
    out = make_special(run_dir.parent / f"{kind[0]}{len(os.listdir(run_dir.parent))}{name}", kind)
    assert COMMANDS[command](run_dir, out) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pazo: error: ") and "not a regular file" in err[0], err
    assert unchanged(out, kind)
    assert not list(run_dir.parent.glob("*.tmp"))


@pytest.mark.parametrize("kind", KINDS)
def test_write_atomic_never_replaces_what_is_not_a_regular_file(kind, tmp_path):
    target = make_special(tmp_path / "t", kind)
    for write in (lambda: write_atomic(target, b"x"), lambda: write_text_atomic(target, "x")):
        with pytest.raises(NotRegularFile, match="not a regular file"):
            write()
        assert unchanged(target, kind)
    assert os.listdir(tmp_path) == ["t"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_that_is_not_regular_is_never_opened_to_read(kind, tmp_path):
    with pytest.raises(NotRegularFile):   # (a FIFO's open without a writer would block here)
        read_regular_bytes(make_special(tmp_path / "t", kind))
