"""The benchmarks (pazo.bench): the step profile and the step's operations besides its floor, the floor's
public passes, the public-gradients comparison, the counts checked before any job, their Ctrl-C and
SIGTERM and their result files, the GPU settings on CPU at a tiny batch, a failed job's line, and
`make bench-gpu`'s share (split from tests/report/test_tables_figures.py)."""
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT
from pazo.bench import common as bench_common
from pazo.bench import engines as bench_engines
from pazo.bench import methods as bench_methods
from pazo.bench import settings as bench_settings
from pazo.bench import step_ops
from pazo.errors import unknown_choice


@pytest.mark.slow   # three profiled steps with traces (about 20 s); in the quick suite:
# test_step_ops_count_what_a_step_does_besides_its_floor
def test_the_step_profile_pairs_three_steps_with_their_floor_and_traces_ours(tmp_path):
    """`profile_zo_step.py` on digits: our step (packed, unpacked) and the minimal one, each with a
    paired floor ratio, the minimal step's operations, and our step's operators under the profiler;
    `--device cuda` without CUDA is one line."""
    out = tmp_path / "profile.json"
    command = [sys.executable, "-m", "pazo.bench.profile_step", "--pairs", "3", "--warmup", "1",
               "--trace-steps", "2", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result["steps"]) == {"ours", "ours_unpacked", "minimal"} and result["pairs"] == 3
    # timings are measured, not judged here (3 pairs on a shared machine): each ratio is a positive number
    assert all(math.isfinite(r["paired_floor_ratio"]) and r["paired_floor_ratio"] > 0 and r["median_floor_ms"] > 0
               for r in result["steps"].values())
    assert set(result["minimal_step_op_us"]) >= {"draw", "perturb", "forward+", "update"}
    ops = {row["op"]: row for row in result["ours_profiled_ops"]}
    assert ops["aten::normal_"]["calls_per_step"] >= 1 and "aten::convolution" in ops
    if not torch.cuda.is_available():
        done = subprocess.run(command[:3] + ["--device", "cuda", "--out", str(tmp_path / "no.json")],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert done.returncode == 2 and done.stderr.strip() == \
            "pazo: error: --device cuda asked for but CUDA is not available; use --device auto or --device cpu"


def test_step_ops_count_what_a_step_does_besides_its_floor(tmp_path):
    """count_step_ops.py: DPZero's in-place step on digits issues its floor's two forwards plus a
    few operations (perturb, move, restore and update: four adds on the packed buffer, the draw);
    PAZO-M's floor holds its public gradient too. An unknown method is argparse's one line."""
    saved = dict(bench_settings.SETTINGS)             # shared with other tests
    bench_settings.set_batch_size(step_ops.BATCH)
    try:
        row = step_ops.step_ops("digits", "dpzero", "inplace")
        pazo_m = step_ops.step_ops("digits", "pazo_m", "inplace")
    finally:
        bench_settings.SETTINGS.update(saved)
    assert row["step_ops"] == row["floor_ops"] + row["extra_ops"] and 0 < row["extra_ops"] < 30
    assert row["extra_by_op"]["add_"] == 4 and row["extra_by_op"]["normal_"] >= 1
    assert "convolution" not in row["extra_by_op"]                   # the forwards are the floor's
    assert pazo_m["floor_ops"] > row["floor_ops"] and "convolution_backward" not in pazo_m["extra_by_op"]
    done = subprocess.run([sys.executable, "-m", "pazo.bench.step_ops", "--methods", "mezo,sgd",
                           "--out", str(tmp_path / "o.json")], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    from pazo.methods import method_names   # every zeroth-order method, from the registry

    assert done.returncode == 2 and done.stderr.splitlines()[-1].endswith(
        f"error: {unknown_choice('method', 'sgd', method_names('zeroth_order'))}")
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("asked,together", [((), False), (("method.public_grads_together=true",), True)])
def test_the_floor_takes_the_public_passes_as_the_method_does(asked, together, monkeypatch):
    """benchmark_methods.py's bare passes of PAZO-P take its k public gradients the way the method
    does (`public_grads_batched`): one by one under the CPU's default, together when forced."""
    from pazo.models.functional import FunctionalModel
    bm = bench_settings
    method, config, model = bm.build_benchmark_method("pazo_p", "digits", torch.device("cpu"), extra=asked)
    x, y = bm.synthetic_inputs("digits", 4, torch.device("cpu"))
    ways, original = [], FunctionalModel.mean_loss_grads

    def spy(self, batches, batched=None):
        ways.append(self.grads_together(batches, batched))
        return original(self, batches, batched)
    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", spy)
    bm.bare_passes("digits", torch.device("cpu"), "pazo_p", config, model, x, y)()
    method.step(x, y, 1)
    assert ways == [together, together]


def test_public_gradients_benchmark_alternates_the_two_ways_on_the_methods_batches(monkeypatch):
    """benchmark_engines.py --public-grads: PAZO-P's k batches of b' examples (digits: 3 of 16),
    taken together and one by one in turn, each way timed once a round, and the model's own default
    recorded beside the paired ratio."""
    from pazo.models.functional import FunctionalModel
    engines = bench_engines
    calls, original = [], FunctionalModel.mean_loss_grads

    def spy(self, batches, batched=None):
        calls.append((batched, len(batches), tuple(batches[0][0].shape)))
        return original(self, batches, batched)

    monkeypatch.setattr(FunctionalModel, "mean_loss_grads", spy)
    row = engines.compare_public_grads("digits", torch.device("cpu"), warmup=1, iters=2)
    assert calls == [(True, 3, (16, 1, 8, 8)), (False, 3, (16, 1, 8, 8))] * 3
    assert (row["batches"], row["public_batch_size"], row["iters"], row["model_default"]) == (3, 16, 2, "one_by_one")
    assert row["together_median_s"] > 0 and row["one_by_one_median_s"] > 0
    assert row["paired_together_over_one_by_one"] > 0


@pytest.mark.parametrize("name,argument", [("methods", "--iters=0"), ("engines", "--warmup=-1"),
                                           ("profile_step", "--pairs=0")])
def test_benchmark_counts_are_checked_before_any_job(name, argument, tmp_path, monkeypatch, capsys):
    """A count below its least value is argparse's one line and exit 2, before any job runs or any
    result file is written (the command line in-process: `python -m pazo.bench.<name> ...`)."""
    import importlib

    out = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", [f"pazo.bench.{name}", argument, "--out", str(out)])
    with pytest.raises(SystemExit) as stop:
        importlib.import_module(f"pazo.bench.{name}").cli()
    done_out, done_err = capsys.readouterr()
    assert stop.value.code == 2 and done_out == ""
    assert done_err.splitlines()[-1].endswith(f"error: argument {argument.split('=')[0]}: must be an integer >= "
                                                 f"{1 if name != 'engines' else 0}, got "
                                                 f"{argument.split('=')[1]}")
    assert not out.exists()


def test_an_interrupted_benchmark_is_one_line_and_keeps_the_earlier_result(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a benchmark: one line, exit 130; a result file interrupted while being written
    leaves the earlier one as it was (written to a temporary file, then renamed) and no leftover."""
    bench = bench_common

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as done:
        bench.run_main("benchmark_methods", interrupted)
    assert done.value.code == 130
    assert capsys.readouterr().err == ("benchmark_methods: interrupted; nothing written (an earlier result file "
                                       "is as it was)\n")
    out = tmp_path / "result.json"
    out.write_text('{"earlier": 1}')
    import pazo.files.rundir

    real_open = pazo.files.rundir.open_file

    class HalfThenInterrupted:   # the result file's write is cut by a Ctrl-C halfway through
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(bytes(data)[: len(data) // 2])
            raise KeyboardInterrupt

    monkeypatch.setattr(pazo.files.rundir, "open_file", lambda path, mode=None, append=False:
                        HalfThenInterrupted(real_open(path, mode, append)))
    with pytest.raises(KeyboardInterrupt):
        bench.write_result(out, {"results": list(range(100))})
    monkeypatch.undo()
    assert out.read_text() == '{"earlier": 1}' and [p.name for p in tmp_path.iterdir()] == ["result.json"]
    bench.write_result(out, {"results": [1]})
    written = json.loads(out.read_text())
    assert written["results"] == [1] and {"command", "commit", "date", "machine"} <= set(written)
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_a_terminated_benchmark_is_one_line_and_kills_its_running_job(tmp_path):
    """SIGTERM to a benchmark while a job subprocess runs: one line, exit 143, and the job is
    killed with it (before, the parent died and the job ran on to its end)."""
    pid_file = tmp_path / "job.pid"
    job = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    parent = (f"import subprocess, sys; from pazo.bench import common as b; "
              f"b.run_main('benchmark_methods', lambda: subprocess.run([sys.executable, '-c', {job!r}]))")
    proc = subprocess.Popen([sys.executable, "-c", parent], stderr=subprocess.PIPE, text=True)
    job_pid = None
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        job_pid = int(pid_file.read_text())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        err = proc.stderr.read()
        assert err.splitlines()[-1] == ("benchmark_methods: terminated; nothing written (an earlier result file is "
                                        "as it was)") and "Traceback" not in err
        with pytest.raises(ProcessLookupError):
            os.kill(job_pid, 0)
        job_pid = None
    finally:   # nothing this test started is left running when it fails
        proc.kill()
        proc.wait()
        if job_pid is not None:
            try:
                os.kill(job_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["cifar10_nf224", "tiny_imagenet_vit", "imdb_lstm",
                                     pytest.param("mnli_roberta", marks=pytest.mark.llm)])
def test_the_gpu_benchmark_settings_run_on_cpu_at_a_tiny_batch(setting, tmp_path):
    """`make bench-gpu`'s four paper settings, run through the same script on CPU with two examples
    per private batch (`--batch-size 2`): a first-order method, a zeroth-order one and one with k
    public batches (PAZO-S: its k = 3 public batches of MNLI fit this machine's memory; PAZO-P's
    k = 6, one by one, peak near 15 GB), each engine, build and step on the setting's real model;
    every row has its floor (private forwards and public passes) and peak memory, and no job fails."""
    out = tmp_path / "methods.json"
    done = subprocess.run([sys.executable, "-m", "pazo.bench.methods", "--device", "cpu",
                           "--settings", setting, "--methods", "dpsgd,dpzero,pazo_s", "--iters", "1",
                           "--warmup", "0", "--batch-size", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(out.read_text())["results"]
    assert [(r["method"], r.get("engine") or r.get("clip_engine")) for r in rows] == [
        ("forward", None), ("dpsgd", "per_example"), ("dpsgd", "ghost"), ("dpzero", "vectorised"),
        ("dpzero", "inplace"),
        ("pazo_s", "vectorised"), ("pazo_s", "inplace")]
    assert all("error" not in r for r in rows), [r["error"] for r in rows if "error" in r]
    assert {r["batch_size"] for r in rows} == {2}   # as each job reports it: --batch-size reached the jobs
    for r in rows:   # the printed table shows every figure of the real rows (the rest is left to the file)
        numbers = {k for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert numbers <= shown_by_table(numbers) | set(bench_methods.IN_FILE_ONLY), r
    assert not [line for line in done.stdout.splitlines() if line.startswith("{")]   # no JSON on stdout
    # book-keeping is refused where uncovered layers need a second forward under dropout: said, not timed
    refused = [r for r in rows if "not_applicable" in r]
    assert [(r["method"], r["clip_engine"]) for r in refused] == \
        ([("dpsgd", "ghost")] if setting in ("imdb_lstm", "mnli_roberta") else [])
    assert all("training forward is random (dropout)" in r["not_applicable"] for r in refused)
    for r in rows:
        if r in refused:
            continue
        assert r["median_s"] > 0 and r["peak_mem_mb"] > 0
        if r["method"] != "forward":
            assert r["dim"] > 10**5 and r["mem_ratio"] > 0
        if r["method"] in ("dpzero", "pazo_s"):
            assert r["forward_s"] > 0 and r["paired_floor_ratio"] > 0 and r["paired_speedup_over_dpsgd"] > 0
            assert r["floor_s"] == pytest.approx(r["forwards"] * r["forward_s"] + r["public_s"])
        if r["method"] == "dpzero":
            assert r["forwards"] == 2 and r["public_passes"] == 0
        if r["method"] == "pazo_s":
            assert r["forwards"] >= 3 and r["public_passes"] >= 2 and r["public_s"] > 0


#: the numbers a job's row may hold (`time_steps`, `ours`, `run_job`; `mem_ratio` is the parent's)
JOB_NUMBERS = ("median_s", "p25_s", "p75_s", "iters", "peak_mem_mb", "dim", "forwards", "forward_s", "public_passes",
               "public_s", "floor_s", "floor_ratio", "paired_floor_ratio", "paired_speedup_over_dpsgd",
               "paired_over_sgd")
job_row = (st.dictionaries(st.sampled_from(JOB_NUMBERS), st.floats(1e-6, 1e4), min_size=1)
           | st.builds(lambda why: {"error": why}, st.text("abc xyz:", min_size=1, max_size=100))
           | st.builds(lambda why: {"not_applicable": why}, st.text("abc xyz:", min_size=1, max_size=100)))


def printed_cells(stdout: str) -> list[dict]:
    """The printed Markdown table's rows, header -> cell."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


def shown_by_table(keys) -> set:
    """The result keys some column of the printed table shows."""
    return {k for _, column_keys, _ in bench_methods.TABLE for k in column_keys} & set(keys)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_the_methods_table_shows_every_figure_its_result_file_holds(data, tmp_path_factory, monkeypatch, capsys):
    """`pazo-bench methods` prints its table only (the rows go to the result file, not to stdout as
    JSON lines), and every cell of a column whose value the row's result holds is that value, formatted;
    every number of a row is in a column or one the table leaves to the file. Before: JSON lines before
    the table, and the zeroth-order rows' paired speedup over DP-SGD, in the file, in no column."""
    out = tmp_path_factory.mktemp("bench") / "methods.json"
    monkeypatch.setattr(bench_methods, "run_isolated", lambda job, args, device: data.draw(job_row))
    monkeypatch.setattr(sys, "argv", ["pazo-bench methods", "--device", "cpu", "--settings", "digits",
                                      "--methods", "sgd,dpsgd,dpzero", "--out", str(out)])
    capsys.readouterr()
    bench_methods.main()
    stdout = capsys.readouterr().out
    assert [line for line in stdout.splitlines() if not line.startswith("|")] == [f"wrote {out}"]
    results = json.loads(out.read_text())["results"]
    printed = printed_cells(stdout)
    assert len(printed) == len(results)
    for shown, row in zip(printed, results):
        numbers = {k for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert numbers <= shown_by_table(numbers) | set(bench_methods.IN_FILE_ONLY), row
        if "error" in row or "not_applicable" in row:
            continue
        for header, keys, fmt in bench_methods.TABLE:
            if fmt is not None and all(k in row for k in keys):
                assert shown[header] == "-".join(format(row[k], fmt) for k in keys), (header, row)
            elif fmt is not None:
                assert shown[header] == "", (header, row)


@pytest.mark.parametrize("returncode,stderr,expected", [
    (-9, "", "killed by SIGKILL (out of memory?)"),
    (-11, "half a line\n", "killed by SIGSEGV: half a line"),
    (1, "Traceback ...\nRuntimeError: CUDA out of memory\n", "RuntimeError: CUDA out of memory"),
    (0, "", "exit 0 and no output"),
])
def test_a_failed_benchmark_job_says_how_it_ended(returncode, stderr, expected):
    """A job that wrote no row is reported by its last stderr line or, killed by a signal (the
    out-of-memory killer's SIGKILL writes nothing), by the signal: before, "no output"."""
    assert bench_methods.job_failure(returncode, stderr) == expected


def test_the_gpu_benchmark_script_runs_the_share_it_is_given(tmp_path):
    """`SETTINGS` and `PARTS` select a share of `make bench-gpu` (the whole does not fit one lease):
    only the named settings' benchmarks, the engines without the LSTM, Table 5 from the files there
    are; an unknown part is one line before anything runs. A stand-in interpreter logs each call."""
    log = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {log}\n")
    fake.chmod(0o755)

    def run(**env):
        log.unlink(missing_ok=True)
        done = subprocess.run(["bash", str(ROOT / "scripts" / "run_gpu_benchmarks.sh")], capture_output=True,
                              text=True, env={**os.environ, "PYTHON": str(fake), **env})
        return done, (log.read_text().splitlines() if log.exists() else [])

    done, calls = run(SETTINGS="imdb_lstm mnli_roberta", PARTS="methods engines")
    assert done.returncode == 0, done.stderr
    scripts = [c.split()[0] for c in calls[1:]]   # after the CUDA check
    assert scripts == ["scripts/benchmark_methods.py"] * 2 + ["scripts/benchmark_engines.py"]
    assert "--settings imdb_lstm " in calls[1] and "methods_cuda_mnli_roberta.json" in calls[2]
    assert "--settings mnli_roberta " in calls[3]   # the LSTM always runs in place: no engine comparison

    done, calls = run(SETTINGS="imdb_lstm mnli_roberta", PARTS="public")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2 and calls[1].startswith("scripts/benchmark_engines.py --public-grads ")
    assert "--settings imdb_lstm,mnli_roberta " in calls[1] and "public_grads_cuda.json" in calls[1]

    done, calls = run(SETTINGS="imdb_lstm", PARTS="engines memory")
    assert done.returncode == 0, done.stderr
    assert [c.split()[0] for c in calls[1:]] == ["scripts/benchmark_memory.py"] * 4

    done, calls = run(SETTINGS="tiny_imagenet_vit", PARTS="profile")
    assert done.returncode == 0, done.stderr
    assert len(calls) == 2
    assert calls[1].startswith("scripts/profile_zo_step.py --device cuda --setting tiny_imagenet_vit ")
    assert calls[1].endswith("--out scripts/results/zo_step_profile_cuda_tiny_imagenet_vit.json")

    done, calls = run(PARTS="methods tabels")
    assert done.returncode == 2 and calls == []
    assert done.stderr.strip() == \
        "run_gpu_benchmarks: unknown part 'tabels' (profile, methods, engines, public, tables, memory)"


@pytest.mark.slow   # three digits runs; the quick suite covers the comparison below
def test_defaults_check_re_runs_to_the_recorded_numbers_and_names_a_difference(tmp_path):
    """The defaults page did not re-run to its numbers (runs of an earlier version were read again,
    and the threads per run followed the machine): each invocation trains anew on one thread, and
    `--check FILE` re-runs FILE's methods and names every number that differs."""
    import json
    import subprocess
    import sys

    recorded = tmp_path / "defaults.json"
    base = [sys.executable, "-m", "pazo.bench.defaults", "--methods", "sgd", "--runs", str(tmp_path / "runs")]
    first = subprocess.run([*base, "--out", str(recorded)], capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-2000:]
    data = json.loads(recorded.read_text())
    assert data["seed"] == 0 and data["machine"]["threads_per_run"] == 1
    assert data["results"][0]["command"].startswith("OMP_NUM_THREADS=1 python -m pazo.train method=sgd")
    same = subprocess.run([*base, "--check", str(recorded)], capture_output=True, text=True, timeout=900)
    assert same.returncode == 0 and "1 of 1 methods re-ran" in same.stdout, same.stdout + same.stderr[-2000:]
    assert len(list((tmp_path / "runs").iterdir())) == 2   # a new folder per invocation, none read again
    data["results"][0]["final_test_accuracy"] += 0.001
    recorded.write_text(json.dumps(data))
    moved = subprocess.run([*base, "--check", str(recorded)], capture_output=True, text=True, timeout=900)
    assert moved.returncode == 1 and "differs: sgd final_test_accuracy: recorded" in moved.stdout


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(accuracies=st.lists(st.none() | st.floats(0, 1), min_size=2, max_size=2),
       status=st.sampled_from(["finished", "failed"]))
def test_defaults_print_accuracies_as_the_summary_does_not_at_full_precision(accuracies, status, tmp_path_factory,
                                                                             monkeypatch, capsys):
    """`pazo-bench defaults` prints each method's accuracies with 4 decimals ("-" for none), as the
    run's summary does; its result file keeps every digit (before: `val 0.43333333333333335`)."""
    import re

    from pazo.bench import defaults

    row = {"method": "dpzero", "status": status, "final_val_accuracy": accuracies[0],
           "final_test_accuracy": accuracies[1], "warnings": []}
    out = tmp_path_factory.mktemp("defaults") / "defaults.json"
    monkeypatch.setattr(defaults, "train", lambda method, seed, runs, threads: dict(row))
    monkeypatch.setattr(sys, "argv", ["pazo-bench defaults", "--methods", "dpzero", "--out", str(out),
                                      "--runs", str(out.parent / "runs")])
    capsys.readouterr()
    defaults.main()
    line = capsys.readouterr().out.splitlines()[0]
    shown = [("-" if a is None else format(a, ".4f")) for a in accuracies]
    assert line.split() == ["dpzero", status, "val", shown[0], "test", shown[1]]
    assert not re.search(r"\d\.\d{5}", line)
    assert json.loads(out.read_text())["results"][0]["final_test_accuracy"] == accuracies[1]


def test_defaults_check_names_every_number_that_differs():
    from pazo.bench.defaults import CHECKED, differences

    recorded = [{"method": "a", **{k: 0.5 for k in CHECKED}}, {"method": "b", **{k: 0.25 for k in CHECKED}}]
    assert differences(recorded, [dict(r) for r in recorded]) == []
    now = [dict(r) for r in recorded]
    now[1]["best_val_accuracy"], now[0]["status"] = 0.3, "failed"
    assert differences(recorded, now) == ["a status: recorded 0.5, now failed",
                                          "b best_val_accuracy: recorded 0.25, now 0.3"]
@pytest.mark.slow   # five job subprocesses: over two minutes on the shared 2-core machine
def test_dpsgd_rows_time_each_clip_engine_against_sgd(tmp_path):
    """DP-SGD's rows: one per clip engine, each run under it (the summary's engine block says so), with
    its paired slowdown over SGD and its peak memory."""
    out = tmp_path / "methods.json"
    done = subprocess.run([sys.executable, "-m", "pazo.bench.methods", "--device", "cpu", "--settings", "digits",
                           "--methods", "sgd,dpsgd", "--iters", "2", "--warmup", "0", "--batch-size", "4",
                           "--threads", "1", "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [r for r in json.loads(out.read_text())["results"] if r["method"] == "dpsgd"]
    assert [r["clip_engine"] for r in rows] == ["per_example", "ghost"]
    for r in rows:
        assert r["clip_engine_used"]["used"] == r["clip_engine"]
        assert r["paired_over_sgd"] > 0 and r["peak_mem_mb"] > 0 and r["median_s"] > 0


def test_the_threads_benchmark_times_each_column_of_the_default_run_interleaved(monkeypatch):
    """`--train-runs N`: every count and auto in turn, N rounds, so that a drift falls on all alike;
    each column's median, min and max, and what auto used."""
    from pazo.bench import threads as bench

    calls = []

    def fake(threads):
        calls.append(threads)
        seconds = {1: 10.0, 2: 20.0, None: 30.0}[threads] + len(calls)
        return {"seconds": seconds, "threads_used": {"count": threads or 2}}
    monkeypatch.setattr(bench, "time_default_run", fake)
    out = bench.time_default_runs([1, 2], 3)
    assert calls == [1, 2, None] * 3
    assert out["1"] == {"runs": 3, "seconds": 14.0, "min_s": 11.0, "max_s": 17.0, "threads_used": [1]}
    assert out["auto"]["seconds"] == 36.0 and out["auto"]["threads_used"] == [2]
