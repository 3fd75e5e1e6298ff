"""The library entry's faults (`pazo.private`, `pazo.private.checks`): what a user's model, loss or
data would break is one pazo error naming the library's own argument before any step; an error a
step still meets inside the user's model or loss names it and the step; every message names the
library's arguments, never the framework's config keys; a drawn batch changed in place is refused."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_library import SIGMA_CACHE, Tiny, tiny_data, tiny_engine
from torch import nn

from pazo.errors import ConfigError, UserCodeError
from pazo.methods import METHODS, method_info
from pazo.methods.zeroth_order import DPZero
from pazo.models.functional import cross_entropy_per_example
from pazo.privacy import plan as plan_module
from pazo.privacy.accountants import BudgetError
from pazo.private import private_zo

#: an engine with no accountant to build (the faults are before it, or in the step)
QUICK = {"method": "dpzero", "epsilon": None, "steps": 3, "batch_size": 16, "seed": 0, "verbose": False,
         "lr": 0.1, "clip": 1.0}
FEW = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def params_of(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def unchanged(model, before) -> bool:
    return all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ----------------------------------------------------------------------- before any step

@FEW
@given(classes=st.integers(2, 5), position=st.integers(0, 59), offset=st.integers(0, 4), below=st.booleans(),
       which=st.sampled_from(["train_data", "public"]))
@example(classes=3, position=59, offset=4, below=False, which="train_data")   # the reported case: label 7 of 3
def test_a_label_outside_the_models_outputs_is_refused_before_any_step(classes, position, offset, below, which):
    x, y = tiny_data(0, classes=classes)
    public = tiny_data(1, n=60, classes=classes)
    bad = -1 - offset if below else classes + offset
    target = y if which == "train_data" else public[1]
    target[position] = bad
    model = Tiny(0, classes=classes)
    before = params_of(model)
    with pytest.raises(ConfigError) as err:
        private_zo(model, cross_entropy_per_example, (x, y), public=public, **QUICK)
    assert str(err.value) == (f"{which}: label {bad} (example {position}) is outside the model's {classes} outputs: "
                              f"labels must be class indices in [0, {classes})")
    assert unchanged(model, before)


def as_list(outputs, targets):
    return list(cross_entropy_per_example(outputs, targets))


@pytest.mark.parametrize("loss, expected", [
    (as_list, "got a list"),   # the reported case (an AttributeError in the per-example check before)
    (lambda o, t: tuple(cross_entropy_per_example(o, t)), "got a tuple"),
    (lambda o, t: cross_entropy_per_example(o, t).sum().item(), "got a float"),
    (lambda o, t: cross_entropy_per_example(o, t).detach().numpy(), "got a ndarray"),
    (lambda o, t: t, "floating-point losses, got torch.int64"),
    (lambda o, t: cross_entropy_per_example(o, t).mean(), "one loss per example"),
])
def test_a_loss_that_gives_no_tensor_of_per_example_losses_is_refused_naming_loss_fn(loss, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as err:
        private_zo(Tiny(0), loss, tiny_data(0), **QUICK)
    assert str(err.value).startswith("loss_fn must return") and "\n" not in str(err.value)


FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@FEW
@given(model_dtype=st.sampled_from(FLOATS), data_dtype=st.sampled_from(FLOATS))
@example(model_dtype=torch.float16, data_dtype=torch.float32)   # the reported case
def test_data_of_another_dtype_than_the_model_is_one_error_naming_model_and_data(model_dtype, data_dtype):
    x, y = tiny_data(0)
    model = Tiny(0).to(model_dtype)
    if model_dtype == data_dtype:
        private_zo(model, cross_entropy_per_example, (x.to(data_dtype), y), **QUICK)
        return
    with pytest.raises(UserCodeError) as err:
        private_zo(model, cross_entropy_per_example, (x.to(data_dtype), y), **QUICK)
    message = str(err.value)
    assert message.startswith("model raised RuntimeError on 2 examples of train_data, before any step: ")
    assert f"train_data's inputs are {data_dtype} but the model's parameters {model_dtype}" in message
    assert "\n" not in message and isinstance(err.value.__cause__, RuntimeError)


class Raising(nn.Module):
    """Tiny's model, whose forward raises on a batch of more than `limit` examples."""

    def __init__(self, limit: int):
        super().__init__()
        self.inner, self.limit = Tiny(0), limit

    def forward(self, x):
        if len(x) > self.limit:
            raise ValueError(f"{len(x)} examples, more than {self.limit}")
        return self.inner(x)


def raising_loss(limit: int):
    def loss_fn(outputs, targets):
        if len(targets) > limit:
            raise KeyError("too many targets")
        return cross_entropy_per_example(outputs, targets)
    return loss_fn


