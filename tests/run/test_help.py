"""`pazo-train --help` and `pazo-audit --help` (`pazo.help`): they point a user of an installed pazo
to what exists for them (commands, not a checkout's docs/ paths), and the command they name for the
config reference, `pazo-report configs [part ...]`, prints it, whole or by part."""
import re

import pytest
from hypothesis import given, settings, strategies as st

import pazo.bench
import pazo.report
from pazo.audit.command import EXIT_CODES
from pazo.help import audit_help, train_help
from pazo.report import config_reference as docs_configs


@pytest.mark.parametrize("text", [train_help(), audit_help(EXIT_CODES)], ids=["pazo-train", "pazo-audit"])
def test_the_help_names_no_path_of_a_checkout_and_only_commands_that_exist(text):
    """(was: "every key with its default and meaning: docs/reference/configs.md", a path that exists
    only in a clone of the repository)"""
    assert not re.search(r"\bdocs/|\b\w+\.md\b", text), re.findall(r"\S*docs/\S*|\S+\.md\b", text)
    named = re.findall(r"\bpazo-(bench|report) ([a-z][\w-]*)", text)
    registered = {"bench": pazo.bench.COMMANDS, "report": pazo.report.COMMANDS}
    assert all(sub in registered[prog] for prog, sub in named), named
    assert ("report", "configs") in named


@settings(max_examples=8, deadline=None)
@given(parts=st.lists(st.sampled_from([*docs_configs.PARTS, *docs_configs.GROUPS]), min_size=1, max_size=3,
                      unique=True))
def test_pazo_report_configs_prints_each_part_asked_for(parts):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert docs_configs.main(parts) == 0
    text = out.getvalue()
    page = docs_configs.configs_page()
    for part in parts:
        heading = {"config": "## The training run", "audit": "## The privacy audit", "sweeps": "## Sweeps"}.get(
            part, f"### {part}\n")
        assert heading in text and heading in page
    assert set(text.splitlines()) <= set(page.splitlines())   # nothing the reference page does not say


def test_pazo_report_configs_whole_is_the_reference_page_and_a_wrong_part_is_one_line(capsys):
    assert docs_configs.main([]) == 0
    assert capsys.readouterr().out == docs_configs.configs_page()
    with pytest.raises(SystemExit) as stop:
        docs_configs.main(["metod"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1
    assert err.startswith("pazo: error: unknown part 'metod'; did you mean 'method'?")


def test_pazo_train_help_imports_no_torch_and_names_every_registered_option(tmp_path):
    """`pazo-train --help` (was: 5-9 s on a loaded machine, torch imported for the method list): run
    as `python -m pazo.train --help` in a process of its own, it leaves torch unimported and still
    names every method, data set and model the registries hold (each has its yaml)."""
    import json

    from fresh_python import fresh_python

    from pazo.catalog import DATASETS, MODELS
    from pazo.methods.registry import method_names
    import pazo.data  # noqa: F401  (registers pazo's own)
    import pazo.models  # noqa: F401

    code = ("import json, runpy, sys\n"
            "sys.argv = ['pazo-train', '--help']\n"
            "runpy.run_module('pazo.train', run_name='__main__', alter_sys=True)\n"
            "print(json.dumps(sorted(m for m in ('torch', 'numpy') if m in sys.modules)))\n")
    out = fresh_python(code, tmp_path)
    *help_lines, imported = out.stdout.splitlines()
    assert "torch" not in json.loads(imported), imported
    named = {line.split()[0] for line in help_lines if line.startswith("  ") and not line.startswith("   ")}
    assert {*method_names(), *DATASETS.names(), *MODELS.names()} <= named


def test_an_option_a_plugin_registers_without_a_yaml_is_in_the_help(monkeypatch):
    from pazo import help as help_page
    from pazo import plugins
    from pazo.catalog import DATASETS

    import pazo.data  # noqa: F401
    monkeypatch.setattr(plugins, "LOADED", {"my_plugin": "PAZO_PLUGINS"})
    monkeypatch.setattr(DATASETS, "names", lambda: ["digits", "my_data"])
    monkeypatch.setattr(DATASETS, "origin", lambda name: "my_plugin")
    assert "  my_data        registered by my_plugin" in help_page.group_lines("dataset")
    monkeypatch.setattr(plugins, "LOADED", {})
    assert not any("my_data" in line for line in help_page.group_lines("dataset"))
