"""Data-parallel runs (`pazo.run.distributed`, torchrun): the shards of a batch add, limb for limb, to the
sum one process makes of the whole batch; 2 gloo processes train the same parameters as 1, bit for
bit, with the same epsilon (the first-order methods: within float rounding, the same on every rank);
a run resumes on another number of processes as the same run; ranks that differ are refused before
compute; a killed rank ends the run with one line."""
import contextlib
import errno
import io
import json
import math
import re
import os
import signal
import socket
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from safetensors.torch import load_file

from conftest import run_cache
from distributed_session import ALL_ZEROTH_ORDER, FIRST_ORDER, one_launch
from pazo.methods import METHODS, method_info
from pazo.run.distributed import (FAILED, FAULT, REFUSED, Group, LeaderRefused, RankFailed, RankFaulted, RankRefused,
                                  asked_difference, asked_facts, failure_facts, nonfinite_sum, told_failure)
from pazo.privacy.device_sum import correctly_rounded, exact_limbs
from pazo.privacy.mechanisms import exact_sum

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
FLOATS = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.floats(min_value=-1.0, max_value=1.0, allow_subnormal=True))


def shard_sums(values: list[float], world: int) -> float:
    """The sum of `values` as `world` ranks make it: each its shard's limbs, added, rounded once."""
    batch = np.arange(len(values))
    limbs = [exact_limbs(torch.tensor([[values[i] for i in Group(rank, world).shard(batch)]], dtype=torch.float64))
             for rank in range(world)]
    return correctly_rounded(sum(limbs))[0]


def rounded_exact_sum(values: list[float]) -> float:
    """The exact sum rounded once (fsum's float where fsum gives one; +-inf beyond the range)."""
    exact = sum(map(Fraction, values), Fraction(0))
    try:
        return float(exact)
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


@settings(deadline=None, max_examples=300)
@given(st.lists(FLOATS, max_size=40), st.integers(1, 5))
@example([1e308, 1e308, -1e308], 2)            # fsum's partial sums overflow; the exact sum does not
@example([1.0, 1e-16, 1e-16, -1.0], 3)         # cancellation: only an exact sum keeps the tail
def test_shards_add_to_the_correctly_rounded_sum_of_the_batch(values, world):
    expected, got = rounded_exact_sum(values), shard_sums(values, world)
    assert got == expected and math.copysign(1, got) == math.copysign(1, expected) or got == expected == 0


@settings(deadline=None)
@given(st.lists(st.integers(0, 10_000), unique=True, max_size=200).map(sorted), st.integers(1, 8))
def test_shards_are_disjoint_and_together_the_batch(indices, world):
    batch = np.array(indices, dtype=np.int64)
    shards = [Group(rank, world).shard(batch) for rank in range(world)]
    assert sorted(np.concatenate(shards).tolist()) == indices


@settings(deadline=None)
@given(st.lists(st.sampled_from([math.nan, math.inf, -math.inf, 1.0, -2.5]), min_size=1, max_size=8))
def test_a_non_finite_value_sums_as_fsums_fallback(values):
    nans, pos, neg = (sum(math.isnan(v) for v in values), values.count(math.inf), values.count(-math.inf))
    finite = math.fsum(v for v in values if math.isfinite(v))
    got, expected = nonfinite_sum(nans, pos, neg, finite), exact_sum(values)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


@settings(deadline=None, max_examples=40)
@given(st.integers(0, 12), st.integers(1, 4), st.integers(1, 5), st.floats(0.01, 2.0), st.booleans(),
       st.integers(0, 2**31))
@example(0, 2, 1, 1.0, False, 0)   # an empty batch: every rank's shard empty
@example(1, 3, 2, 0.05, True, 1)   # ranks 1 and 2 with empty shards, a shift (DOPE-SGD)
def test_shards_clipped_gradient_sums_add_to_the_batchs_within_rounding(n, world, chunk, bound, shifted, seed):
    """What a first-order step's ranks each compute (`clipped_sum` over their shard: each example
    clipped alone), added in rank order, is the whole batch's clipped sum up to float rounding; the
    loss sums and the non-finite counts add too."""
    from torch import nn

    from pazo.methods.per_example import clipped_sum
    from pazo.models import FunctionalModel

    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = FunctionalModel(nn.Linear(5, 3))
    x, y = torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)
    shift = torch.randn(model.dim, generator=g) if shifted else None
    whole = clipped_sum(model, x, y, chunk, bound, shift)
    batch = np.arange(n)
    parts = [clipped_sum(model, x[s], y[s], chunk, bound, shift)
             for s in (Group(rank, world).shard(batch) for rank in range(world))]
    total, losses = parts[0][0].clone(), parts[0][1].clone()
    for grads, loss, _ in parts[1:]:
        total, losses = total + grads, losses + loss
    assert torch.allclose(total, whole[0], rtol=1e-5, atol=1e-6)
    assert torch.allclose(losses, whole[1], rtol=1e-5, atol=1e-6)
    assert sum(int(nonfinite) for *_, nonfinite in parts) == int(whole[2])


# ------------------------------------------------------------------ 2 processes against 1

def _env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    return {**env, "PAZO_CACHE_DIR": str(run_cache(tmp_path / "cache")), "OMP_NUM_THREADS": "1", **extra}


