"""MkDocs hooks of the documentation site (mkdocs.yml's `hooks:`), for what Markdown cannot say.

A results table names its columns by their keys (`paired_floor_ratio`, `vectorised_median_s`) and
its files by their names (`methods_cuda_tiny_imagenet_vit.json`): words with no space, so the
browser cannot wrap them, and the widest names, not the values, set how wide a table is (the
speed page's summary scrolled sideways at 1280 px for them). A header cell's text, a data cell
that is a file's name and the inline code of a data cell (`audit.worst_case`) get a <wbr> after
each slash, each dot before a letter and each underscore (but one before a short unit): a name
breaks there when the table would not fit, and stays on one line when it does (the theme broke
inline code at any letter instead: `audit.canarie` over `s`). Any other data cell of one word (a
value: `0.00263-0.00267`, `2.083e-05`, `DP-SGD`) is marked to stay on one line, where the browser
would break it after its hyphen to narrow the table. The page's Markdown (and GitHub's view of
it) is left as written, and a <wbr> adds no character to what a reader copies or the search
indexes."""
from __future__ import annotations

import re

#: the attributes of a Markdown table's cell (an alignment at most; the classed cells of a code
#: listing's line numbers are left alone), and its opening tags
ALIGN = r'(?:\s+(?:align|style)="[^"]*")*'
TH, TD = rf"<th{ALIGN}>", rf"<td{ALIGN}>"
#: a header cell of a rendered table: its opening tag, its content, its closing tag
HEADER_CELL = re.compile(rf"({TH})(.*?)(</th>)", re.S)
#: a data cell that is nothing but a file's name: a word (with an underscore or a slash) and an
#: extension that is not a number's digits (`table5_cpu.json`, `public_grads_default/cpu.json`)
FILE_CELL = re.compile(rf"({TD})([\w./-]*[_/][\w./-]*\.[A-Za-z]\w*)(</td>)")
#: a data cell of a rendered table: its opening tag, its content, its closing tag
DATA_CELL = re.compile(rf"({TD})(.*?)(</td>)", re.S)
#: inline code with no markup inside it
INLINE_CODE = re.compile(r"(<code>)([^<]*)(</code>)")
#: a data cell of one word and no markup, its opening tag's end apart
WORD_CELL = re.compile(rf"(<td{ALIGN})(>[^\s<>]+</td>)")
#: the class of a one-word cell (docs/stylesheets/tables.css keeps it on one line)
ONE_WORD = "one-word"
#: an HTML tag inside a cell (its attributes are left alone)
TAG = re.compile(r"(<[^>]*>)")
#: where a name may break: after a slash, a dot before a letter (not a number's), or an underscore
#: but one before a last part of one or two characters (a unit: `median_s`, `host_step_ms` keep it
#: on the line of the word it measures)
BREAK_AFTER = re.compile(r"/|\.(?=[A-Za-z])|_(?![^\W_]{1,2}\b)")


def breakable(text: str) -> str:
    """`text` (HTML) with a <wbr> after each BREAK_AFTER outside its tags."""
    parts = TAG.split(text)
    return "".join(part if part.startswith("<") else BREAK_AFTER.sub(r"\g<0><wbr>", part) for part in parts)


def _breakable_match(match: re.Match) -> str:
    return match[1] + breakable(match[2]) + match[3]


def breakable_names(html: str) -> str:
    """Every table header cell, file-name cell and data cell's inline code of `html` breakable
    where BREAK_AFTER says."""
    html = HEADER_CELL.sub(_breakable_match, FILE_CELL.sub(_breakable_match, html))
    return DATA_CELL.sub(lambda m: m[1] + INLINE_CODE.sub(_breakable_match, m[2]) + m[3], html)


def unbroken_words(html: str) -> str:
    """Every one-word data cell of `html` (a file's name, given its breaks, is no longer one) of the
    class ONE_WORD."""
    return WORD_CELL.sub(lambda m: f'{m[1]} class="{ONE_WORD}"{m[2]}', html)


def on_page_content(html: str, **_) -> str:
    """MkDocs' hook on each page's rendered HTML."""
    return unbroken_words(breakable_names(html))
