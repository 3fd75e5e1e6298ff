"""One run assembly (`pazo.run.build.build_run`): training and the privacy audit of the same
overrides get the same model (weights, loss function, placement), the same privacy plan, the
same engine and the same random streams, because both build their run through it."""
from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

import pazo.audit.run as audit_run
import pazo.run.build as experiment
import pazo.run.launch as pazo_run
import pazo.train as train
from pazo.models.functional import cross_entropy_per_example
from conftest import CONFIG_DIR, one_noise_pass, run_cache
from llm_fixtures import write_sst2, write_tiny_causal_lm


def spy_on_build_run(monkeypatch) -> list[dict]:
    """Patch `build_run` where training and the audit call it; each call's run is recorded as it
    comes out of the assembly, before any step changes the weights."""
    seen = []

    def recording(cfg, **kwargs):
        r = experiment.build_run(cfg, **kwargs)
        seen.append({"state": {k: v.detach().clone() for k, v in r.module.state_dict().items()},
                     "loss_fn": r.model.loss_fn, "devices": r.model.devices, "input_device": r.device,
                     "sigma": r.plan.sigma, "q": r.plan.sample_rate, "steps": r.plan.steps,
                     "engine": r.engine["name"], "method": type(r.method), "n": r.n,
                     "seeds": dict(r.streams.seeds)})
        return r
    monkeypatch.setattr(pazo_run, "build_run", recording)
    monkeypatch.setattr(audit_run, "build_run", recording)
    return seen


def compose_both(*overrides):
    common = ["logger.mode=disabled", "train.steps=4", "train.log_every=2", "device=cpu", *overrides]
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return (compose(config_name="config", overrides=common),
                compose(config_name="audit", overrides=[*common, "audit.canaries=4"]))


def assert_same_run(a: dict, b: dict) -> None:
    assert a["state"].keys() == b["state"].keys()
    for key in a["state"]:
        assert torch.equal(a["state"][key], b["state"][key]), key
    # the seeds: the audit's run draws the training run's noise and batches (the audit group is left
    # out of the computation fingerprint that keys them)
    for key in ("loss_fn", "devices", "input_device", "sigma", "q", "steps", "engine", "method", "n", "seeds"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("method", ["dpzero", "dpsgd"])
def test_audit_and_training_build_the_same_run_on_digits(method, tmp_path, monkeypatch):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    seen = spy_on_build_run(monkeypatch)
    one_noise_pass(monkeypatch)   # (the run it builds is the same at any count of passes)
    train_cfg, audit_cfg = compose_both(f"method={method}")
    train.run(train_cfg, tmp_path / "train")
    audit_run.run_audit(audit_cfg, tmp_path / "audit")
    assert len(seen) == 3  # training; the audit's run with canaries; its noise check's repeat of it
    assert_same_run(seen[0], seen[1])
    assert_same_run(seen[0], seen[2])
    assert seen[0]["loss_fn"] is cross_entropy_per_example


@pytest.mark.llm
def test_audit_keeps_a_language_models_own_loss(tmp_path, monkeypatch):
    """A prompt model scores label words with its own per-example loss: the audit, which once built
    its model without it (and so attacked a different loss than training minimised), gets it too."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    write_tiny_causal_lm(tmp_path / "opt")
    write_sst2(tmp_path)
    seen = spy_on_build_run(monkeypatch)
    one_noise_pass(monkeypatch)
    train_cfg, audit_cfg = compose_both(
        "model=hf_causal_lm", f"model.path={tmp_path / 'opt'}", f"dataset.root={tmp_path}", "dataset=sst2",
        "model.attention=eager", "dataset.n_train=24", "dataset.n_val=6", "train.batch_size=8",
        "privacy.sigma=5.0", "method=dpzero", "engine.name=inplace")
    train.run(train_cfg, tmp_path / "train")
    audit_run.run_audit(audit_cfg, tmp_path / "audit")
    assert len(seen) == 3 and all(assert_same_run(seen[0], later) is None for later in seen[1:])
    assert seen[0]["loss_fn"] is not cross_entropy_per_example  # the model's own (label-word) loss
