"""SIGTERM before the training loop (the faults guide's "How each signal ends a command"): what a
`kill`, `timeout`, torchrun or SLURM sends while a command sets up ends it as a Ctrl-C there does: one
line (`pazo: terminated ...`), exit status 143 (128 + SIGTERM), nothing written (Hydra's staged
record and the folders the launch made removed); was: killed silently (143, no line), leaving
`<run>/.hydra/launch-*/`. Once the loop runs, SIGTERM stays its own (`preempted`, exit 3)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cache

HERE = Path(__file__).parent

#: the moments of a run's set-up (`pause_at.py`'s POINT): before Hydra runs (its command line composed
#: and its folders checked), then in the task (Hydra's record staged in the run directory): the
#: directory checked, the data read, sigma calibrated; and under torchrun rank 0 waiting for a peer
MOMENTS = {
    "checking where it writes": "pazo.run.cli:check_output_location",
    "planning the launch": "pazo.run.launch:plan_launch",
    "reading the data": "pazo.run.build:build_dataset",
    "calibrating sigma": "pazo.run.build:make_plan",
    "rank 0 waiting for its peer": "pazo.run.distributed:join+through",
}
#: the moments the default suite sends its signal at: one before Hydra runs, one in the task, one on a
#: rank (the others are in the slow suite: each is a pazo-train process, about 7 s of CPU)
FAST_MOMENTS = ("checking where it writes", "reading the data", "rank 0 waiting for its peer")
#: how each signal ends a command in its set-up: its word and exit status
ENDINGS = {signal.SIGTERM: ("pazo: terminated ", 143), signal.SIGINT: ("pazo: interrupted ", 130)}


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signalled_at(moment: str, signum: int, tmp_path: Path) -> tuple[int, str]:
    """`pazo-train` paused at `moment` of its set-up, sent `signum`: its exit status and its output."""
    marker, cwd = tmp_path / "reached", tmp_path / "cwd"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PYTHONPATH=str(ROOT), PAZO_CACHE_DIR=str(run_cache(tmp_path / "cache")), OMP_NUM_THREADS="1")
    wait_s = 120
    if moment == "rank 0 waiting for its peer":   # (torch acts on a signal once its wait ends: a short one)
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
        wait_s = 15
    proc = subprocess.Popen([sys.executable, str(HERE / "pause_at.py"), MOMENTS[moment], str(marker),
                             "dataset=digits", "method=dpzero", "train.steps=2", "logger.report_to=[]",
                             f"train.distributed_timeout_s={wait_s}", f"hydra.run.dir={tmp_path / 'out/a/run'}"],
                            cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), proc.communicate()
        time.sleep(1.0 if moment == "rank 0 waiting for its peer" else 0.1)   # (inside the wait)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out + err


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("moment", [m if m in FAST_MOMENTS else pytest.param(m, marks=pytest.mark.slow)
                                    for m in MOMENTS])
def test_a_signal_during_set_up_is_one_line_its_status_and_nothing_written(moment, signum, tmp_path):
    """SIGTERM at each moment of a run's set-up ends it as Ctrl-C does there (SIGINT: the reference,
    in the slow suite): one line, 143, no traceback, and neither the output folder nor the working
    directory holds anything (was, for SIGTERM: no line and `.hydra/launch-*/` left once Hydra ran)."""
    code, said = _signalled_at(moment, signum, tmp_path)
    start, status = ENDINGS[signum]
    assert code == status, (code, said[-2000:])
    assert "Traceback" not in said and "KeyboardInterrupt" not in said, said[-2000:]
    lines = [line for line in said.splitlines() if line.strip() and not line.startswith("pazo: rank ")]
    assert len(lines) == 1 and lines[0].startswith(start), lines
    assert "nothing was" in lines[0], lines
    assert not (tmp_path / "out").exists(), sorted(str(p) for p in (tmp_path / "out").rglob("*"))
    assert list((tmp_path / "cwd").iterdir()) == []


def test_sigterm_is_pazos_until_the_loop_and_the_loops_from_there(capfd):
    """In one process, as a command's set-up goes: before `work_starts` a SIGTERM is pazo's exit
    (one line, 143); after it `Terminated`, which Ctrl-C's `except KeyboardInterrupt` clauses catch;
    in the loop (`StopRequests`) a stop request (`preempted`), and after the loop Python's default
    again, not `Terminated` (the run's files are written: a line saying it was in set-up would be
    wrong). A handler of another (a multirun's between its jobs) is kept by `work_starts`."""
    from pazo.commands.interrupts import StoppedBeforeWork, Terminated, until_work_starts, work_starts
    from pazo.run.checkpoint import StopRequests

    until_work_starts("before the test started: nothing was run")
    with pytest.raises(StoppedBeforeWork) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert stopped.value.code == 143
    assert capfd.readouterr().err == "pazo: terminated before the test started: nothing was run\n"
    work_starts()
    with pytest.raises(Terminated):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    with StopRequests() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert stop.reason == "preempted"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def between_jobs(signum, frame):
        raise SystemExit(3)
    signal.signal(signal.SIGTERM, between_jobs)
    work_starts()
    assert signal.getsignal(signal.SIGTERM) is between_jobs
