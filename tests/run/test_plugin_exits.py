"""A plugin whose import calls sys.exit (issue #60, round three's catalogue: `PAZO_PLUGINS=m`
with `sys.exit(3)` in m ended every pazo command with exit 3 and not a word) is a failing plugin
like any other: one `pazo: error: plugin ...` line and exit 2."""
from __future__ import annotations

import itertools
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo import plugins

NUMBERS = itertools.count()
CODES = st.one_of(st.none(), st.integers(-300, 300), st.text(max_size=20))


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=CODES)
@example(code=3)   # the catalogue's case
def test_a_plugin_that_exits_at_import_is_one_line_exit_2(code, tmp_path, monkeypatch, capsys):
    name = f"plug_exit_{next(NUMBERS)}"   # (a module of its own each time: an import is cached)
    (tmp_path / f"{name}.py").write_text(f"import sys\nsys.exit({code!r})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(plugins.ENVIRONMENT, name)
    monkeypatch.setattr(plugins, "LOADED", {})   # (a process that has loaded no plugin yet)
    monkeypatch.setattr(plugins, "_DONE", False)
    with pytest.raises(SystemExit) as stop:
        plugins.load_plugins()
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err == f"pazo: error: plugin {name} (from PAZO_PLUGINS): its import called sys.exit({code!r})\n"
    assert name not in plugins.LOADED
    sys.modules.pop(name, None)
