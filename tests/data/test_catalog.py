"""Data sets and models are registered with their facts (`pazo.catalog`): validation pairs them by
the kind of input a data set produces and the kinds a model accepts, the config schema checks each
against its registered schema (an unregistered name is refused, never left unchecked), and each is
chosen by name on the command line."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pazo.catalog import DATASETS, MODELS, input_phrase, pairing_problem
from pazo.config_schema import check_config_values
from pazo.errors import ConfigError, at_least_one
from pazo.run.validate import validate_config


@given(dataset=st.sampled_from(DATASETS.names()), model=st.sampled_from(MODELS.names()))
def test_a_model_reads_a_data_set_exactly_when_it_accepts_its_input_kind(dataset, model):
    produces = DATASETS.get(dataset).produces
    problem = pairing_problem(dataset, model)
    assert (problem is None) == (produces in MODELS.get(model).accepts)
    if problem:
        able = [n for n, info in MODELS.items() if produces in info.accepts]
        reads = " or ".join(map(input_phrase, MODELS.get(model).accepts))
        assert problem == (f"dataset={dataset} is {input_phrase(produces)} for model={' or '.join(able)}, "
                           f"not model={model} (which reads {reads})")


def test_validation_refuses_a_pairing_the_facts_refuse(hydra_cfg):
    with pytest.raises(ConfigError, match="dataset=digits is images for model=small_cnn or nf_resnet18 or vit, "
                                          "not model=lstm"):
        validate_config(hydra_cfg("model=lstm"))
    validate_config(hydra_cfg("model=small_cnn"))


@pytest.mark.parametrize("group, registry", [("dataset", DATASETS), ("model", MODELS)])
def test_every_name_composes_and_checks_against_its_registered_schema(hydra_cfg, group, registry):
    """`group=<option>` composes (a yaml, or the node a registration stored where it has none) into a
    registered name, whose schema types the section."""
    from conftest import ROOT

    yamls = {p.stem for p in (ROOT / "configs" / group).glob("*.yaml")}
    for option in sorted(yamls | set(registry.names())):
        cfg = hydra_cfg(f"{group}={option}")
        name = cfg[group].name
        assert name in registry and (name == option or option in yamls)
        check_config_values(cfg)   # (against the registered schema)
        assert "name" in registry.get(name).schema.__dataclass_fields__


@given(name=st.text(min_size=1, max_size=12))
def test_an_unregistered_name_is_refused_not_skipped(hydra_cfg_once, name):
    for group, registry in (("dataset", DATASETS), ("model", MODELS)):
        if name in registry:
            continue
        data = {**hydra_cfg_once, group: {**hydra_cfg_once[group], "name": name}}
        with pytest.raises(ConfigError, match=f"unknown {group} "):
            check_config_values(data)


@pytest.fixture(scope="module")
def hydra_cfg_once():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from conftest import CONFIG_DIR

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return OmegaConf.to_container(compose(config_name="config", overrides=["logger.mode=disabled"]), resolve=True)


@given(value=st.one_of(st.integers(-3, 5), st.booleans(), st.floats(-2, 5), st.text(max_size=2), st.none()))
def test_at_least_one_is_an_integer_from_one(value):
    """One rule for counts and sizes, in every schema (the methods' and the config's)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if ok:
        at_least_one(value, "x")
    else:
        with pytest.raises(ConfigError, match=r"^x must be an integer >= 1, got "):
            at_least_one(value, "x")


def test_the_label_word_lookup_is_one_function():
    from pazo.models import hf_lm, prompt_mlm
    from pazo.text import prompts, tokens

    assert hf_lm.tokens.label_word_ids is tokens.label_word_ids
    assert prompt_mlm.label_word_ids is tokens.label_word_ids and not hasattr(prompts, "label_word_ids")
