"""What the printed epsilon covers: a secure-mode run is not started over after it released rows,
the checkpoint (which holds the noise stream) stays private to its owner and is never archived or
left behind by a failed run, the guarantee's assumptions are structured fields of the summary,
validation metrics stay off W&B unless asked, and DPZero's OPT setting uses DPZero's adjacency."""
from __future__ import annotations

import json
import stat

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pazo.config_schema import LoggerSchema
import pazo.run.loop as training_loop
import pazo.train as train
from pazo.run.attempts import plan_launch, same_computation
from pazo.run.checkpoint import CHECKPOINT, checkpoint_path
from pazo.errors import ConfigError
from pazo.run.recorder import Recorder
from pazo.run.typed import run_config
from conftest import CONFIG_DIR, cheap_pld_grid, run_cache, tiny_cfg
from step_faults import fail_at_step


#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")


def test_a_secure_mode_run_that_released_rows_is_not_started_over(hydra_cfg, tmp_path, monkeypatch):
    cfg = hydra_cfg("method=dpzero", "privacy.secure_mode=true", "train.steps=6", "train.checkpoint_every=4")
    fail_at_step(monkeypatch, training_loop, "timed_step", 3, RuntimeError("injected fault"))
    with pytest.raises(RuntimeError):
        train.run(cfg, tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    assert (tmp_path / "metrics.jsonl").read_text().strip()  # a row (step 2) left the process
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="secure-mode run that released rows"):
        train.run(hydra_cfg("method=dpzero", "privacy.secure_mode=true", "train.steps=6",
                            "train.checkpoint_every=4"), tmp_path)
    assert not (tmp_path / "attempts").exists()  # refused before anything was moved


def test_a_seeded_run_starts_over_with_the_same_noise_and_archives_no_checkpoint(hydra_cfg, tmp_path, monkeypatch):
    fail_at_step(monkeypatch, training_loop, "timed_step", 3, RuntimeError("injected fault"))
    with pytest.raises(RuntimeError):
        train.run(hydra_cfg("method=dpzero", "train.steps=6", "train.checkpoint_every=2"), tmp_path)
    assert not checkpoint_path(tmp_path).exists()  # a failed run is never resumed: its checkpoint is gone
    monkeypatch.undo()
    s = train.run(hydra_cfg("method=dpzero", "train.steps=6", "train.checkpoint_every=2"), tmp_path)
    assert s["status"] == "finished" and s["earlier_attempt_moved_to"].endswith("attempts/1")
    archived = tmp_path / "attempts" / "1"
    assert (archived / "metrics.jsonl").exists() and not list(archived.glob("checkpoint*"))


def launch_plan(run_dir, cfg):
    """`plan_launch` as a launch calls it: with the config typed once, and its fingerprint."""
    typed = run_config(cfg)
    return plan_launch(run_dir, typed)


def test_plan_launch_refuses_a_start_over_after_releases_unless_it_is_the_same_seeded_config(hydra_cfg, tmp_path):
    """(Was: only secure mode was refused, and a seeded start over of any config was archived.)"""
    from omegaconf import OmegaConf

    seeded, secure = hydra_cfg("method=dpzero"), hydra_cfg("method=dpzero", "privacy.secure_mode=true")
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed", "steps_done": 5}))
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(seeded, resolve=True))
    (tmp_path / CHECKPOINT).write_bytes(b"noise stream")   # (the old layout's place: found there too)
    with pytest.raises(ConfigError, match="secure mode"):
        launch_plan(tmp_path, secure)
    with pytest.raises(ConfigError, match=r"method.lr: 0.05 -> 0.5"):
        launch_plan(tmp_path, hydra_cfg("method=dpzero", "method.lr=0.5"))
    with pytest.raises(ConfigError, match=r"seed: changed \(not shown\)"):
        launch_plan(tmp_path, hydra_cfg("method=dpzero", "seed=7"))
    start = launch_plan(tmp_path, seeded)
    assert start.kind == "replay" and start.pending_archive and checkpoint_path(tmp_path).exists()  # nothing moved yet
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(secure, resolve=True))
    with pytest.raises(ConfigError, match="secure-mode run"):
        launch_plan(tmp_path, seeded)  # a seeded attempt never continues a secure one
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "summary.json").write_text(json.dumps({"status": "failed", "steps_done": 0}))
    assert launch_plan(quiet, secure).kind == "fresh"  # nothing was released