@pytest.mark.parametrize("engine", ["inplace", "vectorised"])
@pytest.mark.parametrize("culprit", ["model", "loss_fn"])
@pytest.mark.parametrize("limit", [0, 2])   # 0: at the check before any step; 2: at the first step
def test_an_error_inside_the_users_model_or_loss_names_it(culprit, limit, engine):
    model = Raising(limit) if culprit == "model" else Tiny(0)
    loss = raising_loss(limit) if culprit == "loss_fn" else cross_entropy_per_example
    kind = "ValueError" if culprit == "model" else "KeyError"
    if limit == 0:
        with pytest.raises(UserCodeError, match=f"^{culprit} raised {kind} on 2 examples of train_data, before any "
                                                "step: "):
            private_zo(model, loss, tiny_data(0), engine=engine, **QUICK)
        return
    optimiser = private_zo(model, loss, tiny_data(0), engine=engine, **QUICK)
    with pytest.raises(UserCodeError, match=f"^step 1: {culprit} raised {kind} on the step's Poisson batch of "
                                            "train_data: ") as err:
        optimiser.step(next(optimiser.batches()))
    assert "\n" not in str(err.value) and type(err.value.__cause__).__name__ == kind
    assert optimiser.steps_done == 1   # the failed step counts: its batch was drawn and its outcome told


# ------------------------------------------------------------- the library's own words

#: framework config keys (`train.batch_size`, `privacy.sigma=null`, `privacy=none`) a library user never typed
FRAMEWORK_WORDS = re.compile(r"\b(?:train|privacy|engine|method|dataset|model|logger|warm_start)\.[a-z_]|"
                             r"=(?:null|true|false)\b|\bprivacy=")
floats_at_most_0 = st.floats(max_value=0, allow_nan=False)
BAD_ARGUMENTS = st.one_of(
    st.integers(61, 10**4).map(lambda b: {"batch_size": b}),
    st.integers(-3, 0).map(lambda b: {"batch_size": b}),
    st.sampled_from([0, -2, 2.5, "3"]).map(lambda t: {"steps": t}),
    floats_at_most_0.map(lambda v: {"lr": v}),
    floats_at_most_0.map(lambda v: {"clip": v}),
    st.sampled_from(["lrr", "clp", "qq", "radious", "momentum", "name2"]).map(lambda k: {k: 1}),
    st.sampled_from(["x", "one", "?"]).map(lambda v: {"q": v}),
    st.integers(-3, 0).map(lambda q: {"q": q}),
    st.integers(10**8, 10**9).map(lambda q: {"q": q}),   # more memory than any machine: lower q or batch_size
    st.sampled_from(["x", "-1", "0"]).map(lambda r: {"method": "pazo_m", "public": tiny_data(1, n=40), "radius": r}),
    st.just({"method": "pazo_m"}),
    st.integers(41, 400).map(lambda b: {"method": "pazo_m", "public": tiny_data(1, n=40), "public_batch_size": b}),
    st.just({"method": "mezo", "epsilon": 1.0}),
    st.floats(-5, 0).map(lambda e: {"epsilon": e}),
    st.floats(51, 1e6).map(lambda e: {"epsilon": e}),
    st.floats(1, 10).map(lambda d: {"epsilon": 1.0, "delta": d}),
    st.floats(1e-4, 1e-2).map(lambda s: {"epsilon": 1.0, "sigma": s}),   # far too small: a step spends more
    st.floats(0.1, 5).map(lambda s: {"sigma": s}),                         # no target to meet
    st.sampled_from(["x", "replace"]).map(lambda a: {"epsilon": 1.0, "adjacency": a}),
    floats_at_most_0.map(lambda e: {"epsilon": 1.0, "eps_error": e}),
    st.sampled_from([0, -1, "a"]).map(lambda c: {"chunk_size": c}),
    st.sampled_from(["yes", 1, None]).map(lambda q: {"query_dropout": q}),
    st.sampled_from(["yes", 1, None]).map(lambda s: {"secure_mode": s}),
    st.sampled_from(["gpu", "cuda0", "tpu"]).map(lambda d: {"device": d}),
    st.sampled_from(["vmap", "fast"]).map(lambda e: {"engine": e}),
    st.sampled_from([-1, 2**63, "7", True]).map(lambda s: {"seed": s}),
    st.sampled_from(["dpsgd", "no_such"]).map(lambda m: {"method": m}),
    st.just({"fingerprint": "not hex"}),
    st.just({"cache_dir": 3}),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bad=BAD_ARGUMENTS)
