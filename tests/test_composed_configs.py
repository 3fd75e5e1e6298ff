"""conftest's kept compositions (`composed`, `tiny_cfg`, `composed_copy`): Hydra composes the same
overrides in tenths of a second and most runs' tests ask for a few of the same again and again, so
they are composed once per test process; each caller gets Hydra's config, as its own copy, and a
schema stored after a composition is composed with."""
from __future__ import annotations

import conftest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from pazo import CONFIG_DIR

#: overrides of a tiny run
OVERRIDES = ["train.steps=3", "method=dpzero", "seed=7", "privacy=none", "dataset=digits", "engine.chunk_size=2"]


@settings(max_examples=4, deadline=None)
@given(chosen=st.lists(st.sampled_from(OVERRIDES), unique=True, max_size=3))
def test_the_suites_composed_configs_are_hydras_and_each_callers_own(chosen):
    """conftest's `tiny_cfg` (compositions kept per process): Hydra's composition, a copy per call."""
    fresh = _composed_anew(("logger.mode=disabled", "train.steps=4", "train.log_every=2", "device=cpu", *chosen))
    first, second = conftest.tiny_cfg(*chosen), conftest.tiny_cfg(*chosen)
    assert OmegaConf.to_yaml(first) == OmegaConf.to_yaml(fresh) == OmegaConf.to_yaml(second)
    first.train.steps = 99
    assert conftest.tiny_cfg(*chosen).train.steps == fresh.train.steps != 99 and first is not second


def test_a_schema_stored_after_a_composition_is_composed_with():
    """A node stored in Hydra's ConfigStore after a composition (a plugin's, a test's) gets one of its own."""
    from hydra.core.config_store import ConfigStore

    before = conftest.tiny_cfg("seed=3")
    ConfigStore.instance().store(group="compose_once_test", name="probe", node={"x": 1})
    try:
        after = conftest.tiny_cfg("seed=3", "+compose_once_test=probe")
        assert after.compose_once_test.x == 1 and "compose_once_test" not in before
    finally:
        del ConfigStore.instance().repo["compose_once_test"]


def _composed_anew(overrides: tuple[str, ...]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))
