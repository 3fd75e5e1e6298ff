"""A step's statistics (`pazo.methods.base.host_stats`): each is one real number, read as a Python
float; a method (a plugin's) whose step returns anything else is one UserCodeError naming the
method, the statistic and the shape expected, in the framework's loop and the library's alike."""
from __future__ import annotations

import dataclasses
import json
import math
import numbers

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo.errors import UserCodeError
from pazo.methods import METHODS, method_info
from pazo.methods.base import host_stats
from pazo.methods.zeroth_order import DPZero
from pazo.models.functional import cross_entropy_per_example
from pazo.private import private_zo
from pazo.train import run

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool,
          torch.complex64]
shapes = st.lists(st.integers(0, 3), max_size=3).map(tuple)


@st.composite
def statistics(draw):
    """A value a step might return as a statistic: a tensor of any small shape and dtype, or a
    Python / numpy value."""
    if draw(st.booleans()):
        shape, dtype = draw(shapes), draw(st.sampled_from(DTYPES))
        return (torch.rand(shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 99)))) * 4).to(dtype)
    return draw(st.one_of(st.none(), st.floats(), st.integers(-10**6, 10**6), st.booleans(), st.text(max_size=3),
                          st.lists(st.floats(), max_size=3), st.floats(-9, 9).map(np.float32),
                          st.integers(0, 3).map(np.ones)))


def one_real_number(value) -> bool:
    """The rule, said apart from the code under test."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1 and not value.is_complex()
    return value is None or isinstance(value, numbers.Real)


def same_number(a, b) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@settings(max_examples=80, deadline=None)
@given(key=st.from_regex(r"[a-z_]{1,10}", fullmatch=True).filter(lambda k: k != "loss"), value=statistics(),
       method=st.from_regex(r"plug_[a-z]{1,6}", fullmatch=True))
@example(key="sharpness", value=torch.ones(3), method="plug_stat")   # the reported case: shape (3,)
def test_a_statistic_is_one_real_number_or_one_error_naming_the_method_and_the_statistic(key, value, method):
    stats = {"loss": torch.tensor(0.25, dtype=torch.float64), key: value}
    if one_real_number(value):
        out = host_stats(stats, method)
        assert out["loss"] == 0.25
        if isinstance(value, torch.Tensor):
            assert same_number(out[key], value.double().item())
        elif value is not None:
            assert isinstance(out[key], (int, float)) and same_number(out[key], float(value))
        json.dumps(out)   # plain numbers: a metrics row takes them
        return
    with pytest.raises(UserCodeError) as err:
        host_stats(stats, method)
    message = str(err.value)
    assert f"the step of method {method!r} returned statistic {key!r}" in message and "\n" not in message
    assert "one real number" in message and "shape ()" in message
    if isinstance(value, torch.Tensor):
        assert f"{value.dtype} tensor of shape {tuple(value.shape)}" in message


class ExtraStatistic(DPZero):
    """A plugin's method: DPZero's step, with a statistic of its own (`extra`, set by the test)."""

    extra = None

    def step(self, x, y, t):
        return {**super().step(x, y, t), "sharpness": type(self).extra}


@pytest.fixture
def plugged(monkeypatch):
    """`plug_stat` registered as a plugin would register it (dpzero's facts, its own class)."""
    info = dataclasses.replace(method_info("dpzero"), name="plug_stat", cls=ExtraStatistic)
    monkeypatch.setitem(METHODS._items, "plug_stat", info)
    monkeypatch.setitem(METHODS._origins, "plug_stat", "plug")
    monkeypatch.setattr(ExtraStatistic, "extra", None)
    return ExtraStatistic


def tiny_engine():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    torch.manual_seed(0)
    return private_zo(torch.nn.Linear(4, 3), cross_entropy_per_example, (x, y), method="plug_stat", epsilon=None,
                      steps=2, batch_size=8, seed=0, lr=0.1, clip=1.0, verbose=False)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes)
@example(shape=(3,))
def test_a_plugins_statistic_of_another_shape_is_one_error_in_the_library(plugged, shape):
    plugged.extra = torch.full(shape, 0.5)
    engine = tiny_engine()
    batch = next(engine.batches())
    if math.prod(shape) == 1:
        assert engine.step(batch)["sharpness"] == 0.5
        return
    with pytest.raises(UserCodeError, match=rf"method 'plug_stat'.*'sharpness'.*shape {re_shape(shape)}"):
        engine.step(batch)


def re_shape(shape) -> str:
    return str(tuple(shape)).replace("(", r"\(").replace(")", r"\)")


def test_a_plugins_statistic_of_shape_3_is_one_error_in_the_framework_loop(plugged, hydra_cfg, tmp_path):
    plugged.extra = torch.ones(3)
    cfg = hydra_cfg("method=dpzero", "privacy=none", "train.steps=1")   # (no calibration: the loop is the point)
    cfg.method.name = "plug_stat"
    with pytest.raises(UserCodeError, match=r"method 'plug_stat'.*'sharpness'.*shape \(3,\)") as err:
        run(cfg, tmp_path)
    assert "\n" not in str(err.value)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "crashed at step 1: UserCodeError" in summary["failure"]
