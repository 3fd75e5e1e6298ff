"""`pazo-bench scaling`: its inputs checked in one line before any run, a GPU per process asked of
`--device cuda`, more processes than cores noted and run, the world sizes interleaved, the
efficiency t1 / (N tN) of the repeats' medians, a run past its time stopped with its ranks, and
(slow) the real runs' step times and bytes from their summaries."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo.bench import scaling
from pazo.methods import method_names

SHARDED = scaling.sharded_methods()
FUNCTION_FIXTURES = [HealthCheck.function_scoped_fixture]


def main_with(monkeypatch, *argv: str) -> int:
    """`pazo-bench scaling ARGV` in this process, its runs refused (a bad input must stop before them)."""
    monkeypatch.setattr(sys, "argv", ["pazo-bench scaling", *argv])
    monkeypatch.setattr(scaling, "one_run", lambda *a, **k: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as stop:
        scaling.main()
    return stop.value.code


world_size_lists = st.lists(st.integers(-3, 6), min_size=1, max_size=4)
method_lists = st.lists(st.sampled_from([*method_names(), "nosuch", "PAZO_M"]), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(world_sizes=world_size_lists, methods=method_lists)
@example(world_sizes=[0, 2], methods=["pazo_m"])
@example(world_sizes=[1, 2], methods=["sgd"])   # (a method that runs on one process only)
@example(world_sizes=[2], methods=["dpzero"])   # no one-process run to measure the others against
def test_a_bad_world_size_or_method_is_one_line_before_any_run(world_sizes, methods, tmp_path_factory, monkeypatch,
                                                               capsys):
    if min(world_sizes) >= 1 and 1 in world_sizes and set(methods) <= set(SHARDED):
        return   # (a good command line: its runs are the other tests')
    out = tmp_path_factory.mktemp("scaling") / "s.json"
    capsys.readouterr()
    code = main_with(monkeypatch, "--world-sizes", ",".join(map(str, world_sizes)), "--methods", ",".join(methods),
                     "--out", str(out))
    done = capsys.readouterr()
    assert code == 2 and done.out == ""
    lines = done.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(("pazo: error: argument --", "pazo: error: --world-sizes")), done.err
    if min(world_sizes) >= 1 and 1 not in world_sizes and set(methods) <= set(SHARDED):
        assert "--world-sizes must include 1" in lines[0]
    bad_method = next((m for m in methods if m not in SHARDED), None)
    if bad_method and "--methods" in lines[0]:
        why = "does not run on several processes yet" if bad_method in method_names() else "is not a method"
        assert f"{bad_method!r} {why}" in lines[0]
    assert not out.exists()


@settings(max_examples=60, deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(gpus=st.integers(0, 4), world_sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3))
@example(gpus=0, world_sizes=[1, 2])   # this machine: no CUDA
@example(gpus=1, world_sizes=[1, 2])   # one GPU for two processes
def test_cuda_is_refused_unless_each_process_has_a_gpu(gpus, world_sizes, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    from pazo.errors import ConfigError

    if gpus == 0:
        with pytest.raises(ConfigError, match="^--device cuda asked for but CUDA is not available"):
            scaling.checked_device("cuda", world_sizes)
    elif max(world_sizes) > gpus:
        with pytest.raises(ConfigError, match=f"needs {max(world_sizes)} GPUs .*this machine has {gpus}$"):
            scaling.checked_device("cuda", world_sizes)
    else:
        assert scaling.checked_device("cuda", world_sizes) == "cuda"
    assert scaling.checked_device("cpu", world_sizes) == "cpu"   # processes on CPU need no GPU


def test_cuda_without_cuda_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main_with(monkeypatch, "--device", "cuda") == 2
    assert capsys.readouterr().err == ("pazo: error: --device cuda asked for but CUDA is not available; use "
                                       "--device auto or --device cpu\n")


def fake_run(method: str, n: int, index: int) -> dict:
    return {"median_s": 1.0 / n + 0.01 * index, "rank_bytes_per_step": 0.0 if n == 1 else 1176.0,
            "command": f"run {method} {n}"}


def test_more_processes_than_cores_are_noted_and_run(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("pazo.threads.usable_cores", lambda: 2)
    out = tmp_path / "s.json"
    monkeypatch.setattr(sys, "argv", ["pazo-bench scaling", "--methods", "dpzero", "--world-sizes", "1,3",
                                      "--repeats", "1", "--out", str(out)])
    monkeypatch.setattr(scaling, "one_run", lambda m, n, args, scratch, i: fake_run(m, n, i))
    scaling.main()
    note = "3 processes on 2 usable core(s): the processes share cores, so their step times include waiting"
    assert capsys.readouterr().err == f"pazo: note: {note}\n"
    result = json.loads(out.read_text())
    assert result["note"] == note and [r["world_size"] for r in result["results"]] == [1, 3]
    assert {"command", "commit", "date", "machine"} <= set(result) and result["machine"]["threads_per_process"] == 1


@settings(max_examples=50, deadline=None, suppress_health_check=FUNCTION_FIXTURES)
@given(cores=st.integers(1, 8), world_sizes=st.lists(st.integers(1, 10), min_size=1, max_size=3),
       device=st.sampled_from(["cpu", "cuda"]))
@example(cores=2, world_sizes=[1, 2], device="cpu")   # as many processes as cores: nothing to say
def test_a_note_is_made_exactly_when_cpu_processes_outnumber_the_cores(cores, world_sizes, device, monkeypatch):
    monkeypatch.setattr("pazo.threads.usable_cores", lambda: cores)
    note = scaling.crowded_note(world_sizes, device)
    assert (note is not None) == (device == "cpu" and max(world_sizes) > cores)


def test_the_world_sizes_take_turns_within_each_repeat():
    calls = []
    runs, load = scaling.measure(["dpzero", "pazo_m"], [1, 2], 2,
                                 lambda m, n, i: calls.append((m, n, i)) or fake_run(m, n, i))
    assert calls == [("dpzero", 1, 0), ("dpzero", 2, 0), ("dpzero", 1, 1), ("dpzero", 2, 1),
                     ("pazo_m", 1, 0), ("pazo_m", 2, 0), ("pazo_m", 1, 1), ("pazo_m", 2, 1)]
    assert len(runs[("pazo_m", 2)]) == 2 and len(load) == 5


run_result = st.one_of(
    st.builds(lambda t, b: {"median_s": t, "rank_bytes_per_step": b, "command": "c"},
              st.floats(1e-4, 10.0), st.sampled_from([0.0, 1176.0, 1752.0])),
    st.builds(lambda why: {"error": why}, st.text("abc :", min_size=1, max_size=20)))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.tuples(st.sampled_from(["dpzero", "pazo_m"]), st.integers(1, 4)),
                       st.lists(run_result, min_size=1, max_size=4), min_size=1))
def test_each_row_is_its_repeats_median_and_the_efficiency_is_t1_over_n_tn(runs):
    rows = {(r["method"], r["world_size"]): r for r in scaling.scaling_rows(runs)}
    assert rows.keys() == runs.keys()
    for (method, n), row in rows.items():
        times = sorted(r["median_s"] for r in runs[(method, n)] if "median_s" in r)
        errors = [r["error"] for r in runs[(method, n)] if "error" in r]
        assert row["repeats"] == len(times) and row.get("errors", []) == errors
        if not times:
            assert "median_s" not in row and "efficiency" not in row
            continue
        assert row["min_s"] == times[0] <= row["median_s"] <= row["max_s"] == times[-1]
        one = rows.get((method, 1), {}).get("median_s")
        if one is None:
            assert "efficiency" not in row
        else:
            assert row["efficiency"] == pytest.approx(one / (n * row["median_s"]))
            assert row["speedup"] == pytest.approx(one / row["median_s"])
    assert all(r["efficiency"] == 1.0 for r in rows.values() if r["world_size"] == 1 and "efficiency" in r)


def test_a_run_past_its_time_is_stopped_with_every_process_it_started(tmp_path, monkeypatch):
    """A run that hangs (torchrun's ranks included) ends in bounded time, and leaves no process behind."""
    monkeypatch.setattr(scaling, "RUN_TIMEOUT_S", 1)
    pid_file = tmp_path / "child.pid"
    script = f"sleep 120 >/dev/null 2>&1 & echo $! > {pid_file}; wait"   # (the child holds no pipe of ours)
    status, stderr = scaling.run_process_group(["bash", "-c", script], dict(os.environ), tmp_path)
    assert status is None and stderr == "still running after 1 s: stopped"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the run's child process was left running")


@pytest.mark.slow   # three runs (a one-process and a two-process one): about a minute on 2 cores
def test_the_runs_step_times_and_bytes_come_from_their_summaries(tmp_path):
    out = tmp_path / "scaling.json"
    done = subprocess.run([sys.executable, "-m", "pazo.bench.scaling", "--methods", "dpzero", "--steps", "3",
                           "--repeats", "1", "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["world_size"]: r for r in json.loads(out.read_text())["results"]}
    assert rows[1]["rank_bytes_per_step"] == 0 and rows[1]["efficiency"] == 1.0
    assert rows[2]["rank_bytes_per_step"] == 2 * 576 + 24   # q = 1: two rows of 72 int64, two counts, the stop flag
    assert rows[2]["median_s"] > 0 and rows[2]["efficiency"] > 0 and "errors" not in rows[2]
    assert rows[2]["command"].startswith("OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node=2 -m pazo.train ")
    assert list(tmp_path.iterdir()) == [out]   # the runs' directories were temporary
