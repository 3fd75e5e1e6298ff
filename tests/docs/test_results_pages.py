"""The results pages read as a reader wants: each page with a summary leads with it (the columns
that matter, before the files' full rows), and no mapping is dumped whole into a table cell."""
import re

from hypothesis import example, given, settings, strategies as st

from tools.docs.results import CELL_PAIRS, PAGES, cell, results_pages, table
from tools.docs.tables import ROW, fits, fitted, rows_of

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


COLUMNS = [f"c{i:02}" for i in range(18)]
#: a value as a result file holds it (no comma, dot or backtick: the parse below reads the notes by
#: them): a number, a name, a sentence or a command that wraps, a timestamp that does not
VALUE = st.one_of(st.integers(-5, 5), st.floats(0, 1000, allow_nan=False), st.text(alphabet="abxyz-", min_size=1,
                  max_size=6), st.none(), st.text(alphabet="abxyz -=", min_size=20, max_size=120).map(str.strip),
                  st.sampled_from(["2026-11-25T22:53:05+00:00", "methods_cuda_tiny_imagenet_vit"]))


def _tables_and_notes(lines: list[str]) -> list[tuple[dict, list[list[dict]]]]:
    """What `fitted` wrote, by kind of row: the columns said once above a kind, and its tables (each
    a list of rows), a kind beginning at each note (a single kind may have none)."""
    kinds: list[tuple[dict, list[list[dict]]]] = []
    for block in "\n".join(lines).split("\n\n"):
        if not block.startswith("|"):
            said = {key: value for key, value in re.findall(r"`(\w+)` ([^,`]+?)(?=, |\. |\.$)", block)}
            said |= {key: "-" for key in re.findall(r"`(\w+)`", block.partition("No value in any row:")[2])}
            kinds.append((said, []))
            continue
        header, _, *body = block.splitlines()
        names = [name.strip() for name in header.strip("|").split("|")]
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in body]
        if not kinds:
            kinds.append(({}, []))
        kinds[-1][1].append([dict(zip(names, row)) for row in cells])
    return kinds


def _read_back(lines: list[str]) -> list[dict]:
    """The rows `fitted` wrote, each with every column it showed (a note's value, a table's cell; the
    tables a kind's columns were dealt into joined row by row; a table of columns and values)."""
    rows = []
    for said, tables in _tables_and_notes(lines):
        if len(tables) == 1 and list(tables[0][0]) == ["column", "value"]:
            rows.append({r["column"]: r["value"] for r in tables[0]})
            continue
        assert len({len(t) for t in tables}) == 1, "the tables of one kind hold its rows, each once"
        for parts in zip(*tables):
            joined = {**said}
            for part in parts:
                assert all(joined.get(k, v) == v for k, v in part.items()), "a row's tables agree on its names"
                joined |= part
            joined.pop(ROW, None)
            rows.append(joined)
    return rows


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.fixed_dictionaries({}, optional={c: VALUE for c in COLUMNS}), min_size=1, max_size=6),
       wide=st.booleans())
@example(rows=[dict.fromkeys(COLUMNS, 1)] * 2, wide=True)                 # rows alike: nothing left to show
@example(rows=[{"c00": 1, "c17": None}, dict.fromkeys(COLUMNS, "a")], wide=True)   # a row of its own kind
@example(rows=[{**dict.fromkeys(COLUMNS), "c11": -3}, {"c00": "a"}, {"c00": "a"}], wide=True)   # rows alike in a kind
@example(rows=[dict.fromkeys(COLUMNS, 1.5), {**dict.fromkeys(COLUMNS, 1.5), "c17": 2.5}], wide=True)  # no names
def test_a_table_is_laid_out_in_tables_that_fit_the_window_with_no_value_left_out(rows, wide):
    """The rule the results pages broke (issue #60: tuning's, engines', speed's, the audits' tables
    scrolled sideways at 1280 px): every table `fitted` writes fits the text column of a 1280 px
    window, and every value of every row is still on the page, in its tables or said once above
    them; a table that fits is left as it was."""
    columns = tuple(COLUMNS if wide else COLUMNS[:6])
    keys = [c for c in columns if any(c in row for row in rows)]
    lines = fitted(rows, columns)
    if fits(table(rows, columns)):
        assert lines == table(rows, columns)
        return
    tables = [block.splitlines() for block in "\n".join(lines).split("\n\n") if block.startswith("|")]
    assert all(fits(t) for t in tables)
    shown = sorted(sorted(row.items()) for row in _read_back(lines))
    assert shown == sorted(sorted({key: cell(row.get(key)) for key in keys}.items()) for row in rows)


@given(st.lists(st.lists(st.one_of(st.none(), st.text(alphabet="ab |-.", max_size=8).map(str.strip)), min_size=3,
                                  max_size=3),
                min_size=1, max_size=4))
def test_a_printed_markdown_table_reads_back_as_its_rows(cells):
    """The audits' table (`pazo-report audit-table` prints Markdown) is laid out again from its rows:
    each cell as printed, a dash as no value."""
    rows = [dict(zip("xyz", r)) for r in cells]
    back, columns = rows_of("\n".join(table(rows, ("x", "y", "z"))))
    assert columns == ("x", "y", "z")
    assert [{k: cell(v) for k, v in r.items()} for r in back] == [{k: cell(v) for k, v in r.items()} for r in rows]


def test_the_cuda_check_table_is_one_table_for_the_trainings_and_one_for_the_audits():
    text = results_pages()["cuda-check.md"]
    assert "In every row: `kind` train, `device` cuda" in text and "In every row: `kind` audit, `device` cuda" in text
