"""A plugin's mistakes that pazo can see when the plugin loads: a method whose `step` (or any other
method of `Method` it overrides) cannot take the call pazo makes, and a name registered by two
plugins. Each is one `pazo: error: plugin ...` line at load, exit 2, before anything runs, naming
the plugin, the method and what is expected (or both registrations)."""
from __future__ import annotations

import keyword
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from plugin_package import write_package

from pazo import plugins
from pazo.methods.base import Method
from pazo.methods.registry import METHODS, check_overrides

#: a plugin module registering a zeroth-order method `{name}` whose step is `def step({params})`
PLUGIN = """
from pazo.methods.base import MethodConfig
from pazo.methods.registry import register_method
from pazo.methods.two_point import TwoPointMethod

@register_method("{name}", config=MethodConfig, label="{name}", family="zeroth_order", reference="a test")
class Mine(TwoPointMethod):
    def step({params}):
        return {{"loss": 0.0}}
"""


def forget_plugins(patch: pytest.MonkeyPatch) -> None:
    """A process that has loaded no plugin yet, whose method registry `patch` puts back afterwards."""
    patch.setattr(plugins, "LOADED", {})
    patch.setattr(plugins, "_DONE", False)
    patch.setattr(METHODS, "_items", dict(METHODS._items))
    patch.setattr(METHODS, "_origins", dict(METHODS._origins))


@pytest.fixture
def fresh(monkeypatch):
    forget_plugins(monkeypatch)


def load_failure(tmp_path, monkeypatch, capsys, modules: dict[str, str], entry_points: dict[str, str]) -> str:
    write_package(tmp_path, modules, entry_points)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        plugins.load_plugins()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pazo: error: plugin "), err
    return err.strip()


# --- a step pazo cannot call -----------------------------------------------------------------------

NAMES = st.from_regex(r"[a-z]{1,5}", fullmatch=True).filter(lambda n: not keyword.iskeyword(n) and n != "self")
PARAMETER = st.tuples(NAMES, st.sampled_from(["plain", "default", "*args", "**kwargs", "keyword-only"]))


def signature_source(parameters: list[tuple[str, str]]) -> str:
    """`self` and the parameters, in an order Python accepts (plain, with defaults, *args, keyword-only,
    **kwargs), each name once."""
    seen, by_kind = {"self"}, {kind: [] for kind in ("plain", "default", "*args", "keyword-only", "**kwargs")}
    for name, kind in parameters:
        if name not in seen:
            seen.add(name)
            by_kind[kind].append(name)
    out = ["self", *by_kind["plain"], *(f"{n}=None" for n in by_kind["default"])]
    out += [f"*{by_kind['*args'][0]}"] if by_kind["*args"] else (["*"] if by_kind["keyword-only"] else [])
    out += [f"{n}" for n in by_kind["keyword-only"]] + [f"**{n}" for n in by_kind["**kwargs"][:1]]
    return ", ".join(out)


def called_as_pazo_calls(params: str) -> bool:
    """The oracle: does a step of this signature take `method.step(x, y, step)`? Called, not inspected."""
    namespace: dict = {}
    exec(f"def step({params}):\n    return {{}}", namespace)
    try:
        namespace["step"](object(), "x", "y", 1)
    except TypeError:
        return False
    return True


@settings(max_examples=60)
@given(parameters=st.lists(PARAMETER, max_size=5))
@example(parameters=[("x", "plain"), ("y", "plain")])                        # the reported case: step(self, x, y)
@example(parameters=[("x", "plain"), ("y", "plain"), ("step", "plain")])     # pazo's own
def test_a_step_is_refused_at_registration_exactly_when_pazo_cannot_call_it(parameters):
    params = signature_source(parameters)
    namespace: dict = {"Method": Method}
    exec(f"class Mine(Method):\n    def step({params}):\n        return {{}}", namespace)
    if called_as_pazo_calls(params):
        check_overrides("mine", namespace["Mine"])
    else:
        with pytest.raises(TypeError, match=r"method 'mine': .*Mine\.step\(.*\) cannot take pazo's call; "
                                            r"it must accept step\(self, x, y, step\)"):
            check_overrides("mine", namespace["Mine"])


def test_a_plugin_whose_step_takes_two_arguments_is_one_line_at_load(tmp_path, monkeypatch, capsys, fresh):
    err = load_failure(tmp_path, monkeypatch, capsys, {"plug_step": PLUGIN.format(name="twoargs", params="self, x, y")},
                       {"mine": "plug_step"})
    assert err == ("pazo: error: plugin plug_step (from entry point mine): TypeError: method 'twoargs': "
                   "plug_step.Mine.step(self, x, y) cannot take pazo's call; it must accept step(self, x, y, step)")
    assert "twoargs" not in METHODS


# --- a name registered twice ----------------------------------------------------------------------

@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.from_regex(r"plug_a[a-z]{0,4}", fullmatch=True), second=st.from_regex(r"plug_b[a-z]{0,4}",
                                                                                         fullmatch=True))
@example(first="plug_a", second="plug_b")
def test_a_name_registered_by_two_plugins_names_both(first, second, tmp_path_factory, capsys):
    with pytest.MonkeyPatch.context() as patch:
        forget_plugins(patch)
        folder = tmp_path_factory.mktemp("twice")
        source = PLUGIN.format(name=f"twin_{first}", params="self, x, y, step")
        try:
            err = load_failure(folder, patch, capsys, {first: source, second: source},
                               {"ep_one": first, "ep_two": second})
        finally:   # (the next example writes modules of the same names elsewhere)
            for module in (first, second):
                sys.modules.pop(module, None)
    assert err == (f"pazo: error: plugin {second} (from entry point ep_two): DuplicateNameError: method "
                   f"'twin_{first}' is registered twice: first by module {first}, again by module {second} "
                   f"(the first is plugin {first} (from entry point ep_one): rename one of them)")


def test_a_plugin_that_takes_a_name_of_pazo_says_so(tmp_path, monkeypatch, capsys, fresh):
    err = load_failure(tmp_path, monkeypatch, capsys, {"plug_own": PLUGIN.format(name="dpzero",
                                                                                 params="self, x, y, step")},
                       {"own": "plug_own"})
    assert "method 'dpzero' is registered twice: first by module pazo.methods." in err
    assert err.endswith("again by module plug_own (the first is pazo's own: choose another name)")

