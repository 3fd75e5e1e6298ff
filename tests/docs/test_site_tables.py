"""The site's tables show whole where they can (issue #60: the speed page's summary showed five of its
eight columns at 1280 px). tools/docs/site_hooks.py lets a table's names break (a column's name, a
file's name, inline code in a cell) after their underscores, dots and slashes, and keeps a one-word
value on one line, adding nothing a reader copies; and every results page's summary table stays
narrow enough to show whole in a 1280 px window (`python -m tools.docs layout --whole` measures it
in a browser)."""
from __future__ import annotations

import re

from hypothesis import example, given, settings, strategies as st

from pazo import REPO_ROOT
from tools.docs import site_hooks
from tools.docs.results import PAGES

MARKS = re.compile(r'<wbr>| class="one-word"')

#: a part of a name, and a short unit (`s`, `ms`) a name may end with
part = st.tuples(st.sampled_from("abfxz"), st.text(alphabet="abcdefgxyz019", min_size=2, max_size=9)).map("".join)
unit = st.text(alphabet="smbk", min_size=1, max_size=2)
#: the text of a cell: words, names, numbers, ranges and inline code, with a table's punctuation
cell_text = st.text(alphabet="abxy019_./- ", max_size=30).map(lambda t: t.replace("__", "_"))
cell_html = st.one_of(cell_text, cell_text.map(lambda t: f"<code>{t}</code>"),
                      st.tuples(cell_text, cell_text).map(lambda p: f"{p[0]} <code>{p[1]}</code>"))


def a_table(headers: list[str], rows: list[list[str]]) -> str:
    """A table as Python-Markdown renders one (an alignment on some cells)."""
    head = "".join(f"<th>{h}</th>" if k % 2 else f'<th align="right">{h}</th>' for k, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" if k % 2 else f'<td align="right">{c}</td>'
                                    for k, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table>\n<thead>\n<tr>{head}</tr>\n</thead>\n<tbody>\n{body}\n</tbody>\n</table>"


tables = st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(cell_html, min_size=n, max_size=n),
    st.lists(st.lists(cell_html, min_size=n, max_size=n), max_size=4)))


@settings(deadline=None)
@given(tables, st.text(alphabet="ab_. <>/", max_size=40))
def test_the_hook_adds_breaks_and_classes_only(table, prose):
    """What a reader copies, the search indexes and GitHub shows is the page as written: the hook's
    only changes are <wbr> tags and the one-word class, and text outside a table is not touched."""
    html = f"<p>{prose}</p>\n{a_table(*table)}\n<pre><code>x_yyy.zzz</code></pre>"
    out = site_hooks.on_page_content(html)
    assert MARKS.sub("", out) == html
    assert out.startswith(f"<p>{prose}</p>") and out.endswith("<pre><code>x_yyy.zzz</code></pre>")


@settings(deadline=None)
@given(st.lists(part, min_size=1, max_size=5), st.one_of(st.none(), unit))
@example(["paired", "floor", "ratio"], None)
@example(["median"], "s")
@example(["host", "step"], "ms")
def test_a_column_name_breaks_after_each_underscore_but_before_its_unit(parts, last):
    """`paired_floor_ratio` breaks into its three words; `median_s`, `host_step_ms` keep the unit
    with its word."""
    name = "_".join(parts + ([last] if last else []))
    out = site_hooks.on_page_content(a_table([name], [["1.5"]]))
    header = re.search(r"<th[^>]*>(.*?)</th>", out)[1]
    assert header.split("<wbr>") == [p + "_" for p in parts[:-1]] + [parts[-1] + (f"_{last}" if last else "")]


@settings(deadline=None)
@given(st.lists(part, min_size=2, max_size=4), st.sampled_from(["json", "csv"]), st.booleans())
@example(["methods", "cuda", "tiny", "imagenet", "vit"], "json", False)
def test_a_file_name_in_a_cell_breaks_after_its_underscores_and_slashes(parts, extension, in_folder):
    name = ("public_grads/" if in_folder else "") + "_".join(parts) + "." + extension
    out = site_hooks.on_page_content(a_table(["file"], [[name]]))
    cell = re.search(r"<td[^>]*>(.*?)</td>", out)[1]
    assert cell.replace("<wbr>", "") == name and 'one-word' not in out
    assert cell.count("<wbr>") == name.count("_") + name.count("/") + 1      # and before its extension


@settings(deadline=None)
@given(st.one_of(st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.4g}"),
                 st.tuples(st.floats(0, 10), st.floats(0, 10)).map(lambda p: f"{p[0]:.3g}-{p[1]:.3g}"),
                 st.sampled_from(["DP-SGD", "PAZO-S", "2026-11-25T22:53:05+00:00", "-", "tiny_imagenet_vit"])))
