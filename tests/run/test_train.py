"""Every method end to end through Hydra on tiny runs; logging, failure handling, bad input."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cache
from pazo.methods import METHODS, method_info, method_names
from pazo.train import run
from pazo.run.validate import ConfigError
from step_faults import fail_at_step
from wandb_log import wandb_records


def read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


RUNS = [(m, e) for m in METHODS.names() for e in ("vectorised", "inplace")
        if not (m in method_names("first_order") and e == "inplace")]  # the engine only matters for ZO methods


@pytest.mark.parametrize("method,engine", RUNS)
def test_every_method_runs_end_to_end(method, engine, hydra_cfg, tmp_path):
    nonprivate = not method_info(method).private
    privacy = ["privacy=none"] if nonprivate else []
    cfg = hydra_cfg(f"method={method}", f"engine.name={engine}", *privacy)
    summary = run(cfg, tmp_path)
    assert summary["status"] == "finished" and summary["steps_done"] == 4
    assert 0 <= summary["final_test_accuracy"] <= 1
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "finished" and (tmp_path / "config.yaml").exists()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [2, 4]  # log_every=2; the last step is always evaluated
    for key in ("train_loss", "test_accuracy", "s_per_iter", "epoch", "sigma", "epsilon"):
        assert key in rows[-1]
    p = summary["privacy"]
    if nonprivate:
        assert not p["private"] and p["sigma"] is None
    else:
        assert p["private"] and p["epsilon_spent"] <= p["target_epsilon"] == 1.0
        assert p["within_budget"] and p["guarantee_holds"]
        assert p["delta"] == pytest.approx(1 / summary["data"]["n_private"])
        assert rows[-1]["epsilon"] <= 1.0
    if method == "pazo_s":
        assert 0 <= summary["noisy_candidate_win_rate"] <= 1


def test_engine_auto_records_its_choice_and_an_explicit_engine_is_kept(hydra_cfg, tmp_path):
    auto = run(hydra_cfg("method=dpzero"), tmp_path / "auto")["engine"]
    assert auto["requested"] == "auto" and auto["name"] == "inplace" and "cpu" in auto["reason"]
    assert json.loads((tmp_path / "auto/summary.json").read_text())["engine"] == auto
    explicit = run(hydra_cfg("method=dpzero", "engine.name=vectorised"), tmp_path / "vec")["engine"]
    assert explicit == {"requested": "vectorised", "name": "vectorised", "reason": "engine.name=vectorised",
                        "release": "host"}   # Python floats on CPU (`releases_on_device`)
    first_order = run(hydra_cfg("method=sgd", "privacy=none"), tmp_path / "sgd")["engine"]
    assert first_order["name"] == "inplace" and "not used" in first_order["reason"]


def test_engine_auto_rules_for_the_lstm_and_a_given_engine():
    from pazo.config_schema import EngineSchema
    from pazo.models import FunctionalModel
    from pazo.models.lstm import LSTMClassifier
    from pazo.zo.engines import choose_engine
    lstm = FunctionalModel(LSTMClassifier(14, embed=8, hidden=6))
    auto = EngineSchema(name="auto")
    assert choose_engine(auto, lstm, zeroth_order=True, queries=1) == (
        "inplace", "the model's fused kernel runs only outside vmap")
    given = EngineSchema(name="vectorised")
    assert choose_engine(given, lstm, zeroth_order=True, queries=1)[0] == "vectorised"


def test_every_logged_row_carries_the_exact_epsilon_spent_at_its_step(hydra_cfg, tmp_path):
    """Not the value of the last of a few accounting points: each row's epsilon is the run's own
    accountant at that row's step, rising with the steps, and the last row's is the guarantee."""
    from dataclasses import fields

    from pazo.privacy.plan import PrivacyPlan, epsilon_spent, make_accountant
    cfg = hydra_cfg("method=dpzero", "train.steps=30", "train.log_every=2", "train.evals_per_epoch=0")
    summary = run(cfg, tmp_path)
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(2, 31, 2))
    plan = PrivacyPlan(**{f.name: summary["privacy"][f.name] for f in fields(PrivacyPlan)})
    fresh = make_accountant(plan)
    expected = [fresh.epsilon(r["step"]).upper for r in reversed(rows)][::-1]  # backwards: no shared state
    assert [r["epsilon"] for r in rows] == pytest.approx(expected, rel=1e-9)
    assert all(0 < a < b for a, b in zip(expected, expected[1:]))
    assert rows[-1]["epsilon"] == pytest.approx(summary["privacy"]["epsilon_spent"], rel=1e-12)
    assert summary["privacy"]["epsilon_spent"] == pytest.approx(epsilon_spent(plan, 30), rel=1e-12)


def test_same_seed_same_run(hydra_cfg, tmp_path):
    a = run(hydra_cfg("method=pazo_p"), tmp_path / "a")
    b = run(hydra_cfg("method=pazo_p"), tmp_path / "b")
    strip = lambda rows: [{k: v for k, v in r.items() if k != "s_per_iter"} for r in rows]  # noqa: E731
    assert strip(read_jsonl(tmp_path / "a/metrics.jsonl")) == strip(read_jsonl(tmp_path / "b/metrics.jsonl"))
    run(hydra_cfg("method=pazo_p", "seed=1"), tmp_path / "c")
    assert read_jsonl(tmp_path / "a/metrics.jsonl") != read_jsonl(tmp_path / "c/metrics.jsonl")
    assert a["final_test_accuracy"] == b["final_test_accuracy"]
    assert a["public_grads"] == {"requested": "auto", "together": False}  # on CPU, one by one


def test_shuffle_sampling_is_flagged(hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=dpzero", "privacy.sampling=shuffle"), tmp_path)
    assert s["privacy"]["within_budget"] and not s["privacy"]["guarantee_holds"]
    assert any("does NOT hold" in n for n in s["privacy"]["notes"])


def test_divergence_is_marked_failed_and_keeps_what_was_written(hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=pazo_m", "method.lr=1e30", "train.steps=6", "train.log_every=1"), tmp_path)
    assert s["status"] == "failed" and "diverged" in s["failure"]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == "failed" and on_disk["steps_done"] < 6
    assert read_jsonl(tmp_path / "metrics.jsonl")  # earlier rows survive
    assert on_disk["privacy"]["epsilon_spent"] <= 1.0


@pytest.mark.parametrize("override,match", [
    ("privacy.epsilon=-1", "privacy.epsilon"),
    ("privacy.delta=1.5", "privacy.delta"),
    ("privacy.delta=0.0", "0 only for pure DP with Laplace noise"),
    ("method=dp_zogd method.beta=0", "no composition guarantee"),
    ("method.alpha=1.5", "method.alpha"),
    ("method.q=0", "method.q"),
    ("train.batch_size=5000", "exceeds the"),
    ("method.public_batch_size=1000", "public examples"),
    ("method.name=nope", "choices: dope_sgd, dp_aggzo, dp_zo, dp_zogd, dpmd, dpsgd, dpzero, gep, mezo"),
    ("engine.name=fast", "choices: auto, inplace, vectorised"),
    ("privacy.epsilon=1e-9", "out of reach"),
    ("privacy.sigma=0.1", "above the target"),
])
def test_bad_input_is_rejected_before_training(override, match, hydra_cfg, tmp_path):
    with pytest.raises(ValueError, match=match):
        run(hydra_cfg(*override.split()), tmp_path)
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.parametrize("delta,guarantee", [("0.0", "pure epsilon-DP"), ("null", "(epsilon, delta)-DP")])
def test_dp_zo_laplace_states_its_guarantee(delta, guarantee, hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=dp_zo", "method.noise=laplace", f"privacy.delta={delta}", "train.steps=300",
                      "train.log_every=100"), tmp_path)
    p = s["privacy"]
    assert p["noise"] == "laplace" and p["guarantee"] == guarantee and p["within_budget"]
    assert p["epsilon_spent"] <= p["pure_epsilon_spent"]
    if delta == "0.0":
        assert p["pure_epsilon_spent"] <= 1.0 and p["epsilon_spent"] == p["pure_epsilon_spent"]
    else:
        assert p["pure_epsilon_spent"] > 1.0  # the (epsilon, delta) account needs less noise


def test_mezo_under_a_privacy_target_is_refused(hydra_cfg, tmp_path):
    with pytest.raises(ConfigError, match="non-private"):
        run(hydra_cfg("method=mezo"), tmp_path)


def _cli(*args, cwd=ROOT, env_extra=None):
    env = {**os.environ, "WANDB_SILENT": "true", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "pazo.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("override,message", [
    ("method.lrr=0.1", "pazo: error: unknown key method.lrr; did you mean method.lr? (method pazo_m has: alpha, "),
    ("method.q=abc", "pazo: error: method.q must be an integer, got the string 'abc'"),
    ("method=nope", "pazo: error: unknown method=nope (choices: dope_sgd, "),
])
def test_cli_override_hydra_cannot_compose_is_one_line(override, message, tmp_path):
    out = _cli(override, "logger.mode=disabled", f"hydra.run.dir={tmp_path}/r")
    assert out.returncode == 2 and out.stderr.startswith(message), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / "r").exists()


def test_cli_bad_input_exits_with_one_clear_message(tmp_path):
    """A value out of range is refused before Hydra makes the run directory; one that only the data
    can refuse (a batch larger than the private set) is refused before compute, and writes nothing
    into the directory it was given (no train.log: the launch was never accepted)."""
    out = _cli("privacy.epsilon=0", "logger.mode=disabled", f"hydra.run.dir={tmp_path}/early",
               env_extra={"PAZO_CACHE_DIR": str(run_cache(tmp_path / "c"))})
    assert out.returncode == 2 and not (tmp_path / "early").exists()
    assert out.stderr.strip() == "pazo: error: privacy.epsilon must be a positive number, got 0.0"
    out = _cli("train.batch_size=100000", "logger.mode=disabled", f"hydra.run.dir={tmp_path}",
               env_extra={"PAZO_CACHE_DIR": str(run_cache(tmp_path / "c"))})
    assert out.returncode == 2
    assert "pazo: error: train.batch_size=100000 exceeds the" in out.stderr
    assert "Traceback" not in out.stderr and "pazo: error" not in out.stdout
    assert not (tmp_path / "train.log").exists() and not (tmp_path / ".hydra").exists()


@pytest.mark.slow   # a four-job multirun in a subprocess (about 22 CPU-s); in the quick suite, in-process:
# tests/faults/test_fault_multiruns.py's test_a_job_refused_at_its_start_makes_the_multirun_fail_and_says_which
def test_cli_multirun_deterministic_dirs_and_failures_do_not_stop_the_sweep(tmp_path):
    """A failed job does not stop the others; the multirun then exits 1 and says which did not finish."""
    sweep = tmp_path / "sweep"
    out = _cli("-m", "method=pazo_m,dpsgd", "method.lr=0.1,1e30", "train.steps=3", "train.log_every=1",
               "logger.mode=disabled", f"hydra.sweep.dir={sweep}",
               env_extra={"PAZO_CACHE_DIR": str(run_cache(tmp_path / "c"))})
    assert out.returncode == 1, out.stderr
    assert "pazo: multirun ended: " in out.stderr and "not finished: " in out.stderr
    dirs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    common = "train.log_every=1,train.steps=3"  # the directory is the sorted override list
    assert dirs == [f"method.lr={lr},method={m},{common}" for lr in ("0.1", "1e+30") for m in ("dpsgd", "pazo_m")]
    status = {d: json.loads((sweep / d / "summary.json").read_text())["status"] for d in dirs}
    assert status[f"method.lr=0.1,method=pazo_m,{common}"] == "finished"
    assert status[f"method.lr=0.1,method=dpsgd,{common}"] == "finished"
    assert status[f"method.lr=1e+30,method=pazo_m,{common}"] == "failed"
    for d in dirs:  # each job's own lines in its own train.log
        log = (sweep / d / "train.log").read_text()
        assert f"[INFO] - {status[d].upper()}" in log and f"results: {sweep / d}" in log


def _read_wandb_log(path):
    history, final, exit_code, kinds = [], {}, None, []
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        kinds.append(kind if kind != "request" else "request." + record.request.WhichOneof("request_type"))
        key = lambda item: item.key or "/".join(item.nested_key)  # noqa: E731
        if kind == "history":
            history.append({key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "summary":
            final.update({key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "exit":
            exit_code = record.exit.exit_code
    return history, final, exit_code, kinds


def test_wandb_offline_history_and_summary_read_back(hydra_cfg, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cfg = hydra_cfg("method=pazo_s", "logger.mode=offline", "train.log_every=1")
    summary = run(cfg, tmp_path)
    logs = list(tmp_path.glob("wandb/offline-run-*/*.wandb"))
    assert len(logs) == 1
    local = read_jsonl(tmp_path / "metrics.jsonl")
    # wandb-core may still be flushing its log when finish() returns: re-read for a few seconds
    for _ in range(50):
        history, final, exit_code, kinds = _read_wandb_log(logs[0])
        if exit_code is not None and len(history) >= len(local):
            break
        time.sleep(0.2)
    assert [h["step"] for h in history] == [r["step"] for r in local], kinds
    assert history[-1]["test_accuracy"] == pytest.approx(local[-1]["test_accuracy"])
    assert history[-1]["epsilon"] == pytest.approx(local[-1]["epsilon"])
    assert final["status"] == "finished"
    assert final["final_test_accuracy"] == pytest.approx(summary["final_test_accuracy"])
    assert exit_code == 0


def test_a_crash_is_recorded_before_it_propagates(hydra_cfg, tmp_path, monkeypatch):
    from pazo.methods.zeroth_order import DPZero

    fail_at_step(monkeypatch, DPZero, "step", 3, RuntimeError("CUDA out of memory (simulated)"))
    with pytest.raises(RuntimeError, match="simulated"):
        run(hydra_cfg("method=dpzero", "train.log_every=1"), tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "crashed at step 3" in summary["failure"]
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]