@example(bad={"batch_size": 100})   # the reported case: train.batch_size=100 exceeds ...
def test_every_message_names_the_librarys_arguments_not_the_frameworks_keys(bad):
    options = {**QUICK, "cache_dir": SIGMA_CACHE, **bad}
    with pytest.raises((ConfigError, BudgetError)) as err:
        private_zo(Tiny(0), cross_entropy_per_example, tiny_data(0), **options)
    message = str(err.value)
    assert "\n" not in message
    assert not FRAMEWORK_WORDS.search(message), message



@FEW
@given(q=st.integers(10**8, 10**15), method=st.sampled_from(["dpzero", "mezo", "dp_aggzo"]))
def test_a_query_count_too_large_to_fit_is_refused_in_bounded_time_and_memory(q, method):
    """The refusal comes from the step's memory estimate, before anything grows with q (a list of
    2q query points once filled gigabytes here and killed the test worker)."""
    import time
    import tracemalloc
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=f"^q={q} with batch_size=16 needs about"):
            private_zo(Tiny(0), cross_entropy_per_example, tiny_data(0), **{**QUICK, "method": method, "q": q})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB held on the way to the refusal"
    assert time.monotonic() - started < 30

# ------------------------------------------------------------------ a batch changed in place

def _mutated(batch, which: int, position: int, how: str, value: float):
    """Change one entry of the drawn batch's inputs (0) or labels (1) in place, as a user might."""
    tensor = batch[which]
    flat_index = position % tensor.numel()
    new = torch.tensor(value).to(tensor.dtype)
    if how == "index":
        tensor.view(-1)[flat_index] = new
    elif how == "data":   # through .data: no version counter sees it
        tensor.data.view(-1)[flat_index] = new
    elif how == "numpy":  # through a numpy view of the same memory
        tensor.numpy().reshape(-1)[flat_index] = new.numpy()
    else:
        tensor.mul_(new)


@FEW
@given(seed=st.integers(0, 2**20), which=st.integers(0, 1), position=st.integers(0, 10**4),
       how=st.sampled_from(["index", "data", "numpy", "mul_"]), value=st.sampled_from([0.0, 1.0, 2.0, -3.0]))
@example(seed=0, which=0, position=0, how="mul_", value=0.0)   # the reported case: the inputs zeroed in place
def test_a_batch_changed_after_it_was_drawn_is_refused_and_an_unchanged_one_steps(seed, which, position, how, value):
    optimiser = tiny_engine(seed=seed, epsilon=None)
    batch = next(optimiser.batches())
    drawn = [t.clone() for t in batch]
    _mutated(batch, which, position, how, value)
    if all(torch.equal(a, b) for a, b in zip(drawn, batch)):   # the same content (e.g. a label set to itself)
        optimiser.step(batch)
        assert optimiser.steps_done == 1
        return
    before = params_of(optimiser.model.module)
    with pytest.raises(ConfigError, match="^step\\(\\): the batch batches\\(\\) gave was changed in place"):
        optimiser.step(batch)
    assert optimiser.steps_done == 0 and unchanged(optimiser.model.module, before)
    optimiser.step(next(optimiser.batches()))   # a fresh one steps
    assert optimiser.steps_done == 1


REPACKINGS = {"tuple": lambda x, y: (x, y), "list": lambda x, y: [x, y], "clones": lambda x, y: (x.clone(), y.clone()),
              "views": lambda x, y: (x.view_as(x), y[:])}


@FEW
@given(seed=st.integers(0, 2**20), how=st.sampled_from(sorted(REPACKINGS)))
@example(seed=0, how="tuple")   # the reported case: `for x, y in engine.batches(): engine.step((x, y))`
def test_the_drawn_batch_is_checked_by_content_so_repacked_or_copied_it_steps_as_drawn(seed, how):
    drawn, repacked = tiny_engine(seed=seed, epsilon=None), tiny_engine(seed=seed, epsilon=None)
    for batch, again in zip(drawn.batches(), repacked.batches()):
        drawn.step(batch)
        repacked.step(REPACKINGS[how](*again))
    assert repacked.steps_done == drawn.steps_done == drawn.plan.steps
    assert all(torch.equal(a, b) for a, b in zip(drawn.model.params, repacked.model.params))


def unpacked_and_changed(optimiser):
    """The reported case's other form: the drawn tensors unpacked, one changed in place, re-packed."""
    x, y = next(optimiser.batches())
    x.mul_(2.0)
    return x, y


def test_a_repacked_batch_changed_in_place_is_refused_as_changed():
    optimiser = tiny_engine(seed=0, epsilon=None)
    with pytest.raises(ConfigError, match="^step\\(\\): the batch batches\\(\\) gave was changed in place"):
        optimiser.step(unpacked_and_changed(optimiser))
    assert optimiser.steps_done == 0