def _steps(tmp_path, specs: list[str], processes: int) -> list[dict]:
    """distributed_steps.py's results for `specs` on `processes` processes (rank 0's lines)."""
    script = [str(HERE / "distributed_steps.py"), "3", *specs]
    command = ([str(BIN / "torchrun"), f"--nproc_per_node={processes}", "--master_port", str(_free_port())]
               if processes > 1 else [sys.executable])
    out = subprocess.run([*command, *script], env=_env(tmp_path), capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


#: (ALL_ZEROTH_ORDER, FIRST_ORDER: distributed_session's, every method its one launch runs)


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The session's one 2-process launch, its one-process references and the runs it left."""
    return one_launch(tmp_path_factory)


def _same_bits(one: list[dict], two: list[dict]) -> None:
    for a, b in zip(one, two, strict=True):
        assert a["params"] == b["params"], f"{a['spec']}: parameters differ after 3 steps"
        assert a["epsilon"] == b["epsilon"] and b["ranks_agree"]


def _one_and_two(launched: dict, specs: list[str]) -> tuple[list[dict], list[dict]]:
    """`specs`' results on one process (here) and on the launch's two (rank 0's lines)."""
    return [launched["one"][s] for s in specs], [launched["ranks"][0][s] for s in specs]


#: the methods whose k public gradients the ranks share out and gather (`ShardSums.computed_rows`)
SHARED_PUBLIC = ("pazo_p", "pazo_p_prime", "pazo_s")


def _public_grads_gathered(two: list[dict], k: int) -> None:
    """On 2 processes a rank of PAZO-P, P' or S puts ceil(k / 2) public gradients of d float32 a step into
    the exchanges, beside its release's few thousand bytes: its share of the k, gathered by the other rank.
    With dropout, every rank computes all k (their masks drawn as one process draws them) and gathers none."""
    for b in two:
        if b["spec"].partition(":")[0] in SHARED_PUBLIC:
            gathered = 0 if "model.dropout=0.1" in b["spec"] else -(-k // 2) * b["dim"] * 4
            assert gathered <= b["rank_bytes_per_step"] < gathered + 4096, b["spec"]


def test_two_processes_train_the_parameters_of_one_bit_for_bit(launched):
    """Every zeroth-order method on digits, 3 steps: the same parameters, to the bit, on every rank,
    with the same epsilon; PAZO-P, P' and S with their k = 3 public gradients computed 2 on rank 0 and
    1 on rank 1, and gathered."""
    one, two = _one_and_two(launched, ALL_ZEROTH_ORDER)
    _same_bits(one, two)
    _public_grads_gathered(two, k=3)


@pytest.mark.slow
def test_two_processes_train_the_parameters_of_one_bit_for_bit_for_every_zeroth_order_method(tmp_path):
    _same_bits(_steps(tmp_path, ALL_ZEROTH_ORDER, 1), _steps(tmp_path, ALL_ZEROTH_ORDER, 2))


def _params(result: dict) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(result["params"]), dtype=result["dtype"])


def test_two_processes_train_the_first_order_parameters_of_one_within_float_rounding(launched):
    """DP-SGD, DPMD, DOPE-SGD and GEP on 2 processes: each rank clips its shard's per-example
    gradients and sums them; the sums are gathered and added in rank order (the same floats on every
    rank) and the noise, drawn alike on every rank, is added once. Not bit for bit: one process adds
    the whole batch's gradients in another order (float32 here), so after 3 steps the parameters are
    one process's within float rounding (about 1e-8 apart on digits; a rank that missed the other's
    shard would be about 1e-3 off), with the same epsilon, and every rank holds the same bits."""
    for a, b in zip(*_one_and_two(launched, FIRST_ORDER), strict=True):
        assert b["ranks_agree"], f"{b['spec']}: the ranks' parameters differ"
        assert a["epsilon"] == b["epsilon"]
        np.testing.assert_allclose(_params(b), _params(a), rtol=0, atol=1e-6, err_msg=a["spec"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow   # (torchrun and pazo-train, 3 processes; the default suite's: test_a_follower_writes_nothing...)
def test_torchrun_pazo_train_is_the_one_process_run_and_rank_1_writes_nothing(tmp_path):
    args = ["-m", "pazo.train", "dataset=digits", "method=dpzero", "train.steps=4", "logger.report_to=[]"]
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    one = subprocess.run([sys.executable, *args, f"hydra.run.dir={tmp_path}/one"], env=_env(tmp_path),
                         capture_output=True, text=True, timeout=300, cwd=cwd)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node=2", "--master_port", str(_free_port()), *args,
                          f"hydra.run.dir={tmp_path}/two"], env=_env(tmp_path), capture_output=True, text=True,
                         timeout=300, cwd=cwd)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = load_file(tmp_path / "one/model.safetensors"), load_file(tmp_path / "two/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    summary = json.loads((tmp_path / "two/summary.json").read_text())
    assert summary["distributed"]["world_size"] == 2 and 0 < summary["distributed"]["rank_bytes_per_step"] < 4096
    assert summary["privacy"]["epsilon_spent"] == json.loads((tmp_path / "one/summary.json").read_text())[
        "privacy"]["epsilon_spent"]
    assert list(cwd.iterdir()) == []   # rank 1 made no run directory of its own


def _rank(tmp_path, rank: int, port: int, *overrides: str, command=("-m", "pazo.train")) -> subprocess.Popen:
    """One rank of a 2-process run started by hand, as torchrun would start it (pazo-train, or `command`)."""
    env = _env(tmp_path, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    return subprocess.Popen([sys.executable, *command, "dataset=digits", "method=dpzero",
                             "logger.report_to=[]", f"hydra.run.dir={tmp_path}/run", *overrides],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if "pazo: error:" in line]


@pytest.mark.slow   # (pazo-train's ranks; the default suite's: test_ranks_whose_configs_differ_..._in_one_launch)
def test_a_rank_whose_config_differs_is_refused_before_compute_on_every_rank(tmp_path):
    port = _free_port()
    ranks = [_rank(tmp_path, 0, port, "train.steps=3"), _rank(tmp_path, 1, port, "train.steps=3", "method.lr=0.5")]
    outs = [p.communicate(timeout=300) for p in ranks]
    for p, (stdout, stderr) in zip(ranks, outs):
        assert p.returncode == 2, stderr[-3000:]
        assert "Traceback" not in stderr
        errors = _errors(stdout + stderr)
        assert len(errors) == 1 and "given different command lines (rank 1 from rank 0: method.lr on rank 1 " \
            "only)" in errors[0], stdout + stderr
    assert not (tmp_path / "run").exists()   # refused as the ranks joined, before the run's first write


@pytest.mark.slow   # (pazo-train --plan's ranks, twice; the default suite's: test_plan_flag.py's of the rule)
def test_a_plan_on_two_processes_compares_the_ranks_as_a_run_does(tmp_path):
    """`pazo-train ... --plan` under torchrun: ranks given other overrides are refused as a run's are (one
    line from each, exit 2); ranks that agree: rank 0 prints the plan, saying so, rank 1 nothing."""
    def plans(*rank_1: str) -> list[tuple[int, str, str]]:
        port = _free_port()
        ranks = [_rank(tmp_path, rank, port, "train.steps=3", "--plan", *(rank_1 if rank else ())) for rank in (0, 1)]
        outs = [p.communicate(timeout=300) for p in ranks]
        return [(p.returncode, *out) for p, out in zip(ranks, outs)]
    differ = plans("method.lr=0.5")
    for code, stdout, stderr in differ:
        assert code == 2 and "Traceback" not in stderr and not stdout, stderr[-3000:]
        assert len(_errors(stderr)) == 1 and "given different command lines" in stderr, stderr
    (code_0, out_0, err_0), (code_1, out_1, err_1) = plans()
    assert (code_0, code_1) == (0, 0), err_0[-3000:] + err_1[-3000:]
    assert "ranks: the 2 processes run the same config, data and code" in out_0 and not out_1
    assert not (tmp_path / "run").exists()


@pytest.mark.slow   # (about a minute: two runs start, a rank is killed mid-run, one process resumes, one runs whole)
def test_a_killed_rank_ends_the_other_with_one_line_and_one_process_resumes_the_same_run(tmp_path):
    port = _free_port()
    overrides = ["train.steps=300", "train.log_every=1", "train.evals_per_epoch=0", "train.checkpoint_every=5",
                 "train.distributed_timeout_s=30"]
    leader, follower = _rank(tmp_path, 0, port, *overrides), _rank(tmp_path, 1, port, *overrides)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().count("\n") >= 3):   # mid-run: rows written
        assert leader.poll() is None and time.monotonic() < deadline, leader.communicate()[1][-3000:]
        time.sleep(0.05)
    follower.send_signal(signal.SIGKILL)
    follower.wait()
    stdout, stderr = leader.communicate(timeout=120)   # ends well within the exchange's timeout
    assert leader.returncode == 75, stderr[-3000:]   # a fault of the machine: resumable
    assert "Traceback" not in stderr
    errors = _errors(stdout + stderr)
    assert len(errors) == 1 and "another rank of this run stopped answering" in errors[0], stdout + stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "fault" and "another rank" in summary["failure"]
    _run_as_one(tmp_path, f"hydra.run.dir={tmp_path}/run", *overrides)             # resumes at its checkpoint
    _run_as_one(tmp_path, f"hydra.run.dir={tmp_path}/whole", *overrides)           # never interrupted
    a, b = load_file(tmp_path / "run/model.safetensors"), load_file(tmp_path / "whole/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def _run_as_one(tmp_path, *overrides: str) -> None:
    out = subprocess.run([sys.executable, "-m", "pazo.train", "dataset=digits", "method=dpzero", "logger.report_to=[]",
                          *overrides], env=_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]


@settings(deadline=None)
@given(st.sampled_from(sorted(METHODS.names())), st.integers(1, 8), st.booleans(), st.booleans())
@example("sgd", 2, False, False)      # a method whose sums the ranks cannot add
@example("dpzero", 2, True, False)    # secure mode: each rank its own entropy
@example("dpzero", 2, False, True)    # dropout in the queries: each rank's masks drawn for its shard
def test_several_processes_refuse_what_they_cannot_share(method, world, secure_mode, query_dropout):
    """One process runs anything; several only a method that shards its batches, without secure mode
    and with its queries in eval mode (engine.query_dropout=true on 2 processes was not one process's
    run: small_cnn with dropout 0.5 on digits, dpzero, 3 steps, gave other parameters)."""
    from pazo.errors import ConfigError
    from pazo.run.build import require_shards

    info = method_info(method)
    refused = ([f"method {method!r} does not run on several processes yet"] if not info.cls.shards_batches else []) + \
        (["privacy.secure_mode=true"] if secure_mode else []) + (["engine.query_dropout=true"] if query_dropout else [])
    if world == 1 or not refused:
        require_shards(info, Group(0, world), secure_mode, query_dropout)
    else:
        with pytest.raises(ConfigError, match=f"^{re.escape(refused[0])}"):
            require_shards(info, Group(1, world), secure_mode, query_dropout)


@pytest.mark.slow   # (about 30 s: two runs start, rows are written, then Ctrl-C)
def test_ctrl_c_stops_every_rank_at_one_step_and_rank_0_checkpoints(tmp_path):
    port = _free_port()
    overrides = ["train.steps=3000", "train.log_every=1", "train.evals_per_epoch=0"]
    ranks = [_rank(tmp_path, 0, port, *overrides), _rank(tmp_path, 1, port, *overrides)]
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        assert ranks[0].poll() is None and time.monotonic() < deadline, ranks[0].communicate()[1][-3000:]
        time.sleep(0.05)
    for p in ranks:   # as a terminal's Ctrl-C (or torchrun) signals every rank
        p.send_signal(signal.SIGINT)
    outs = [p.communicate(timeout=120) for p in ranks]
    assert [p.returncode for p in ranks] == [130, 0], outs
    assert not any("Traceback" in stderr for _, stderr in outs)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and (tmp_path / "run" / "private" / "checkpoint.pt").exists()


def _rows(run_dir: Path) -> list[dict]:
    """A run's rows but for their timing."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "s_per_iter"} for line in lines]


def _assert_same_run(resumed: Path, resumed_summary: dict, whole: Path, whole_summary: dict) -> None:
    """The resumed run's rows, epsilon and parameters are the uninterrupted run's, bit for bit."""
    assert _rows(resumed) == _rows(whole)
    assert resumed_summary["privacy"]["epsilon_spent"] == whole_summary["privacy"]["epsilon_spent"]
    a, b = load_file(whole / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _preempt_on_two(tmp_path, step: int, *overrides: str) -> dict:
    """The run of `overrides` on 2 processes (ranks started as torchrun starts them), rank 0 sent
    SIGTERM during its step `step`; rank 0's summary."""
    port, script = _free_port(), str(HERE / "stop_after.py")
    ranks = [subprocess.Popen([sys.executable, script, str(step), *overrides], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=_env(tmp_path, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
             for rank in range(2)]
    outs = [p.communicate(timeout=300) for p in ranks]
    assert [p.returncode for p in ranks] == [3, 0], outs   # preempted (resumable); rank 1 stops with it
    assert not any("Traceback" in stderr for _, stderr in outs)
    return json.loads((tmp_path / "run" / "summary.json").read_text())


@pytest.mark.slow   # (pazo-train's ranks; the default suite's: test_a_run_resumes_..._in_one_launch)
def test_a_run_resumes_on_two_processes_and_back_on_one_as_the_same_run(tmp_path, hydra_cfg, monkeypatch):
    """One process to step 1, two to step 3 (rank 1 reads rank 0's checkpoint), one to the end: the
    uninterrupted one-process run's parameters, rows and epsilon, bit for bit."""
    from pazo.methods.base import Method
    from pazo.train import run

    overrides = ["dataset=digits", "method=dpzero", "train.steps=4", "train.log_every=1", "logger.report_to=[]"]
    whole = run(hydra_cfg(*overrides), tmp_path / "whole")
    original = Method.take_step

    def take_step(self, x, y, step):   # SIGTERM during step 1: honoured after it, with a checkpoint
        stats = original(self, x, y, step)
        if step == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats
    monkeypatch.setattr(Method, "take_step", take_step)
    assert run(hydra_cfg(*overrides), tmp_path / "run")["stopped_at_step"] == 1
    monkeypatch.setattr(Method, "take_step", original)
    on_two = _preempt_on_two(tmp_path, 3, *overrides, f"hydra.run.dir={tmp_path}/run")
    assert on_two["resumed_from_step"] == 1 and on_two["stopped_at_step"] == 3
    assert on_two["distributed"]["world_size"] == 2
    split = run(hydra_cfg(*overrides), tmp_path / "run")   # and back on one process
    assert split["resumed_from_step"] == 3 and split["status"] == "finished"
    _assert_same_run(tmp_path / "run", split, tmp_path / "whole", whole)


def test_a_follower_that_cannot_read_rank_0s_checkpoint_starts_nowhere(tmp_path):
    from pazo.run.launch import follower_start

    loop, where = follower_start(None, None, str(tmp_path / "private" / "checkpoint.pt"))
    assert loop.step == 0 and where.startswith("no step: rank 0's checkpoint") and "shared file system" in where


@pytest.mark.slow   # (pazo-train's ranks; the default suite's: test_a_refusal_on_rank_0_..._in_one_launch)
def test_a_refusal_on_rank_0_before_the_first_exchange_ends_every_rank_with_its_line_once(tmp_path):
    """Rank 0 refuses the launch after the ranks joined, before they exchange anything (its run
    directory in use by another launch: a check only rank 0 makes). Was: rank 0 exit 2, rank 1 lost
    in the exchange, exit 75 (a fault). Now every rank exits 2, and the line is printed once."""
    from pazo.files.rundir import RunDirLock

    (tmp_path / "run").mkdir()
    port = _free_port()
    with RunDirLock(tmp_path / "run"):
        ranks = [_rank(tmp_path, rank, port, "train.steps=2") for rank in (0, 1)]
        outs = [p.communicate(timeout=300) for p in ranks]
    assert [p.returncode for p in ranks] == [2, 2], [err[-2000:] for _, err in outs]
    lines = [_errors(out + err) for out, err in outs]
    assert len(lines[0]) == 1 and "in use by another launch" in lines[0][0] and lines[1] == [], lines
    assert not any("Traceback" in err for _, err in outs)


#: the exception a rank told of another's failure ends with, by the kind told, and its exit under pazo-train
TOLD = {REFUSED: (RankRefused, 2), FAULT: (RankFaulted, 75), FAILED: (RankFailed, 1)}


@settings(deadline=None)
@given(st.lists(st.sampled_from([None, REFUSED, FAILED, FAULT]), min_size=2, max_size=6))
@example([None, REFUSED])   # a mistake only rank 1 sees (its data root)
@example([FAILED, None])    # an error in rank 0's build
@example([REFUSED, FAILED])
@example([FAULT, None])     # rank 0's full disk (was: rank 1 ended as rank 0's error, exit 1)
@example([None, FAULT, FAILED])
def test_every_rank_that_built_the_run_ends_naming_the_first_rank_that_could_not(outcomes):
    """The agreement's rule (`told_failure`) over every pattern of ranks that built the run (None) or
    could not (refused: a user's mistake; fault: of the machine; failed: an error): where one could not,
    every rank that built ends, naming the first that could not, as its kind ends (a refusal: exit 2; a
    fault: 75; an error: 1); rank 0's refusal is rank 0's line (the others end silent); a rank that could
    not raises its own error."""
    gathered = [{"config": "same"} if how is None else failure_facts(ValueError(f"trouble on rank {rank}"), how)
                for rank, how in enumerate(outcomes)]
    could_not = [rank for rank, how in enumerate(outcomes) if how]
    for rank, how in enumerate(outcomes):
        told = told_failure(gathered, rank)
        if rank and outcomes[0] == "refused":
            assert isinstance(told, LeaderRefused) and str(told) == "trouble on rank 0"
        elif how or not could_not:
            assert told is None
        else:
            first = could_not[0]
            assert type(told) is TOLD[outcomes[first]][0]
            assert str(told).startswith(f"rank {first} ") and f"trouble on rank {first}" in str(told)


def test_a_rank_that_entered_the_agreement_tells_nothing_more():
    """After the agreement (spent), or alone, a rank's error is its own: no second exchange to wait in."""
    spent = Group(1, 2, agreed=True)
    spent.tell(RuntimeError("after the agreement"), FAILED)   # (an exchange here: no group to run it)
    Group(0, 1).tell(RuntimeError("one process"), FAILED)


@settings(deadline=None, max_examples=8)
@given(st.integers(2, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
       st.sampled_from(["dpzero", "pazo_s", "dpsgd", "sgd"]), st.booleans(), st.booleans())
@example((2, 1), "dpzero", False, True)   # query dropout: each rank's masks drawn for its shard
def test_what_the_ranks_cannot_share_is_refused_on_every_rank_before_they_join(
        rank_world, method, secure_mode, query_dropout):
    """pazo-train's check of its command line under torchrun (`require_shards`'s rule): every rank
    finds the same refusal before any joins (who prints it is settled once they have joined:
    `test_a_config_refused_on_every_rank_is_said_once`)."""
    import pazo.train as train
    from pazo.methods import method_info

    (world, rank), argv = rank_world, [f"method={method}", "dataset=digits", f"privacy.secure_mode={secure_mode}",
                                       f"engine.query_dropout={query_dropout}"]
    if not method_info(method).private:   # (a config of its own: else the config check refuses it first)
        argv.append("privacy.epsilon=null")
    shards = method_info(method).cls.shards_batches
    expected = (f"method {method!r} does not run on several processes yet" if not shards else
                "privacy.secure_mode=true" if secure_mode else "engine.query_dropout=true" if query_dropout else None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RANK", str(rank))
        patch.setenv("WORLD_SIZE", str(world))
        problem = train._command_line_problem(argv, single=False)   # (the overrides alone: no run directory)
    assert (problem or "").startswith(expected or ""), problem
    assert (problem is None) == (expected is None)


@pytest.mark.parametrize("override, says", [
    ("train.steps=0", "train.steps"),
    # was: each rank refused it as it built the run, after joining: a line from each, rank 0 lost in
    # its exchange (torchrun: SIGTERM) unless rank 1 was slower
    ("engine.query_dropout=true", "engine.query_dropout=true draws the queries' dropout masks"),
])
def test_a_config_refused_on_every_rank_is_said_once(tmp_path, override, says):
    """A mistake in the config, or what the ranks cannot share, found by every rank before they join:
    exit 2 on each, one line (rank 0's), nothing written."""
    port = _free_port()
    ranks = [_rank(tmp_path, rank, port, override) for rank in (0, 1)]
    outs = [p.communicate(timeout=300) for p in ranks]
    assert [p.returncode for p in ranks] == [2, 2], outs
    assert [len(_errors(out + err)) for out, err in outs] == [1, 0], outs
    assert says in _errors(outs[0][0] + outs[0][1])[0]
    assert not (tmp_path / "run").exists()


#: a mistake in one rank's command line only (a typo'd key), found before the ranks join
TYPO = "train.stepz=3"


@pytest.mark.parametrize("refusing, plan", [
    (1, False),   # the reported case: was rank 1 exit 2 silent, rank 0 a DistStoreError traceback at the timeout
    pytest.param(0, False, marks=pytest.mark.slow),   # was: rank 1 the traceback at the timeout
    pytest.param(1, True, marks=pytest.mark.slow),    # pazo-train --plan's ranks the same way
])
def test_a_command_line_refused_on_one_rank_alone_ends_every_rank_at_once_with_its_line(tmp_path, refusing, plan):
    """One rank's command line refused before the ranks join (a key only it has wrong): it cannot
    know that the others refuse theirs, so it joins them and tells them. Every rank exits 2 well
    within the exchange's timeout; the refusing rank's line is printed once, by it (`rank 1: ...`);
    a rank 0 that accepted its own ends naming rank 1 and its line; nothing is written."""
    port = _free_port()
    flags = ["--plan"] if plan else []
    ranks = [_rank(tmp_path, rank, port, "train.steps=3", "train.distributed_timeout_s=60", *flags,
                   *([TYPO] if rank == refusing else [])) for rank in (0, 1)]
    outs = [p.communicate(timeout=240) for p in ranks]
    assert [p.returncode for p in ranks] == [2, 2], [err[-2000:] for _, err in outs]
    assert not any("Traceback" in err for _, err in outs), [err[-2000:] for _, err in outs]
    lines = [_errors(out + err) for out, err in outs]
    said = "unknown key train.stepz; did you mean train.steps?"
    if refusing == 0:   # rank 0's line is the run's: rank 1, told in rank 0's share, says nothing
        assert len(lines[0]) == 1 and lines[0][0].startswith(f"pazo: error: {said}") and lines[1] == [], lines
    else:
        assert len(lines[1]) == 1 and lines[1][0].startswith(f"pazo: error: rank 1: {said}"), lines
        assert len(lines[0]) == 1 and lines[0][0].startswith(f"pazo: error: rank 1 refused the run: {said}"), lines
    assert not (tmp_path / "run").exists()   # (was: rank 1's check of it made the folder, left empty)


@pytest.mark.parametrize("alone, refused", [
    pytest.param(0, False, marks=pytest.mark.slow),   # was: a DistStoreError traceback, exit 1, Hydra's record left
    (1, False),   # was: torch's c10d lines (socket timeouts, store retries, C++ stacks) before the line
    pytest.param(1, True, marks=pytest.mark.slow),   # a refusing rank that cannot tell anyone: its own line
])
def test_a_rank_whose_peers_never_join_ends_with_one_line_and_writes_nothing(tmp_path, alone, refused):
    """One rank of two started (its peer never comes): it ends at the join's timeout with one line
    naming what did not join and the timeout (exit 75, a fault of the launch: the same command runs
    once every rank starts), or, where it refused its command line, with that line (exit 2); never
    a traceback, nor torch's own lines; no run directory."""
    process = _rank(tmp_path, alone, _free_port(), "train.steps=3", "train.distributed_timeout_s=2",
                    *([TYPO] if refused else []))
    stdout, stderr = process.communicate(timeout=240)
    assert process.returncode == (2 if refused else 75), stderr[-3000:]
    assert "Traceback" not in stderr
    (line,) = _errors(stdout + stderr)
    on_rank = f"rank {alone}: " if alone else ""
    if refused:
        assert line.startswith(f"pazo: error: {on_rank}unknown key train.stepz"), line
    else:
        assert line.startswith(f"pazo: error: {on_rank}the 2 processes of this run did not all join it within 2 s "
                               "(train.distributed_timeout_s), at 127.0.0.1:"), line
        assert "summary.json" not in line and (alone or "nothing of this run was written" in line), line
    said = [line for line in (stdout + stderr).splitlines() if line.strip()]
    started = ["pazo: rank 1 of 2: taking its shard of each batch (rank 0 writes the run)"] if alone and not refused \
        else []
    assert said == [*started, line], said
    assert not (tmp_path / "run").exists()   # (was: rank 1 checked, and so made, where rank 0 would write)


def test_a_rank_lost_before_the_launch_is_accepted_names_no_summary(tmp_path):
    """Rank 1 killed as it builds the run: rank 0, in the ranks' agreement, loses it before its launch
    is accepted, and says so in one line (exit 75) that claims no summary (was: `summary.json records
    status fault`, with no summary.json written). Sigma given: rank 0 calibrates nothing before it waits."""
    port, script = _free_port(), (str(HERE / "fail_building.py"), "1", "died")
    ranks = [_rank(tmp_path, rank, port, "train.steps=3", "privacy.sigma=2.0", "train.distributed_timeout_s=60",
                   command=script) for rank in (0, 1)]
    (stdout, stderr), _ = [p.communicate(timeout=240) for p in ranks]
    assert [p.returncode for p in ranks] == [75, -signal.SIGKILL], stderr[-3000:]
    assert "Traceback" not in stderr
    (line,) = _errors(stdout + stderr)
    assert "another rank of this run stopped answering" in line and "summary.json" not in line, line
    assert "nothing of this run was written; pazo-train with the same overrides" in line, line
    assert not (tmp_path / "run" / "summary.json").exists()


def _cli_as_rank(rank: int, other: dict, monkeypatch, capsys, tmp_path) -> tuple[int, str, list[dict]]:
    """`pazo-train` as rank `rank` of 2 in this process, the ranks' first exchange played (the other rank
    sends `other`): its exit status, its stderr and what it sent."""
    from pazo.run import cli as command_line, distributed
    from pazo.train import cli

    sent = []

    def gather(gathered, facts, group=None):
        sent.append(facts)
        gathered[:] = [facts, other] if rank == 0 else [other, facts]

    def join(timeout_s, asked=None):
        group = distributed.Group(rank, 2)
        group.compare_asked(asked)
        return group
    for name, value in (("RANK", str(rank)), ("WORLD_SIZE", "2"), ("PAZO_CACHE_DIR", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(distributed, "join", join)
    monkeypatch.setattr(distributed.dist, "all_gather_object", gather)
    monkeypatch.setattr(distributed, "ignore_stop_signals", lambda: None)
    monkeypatch.setattr(command_line, "LAUNCH", None)   # (restored after: a launch refused here leaves its own)
    monkeypatch.setattr(sys, "argv", ["pazo-train", "dataset=digits", "method=dpzero", "train.steps=3",
                                      f"hydra.run.dir={tmp_path / 'run'}"])
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as ended:
            cli()
    finally:
        signal.signal(signal.SIGINT, handler)
    return ended.value.code, capsys.readouterr().err, sent


@pytest.mark.parametrize("faulty, rank", [(0, 0), (1, 1), (0, 1), (1, 0)])
def test_a_fault_before_joining_is_sent_in_the_first_exchange_and_heard_there(tmp_path, monkeypatch, capsys,
                                                                             faulty, rank):
    """A rank that meets a fault of the machine before the ranks join (rank 0: a full disk as it checks
    where the run writes; rank 1: an I/O error as it composes its config) says so (exit 75) and sends it,
    as a fault, in the ranks' first exchange (was: it exited, and the others waited for it until the
    timeout); a rank that hears it there ends at once naming it, as a fault too (exit 75; was: exit 1,
    as another rank's error). Nothing is written."""
    import fault_before_joining
    from pazo.files import rundir
    import pazo.train as train

    if faulty == 0:
        monkeypatch.setattr(rundir, "open_file", fault_before_joining.full_disk(rundir.open_file))
    if faulty == 1:
        monkeypatch.setattr(train, "follower_config", fault_before_joining.unreadable_config)
    failure = failure_facts(OSError(errno.EIO, "Input/output error"), FAULT)
    code, err, sent = _cli_as_rank(rank, failure if faulty != rank else {"plan": False, "overrides": {}},
                                   monkeypatch, capsys, tmp_path)
    (line,) = _errors(err)
    assert code == 75, err
    if faulty == rank:
        assert ("the disk is full" if rank == 0 else "rank 1: [Errno 5]") in line, err
        assert [set(facts) for facts in sent] == [{FAULT}], sent
        assert sent[0][FAULT].startswith("WriteFault: could not write" if rank == 0 else "OSError: [Errno 5]")
    else:
        assert line.startswith(f"pazo: error: {'rank 1: ' if rank else ''}rank {faulty} met a fault of the machine "
                               "before the first step (OSError: [Errno 5]"), err
    assert not (tmp_path / "run").exists()


@settings(deadline=None, max_examples=30)
@given(st.sampled_from(sorted(TOLD)), st.integers(2, 5).flatmap(
    lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda t: t[1] != t[2])))
@example(FAULT, (2, 0, 1))   # rank 1 hears rank 0's full disk: was exit 1, as an error
@example(REFUSED, (2, 0, 1))   # rank 0's refusal: its line, rank 1 silent
def test_a_rank_told_of_a_failure_ends_with_the_exit_of_the_kind_told(kind, world_teller_hearer):
    """What a torchrun rank other than pazo-train's rank 0 (`_on_rank`; a plan's rank 0 too) ends with,
    told in an exchange of another rank's failure of any kind, in any world: the kind's exit (a
    refusal 2, a fault of the machine 75, an error 1) and one line naming the rank that told, but for
    rank 0's refusal (rank 0's line is the run's: silent)."""
    from pazo.train import _on_rank

    world, teller, hearer = world_teller_hearer
    gathered = [{"config": "same"}] * world
    gathered[teller] = failure_facts(OSError(errno.ENOSPC, "No space left on device"), kind)
    told = told_failure(gathered, hearer)

    def work():
        raise told
    with contextlib.redirect_stderr(io.StringIO()) as stderr:
        status, _ = _on_rank(work, f"rank {hearer}: " if hearer else "")
    assert status == TOLD[kind][1]
    said = stderr.getvalue().splitlines()
    if kind == REFUSED and teller == 0:
        assert said == []
    else:
        (line,) = said
        assert line.startswith(f"pazo: error: {f'rank {hearer}: ' if hearer else ''}rank {teller} "), line
        assert "No space left on device" in line


@pytest.mark.slow   # (2 processes; the default suite's: test_a_fault_before_joining_is_sent_in_the_first_exchange...)
@pytest.mark.parametrize("faulty", [0, 1])
def test_a_fault_before_the_ranks_join_ends_every_rank_at_once_with_one_line_each(tmp_path, faulty):
    """A rank meets a fault of the machine before the ranks join (rank 0: a full disk as it checks where
    the run writes; rank 1: an I/O error as it composes its config), the exchange's timeout 600 s: it
    says so in one line (exit 75) and joins the others to tell them, so that they end at once naming
    it, as a fault (exit 75; was: they waited for it until the timeout, then ended as its error, exit
    1); nothing is written."""
    port, script = _free_port(), (str(HERE / "fault_before_joining.py"), str(faulty))
    ranks = [_rank(tmp_path, rank, port, "train.steps=3", "train.distributed_timeout_s=600", command=script)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=240) for p in ranks]
    assert [p.returncode for p in ranks] == [75, 75], outs
    assert not any("Traceback" in err for _, err in outs), outs
    lines = [_errors(out + err) for out, err in outs]
    (fault,), (told,) = lines[faulty], lines[1 - faulty]
    assert ("the disk is full" if faulty == 0 else "rank 1: [Errno 5] Input/output error") in fault, fault
    assert told.startswith(f"pazo: error: {'rank 1: ' if faulty == 0 else ''}rank {faulty} met a fault of the "
                           "machine before the first step (") and told.endswith("and nothing was written"), told
    assert not (tmp_path / "run").exists()


@settings(deadline=None, max_examples=5)
@given(st.integers(2, 4).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))), st.integers(1, 3))
def test_a_followers_check_of_its_command_line_makes_no_folder(tmp_path_factory, rank_world, depth):
    """A rank other than 0 checks its command line as rank 0 does, but not where the run writes: it
    writes nowhere, and a run refused by rank 0 left the folder its check made (one run, one directory)."""
    import pazo.train as train

    (world, rank), root = rank_world, tmp_path_factory.mktemp("follower")
    run_dir = root.joinpath(*(f"level{i}" for i in range(depth)))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RANK", str(rank))
        patch.setenv("WORLD_SIZE", str(world))
        problem = train._command_line_problem(["dataset=digits", "method=dpzero", f"hydra.run.dir={run_dir}"],
                                              single=True)
    assert problem is None and list(root.iterdir()) == []


@pytest.mark.parametrize("refusal", [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EACCES, errno.EROFS])
def test_a_launch_refused_as_it_checks_where_it_writes_leaves_no_folder(tmp_path, monkeypatch, refusal):
    """The check of where a run writes makes the run directory and writes a probe into it: where the
    probe is refused (a full disk: exit 75, `LaunchFault`; no permission: a user's mistake), the
    folders the check made go (was: left behind, empty, by a launch that said nothing was written)."""
    from pazo.files import rundir
    from pazo.run import cli

    original = rundir.open_file

    def open_file(path, *args, **kwargs):
        if Path(path).name.startswith(".pazo-probe-"):
            raise OSError(refusal, os.strerror(refusal))
        return original(path, *args, **kwargs)
    monkeypatch.setattr(rundir, "open_file", open_file)
    monkeypatch.setattr(cli, "LAUNCH", None)
    argv = [f"hydra.run.dir={tmp_path / 'made' / 'for' / 'run'}"]
    if refusal in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        with pytest.raises(cli.LaunchFault) as stop:
            cli.check_single_launch(argv)
        assert stop.value.code == 75 and stop.value.fault.errno == refusal
    else:
        assert "give a hydra.run.dir you can write to" in cli.check_single_launch(argv)
    assert list(tmp_path.iterdir()) == []


ASKED_KEYS = ["method", "method.lr", "+train.steps", "seed", "hydra.run.dir", "dataset.root"]


@settings(deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(ASKED_KEYS), st.sampled_from(["secret-1", "secret-2"])),
                         max_size=4), min_size=2, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
@example([[("seed", "secret-1")], [("seed", "secret-2")]], [False] * 4)   # another value of one key
@example([[], []], [True, False, True, True])                            # --plan on rank 0 only
def test_ranks_asked_alike_go_on_and_the_first_asked_otherwise_is_named(command_lines, plans):
    """`asked_difference` over what ranks were asked (`asked_facts`): None where every rank's overrides, by
    key (hydra.* apart: rank 0's run directory; a node's own data folder too) and in order, and its --plan
    are rank 0's; else the first
    rank that differs, with each key that differs and --plan where it does; no value leaves its rank."""
    argvs = [[f"{key}={value}" for key, value in line] for line in command_lines]
    gathered = [asked_facts(argv, plan) for argv, plan in zip(argvs, plans)]

    def by_key(argv: list[str]) -> dict:
        keys = {a.split("=")[0].lstrip("+") for a in argv} - {"hydra.run.dir", "dataset.root"}
        return {key: [a for a in argv if a.split("=")[0].lstrip("+") == key] for key in keys}
    differ = [r for r in range(1, len(argvs)) if by_key(argvs[r]) != by_key(argvs[0]) or plans[r] != plans[0]]
    said = asked_difference(gathered)
    assert "secret" not in json.dumps(gathered)
    if not differ:
        assert said is None
        return
    first, mine = differ[0], by_key(argvs[0])
    theirs = by_key(argvs[first])
    assert said.startswith(f"rank {first} from rank 0: ")
    assert ("--plan" in said) == (plans[first] != plans[0]), said
    for key in mine.keys() | theirs.keys():
        assert (f"{key} " in said) == (mine.get(key) != theirs.get(key)), said


@pytest.mark.parametrize("after", ["nothing", "share", "agree"])
def test_rank_0_tells_a_failure_in_the_exchange_the_others_wait_in_and_none_after_the_agreement(
        monkeypatch, after):
    """`LeaderExchanges`: rank 0's failure before its share goes in the share, after it in the agreement,
    and after the agreement nowhere (spent: `Group.agreed`, recorded once, where the agreement is entered)."""
    from pazo.run import distributed
    from pazo.run.launch import LeaderExchanges

    sent = []

    def gather(gathered, facts, group=None):
        sent.append(("agree", facts))
        gathered[:] = [facts, facts]

    def broadcast(box, src=0, group=None):
        sent.append(("share", box[0]))
    monkeypatch.setattr(distributed.dist, "all_gather_object", gather)
    monkeypatch.setattr(distributed.dist, "broadcast_object_list", broadcast)
    exchanges = LeaderExchanges(Group(0, 2))
    if after != "nothing":
        exchanges.share({"finished": False})
    if after == "agree":
        exchanges.agree({"config": "c"})
    sent.clear()
    exchanges.tell(RuntimeError("trouble"), FAILED)
    failure = failure_facts(RuntimeError("trouble"), FAILED)
    assert sent == {"nothing": [("share", failure)], "share": [("agree", failure)], "agree": []}[after]


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(["mistake", "missing", "full disk", "read-only", "error"]), st.sampled_from(["share", "agree"]))
@example("full disk", "share")   # as rank 0 locks its run directory (was: told as an error, rank 1 exit 1)
def test_rank_0_tells_a_failure_before_the_first_step_as_the_kind_it_ends_with(error, exchange):
    """`pazo.run.launch.run` on rank 0 of 2: whatever ends it before the first step is told to the
    other ranks in the exchange they wait in, of the kind it ends rank 0 with (`pazo.train.main`): a
    user's mistake (a refusal, exit 2), a write the machine refused (`WriteFault`: a fault, exit 75),
    anything else (an error, exit 1)."""
    from pazo.errors import ConfigError
    from pazo.files.rundir import WriteFault
    from pazo.run import distributed, launch

    raised = {"mistake": ConfigError("a mistake"), "missing": FileNotFoundError(errno.ENOENT, "no data"),
              "full disk": WriteFault("run/.lock", OSError(errno.ENOSPC, "No space left on device")),
              "read-only": WriteFault("run/.lock", OSError(errno.EROFS, "Read-only file system")),
              "error": RuntimeError("trouble")}[error]
    kind = {"mistake": REFUSED, "missing": REFUSED, "error": FAILED}.get(error, FAULT)
    sent = []

    def launched(cfg, run_dir, hydra_record, show_header, exchanges, last):
        if exchange == "agree":
            exchanges.share({"finished": False})
            sent.clear()
        raise raised

    def gather(gathered, facts, group=None):
        sent.append(facts)
        gathered[:] = [facts, facts]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distributed, "current", lambda: Group(0, 2))
        patch.setattr(distributed.dist, "broadcast_object_list", lambda box, src=0, group=None: sent.append(box[0]))
        patch.setattr(distributed.dist, "all_gather_object", gather)
        patch.setattr(launch, "_launch", launched)
        with pytest.raises(type(raised)):
            launch.run(None, "run")
    assert sent == [failure_facts(raised, kind)]


SUMMARIES = st.sampled_from([None, "garbage", "this fault", "earlier fault", "preempted", "finished"])


@settings(deadline=None)
@given(SUMMARIES, st.booleans())
@example(None, False)            # lost in the agreement of a fresh run: nothing written
@example("preempted", True)      # lost in the agreement of a resumed run: the earlier attempt's summary
@example("this fault", True)     # lost in the loop: the summary records it
def test_the_lost_rank_line_names_the_summary_only_where_it_records_this_fault(summary, checkpoint):
    """`_lost_rank_where`'s rule, over what a run directory may hold: the line says summary.json records
    status fault only where it does, for this loss (its failure line); a summary it cannot read is none;
    it says a checkpoint resumes the run only where there is one."""
    import tempfile

    from pazo.run.checkpoint import checkpoint_path
    from pazo.run.distributed import RankLost
    from pazo.train import _lost_rank_where

    lost = RankLost("another rank of this run stopped answering (Connection closed by peer); the run ended")
    with tempfile.TemporaryDirectory() as folder:
        run_dir = Path(folder)
        if summary == "garbage":
            (run_dir / "summary.json").write_text("{not json")
        elif summary is not None:
            status, failure = (("fault", f"fault after step 2: {lost}") if summary == "this fault" else
                               ("fault", "fault after step 1: disk full") if summary == "earlier fault" else
                               (summary, None))
            (run_dir / "summary.json").write_text(json.dumps({"status": status, "failure": failure, "steps_done": 2}))
        if checkpoint:
            checkpoint_path(run_dir).parent.mkdir(parents=True, exist_ok=True)
            checkpoint_path(run_dir).write_bytes(b"a checkpoint")
        line = _lost_rank_where(run_dir, lost)
    assert ("records status fault after step 2" in line) == (summary == "this fault"), line
    assert ("nothing of this run was written" in line) == (summary in (None, "garbage")), line
    assert line.endswith("resumes it from its checkpoint" if checkpoint else "starts it again"), line


@settings(deadline=None)
@given(st.one_of(st.floats(), st.integers(-5, 10**6), st.text(max_size=12)))
@example(10.0)
@example("10s")     # a mistake in the timeout itself: the default, not a refusal that cannot join
@example(-1)
@example(1e300)   # (a timeout torch cannot hold: the default)
def test_a_refusing_rank_waits_for_the_others_as_long_as_its_command_line_says_where_it_can(value):
    """A rank that refused its command line joins the others with the timeout it gives, where that
    reads as a positive number, else the default: always a positive, finite wait."""
    from pazo.config_schema import MAX_DISTRIBUTED_TIMEOUT_S, TrainSchema
    from pazo.train import refusing_rank_timeout

    waited = refusing_rank_timeout(["method=dpzero", f"train.distributed_timeout_s={value}", TYPO])
    assert 0 < waited <= MAX_DISTRIBUTED_TIMEOUT_S
    if isinstance(value, (int, float)) and 0 < value <= MAX_DISTRIBUTED_TIMEOUT_S:
        assert waited == float(value)
    elif isinstance(value, (int, float)):
        assert waited == TrainSchema.distributed_timeout_s


# ------------------------------------------------------------------ the default suite's: one launch

def test_a_run_resumes_from_one_process_on_two_and_back_on_one_in_one_launch(launched):
    """One process to step 1, the launch's two to step 3 (rank 1 reads rank 0's checkpoint), one to
    the end: the uninterrupted one-process run's parameters, rows and epsilon, bit for bit; the
    2-process attempt's summary says its world size and that a rank exchanged bytes, not a model."""
    root, whole, last = launched["root"], launched["whole"], launched["last"]["resumed"]
    on_two = launched["two"]["resumed"]
    assert launched["first"]["stopped_at_step"] == 1
    assert [launched["ranks"][r]["resumed"].get("status") for r in (0, 1)] == ["preempted", "followed"]
    assert on_two["resumed_from_step"] == 1 and on_two["stopped_at_step"] == 3
    assert on_two["distributed"]["world_size"] == 2 and 0 < on_two["distributed"]["rank_bytes_per_step"] < 4096
    assert last["resumed_from_step"] == 3 and last["status"] == "finished"
    _assert_same_run(root / "resumed", last, root / "whole", whole)


def test_a_killed_rank_ends_the_run_with_one_line_and_one_process_resumes_it_in_one_launch(launched):
    """pazo-train on 2 ranks, rank 1 killed (SIGKILL) as its step 3 starts: rank 0 ends at once with
    one line, exit 75 (a fault of the machine: resumable), its summary says so; one process then
    resumes from the step-2 checkpoint to the uninterrupted run's parameters, bit for bit."""
    root, (leader, follower) = launched["root"], launched["outputs"]
    assert launched["exits"] == [75, -signal.SIGKILL], leader[-3000:]
    assert "Traceback" not in leader + follower
    errors = _errors(leader)
    assert len(errors) == 1 and "another rank of this run stopped answering" in errors[0], leader[-3000:]
    fault = launched["two"]["killed"]
    assert fault["status"] == "fault" and "another rank" in fault["failure"]
    assert launched["last"]["killed"]["resumed_from_step"] == 2 and launched["last"]["killed"]["status"] == "finished"
    a, b = load_file(root / "whole/model.safetensors"), load_file(root / "killed/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_ranks_whose_configs_differ_refuse_the_run_in_one_launch(launched):
    """Rank 1 with another learning rate: every rank refuses, before the run's first write."""
    for rank in (0, 1):
        refusal = launched["ranks"][rank]["differs"]
        assert refusal["error"] == "ConfigError" and "differ in config" in refusal["message"], refusal
    assert not (launched["root"] / "differs" / "summary.json").exists()


def test_a_refusal_on_rank_0_before_the_first_exchange_ends_every_rank_in_one_launch(launched):
    """Rank 0 refuses the launch (its run directory in use by another launch: a check only rank 0
    makes) and tells rank 1 in the exchange it waits in: rank 1 ends as refused (LeaderRefused: rank 0
    prints the line), not as a lost rank."""
    leader, follower = (launched["ranks"][rank]["locked"] for rank in (0, 1))
    assert leader["error"] == "ConfigError" and "in use by another launch" in leader["message"], leader
    assert follower["error"] == "LeaderRefused" and follower["message"] == leader["message"], follower


def test_a_rank_that_refuses_while_building_ends_every_rank_at_once_in_one_launch(launched):
    """Rank 1 alone cannot build the run (a mistake only it sees: its data root): it says so in the
    ranks' agreement, so rank 0 ends there at once, naming rank 1 and its line, as a refusal (was:
    rank 0 waited for rank 1 until the exchange's timeout, or ended as a lost rank, exit 75)."""
    leader, follower = (launched["ranks"][rank]["refused_building"] for rank in (0, 1))
    assert (follower["error"], follower["message"]) == ("ConfigError", "rank 1's dataset.root holds no data (injected)")
    assert leader["error"] == "RankRefused", leader
    assert leader["message"].startswith(f"rank 1 refused the run: {follower['message']} (every rank ended"), leader
    assert not (launched["root"] / "refused_building" / "summary.json").exists()


def test_a_rank_that_fails_while_building_ends_every_rank_at_once_in_one_launch(launched):
    """An error in rank 0's build (not a user's mistake): rank 1, which built its run, ends in the
    agreement at once, naming rank 0 and the error, as a failed run (exit 1 under pazo-train)."""
    leader, follower = (launched["ranks"][rank]["failed_building"] for rank in (0, 1))
    assert (leader["error"], leader["message"]) == ("BuildCrash", "rank 0 crashed while building (injected)")
    assert follower["error"] == "RankFailed", follower
    assert follower["message"].startswith("rank 0 failed before the first step (BuildCrash: rank 0 crashed while "
                                          "building (injected)); every rank ended"), follower
    assert not (launched["root"] / "failed_building" / "summary.json").exists()


def test_a_rank_that_meets_a_fault_while_building_ends_every_rank_as_a_fault_in_one_launch(launched):
    """A write the machine refuses as rank 0 starts the run (a full disk): rank 1, which built its run,
    ends in the agreement at once, naming rank 0 and the fault, as a fault ends (exit 75 under
    pazo-train; was: as rank 0's error, RankFailed, exit 1)."""
    leader, follower = (launched["ranks"][rank]["faulted_building"] for rank in (0, 1))
    assert leader["error"] == "WriteFault" and "rank-0-injected.lock" in leader["message"], leader
    assert follower["error"] == "RankFaulted", follower
    assert follower["message"].startswith("rank 0 met a fault of the machine before the first step (WriteFault: "
                                          "could not write rank-0-injected.lock"), follower
    assert not (launched["root"] / "faulted_building" / "summary.json").exists()


@pytest.mark.slow   # (pazo-train's ranks; the default suite's: test_a_rank_that_refuses_..._in_one_launch)
def test_a_rank_that_refuses_while_building_ends_the_other_at_once_with_one_line(tmp_path):
    """pazo-train on 2 ranks, rank 1 unable to build the run (a mistake only it sees), the exchange's
    timeout 600 s: both end within the test's wait, exit 2, rank 1 with its line and rank 0 with one
    naming rank 1 and its line; nothing written (was: rank 0 exit 75, "another rank of this run
    stopped answering", and a summary it said it had written)."""
    port, script = _free_port(), (str(HERE / "fail_building.py"), "1", "refused")
    ranks = [_rank(tmp_path, rank, port, "train.steps=3", "train.distributed_timeout_s=600", command=script)
             for rank in (0, 1)]
    outs = [p.communicate(timeout=240) for p in ranks]
    assert [p.returncode for p in ranks] == [2, 2], [err[-2000:] for _, err in outs]
    assert not any("Traceback" in err for _, err in outs)
    (leader,), (follower,) = (_errors(out + err) for out, err in outs)
    assert follower == "pazo: error: rank 1: rank 1's dataset.root holds no data (injected)"
    assert leader.startswith("pazo: error: rank 1 refused the run: rank 1's dataset.root holds no data (injected) ("), \
        leader
    assert not (tmp_path / "run" / "summary.json").exists()


def test_a_follower_writes_nothing_in_one_launch(launched):
    """The launch's ranks ran in a folder of their own: rank 1 (and rank 0, its runs given their
    directories) left nothing there."""
    assert launched["elsewhere"] == []


class _FollowerGroup:
    """What a follower's `pazo.run.launch.follow` meets of its group: rank 0's start (a fresh run), and
    the failure it tells the others (its kind, recorded)."""

    def __init__(self, rank: int):
        self.rank, self.told = rank, []

    def share(self, value):
        return {"finished": False, "checkpoint": None, "earlier_engine": None}

    def tell(self, err, kind):
        self.told.append(kind)


#: an OSError of the machine a follower may meet while it builds the run (rank 0's checkpoint, the data)
MACHINE_ERRNOS = [errno.EIO, errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EMFILE, errno.ESTALE, errno.ENOTDIR]


@settings(deadline=None, max_examples=20)
@given(st.sampled_from(MACHINE_ERRNOS), st.integers(1, 7), st.sampled_from(["validated_run_config", "build_run"]))
@example(errno.EIO, 1, "build_run")   # the reported case: an I/O error as rank 1 reads what rank 0 wrote
def test_a_followers_os_error_while_building_is_one_line_a_fault_and_told_as_one(err_no, rank, where):
    """A rank > 0 whose build meets an OSError other than a missing file (which is the user's) tells
    the others it met a fault of the machine (they end as rank 0's WriteFault ends them, exit 75), and
    ends itself in one line naming the file and the reason, exit 75 (was: told as failed, and this rank
    exit 1 with a traceback: `_on_rank` let the OSError out)."""
    from pazo.run import distributed, launch
    from pazo.train import _on_rank

    group = _FollowerGroup(rank)

    def refused(*args, **kwargs):
        raise OSError(err_no, os.strerror(err_no), "/runs/r/checkpoint.pt")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distributed, "current", lambda: group)
        patch.setattr(launch, "validated_run_config", lambda cfg: cfg)   # (the run's own config: none here)
        patch.setattr(launch, where, refused)
        with contextlib.redirect_stderr(io.StringIO()) as stderr:
            status, _ = _on_rank(lambda: launch.follow(None), f"rank {rank}: ")
    assert status == 75 and group.told == [FAULT]
    assert stderr.getvalue().splitlines() == [f"pazo: error: rank {rank}: /runs/r/checkpoint.pt: "
                                              f"{os.strerror(err_no)} (a fault of the machine)"]
