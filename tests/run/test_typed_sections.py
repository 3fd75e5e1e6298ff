"""The modules below the entry take typed sections (issue 57): a data set's loader, a model's builder
and the engine choice are handed the run's typed `dataset`, `model` and `engine` sections, instances
of the schemas their registrations name, which sit beside the loader or builder they configure; the
typed sections hold the values the fingerprints hash."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pazo.config_schema
import pazo.run.build as build
from conftest import CONFIG_DIR, ROOT
from pazo.catalog import DATASETS, MODELS
from pazo.config_schema import EngineSchema, OptimizerSchema, PrivacySchema, ScheduleSchema, TrainSchema
from pazo.run.typed import RunConfig, run_config

#: the data sets and models whose files a test can compose without data on disk, and a model of each
#: data set's input kind (the schemas are typed before any data are read)
PAIRS = [("digits", "small_cnn"), ("digits", "nf_resnet18"), ("digits", "vit"), ("cifar10", "small_cnn"),
         ("tiny_imagenet", "vit"), ("torchvision", "small_cnn"), ("image_folder", "small_cnn"), ("imdb", "lstm"),
         ("hf_text", "lstm"), ("mnli", "roberta_prompt"), ("sst2", "hf_causal_lm"), ("glue_prompt", "hf_masked_lm"),
         ("squad", "hf_causal_lm")]

#: the modules below the entry that configure a run's data, model and engine, assemble it, run its
#: loop, warm start, plan and records, and cost a private selection
BELOW_THE_ENTRY = ("pazo/data", "pazo/models", "pazo/zo", "pazo/methods", "pazo/privacy", "pazo/run/build.py",
                   "pazo/run/loop.py", "pazo/run/warm_start.py", "pazo/run/recorder.py", "pazo/run/summary.py",
                   "pazo/run/attempts.py", "pazo/sweep/selection.py")


def composed(*overrides: str):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=["device=cpu", *overrides])


def test_every_registered_schema_sits_beside_what_it_configures():
    """(Was: every data set's and model's schema in pazo/config_schema.py, beside none of them.)"""
    assert DATASETS.names() and MODELS.names()
    for registry, package in ((DATASETS, "pazo.data"), (MODELS, "pazo.models")):
        for name, info in registry.items():
            origin = (info.load if registry is DATASETS else info.build).__module__
            if not origin.startswith("pazo."):
                continue   # (a plugin's registration: its schema is its own business)
            assert info.schema.__module__.startswith(f"{package}."), (name, info.schema.__module__)
    own = {obj for obj in vars(pazo.config_schema).values() if dataclasses.is_dataclass(obj)}
    assert not own & {info.schema for _, info in [*DATASETS.items(), *MODELS.items()]}


@settings(max_examples=len(PAIRS), deadline=None)
@given(st.sampled_from(PAIRS), st.sampled_from(["auto", "inplace", "vectorised"]))
@example(("digits", "small_cnn"), "auto")
def test_the_typed_dataset_model_and_engine_sections_are_their_schemas_with_the_hashed_values(pair, engine):
    dataset, model = pair
    typed = run_config(composed(f"dataset={dataset}", f"model={model}", f"engine.name={engine}"))
    for section, registry in (("dataset", DATASETS), ("model", MODELS)):
        value = getattr(typed, section)
        assert type(value) is registry.get(getattr(value, "name")).schema
        for key, hashed in typed.values[section].items():   # what the fingerprints hash, key by key
            mine = getattr(value, key)
            mine = dataclasses.asdict(mine) if dataclasses.is_dataclass(mine) else mine
            assert mine == hashed and type(mine) is type(hashed), f"{section}.{key}"
    assert type(typed.engine) is EngineSchema and typed.engine.name == engine


@settings(max_examples=4, deadline=None)
@given(st.sampled_from(["dpzero", "pazo_m", "sgd"]), st.sampled_from(["auto", "inplace"]))
@example("pazo_m", "auto")
def test_build_run_hands_the_loader_builder_and_engine_choice_their_typed_sections(method, engine):
    """(Was: the data set's loader and the model's builder read the DictConfig, with `cfg.get`.)"""
    seen = {}
    real_data, real_model, real_engine = build.build_dataset, build.build_model, build.choose_engine

    def data(cfg, streams):
        seen["dataset"] = cfg
        return real_data(cfg, streams)

    def model(cfg, *args):
        seen["model"] = cfg
        return real_model(cfg, *args)

    def choice(cfg, *args, **kwargs):
        seen["engine"] = cfg
        return real_engine(cfg, *args, **kwargs)

    privacy = ["privacy=none"] if method == "sgd" else []
    cfg = composed(f"method={method}", f"engine.name={engine}", "train.steps=2", "warm_start.epochs=0", *privacy)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "build_dataset", data)
        patch.setattr(build, "build_model", model)
        patch.setattr(build, "choose_engine", choice)
        build.build_run(run_config(cfg), sigma=1.0, time_engines=False)   # (sigma given: nothing calibrated)
    assert type(seen["dataset"]) is DATASETS.get(cfg.dataset.name).schema
    assert type(seen["model"]) is MODELS.get(cfg.model.name).schema
    assert type(seen["engine"]) is EngineSchema


def test_nothing_below_the_entry_reads_a_config_with_get():
    """(Was: 33 `cfg.get(...)` calls in the data sets' loaders, the models' builders and the engines:
    each a guess at a key the typed section always has; then `pcfg.get("accountant")` in the private
    selection's account.)"""
    found = []
    for place in BELOW_THE_ENTRY:
        for path in [ROOT / place] if place.endswith(".py") else sorted((ROOT / place).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                        and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("cfg")):
                    found.append(f"{Path(path).relative_to(ROOT)}:{node.lineno}")
    assert not found, found


#: (schedule, optimizer) overrides of a run: every option of each
RULES = st.tuples(st.sampled_from(["constant", "warmup", "cosine", "step", "inv_sqrt"]),
                  st.sampled_from(["sgd", "momentum", "adam"]))


@settings(max_examples=5, deadline=None)
@given(st.sampled_from(["dpzero", "pazo_m", "sgd"]), RULES, st.sampled_from([0, 1]))
@example("dpzero", ("warmup", "adam"), 1)
def test_build_run_hands_the_plan_warm_start_checks_and_update_rule_typed_sections(method, rule, warm):
    """What a run is assembled from is its typed config, section by section: the run holds the
    `RunConfig`; the data-size checks get the typed train, method and schedule sections; the plan
    the typed privacy section; the warm start the typed config; the method its typed schedule and
    optimizer sections. (Was: `Run.cfg` the raw DictConfig, which the loop, the warm start, the
    plan and the checks read, and the schedule and optimizer handed to the method as dicts.)"""
    seen = {}
    real = {name: getattr(build, name) for name in ("validate_against_data", "make_plan", "warm_start",
                                                       "build_method")}

    def spy(name):
        def record(*args, **kwargs):
            seen[name] = (args, kwargs)
            return real[name](*args, **kwargs)
        return record

    schedule, optimizer = rule
    # (a given sigma, checked by the RDP accountant: the plan is made, with no calibration)
    privacy = ["privacy=none"] if method == "sgd" else ["privacy.sigma=5.0", "privacy.accountant=rdp"]
    fits = {"warmup": ["schedule.warmup_steps=2"], "step": ["schedule.decay_every=5"]}.get(schedule, [])
    cfg = composed(f"method={method}", f"schedule={schedule}", f"optimizer={optimizer}", "train.steps=10", *fits,
                   f"warm_start.epochs={warm}", "warm_start.cache=false", *privacy)
    with pytest.MonkeyPatch.context() as patch:
        for name in real:
            patch.setattr(build, name, spy(name))
        r = build.build_run(run_config(cfg), time_engines=False)
    assert isinstance(r.cfg, RunConfig) and r.cfg.raw is cfg
    train, method_cfg, schedule_cfg = seen["validate_against_data"][0][:3]
    assert (type(train), type(schedule_cfg)) == (TrainSchema, ScheduleSchema) and method_cfg is r.cfg.method
    assert type(seen["make_plan"][0][0]) is PrivacySchema
    assert isinstance(seen["warm_start"][0][2], RunConfig)
    rule_sections = seen["build_method"][1]
    assert (type(rule_sections["schedule"]), type(rule_sections["optimizer"])) == (ScheduleSchema, OptimizerSchema)
    assert (rule_sections["schedule"].name, rule_sections["optimizer"].name) == rule