BAD_VALUES = st.sampled_from([float("nan"), float("inf"), -float("inf")])


@FEW
@given(which=st.sampled_from(["train_data", "public"]), position=st.integers(0, 10**6), value=BAD_VALUES)
@example(which="train_data", position=17 * 5 + 3, value=float("nan"))   # the reported case: a NaN input
def test_a_non_finite_input_is_refused_before_any_step_naming_the_argument(which, position, value):
    x, y = tiny_data(0)
    public_x, public_y = tiny_data(1, n=40)
    target = x if which == "train_data" else public_x
    index = position % target.numel()
    target.view(-1)[index] = value
    model = Tiny(0)
    before = params_of(model)
    with pytest.raises(ConfigError) as err:
        private_zo(model, cross_entropy_per_example, (x, y), public=(public_x, public_y),
                   **{**QUICK, "method": "pazo_m", "epsilon": 2.0, "cache_dir": SIGMA_CACHE})
    example_index = index // target.shape[1]
    assert str(err.value).startswith(f"{which}: the inputs of example {example_index} hold {value}: inputs must be "
                                     "finite")
    assert "\n" not in str(err.value) and unchanged(model, before)


@FEW
@given(tensor=st.sampled_from(["layer.weight", "layer.bias", "scale"]), position=st.integers(0, 10**6),
       value=BAD_VALUES)
def test_a_non_finite_initial_parameter_or_buffer_is_refused_naming_it(tensor, position, value):
    model = Tiny(0)
    model.register_buffer("scale", torch.ones(5, dtype=torch.float64))
    values = model.state_dict(keep_vars=True)[tensor]
    index = position % values.numel()
    with torch.no_grad():
        values.view(-1)[index] = value
    kind = "buffer" if tensor == "scale" else "parameter"
    with pytest.raises(ConfigError, match=re.escape(f"model: {kind} {tensor!r} holds {value} at flat index {index}: "
                                                    "the initial parameters must be finite")):
        private_zo(model, cross_entropy_per_example, tiny_data(0), **QUICK)


class LateStatistic(DPZero):
    """A plugin's method: DPZero's step, with a statistic of its own that is `bad` from step `from_step`."""

    bad, from_step = None, 1

    def step(self, x, y, t):
        stats = super().step(x, y, t)   # (its update handed over, as every method's is, before it returns)
        return {**stats, "sharpness": type(self).bad if t >= type(self).from_step else 0.5}


@pytest.fixture
def late_plugin(monkeypatch):
    """`plug_late` registered as a plugin would register it (dpzero's facts, its own class); plans
    without their cross-check of every accountant (seconds of PLD each, not read here)."""
    monkeypatch.setattr(plan_module, "cross_check", lambda plan, steps, cache_dir=None: None)
    info = dataclasses.replace(method_info("dpzero"), name="plug_late", cls=LateStatistic)
    monkeypatch.setitem(METHODS._items, "plug_late", info)
    monkeypatch.setitem(METHODS._origins, "plug_late", "plug")
    return LateStatistic


#: queries on copies of the parameters (the in-place engine's perturbations, x + lam u - lam u, move them by a
#: rounding: a failed step there leaves them within rounding of where they were)
ENGINE = "vectorised"
BAD_STATISTICS = st.one_of(
    st.lists(st.integers(0, 3), max_size=3).filter(lambda shape: math.prod(shape) != 1)
    .map(lambda shape: torch.full(shape, 0.5)),
    st.just(torch.tensor(1 + 2j)), st.just([0.5]), st.just("0.5"))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(bad=BAD_STATISTICS, from_step=st.integers(1, 3), method=st.sampled_from(["epsilon", "none"]))
@example(bad=torch.ones(3), from_step=1, method="none")   # the reported case: shape (3,) at step 1
def test_a_plugins_bad_statistic_is_refused_before_its_steps_update_so_the_model_is_as_before(late_plugin, bad,
                                                                                               from_step, method):
    epsilon = 2.0 if method == "epsilon" else None
    late_plugin.bad, late_plugin.from_step = bad, 99
    reference = tiny_engine(method="plug_late", epsilon=epsilon, steps=3, engine=ENGINE)   # the same key and streams
    for _, batch in zip(range(from_step - 1), reference.batches()):
        reference.step(batch)
    late_plugin.from_step = from_step
    failing = tiny_engine(method="plug_late", epsilon=epsilon, steps=3, engine=ENGINE)
    batches = failing.batches()
    for _ in range(from_step - 1):
        failing.step(next(batches))
    with pytest.raises(UserCodeError, match="^the step of method 'plug_late' returned statistic 'sharpness' as "):
        failing.step(next(batches))
    assert all(torch.equal(a, b) for a, b in zip(failing.model.params, reference.model.params))
