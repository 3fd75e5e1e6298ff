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
from pazo.files.file_kinds import NotRegularFile, read_regular_bytes
from pazo.files.rundir import write_atomic, write_text_atomic

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


# --- a run's files read by the reports and the sweep: never waited on ---------------------------------

def run_with_config(folder: Path) -> Path:
    """A run directory with a run's config.yaml (what the reports and the sweep look for)."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("method: {name: dpsgd}\ndataset: {name: digits}\nseed: 0\n"
                                        "privacy: {epsilon: 1.0}\n")
    return folder


def read_summary_of(run: Path) -> str:
    from pazo.run.checkpoint import read_summary
    return "none" if read_summary(run / "summary.json") is None else "read"


def metric_rows_of(run: Path) -> str:
    from pazo.run.metrics_file import read_metric_rows
    try:
        read_metric_rows(run / "metrics.jsonl")
    except OSError as err:
        return f"refused: {err}"
    return "read"


def table_rows_of(run: Path) -> str:
    from pazo.run.results import load_runs
    return f"{len(load_runs([run.parent]))} rows"


def sweep_status_of(run: Path) -> str:
    from pazo.sweep.checks import status
    return status(run)


#: each reader of a run's file, the file it reads, and what it gives when that file is not regular
READERS = {"checkpoint.read_summary": ("summary.json", read_summary_of, "none"),
           "metrics_file.read_metric_rows": ("metrics.jsonl", metric_rows_of, "refused: "),
           "results.load_runs (summary.json)": ("summary.json", table_rows_of, "0 rows"),
           "results.load_runs (config.yaml)": ("config.yaml", table_rows_of, "0 rows"),
           "sweep.status": ("summary.json", sweep_status_of, "incomplete")}


def without_waiting(read, path: Path):
    """`read()` in a thread; a reader still blocked on the FIFO after a minute fails the test, and is
    then let go (a writer opens and closes the FIFO) so that the suite goes on."""
    import threading
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(read()), daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join()
        pytest.fail(f"the reader waited on {path}")
    return outcome[0]


@settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), reader=st.sampled_from(sorted(READERS)))
@example(kind="fifo", reader="results.load_runs (summary.json)")   # the reported case: pazo-report tables hung
def test_a_run_file_that_is_not_regular_is_left_out_never_waited_on(kind, reader, tmp_path_factory, capsys):
    name, read, gives = READERS[reader]
    run = run_with_config(tmp_path_factory.mktemp("sweep") / "run")
    if name == "config.yaml":
        (run / name).unlink()
    path = make_special(run / name, kind)
    assert without_waiting(lambda: read(run), path).startswith(gives)
    assert unchanged(path, kind)
    err = capsys.readouterr().err
    if reader.startswith("results."):       # the report names the run it leaves out, and why
        assert f"pazo: skipped {run}" in err and "unreadable" in err


@pytest.mark.parametrize("name", ["summary.json", "config.yaml", "metrics.jsonl"])
def test_a_sweep_whose_run_file_is_a_fifo_is_refused_in_one_line_before_any_run(name, tmp_path, monkeypatch, capsys):
    import pazo.sweep.command
    monkeypatch.setattr(pazo.sweep.command, "launch", lambda *a, **k: pytest.fail("a run was launched"))
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\ngrid: false\n")
    run = tmp_path / "out" / "mini" / "digits" / "dpsgd" / "eps=1" / "rep=0"
    run.mkdir(parents=True)
    fifo = make_special(run / name, "fifo")
    argv = [str(spec), "--out", str(tmp_path / "out"), "device=cpu"]
    status = without_waiting(lambda: pazo.sweep.command.main(argv), fifo)
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pazo: error: {fifo}: it is a FIFO (named pipe), not a regular file")
    assert unchanged(fifo, "fifo")
