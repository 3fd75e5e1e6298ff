"""The generated pages (docs/reference/, docs/results/) are what `python -m pazo.report docs` makes
from the code, configs/ and scripts/results/ now: regenerating them changes nothing."""
import json
import re
import shutil

from hypothesis import given, settings
from hypothesis import strategies as st

from pazo import REPO_ROOT
from pazo.report import docs_pages
from pazo.report.docs_configs import parse, split_comment
from pazo.report.docs_results import cell, provenance


def test_regenerating_the_pages_changes_nothing(tmp_path):
    docs = tmp_path / "docs"
    for folder in docs_pages.GENERATED:
        shutil.copytree(REPO_ROOT / "docs" / folder, docs / folder)
    wanted = docs_pages.pages()
    assert docs_pages.differences(docs, wanted) == [], "run `python -m pazo.report docs` and commit the pages"
    assert docs_pages.write(docs, wanted) == []     # (the committed figures came from another process: deterministic)
    assert (docs / "results" / "figures").is_dir() and any((docs / "results" / "figures").glob("*.svg"))


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
    from pazo.report.docs_results import RESULTS, result_files
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
