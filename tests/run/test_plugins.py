"""The plugin loader (`pazo.plugins`): modules named by the `pazo.plugins` entry points of an
installed package and by PAZO_PLUGINS, imported once per process, in one order; a plugin that fails
is one `pazo: error: plugin ...` line and exit 2 from every entry point."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from plugin_package import write_package

from pazo import plugins
from conftest import ROOT

names = st.lists(st.from_regex(r"plug_[a-z]{1,6}", fullmatch=True), max_size=5, unique=True)


@pytest.fixture
def fresh(monkeypatch):
    """A process that has loaded no plugin yet."""
    monkeypatch.setattr(plugins, "LOADED", {})
    monkeypatch.setattr(plugins, "_DONE", False)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(by_entry=names, by_env=names)
def test_every_named_module_once_entry_points_first(tmp_path_factory, monkeypatch, by_entry, by_env):
    root = tmp_path_factory.mktemp("site")
    write_package(root, {}, {f"ep_{m}": m for m in by_entry})
    monkeypatch.syspath_prepend(str(root))
    listed = plugins.plugin_modules({plugins.ENVIRONMENT: " , ".join(by_env) + ","})
    modules = [m for m, _, _ in listed]
    assert modules == list(dict.fromkeys(sorted(by_entry, key=lambda m: f"ep_{m}") + by_env))
    for module, where, _ in listed:
        assert where == (f"entry point ep_{module}" if module in by_entry else plugins.ENVIRONMENT)


def test_loaded_once_and_registers(tmp_path, monkeypatch, fresh):
    counter = "import builtins\nbuiltins.PAZO_TEST_IMPORTS = getattr(builtins, 'PAZO_TEST_IMPORTS', 0) + 1\n"
    write_package(tmp_path, {"plug_count": counter}, {"count": "plug_count"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.ENVIRONMENT, "plug_count")   # named twice: imported once
    import builtins
    monkeypatch.setattr(builtins, "PAZO_TEST_IMPORTS", 0, raising=False)
    plugins.load_plugins()
    plugins.load_plugins()
    assert builtins.PAZO_TEST_IMPORTS == 1
    assert plugins.LOADED == {"plug_count": "entry point count"}
    monkeypatch.delitem(sys.modules, "plug_count")


@pytest.mark.parametrize("source, error", [("raise RuntimeError('no GPU here')", "RuntimeError: no GPU here"),
                                           ("import not_a_module_anywhere", "ModuleNotFoundError")])
def test_failing_plugin_is_one_line_exit_2(tmp_path, monkeypatch, capsys, fresh, source, error):
    write_package(tmp_path, {"plug_bad": source}, {"bad": "plug_bad"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        plugins.load_plugins()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("pazo: error: plugin plug_bad (from entry point bad): ") and error in err
    assert err.count("\n") == 1 and not plugins._DONE


_FRESH_NAMES = (f"plug_exit{i}" for i in itertools.count())   # (a module imported once per name)
#: a plugin module that writes `said` to stderr, then exits with `code` (`subclass`: its own SystemExit class)
EXITING = """import sys
class Stop(SystemExit):
    pass
for line in {said!r}:
    print(line, file=sys.stderr)
raise {exit}({code!r})
"""


def load_exiting(source: str, root, capsys) -> tuple[str, str]:
    """(module, what stderr said) of loading, as the entry point `stop`, a plugin of `source` whose
    import exits: pazo's load must exit 2."""
    module = next(_FRESH_NAMES)
    write_package(root, {module: source}, {"stop": module})
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch, pytest.raises(SystemExit) as stop:
        patch.syspath_prepend(str(root))
        patch.setattr(plugins, "LOADED", {})
        patch.setattr(plugins, "_DONE", False)
        plugins.load_plugins()
    assert stop.value.code == 2
    return module, capsys.readouterr().err


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.none() | st.integers(0, 255) | st.text("abc ", min_size=1, max_size=6),
       said=st.lists(st.text("xyz: ", max_size=12), max_size=3), subclass=st.booleans())
@example(code=3, said=[], subclass=True)        # an exit of the plugin's own class: the command ended 3, no word
@example(code=1, said=["no cuda"], subclass=False)
def test_a_plugin_whose_import_exits_is_one_line_that_quotes_its_last_words(tmp_path_factory, capsys, code, said,
                                                                           subclass):
    source = EXITING.format(said=said, exit="Stop" if subclass else "SystemExit", code=code)
    module, err = load_exiting(source, tmp_path_factory.mktemp("site"), capsys)
    last = next((line.strip() for line in reversed(said) if line.strip()), "")
    assert err == (f"pazo: error: plugin {module} (from entry point stop): its import called sys.exit({code!r})"
                   + (f" after writing {last!r}" if last else "") + "\n")


