"""The run's config is typed once, at the door (`pazo.run.typed.run_config`): a launch (fresh or
resumed) types its DictConfig once, and the typed sections the run reads agree with the typed
values its fingerprints hash (issue 57)."""
from __future__ import annotations

import dataclasses
import os
import signal

from hydra import compose, initialize_config_dir
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig

import pazo.run.typed as typed
from conftest import CONFIG_DIR
from pazo.config_schema import SECTIONS
from pazo.methods.two_point import TwoPointMethod
from pazo.run.fingerprint import config_fingerprint
from pazo.run.typed import run_config, typed_config
from pazo.train import run

#: overrides of one run, some in another spelling of one value (an integer for a float)
OVERRIDES = st.lists(st.sampled_from([
    "privacy.epsilon=1", "privacy.epsilon=2.0", "privacy=none", "method=dpzero", "method=dpsgd", "seed=3",
    "train.batch_size=16", "train.epochs=2", "train.log_every=1", "engine.name=inplace", "schedule=step",
    "optimizer=momentum", "warm_start.lr=1", "warm_start.epochs=1", "logger.mode=disabled",
]), max_size=5, unique=True)


def composed(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["device=cpu", *overrides])


@settings(max_examples=15, deadline=None)
@given(OVERRIDES)
@example(["privacy.epsilon=1", "optimizer=momentum", "optimizer.beta=0"])
def test_the_typed_sections_agree_with_the_values_the_fingerprints_hash(overrides):
    cfg = composed(overrides)
    typed = run_config(cfg)
    assert config_fingerprint(typed.values) == config_fingerprint(typed_config(cfg))
    for name in SECTIONS:
        section = dataclasses.asdict(getattr(typed, name))
        for key, value in (typed.values.get(name) or {}).items():
            assert section[key] == value and type(section[key]) is type(value), f"{name}.{key}"
    assert typed.seed == typed.values["seed"] and typed.method.name == cfg.method.name


def test_a_launch_and_its_resume_type_the_config_once(hydra_cfg, tmp_path, monkeypatch):
    """(Was: the launch, the assembly and the resume check each typed it again.)"""
    typings = []
    original_typing, original_step = typed.typed_values, TwoPointMethod.step

    def counting(cfg, *args, **kwargs):
        if isinstance(cfg, DictConfig):   # (an earlier attempt's config.yaml is read as a dict)
            typings.append(cfg)
        return original_typing(cfg, *args, **kwargs)

    def preempted_at_step_3(self, x, y, t):
        if t == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return original_step(self, x, y, t)

    monkeypatch.setattr(typed, "typed_values", counting)
    monkeypatch.setattr(TwoPointMethod, "step", preempted_at_step_3)
    cfg = hydra_cfg("method=dpzero", "train.steps=4", "train.checkpoint_every=2")
    assert run(cfg, tmp_path)["status"] == "preempted"
    assert len(typings) == 1
    monkeypatch.setattr(TwoPointMethod, "step", original_step)
    typings.clear()
    assert run(cfg, tmp_path)["resumed_from_step"] == 3   # (the stop checkpoints)
    assert len(typings) == 1
