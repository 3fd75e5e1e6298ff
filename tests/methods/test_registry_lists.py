"""Every list of methods is derived from the registry (a method's facts say what it is): a method
registered later (a plugin's, or a new in-tree one) appears in the engines benchmark's methods, the
device-step tests' cases and the figures' robustness heat maps, without a list kept by hand."""
import dataclasses
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from pazo.bench import engines
from pazo.methods import METHODS, method_info, method_names
from pazo.report.figures import heat_maps
from test_device_steps import TUNED, device_step_cases

NAMES = st.from_regex(r"[a-z][a-z0-9_]{2,12}", fullmatch=True).filter(lambda n: n not in METHODS)
KEYS = st.sampled_from(["public_batch_size", "alpha", "k", "q", "perturbation", "smoothing"])


def register(patch, name, heat_map):
    """Register `name` as a plugin would (DPZero's facts under another name, a heat map's keys)."""
    info = dataclasses.replace(method_info("dpzero"), name=name, heat_map=heat_map)
    patch.setitem(METHODS._items, name, info)
    patch.setitem(METHODS._origins, name, "plug")


def engines_methods(monkeypatch, capsys) -> str:
    """The methods `pazo-bench engines` offers, as its one line for an unknown setting says them."""
    monkeypatch.setattr(sys, "argv", ["pazo-bench engines", "--settings", "no_such_setting"])
    with pytest.raises(SystemExit) as stop:
        engines.main()
    return str(stop.value.code).split("methods: ", 1)[1]


@settings(deadline=None, max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES, heat_map=st.tuples(KEYS, KEYS))
@example(name="zo_new", heat_map=("public_batch_size", "q"))
def test_a_registered_method_appears_in_every_derived_list(name, heat_map, monkeypatch, capsys):
    with monkeypatch.context() as patch:
        register(patch, name, heat_map)
        assert name in engines_methods(patch, capsys).split(", ")
        assert name in device_step_cases(TUNED, method_names("zeroth_order"))
        assert heat_maps()[name] == heat_map
    assert name not in heat_maps()


def test_the_derived_lists_hold_what_the_hand_lists_held():
    """The paper's three heat maps, in its order, and every zeroth-order method in the benchmark."""
    assert heat_maps() == {"pazo_m": ("public_batch_size", "alpha"), "pazo_p": ("public_batch_size", "k"),
                           "pazo_s": ("public_batch_size", "perturbation")}
    assert set(device_step_cases(TUNED, method_names("zeroth_order"))) >= set(method_names("zeroth_order"))
    assert {"mezo", "dpzero", "pazo_m", "pazo_p", "pazo_s"} <= set(method_names("zeroth_order"))
