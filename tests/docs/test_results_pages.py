"""The results pages read as a reader wants: each page with a summary leads with it (the columns
that matter, before the files' full rows), and no mapping is dumped whole into a table cell."""
import re

from hypothesis import given, strategies as st

from tools.docs.results import CELL_PAIRS, PAGES, cell, results_pages

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
