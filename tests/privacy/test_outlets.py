"""Every outlet of a run against the one allow-list (`pazo.run.outlets`): the files of a real tiny run
(metrics.jsonl, summary.json, W&B's offline files read record by record, the printed lines) hold
only listed keys, W&B only what the list releases, the seed only config.yaml and .hydra/, and every
noiseless private value is named in `outside_guarantee`."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pazo import train

from pazo.run import outlets
from pazo.run.build import SHIPPED_SEED_NOTE
from pazo.run.summary import print_summary
from pazo.sweep.launchers import command, without_seed
from pazo.sweep.spec import PlannedRun
from conftest import run_cache
from wandb_log import wandb_records

ROOT = Path(__file__).resolve().parents[2]
SEED = 987654321
#: where the seed_secret assumption says the seed is written (private/checkpoint.pt, 0600, is gone at the end)
SEED_PLACES = ("config.yaml", ".hydra/")
#: W&B's own bookkeeping in its records (times, its step, its runtime block)
WANDB_OWN = ("_",)


def wandb_keys(run_dir: Path) -> dict[str, set[str]]:
    """The keys W&B recorded for the run, by kind: config (with the run record's), history, summary;
    and its run name."""
    found = {"config": set(), "history": set(), "summary": set(), "name": set()}
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found["config"] |= {item.key for item in record.run.config.update}
            found["summary"] |= {item.key for item in record.run.summary.update}
            found["name"].add(record.run.display_name)
        elif kind == "config":
            found["config"] |= {item.key or item.nested_key[0] for item in record.config.update}
        elif kind == "history":
            found["history"] |= {item.key or item.nested_key[0] for item in record.history.item}
        elif kind == "summary":
            found["summary"] |= {item.key or item.nested_key[0] for item in record.summary.update}
    return {k: {key for key in v if not key.startswith(WANDB_OWN)} for k, v in found.items()}


@pytest.fixture(scope="module")
def seeded_run(tmp_path_factory):
    """A real seeded private run through the command line (W&B offline, validation split, a row
    every step), as a user launches it: its directory and its printed output."""
    run_dir = tmp_path_factory.mktemp("outlets") / "run"
    env = {**os.environ, "PAZO_CACHE_DIR": str(run_cache(run_dir.parent / "cache")), "WANDB_SILENT": "true"}
    done = subprocess.run([sys.executable, "-m", "pazo.train", f"seed={SEED}", "train.steps=3", "train.log_every=1",
                           "warm_start.epochs=1", "logger.mode=offline", "device=cpu", f"hydra.run.dir={run_dir}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return run_dir, done.stdout + done.stderr


def test_the_seed_is_only_where_the_assumption_says(seeded_run):
    run_dir, printed = seeded_run
    holding = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
               if p.is_file() and str(SEED).encode() in p.read_bytes()]
    assert holding and all(h == "config.yaml" or h.startswith(".hydra/") for h in holding), holding
    assert not (run_dir / "checkpoint.pt").exists() and not (run_dir / "private" / "checkpoint.pt").exists()
    assert str(SEED) not in printed
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "config.yaml and .hydra/ only" in summary["privacy"]["assumptions"]["seed_secret"]
    assert any(run_dir.glob("wandb/offline-run-*/logs/debug*.log"))  # (W&B's debug logs were read too)
    # nor a hash of it: the warm-start cache file's name hashes the config and the seed
    (cached,) = (run_dir.parent / "cache" / "warm_start").glob("*.pt")
    assert not [p for p in run_dir.rglob("*") if p.is_file() and cached.stem.encode() in p.read_bytes()]


def test_metrics_and_summary_hold_only_listed_keys(seeded_run):
    run_dir, _ = seeded_run
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(rows) == 3 and "val_accuracy" in rows[-1]  # (the run has a validation split)
    assert outlets.unlisted("metrics", {k for row in rows for k in row}) == []
    assert outlets.unlisted("summary", summary) == []


def test_every_noiseless_private_value_is_declared(seeded_run):
    run_dir, _ = seeded_run
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    private = ({k for row in rows for k in row if outlets.status("metrics", k) == outlets.PRIVATE}
               | {k for k in summary if outlets.status("summary", k) == outlets.PRIVATE})
    assert {"train_loss", "val_accuracy", "val_loss", "final_val_accuracy", "best_val_accuracy"} <= private
    declared = " ".join(summary["outside_guarantee"])
    assert all(key in declared for key in private)


def test_the_printed_and_logged_lines_of_a_real_run_show_no_validation_value(seeded_run):
    run_dir, printed = seeded_run
    summary = json.loads((run_dir / "summary.json").read_text())
    shown = printed + (run_dir / "train.log").read_text()
    tested = {f"{summary[k]:.4f}" for k in ("final_test_accuracy", "best_test_accuracy")}
    for key in ("final_val_accuracy", "best_val_accuracy"):
        value = f"{summary[key]:.4f}"
        assert value not in shown or value in tested


def test_wandb_receives_only_what_the_list_releases(seeded_run):
    run_dir, _ = seeded_run
    sent = wandb_keys(run_dir)
    assert "seed" not in sent["config"] and {"method", "privacy", "train"} <= sent["config"]
    assert sent["history"] and sent["summary"]
    released = {outlets.RELEASED, outlets.PUBLIC, outlets.OUTSIDE}
    assert all(outlets.status("metrics", k) in released for k in sent["history"]), sent["history"]
    assert all(outlets.status("metrics", k) in released or outlets.status("summary", k) in released
               for k in sent["summary"]), sent["summary"]
    assert sent["name"] == {run_dir.name}


listed_keys = st.sampled_from(sorted({*outlets.METRICS, *outlets.SUMMARY} - {"test_*"}))
any_key = st.one_of(listed_keys, st.text(min_size=1, max_size=12), st.just("seed"),
                    st.builds("test_{}".format, st.text(max_size=6)))


@given(st.dictionaries(any_key, st.floats(allow_nan=False) | st.integers() | st.none()), st.booleans())
def test_the_gate_sends_wandb_only_listed_released_values(values, diagnostics):
    for outlet in ("metrics", "summary"):
        sent = outlets.released_row(outlet, values, private_diagnostics=diagnostics)
        for key, value in values.items():
            what = outlets.status(outlet, key)
            allowed = what in (outlets.RELEASED, outlets.PUBLIC, outlets.OUTSIDE) or (
                diagnostics and what == outlets.PRIVATE)
            assert (key in sent) == (allowed and value is not None)
            assert key not in sent or sent[key] == value


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.integers()), st.integers(0, 2**63 - 1))
def test_the_wandb_config_never_holds_the_seed(config, seed):
    assert "seed" not in outlets.without_secrets({**config, "seed": seed})


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.floats(0.01, 0.99), min_size=4, max_size=4, unique=True))
def test_the_printed_lines_show_no_private_diagnostic(seeded_run, caplog, sentinels):
    """print_summary on the real run's summary with its private values set to two sets of
    sentinels prints the same lines: nothing printed depends on them (a sentinel may still equal a
    printed public number, such as a step time, without being printed)."""
    run_dir, _ = seeded_run
    summary = json.loads((run_dir / "summary.json").read_text())

    def printed(final_val: float, best_val: float) -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pazo.train"):
            print_summary({**summary, "final_val_accuracy": round(final_val, 9),
                           "best_val_accuracy": round(best_val, 9), "final_test_accuracy": 0.5,
                           "best_test_accuracy": 0.5})
        return caplog.text

    text = printed(*sentinels[:2])
    assert "0.5000" in text  # (the test accuracy is printed)
    assert printed(*sentinels[2:]) == text


@given(st.integers(10**9, 2**63 - 1), st.lists(st.integers(0, 5), max_size=3))
def test_a_sweep_names_its_runs_and_commands_without_the_seed(seed, values):
    run = PlannedRun("s", "digits", None, "dpzero", 1.0, seed,
                     tuple((f"method.k{i}", v) for i, v in enumerate(values)), 2)
    assert str(seed) not in run.run_id and run.run_id.endswith("rep=2")
    cmd = command(run, Path("/tmp/out") / run.run_id, [])
    assert f"seed={seed}" in cmd  # the run is given its seed ...
    assert not any(str(seed) in arg for arg in without_seed(cmd))  # ... which its stdout.log does not show
    assert not any(str(seed) in arg for arg in cmd if arg.startswith(("logger.name", "hydra.run.dir")))


@pytest.mark.usefixtures("cheap_pld")   # (reads no PLD bound)
def test_the_shipped_default_seed_says_its_noise_is_anyones(hydra_cfg, tmp_path):
    shipped = train.run(hydra_cfg("method=dpzero", "train.steps=1"), tmp_path / "shipped")["privacy"]["notes"]
    own = train.run(hydra_cfg("method=dpzero", "train.steps=1", "seed=5"), tmp_path / "own")["privacy"]["notes"]
    secure = train.run(hydra_cfg("method=dpzero", "train.steps=1", "privacy.secure_mode=true"),
                       tmp_path / "secure")["privacy"]["notes"]
    assert SHIPPED_SEED_NOTE in shipped and SHIPPED_SEED_NOTE not in own + secure
    assert "secure_mode=true" in SHIPPED_SEED_NOTE and "\n" not in SHIPPED_SEED_NOTE


def test_an_audit_writes_the_seed_to_config_yaml_only_and_its_table_reads_it_there(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tests" / "audit"))
    from test_audit import audit_cfg

    from pazo.audit.run import read_audits, run_audit
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    cfg = audit_cfg("method=dpzero", "train.steps=4", "audit.canaries=10", "audit.threat=black_box", f"seed={SEED}")
    summary = run_audit(cfg, tmp_path / "audits" / "run")
    assert outlets.unlisted("audit_summary", summary) == []
    holding = sorted(p.name for p in (tmp_path / "audits").rglob("*") if p.is_file() and str(SEED) in p.read_text())
    assert holding == ["config.yaml"]
    (read,) = read_audits([tmp_path / "audits"])
    assert read["seed"] == SEED


@settings(max_examples=25, deadline=None)
@given(st.integers(10**6, 2**63 - 1), st.integers(10**6, 2**63 - 1), st.booleans(), st.integers(0, 3))
def test_a_sweep_refuses_a_run_directory_of_another_seed_without_naming_either(then, now, same, replicate):
    import tempfile

    from pazo.errors import ConfigError
    from pazo.sweep.checks import check_replicates
    then = now if same else then
    run = PlannedRun("s", "digits", None, "dpzero", 1.0, now, (), replicate)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / run.run_id
        check_replicates([(run, run_dir)])  # not run yet
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(f"seed: {then}\n")
        if then == now:
            check_replicates([(run, run_dir)])
        else:
            with pytest.raises(ConfigError, match="another seed") as err:
                check_replicates([(run, run_dir)])
            message = str(err.value).replace(tmp, "")
            assert str(then) not in message and str(now) not in message


@given(st.integers(10**6, 2**63 - 1), st.lists(st.sampled_from(["method.lr=0.1", "train.steps=3", "method=dpzero"]),
                                                 unique=True), st.integers(0, 50), st.integers(0, 50))
def test_a_multirun_names_its_jobs_without_the_seed(seed, others, num, other_num):
    """`hydra.sweep.subdir` is the overrides less the seed (Hydra's exclude_keys), and a job given a
    seed gets its number so that two seeds do not share a directory."""
    from pazo.run.cli import job_dir
    dirname = ",".join(sorted(others))
    seeded = job_dir(dirname, [f"seed={seed}", *others], num)
    assert str(seed) not in seeded and seeded.startswith(dirname) and f"job={num}" in seeded
    assert num == other_num or seeded != job_dir(dirname, [f"seed={seed + 1}", *others], other_num)
    assert job_dir(dirname, others, num) == dirname
