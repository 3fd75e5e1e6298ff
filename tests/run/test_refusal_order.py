"""A config with several mistakes is refused for the same one before torch loads as by the full
check (issue #60): both check in one order, the run's own sections in the config's order first
(`pazo.run.door.check_run_sections`), then the registered names and sections, then what spans
groups; a bad engine name is refused before torch loads, in the full check's line."""
from __future__ import annotations

import json
from contextlib import contextmanager

from fresh_python import fresh_python
from hydra.core.config_store import ConfigStore
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.run.cli import check_overrides, refusal_before_torch

#: a mistake of each kind, by whether the refusal before torch loads can see it (`EARLY`) or only
#: the full check, which reads the registries (`LATE`); each a strategy of override lists
NAMES = st.text("abcxyz_", min_size=1, max_size=8)


def one_of(*overrides: str):
    return st.sampled_from(overrides).map(lambda o: [o])


EARLY = {
    "option": one_of("method=pazom", "optimizer=adamx", "schedule=cosin", "dataset=digit"),
    "key": one_of("+train.foo=1", "privacy.foo=1", "+engine.chunk=2", "warm_start.lrr=1"),
    "value": one_of("train.steps=0", "privacy.epsilon=abc", "warm_start.lr=-1", "seed=-1", "engine.chunk_size=0",
                    "schedule.final=2", "train.batch_size=x"),
    "engine": NAMES.filter(lambda n: n not in ("auto", "vectorised", "inplace")).map(lambda n: [f"engine.name={n}"]),
    "schedule": st.integers(1, 20).map(lambda t: ["schedule=step", f"schedule.decay_every={t + 5}",
                                                  f"train.steps={t}"]),
}
LATE = {
    "registry": st.sampled_from(["dataset", "model"]).flatmap(lambda g: NAMES.map(lambda n: [f"{g}.name={n}"])),
    "method_type": one_of("method.lr=abc", "method.q=x", "method.clip=[1]"),
    "method_range": one_of("method.lr=-1", "method.q=0", "+method.foo=1"),
    "dataset_value": st.just(["dataset.val_fraction=2"]),
    "pairing": st.just(["dataset=imdb"]),
    "epsilon_range": st.just(["privacy.epsilon=1e9"]),
}


def keys(overrides: list[str]) -> set[str]:
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


@st.composite
def two_mistakes(draw) -> tuple[list[str], bool]:
    """Two mistakes of different kinds on different keys, in a random order, and whether the
    refusal before torch loads must find one (both of its kinds, and no method key set)."""
    kinds = draw(st.lists(st.sampled_from(sorted(EARLY) + sorted(LATE)), min_size=2, max_size=2, unique=True))
    first, second = (draw({**EARLY, **LATE}[kind]) for kind in kinds)
    if keys(first) & keys(second) or ({"train.steps"} & keys(first + second) and "schedule" in kinds):
        second = []
    overrides = draw(st.permutations(first + second))
    early_only = all(kind in EARLY for kind in kinds) and not any(k.startswith("method.") for k in keys(overrides))
    return list(overrides), early_only


@contextmanager
def before_torch():
    """The method's registered schemas out of Hydra's store, as before torch loads (the refusal
    before torch composes with stand-ins for them), and back after."""
    stored = ConfigStore.instance().repo.setdefault("method", {})
    schemas = {name: node for name, node in stored.items() if name.endswith("_schema.yaml")}
    for name in schemas:
        del stored[name]
    try:
        yield
    finally:
        stored.update(schemas)


@settings(max_examples=12, deadline=None)
@given(two_mistakes(), st.sampled_from([[], ["method=dpzero"]]))
@example((["engine.name=foo", "train.steps=0"], True), [])
@example((["method.lr=abc", "+train.foo=1"], False), [])
@example((["privacy.foo=1", "method.lr=abc"], False), [])
@example((["dataset.name=foo", "seed=-1"], False), [])
@example((["schedule=step", "schedule.decay_every=50", "train.steps=5", "dataset=imdb"], False), [])
def test_the_refusal_before_torch_names_the_full_checks_first_mistake(mistakes, rest):
    """The rule, over pairs of mistakes of every kind in either order: the full check refuses the
    command line; the refusal before torch loads is its line or nothing, and is its line where
    both mistakes are of kinds it sees."""
    overrides, early_only = mistakes
    full = check_overrides(rest + overrides)   # (torch is loaded in this process: the full check alone)
    with before_torch():
        early = refusal_before_torch(rest + overrides)
    assert full is not None
    assert early is None or early == full, (early, full)
    if early_only and len(overrides) > 1:
        assert early is not None


def test_a_bad_engine_name_is_refused_before_torch_loads(tmp_path):
    """The reported case through pazo-train's own start in a fresh process: exit 2 with the full
    check's line (a close match named), and torch not imported."""
    code = ("import json, sys\n"
            "import pazo.train\n"
            "sys.argv = ['pazo-train', 'engine.name=vectorized']\n"
            "try:\n"
            "    pazo.train.cli()\n"
            "except SystemExit as stop:\n"
            "    print(json.dumps([stop.code, 'torch' in sys.modules]))\n")
    out = fresh_python(code, tmp_path)
    assert json.loads(out.stdout.splitlines()[-1]) == [2, False]
    line = "unknown engine 'vectorized'; did you mean 'vectorised'? (choices: auto, inplace, vectorised)"
    assert out.stderr.strip().splitlines()[-1] == f"pazo: error: {line}"
    assert check_overrides(["engine.name=vectorized"]) == line
