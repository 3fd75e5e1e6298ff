"""The generated pages (docs/reference/, docs/results/) are what `python -m pazo.report docs` makes
from the code, configs/ and scripts/results/ now: regenerating them changes nothing."""
import json
import shutil

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
