"""How wide a table of the site is at its narrowest, estimated from its HTML without a browser: the
rule that no table scrolls sideways in a 1280 px window (issue #60) is then checked by a fast test
(tests/docs/test_site_tables.py) and kept by the results pages' generator (`tools.docs.fit`), while
`python -m tools.docs layout --whole` measures the same in Chromium.

A table of the site (docs/stylesheets/tables.css) is as wide as its columns, each as wide as the
longest piece of its cells that cannot break (a word; a name between the breaks that
tools/docs/site_hooks.py adds; a one-word value whole) plus its padding, a data cell's column at
least its 4em; it shows whole when that fits the text column."""
from __future__ import annotations

import re
from html.parser import HTMLParser

#: the table's font size (0.6rem of the theme's 20 px) and what it makes of a character, in px:
#: the widest a character of running text, of a bold header and of inline code (0.85em, monospace)
#: takes in the fonts a reader may get (Chromium's measurements of the site, with a margin)
FONT_PX = 12
TEXT_PX, BOLD_PX, CODE_PX = 7.0, 7.6, 6.4
#: inline code's own padding (0.29em each side of its 0.85em), in px: a piece of code carries it
CODE_PADDING_PX = 6
#: narrow characters of running text (an `i`, a dot) take less
NARROW, NARROW_PX = set("iljtfr.,:;'|!()[] "), 3.6
#: a cell's padding (0.5em each side) and a data cell's least width (4em), in px
CELL_PADDING_PX, DATA_CELL_PX = FONT_PX, 4 * FONT_PX
#: a table's own border and what rounding leaves, in px
TABLE_EDGE_PX = 6
#: the text column of a 1280 x 900 window beside the navigation and the table of contents: 705 px,
#: 690 px beside a tall table's own scrollbar; less a margin for the estimate
BUDGET_PX = 660


class _Cells(HTMLParser):
    """The cells of an HTML table, each as (header?, one-word?, its pieces that cannot break, each a
    list of (text, code?) runs)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.rows: list[list[tuple[bool, bool, list[list[tuple[str, bool]]]]]] = []
        self.cell: tuple[bool, bool, list[list[tuple[str, bool]]]] | None = None
        self.code = 0

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("th", "td") and self.rows:
            nowrap = "one-word" in (dict(attrs).get("class") or "").split()
            self.cell = (tag == "th", nowrap, [[]])
            self.rows[-1].append(self.cell)
        elif tag == "code":
            self.code += 1
        elif tag in ("wbr", "br") and self.cell:
            self.cell[2].append([])

    def handle_endtag(self, tag):
        if tag in ("th", "td"):
            self.cell = None
        elif tag == "code":
            self.code = max(0, self.code - 1)

    def handle_data(self, data):
        if self.cell is None:
            return
        header, nowrap, pieces = self.cell
        words = [data] if nowrap else re.split(r"(\s+)", data)
        for word in words:
            if not nowrap and word.isspace():
                pieces.append([])
            elif word:
                pieces[-1].append((word, bool(self.code)))


def text_px(text: str, code: bool, bold: bool) -> float:
    """The estimated width of `text` in a table's cell."""
    if code:
        return CODE_PX * len(text)
    wide = BOLD_PX if bold else TEXT_PX
    return sum(NARROW_PX if c in NARROW else wide for c in text)


def cell_px(header: bool, pieces: list[list[tuple[str, bool]]]) -> float:
    """A cell's narrowest width: its widest piece that cannot break, and its padding."""
    widest = max((sum(text_px(t, code, header) for t, code in piece) + CODE_PADDING_PX * any(c for _, c in piece)
                  for piece in pieces), default=0.0)
    return max(widest + CELL_PADDING_PX, 0 if header else DATA_CELL_PX)


def table_px(html: str) -> float:
    """The estimated narrowest width of the first table of `html` (rendered, with the site's hooks),
    in px: the sum of its columns' narrowest widths."""
    parser = _Cells()
    parser.feed(html.split("</table>", 1)[0])
    columns: dict[int, float] = {}
    for row in parser.rows:
        for k, (header, _, pieces) in enumerate(row):
            columns[k] = max(columns.get(k, 0.0), cell_px(header, pieces))
    return TABLE_EDGE_PX + sum(columns.values())


def tables(html: str) -> list[str]:
    """The HTML of each table of a page (a source listing's, classed, apart)."""
    return re.findall(r"<table>.*?</table>", html, re.S)