def test_a_kept_checkpoint_is_readable_by_its_owner_only(hydra_cfg, tmp_path):
    s = train.run(hydra_cfg("method=dpzero", "train.steps=4", "train.checkpoint_every=2",
                            "train.keep_checkpoint=true"), tmp_path)
    assert s["status"] == "finished"
    mode = stat.S_IMODE(checkpoint_path(tmp_path).stat().st_mode)
    assert mode == 0o600, oct(mode)
    assert stat.S_IMODE(checkpoint_path(tmp_path).parent.stat().st_mode) == 0o700   # in the private workspace
    assert not list(tmp_path.glob("*.tmp"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The summaries of a tiny seeded private run and a public one, which two rules below read (a
    run each, not one a test)."""
    root = tmp_path_factory.mktemp("finished")
    with cheap_pld_grid(), pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAZO_CACHE_DIR", str(run_cache(root / "cache")))
        return {"seeded": train.run(tiny_cfg("method=dpzero"), root / "seeded"),
                "public": train.run(tiny_cfg("method=sgd", "privacy=none"), root / "public")}


def test_the_summary_says_what_the_guarantee_assumes(finished, hydra_cfg, tmp_path):
    seeded = finished["seeded"]["privacy"]["assumptions"]
    secure = train.run(hydra_cfg("method=dpzero", "privacy.secure_mode=true"), tmp_path / "secure")
    public = finished["public"]
    assert "secure_mode" in seeded["seed_secret"] and {"no_selection", "n_private_public"} <= seeded.keys()
    assert "seed_secret" not in secure["privacy"]["assumptions"] and "no_selection" in secure["privacy"]["assumptions"]
    assert public["privacy"]["assumptions"] == {}


class FakeWandb:
    def __init__(self):
        self.rows, self.summary, self.id = [], {}, "fake"

    def log(self, row, step):
        self.rows.append(row)

    def finish(self, exit_code):
        pass


@pytest.mark.parametrize("diagnostics", [False, True])
def test_validation_metrics_reach_wandb_only_when_asked(tmp_path, diagnostics):
    logger_cfg = LoggerSchema(mode="disabled", private_diagnostics=diagnostics)
    recorder = Recorder(tmp_path, OmegaConf.create({"seed": 0}), logger_cfg)
    recorder.wandb = FakeWandb()
    fake = recorder.wandb
    recorder.log({"step": 2, "test_accuracy": 0.5, "val_accuracy": 0.4, "val_loss": 1.0, "train_loss": 2.0})
    recorder.write_summary({"status": "finished", "final_test_accuracy": 0.5, "final_val_accuracy": 0.4,
                            "best_val_accuracy": 0.45})
    recorder.close(failed=False)
    private = {"val_accuracy", "val_loss", "train_loss", "final_val_accuracy", "best_val_accuracy"}
    sent = set(fake.rows[0]) | set(fake.summary)
    assert "test_accuracy" in sent and "final_test_accuracy" in sent
    assert (private <= sent) if diagnostics else not (private & sent)
    local = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert local["val_accuracy"] == 0.4  # always in the run's own files


def test_dpzero_opt_setting_uses_dpzero_adjacency_and_delta():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=opt_sst2", "method=dpzero"])
    assert cfg.privacy.adjacency == "replace_one" and cfg.privacy.delta == 1e-5


def interrupt_at(monkeypatch, bad_step: int) -> None:
    """A second Ctrl-C during step `bad_step`: the run is recorded as interrupted and resumable."""
    real = training_loop.timed_step

    def step(r, sampler, loop, t):
        if t == bad_step:
            raise KeyboardInterrupt
        return real(r, sampler, loop, t)
    monkeypatch.setattr(training_loop, "timed_step", step)


def test_a_resume_that_changes_the_computation_is_refused(hydra_cfg, tmp_path, monkeypatch):
    def cfg(together):
        return hydra_cfg("method=pazo_p", "train.steps=6", "train.checkpoint_every=2",
                         f"method.public_grads_together={together}")
    interrupt_at(monkeypatch, 5)
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg("true"), tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "interrupted"
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="public_grads_together: True -> False"):
        train.run(cfg("false"), tmp_path)  # the fingerprint allows the switch; the computation differs
    s = train.run(cfg("true"), tmp_path)  # where it ran: the replay is the same computation
    assert s["status"] == "finished" and s["resumed_from_step"] == 4
    assert not any("CUDA" in line for line in s["outside_guarantee"])  # a CPU replay is bit-identical


def test_a_checkpoint_of_other_private_data_or_sigma_is_not_resumed(tmp_path):
    now = {"device": "cpu", "sigma": 1.5, "private_data_sha256": "ab", "public_grads_together": None}
    same_computation(dict(now), now, tmp_path)
    same_computation(None, now, tmp_path)  # an attempt that recorded nothing
    with pytest.raises(ConfigError, match="private data read differs"):
        same_computation({**now, "private_data_sha256": "cd"}, now, tmp_path)
    with pytest.raises(ConfigError, match="sigma: 1.4 -> 1.5"):
        same_computation({**now, "sigma": 1.4}, now, tmp_path)


def test_a_seeded_start_over_that_changes_the_computation_is_refused(hydra_cfg, tmp_path, monkeypatch):
    """A failed seeded run starts over with its noise from step 1: on another computation that
    would release the same noise twice, so it is refused, and nothing is moved."""
    def cfg(together):
        return hydra_cfg("method=pazo_p", "train.steps=6", f"method.public_grads_together={together}")
    fail_at_step(monkeypatch, training_loop, "timed_step", 3, RuntimeError("injected fault"))
    with pytest.raises(RuntimeError):
        train.run(cfg("true"), tmp_path)
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="public_grads_together: True -> False"):
        train.run(cfg("false"), tmp_path)
    assert not (tmp_path / "attempts").exists()
    s = train.run(cfg("true"), tmp_path)
    assert s["status"] == "finished" and s["earlier_attempt_moved_to"].endswith("attempts/1")
    assert "private_data_sha256" not in s["computation"]  # a hash of the private data is never released


def test_a_missing_device_is_refused_before_the_run_directory_is_touched(hydra_cfg, tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed"}))
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        train.run(hydra_cfg("method=dpzero", "device=cuda"), tmp_path)
    assert not (tmp_path / "attempts").exists() and (tmp_path / "summary.json").exists()


def test_the_summary_lists_what_a_private_run_releases_outside_the_guarantee(finished):
    private = finished["seeded"]["outside_guarantee"]
    assert any("s_per_iter" in line for line in private)
    assert any("validation split" in line for line in private)  # digits carves one from the private set
    assert finished["public"]["outside_guarantee"] == []
