"""The generated pages (docs/reference/, docs/results/) are what `make docs-pages` makes
from the code, configs/ and scripts/results/ now: regenerating them changes nothing, wherever pazo
runs (another interpreter, virtual environment or working directory)."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo import REPO_ROOT
from tools.docs import pages as docs_pages
from pazo.report.config_reference import parse, split_comment
from tools.docs.results import cell, provenance


def test_regenerating_the_pages_changes_nothing(tmp_path):
    docs = tmp_path / "docs"
    for folder in docs_pages.GENERATED:
        shutil.copytree(REPO_ROOT / "docs" / folder, docs / folder)
    wanted = docs_pages.pages()
    assert docs_pages.differences(docs, wanted) == [], "run `make docs-pages` and commit the pages"
    assert docs_pages.write(docs, wanted) == []     # (the committed figures came from another process: deterministic)
    assert (docs / "results" / "figures").is_dir() and any((docs / "results" / "figures").glob("*.svg"))


folder = st.text("abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=8).filter(lambda t: t.strip("."))
#: where a Python may run from: any absolute path, or one inside the checkout (a `.venv` of it, as `make setup` makes)
python_home = (st.lists(folder, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))
               | st.sampled_from([str(REPO_ROOT / ".venv"), str(REPO_ROOT / "venvs" / "py311"), sys.prefix]))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=python_home, cwd=st.sampled_from(["/", "tmp", "repo", "docs"]))
@example(prefix=str(REPO_ROOT / ".venv"), cwd="repo")           # the checkout's own venv: the page as committed
@example(prefix="/opt/conda/envs/pazo", cwd="tmp")              # the report: --venv showed this path
def test_the_reference_pages_are_the_same_wherever_pazo_runs(prefix, cwd, tmp_path_factory):
    """The interpreter, its virtual environment and the working directory change no byte of a page
    (before, docs-run's --venv default printed the running venv's path: `docs --check` failed in
    every environment but <repo>/.venv)."""
    where = {"/": "/", "tmp": str(tmp_path_factory.mktemp("cwd")), "repo": str(REPO_ROOT),
             "docs": str(REPO_ROOT / "docs")}[cwd]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("prefix", "exec_prefix", "base_prefix", "base_exec_prefix"):
            mp.setattr(sys, name, prefix)
        mp.setattr(sys, "executable", f"{prefix}/bin/python")
        mp.setenv("VIRTUAL_ENV", prefix)
        mp.chdir(where)
        generated = docs_pages.reference_pages()
    assert {name: (REPO_ROOT / "docs" / name).read_text() for name in generated} == generated


@pytest.mark.slow   # a whole `python -m tools.docs pages --check` in a fresh process (about 15 s on the shared machine)
def test_docs_check_passes_from_another_virtual_environment_and_directory(tmp_path):
    """`python -m tools.docs pages --check` run by an interpreter of another virtual environment (its own
    prefix, pazo and its packages reached by PYTHONPATH), from a folder outside the checkout."""
    venv = tmp_path / "elsewhere" / "env"
    (venv / "bin").mkdir(parents=True)
    base = os.path.realpath(sys._base_executable)
    (venv / "bin" / "python").symlink_to(base)
    (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(base)}\ninclude-system-site-packages = false\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), sysconfig.get_paths()["purelib"]])}
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys; print(sys.prefix)"], env=env,
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.stdout.strip() == str(venv)                     # (it is another environment indeed)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "tools.docs", "pages", "--check"], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_stale_or_stray_page_is_named_and_check_fails(tmp_path, capsys):
    docs = tmp_path / "docs"
    wanted = {"reference/configs.md": "a\n", "results/index.md": "b\n"}
    docs_pages.write(docs, wanted)
    (docs / "results" / "index.md").write_text("edited by hand\n")
    (docs / "results" / "old.md").write_text("stray\n")
    assert docs_pages.differences(docs, wanted) == ["results/index.md: differs",
                                                    "results/old.md: not generated (remove it)"]
    docs_pages.write(docs, wanted)
    assert not (docs / "results" / "old.md").exists() and (docs / "results" / "index.md").read_text() == "b\n"


def _figure_with(numbers):
    return "".join(f'<path d="M {x:.6f} L 1.5" fill="none"/>' for x in numbers)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=12), st.data())
def test_a_figure_is_stale_only_when_what_it_draws_changes(numbers, data):
    """The rule a figure drawn on another machine broke (coordinates 1e-6 apart read as a stale page):
    numbers that move within the tolerance are the same figure; one number moved past it, a number more
    or less, or other text is a different figure."""
    have = _figure_with(numbers)
    jitter = [x + data.draw(st.floats(-0.4e-3, 0.4e-3)) for x in numbers]
    assert docs_pages.same_page("results/figures/f.svg", have, _figure_with(jitter))
    moved = list(numbers)
    i = data.draw(st.integers(0, len(numbers) - 1))
    moved[i] += data.draw(st.sampled_from([-1, 1])) * data.draw(st.floats(2e-3, 1e3))
    assert not docs_pages.same_page("results/figures/f.svg", have, _figure_with(moved))
    assert not docs_pages.same_page("results/figures/f.svg", have, _figure_with(numbers + [0.0]))
    assert not docs_pages.same_page("results/figures/f.svg", have, have.replace("none", "red", 1))
    assert not docs_pages.same_page("results/index.md", have, _figure_with(jitter)) or have == _figure_with(jitter)


def test_a_figure_from_another_machine_is_neither_stale_nor_rewritten(tmp_path):
    docs = tmp_path / "docs"
    figure = next((REPO_ROOT / "docs" / "results" / "figures").glob("*.svg")).read_text()
    name = "results/figures/f.svg"
    docs_pages.write(docs, {name: figure})
    nudged = re.sub(r"(\d+\.\d{5})\d", lambda m: m.group(1) + "9", figure, count=4)  # the last decimal moves
    assert nudged != figure and docs_pages.differences(docs, {name: nudged}) == []
    assert docs_pages.write(docs, {name: nudged}) == [] and (docs / name).read_text() == figure


def test_every_results_file_appears_on_a_results_page():
    text = "\n".join(p.read_text() for p in (REPO_ROOT / "docs" / "results").glob("*.md"))
    from tools.docs.results import RESULTS, result_files
    missing = [p.relative_to(RESULTS).as_posix() for p in result_files() if f"## {p.relative_to(RESULTS).as_posix()}"
               not in text]
    assert missing == []


def test_the_config_parser_reads_defaults_comments_and_nesting():
    header, defaults, entries = parse(
        "# @package _global_\n# What this file is.\ndefaults:\n  - base  # the base\n  - _self_\n\n"
        "# above a\na: 1  # beside a\nb:\n  c: 'x # not a comment'  # beside c\n  d: [1, 2]\n")
    assert header == ["What this file is."]
    assert [(d.key, d.comment) for d in defaults] == [("base", "the base"), ("_self_", "")]
    assert [(e.key, e.value, e.comment, e.section) for e in entries] == [
        ("a", 1, "beside a", False), ("b", {"c": "x # not a comment", "d": [1, 2]}, "", True),
        ("b.c", "x # not a comment", "beside c", False), ("b.d", [1, 2], "", False)]
    assert split_comment("value#x  # c") == ("value#x", "c")


def test_a_results_page_states_what_the_file_records_and_never_invents():
    lines = provenance({"command": "pazo-bench x", "commit": None, "date": None,
                        "machine": {"device": "cpu x2", "threads": 1}})
    assert lines == ["- **Command:** `pazo-bench x`", "- **Commit:** not recorded",
                     "- **Machine:** device cpu x2; threads 1", "- **Date:** not recorded"]
    assert cell(0.000123456) == "0.0001235" and cell(None) == "-" and cell("a|b") == "a\\|b"
    data = json.loads((REPO_ROOT / "scripts/results/methods_cpu_digits.json").read_text())
    page = (REPO_ROOT / "docs/results/speed.md").read_text()
    assert f"- **Commit:** `{data['commit']}`" in page
