"""The results pages read as a reader wants: each page with a summary leads with it (the columns
that matter, before the files' full rows), and no mapping is dumped whole into a table cell."""
import re

from hypothesis import example, given, settings, strategies as st

from tools.docs.results import CELL_PAIRS, MAX_COLUMNS, PAGES, cell, narrow_table, results_pages, table

scalar = st.one_of(st.integers(), st.floats(allow_nan=False), st.text(alphabet="abcxyz _-", max_size=12), st.none())
keys = st.text(alphabet="abcdefghij_", min_size=1, max_size=8)


@given(st.dictionaries(keys.filter(lambda k: k != "name"), scalar, max_size=30))
def test_a_mapping_shows_its_first_pairs_and_counts_the_rest(mapping):
    text = cell(mapping)
    shown = min(len(mapping), CELL_PAIRS)
    for key in list(mapping)[:shown]:
        assert f"{key} " in text
    more = len(mapping) - CELL_PAIRS
    assert (f"({more} more in the file)" in text) == (more > 0)
    assert "\n" not in text


@given(name=st.sampled_from(["inplace", "vectorised"]), requested=st.sampled_from(["auto", "inplace", None]),
       reason=st.text(alphabet="abc ;:", max_size=80))
def test_a_named_choice_shows_its_name_and_what_was_asked_not_why(name, requested, reason):
    text = cell({"name": name, "reason": reason, "requested": requested})
    if "not used" in reason:
        assert text == "not used"
    else:
        assert text.startswith(name) and ("requested" in text) == (requested not in (None, name))
        assert ";" not in text and ":" not in text      # the reason (its punctuation) stays in the file


def test_every_page_with_a_summary_leads_with_it_before_the_files_rows():
    pages = results_pages()
    for page in PAGES:
        text = pages[f"{page.name}.md"]
        headings = re.findall(r"^## (.+)$", text, re.M)
        if not page.summary:
            continue
        assert headings[0] == "Summary", (page.name, headings[:3])
        summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
        header = next(line for line in summary.splitlines() if line.startswith("| "))
        columns = [c.strip() for c in header.strip("|").split("|")]
        assert set(columns) <= set(page.summary) and len(columns) <= len(page.summary), (page.name, columns)
    defaults = pages["defaults.md"]
    assert "reason" not in defaults and max(map(len, defaults.splitlines())) < 400


COLUMNS = [f"c{i:02}" for i in range(MAX_COLUMNS + 6)]
#: a value as a result file holds it (no comma, dot or backtick: the parse below reads the notes by them)
VALUE = st.one_of(st.integers(-5, 5), st.text(alphabet="abxyz-", min_size=1, max_size=6), st.none())


def _read_back(lines: list[str]) -> list[dict]:
    """The rows `narrow_table` wrote, each with every column it showed (a note's value, a table's cell)."""
    rows, said = [], {}
    for block in "\n".join(lines).split("\n\n"):
        if not block.startswith("|"):
            said = {key: value for key, value in re.findall(r"`(\w+)` ([^,`]+?)(?=, |\. |\.$)", block)}
            said |= {key: "-" for key in re.findall(r"`(\w+)`", block.partition("No value in any row:")[2])}
            continue
        header, _, *body = block.splitlines()
        names = [name.strip() for name in header.strip("|").split("|")]
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in body]
        if names == ["column", "value"]:
            rows.append(dict(cells))
        else:
            rows += [{**said, **dict(zip(names, row))} for row in cells]
        said = {}
    return rows


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({}, optional={c: VALUE for c in COLUMNS}), min_size=1, max_size=6),
       wide=st.booleans())
@example(rows=[dict.fromkeys(COLUMNS, 1)] * 2, wide=True)                 # rows alike: nothing left to show
@example(rows=[{"c00": 1, "c17": None}, dict.fromkeys(COLUMNS, "a")], wide=True)   # a row of its own kind
@example(rows=[{**dict.fromkeys(COLUMNS), "c11": -3}, {"c00": "a"}, {"c00": "a"}], wide=True)   # rows alike in a kind
def test_a_wide_table_is_narrowed_with_no_column_left_out(rows, wide):
    """A results table of more than MAX_COLUMNS columns (cuda-check's, tuning's, dimension's settings
    scrolled sideways at 1280 px): every value of every row is still on the page, in its table or
    said once above it, and no table is wider than the one it replaces."""
    columns = tuple(COLUMNS if wide else COLUMNS[:MAX_COLUMNS])
    keys = [c for c in columns if any(c in row for row in rows)]
    lines = narrow_table(rows, columns)
    if len(keys) <= MAX_COLUMNS:
        assert lines == table(rows, columns)
        return
    widths = [line.count("|") - 1 for line in lines if line.startswith("| ")]
    assert max(widths) <= len(keys)
    shown = sorted(sorted(row.items()) for row in _read_back(lines))
    assert shown == sorted(sorted({key: cell(row.get(key)) for key in keys}.items()) for row in rows)


def test_the_cuda_check_table_is_one_table_for_the_trainings_and_one_for_the_audits():
    text = results_pages()["cuda-check.md"]
    assert "In every row: `kind` train, `device` cuda" in text and "In every row: `kind` audit, `device` cuda" in text