@example("0.00263-0.00267")
def test_a_one_word_value_stays_on_one_line_and_a_number_never_breaks(value):
    """A range or a hyphenated name is not broken after its hyphen; no number (nor one in inline
    code) gets a break."""
    out = site_hooks.on_page_content(a_table(["value", "code"], [[value, f"<code>{value}</code>"]]))
    assert f'class="one-word">{value}</td>' in out
    if re.fullmatch(r"[-+0-9.e]+", value):
        assert "<wbr>" not in out.split("</thead>")[1]


@given(st.lists(part, min_size=2, max_size=4), st.lists(part, min_size=1, max_size=3))
@example(["audit", "worst"], ["case"])
def test_inline_code_in_a_cell_breaks_at_its_dots_and_underscores_and_prose_is_not_marked(dotted, under):
    """`audit.worst_case` breaks after its dot and underscore, not at any letter (the theme's
    word-break: `audit.canarie` over `s`); a cell of words wraps at its spaces, unmarked."""
    key = ".".join(dotted[:-1]) + "." + "_".join([dotted[-1], *under])
    out = site_hooks.on_page_content(a_table(["key", "meaning"], [[f"<code>{key}</code>", "of both bounds"]]))
    code = re.search(r"<code>(.*?)</code>", out)[1]
    assert code.replace("<wbr>", "") == key and code.count("<wbr>") == key.count(".") + key.count("_")
    assert "<td>of both bounds</td>" in out


def test_a_code_listings_classed_cells_are_left_alone():
    listing = ('<table class="highlighttable"><tr><td class="linenos">a_bcd.json</td>'
               '<td class="code">x-y</td></tr></table>')
    assert site_hooks.on_page_content(listing) == listing


# ---------------------------------------------------------------------------------- the summaries' width

#: how wide a summary table may be, in characters of its narrowest layout (each column as wide as
#: its longest piece that cannot break, plus CELL_PADDING): the text column of a 1280 px window holds
#: 716 px of a long table (its vertical scrollbar apart) at the stylesheet's 12 px, about 6 px a
#: character so counted (the speed page's summary, 100 characters, takes 566 px there; the engines
#: page's, 86, takes 512 px), less a margin for the estimate
SUMMARY_BUDGET = 115
#: a cell's padding (0.5em each side) in characters
CELL_PADDING = 2


def summary_table(page_text: str) -> list[list[str]]:
    """The cells (header row first) of the table under a results page's `## Summary`."""
    section = page_text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in rows]


def unbreakable(text: str, header: bool) -> int:
    """The longest piece of a cell's text that the site cannot break (header and file-name cells
    break where the hook lets them; a one-word value does not break; words break at spaces)."""
    html = site_hooks.on_page_content(a_table([text], []) if header else a_table(["x"], [[text]]))
    inner = re.search(r"<t[hd](?:\s[^>]*)?>(.*?)</t[hd]>", html.split("</thead>")[int(not header)], re.S)[1]
    return max(len(piece) for piece in re.split(r"<wbr>|\s+", inner))


def narrowest(table: list[list[str]]) -> int:
    """The characters of a table's narrowest layout: each column its longest unbreakable piece."""
    header, *rows = table
    return sum(max([unbreakable(h, True)] + [unbreakable(r[k], False) for r in rows]) + CELL_PADDING
               for k, h in enumerate(header))


def test_every_results_summary_fits_a_1280_px_window():
    """The rule the speed page broke: a summary table a reader sees at 1280 px whole. A column more
    or a value too long to break fails here before the site shows half a table."""
    widths = {}
    for page in (p for p in PAGES if p.summary):
        text = (REPO_ROOT / "docs" / "results" / f"{page.name}.md").read_text()
        widths[page.name] = narrowest(summary_table(text))
    assert widths["speed"] > 60, widths       # (the measure sees the summary's columns)
    wide = {name: width for name, width in widths.items() if width > SUMMARY_BUDGET}
    assert not wide, f"summaries wider than {SUMMARY_BUDGET} characters (check: python -m tools.docs layout --whole)"


def test_the_width_measure_tells_a_table_that_fits_from_one_that_does_not():
    fits = [["file", "paired_floor_ratio"], ["methods_cpu_digits.json", "1.113"]]
    assert narrowest(fits) == len("paired_") + len("methods_") + 2 * CELL_PADDING
    assert narrowest([["a"] * 9, ["0.00263-0.00267"] * 9]) > SUMMARY_BUDGET