def test_a_plugin_whose_argparse_refuses_the_command_line_is_one_line(tmp_path, capsys):
    source = "import argparse\nargparse.ArgumentParser(prog='plug').parse_args(['--nope'])\n"
    module, err = load_exiting(source, tmp_path, capsys)
    assert err == (f"pazo: error: plugin {module} (from entry point stop): its import called sys.exit(2) after "
                   "writing 'plug: error: unrecognized arguments: --nope'\n")


def test_what_a_plugin_that_loads_writes_to_stderr_is_shown_and_its_logging_goes_on(tmp_path, monkeypatch, capsys,
                                                                                    fresh):
    source = ("import logging, sys\nprint('loading', file=sys.stderr)\nLOG = logging.getLogger('plug_talks')\n"
              "LOG.addHandler(logging.StreamHandler())\nLOG.propagate = False\n")
    write_package(tmp_path, {"plug_talks": source}, {"talks": "plug_talks"})
    monkeypatch.syspath_prepend(str(tmp_path))
    capsys.readouterr()
    plugins.load_plugins()
    sys.modules["plug_talks"].LOG.warning("later")
    assert capsys.readouterr().err == "loading\nlater\n"
    monkeypatch.delitem(sys.modules, "plug_talks")


def test_a_ctrl_c_while_a_plugin_imports_is_pazos_exit_not_the_plugins(tmp_path, monkeypatch, capsys, fresh):
    source = ("from pazo.commands.interrupts import INTERRUPTED, StoppedBeforeWork\n"
              "raise StoppedBeforeWork(INTERRUPTED)\n")
    write_package(tmp_path, {"plug_stopped": source}, {"stopped": "plug_stopped"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        plugins.load_plugins()
    assert stop.value.code == 130 and not capsys.readouterr().err


_SLOW = pytest.mark.slow   # (a subprocess that imports pazo each: about 4 s)


@pytest.mark.parametrize("command", [["pazo.train", "train.steps=1"],
                                     *(pytest.param(c, marks=_SLOW) for c in (
                                         ["pazo.audit"], ["pazo.sweep", "x"], ["pazo.report", "tables"],
                                         ["pazo.bench", "methods"], ["pazo.report.tables"], ["pazo.bench.defaults"]))])
def test_every_entry_point_loads_plugins_first(tmp_path, command):
    """Each command (its `python -m` form) imports the plugin named in PAZO_PLUGINS before it reads
    its command line: a broken one stops it with the one line, exit 2."""
    (tmp_path / "plug_broken.py").write_text("raise ValueError('bad\\nplugin')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           plugins.ENVIRONMENT: "plug_broken"}
    done = subprocess.run([sys.executable, "-m", *command], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr == "pazo: error: plugin plug_broken (from PAZO_PLUGINS): ValueError: bad plugin\n"


def test_registrations_record_their_module_and_the_docs_show_pazos_own(monkeypatch):
    """Every registration of pazo's is `builtin`; one from another module is not, and the generated
    reference (the algorithm modules) leaves it out."""
    import dataclasses

    from pazo.catalog import DATASETS, MODELS
    from pazo.methods import METHODS
    from pazo.registry import Registry
    from tools.docs.pages import ALGORITHM_MODULES, algorithm_modules

    for registry in (METHODS, DATASETS, MODELS):
        assert all(registry.builtin(n) and registry.origin(n).startswith("pazo.") for n in registry.names())
    other = Registry("thing")
    other.register("mine", origin="my_pazo_plugin")(object())
    other.register("pazos", origin="pazo.methods.x")(object())
    assert [other.builtin(n) for n in ("mine", "pazos")] == [False, True]

    plugin = dataclasses.replace(METHODS.get("dpzero"), name="plugged", cls=type("Plugged", (), {"__module__": "plug"}))
    monkeypatch.setitem(METHODS._items, "plugged", plugin)
    monkeypatch.setitem(METHODS._origins, "plugged", "plug")
    assert algorithm_modules() == ALGORITHM_MODULES   # pazo's own method modules, and no plugin's
