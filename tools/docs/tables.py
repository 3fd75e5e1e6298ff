"""The results pages' Markdown tables: their cells, and their layout in tables that each show whole
in a 1280 px window (issue #60), with no value left out.

A table whose columns fit the text column (`tools.docs.table_width`) is left as it is. One that does
not is split by kind of row (the rows with values in the same columns: a check's trainings and its
audits), the columns with one value in all of a kind's rows said once above its table; and where a
kind's table is still too wide, its columns are dealt into several tables that fit, each led by the
columns that name a row (`setting`, `method`: the fewest of the first short columns whose values tell
the rows apart, else the row's number beside them), the long values (commands, timestamps) apart in
the last."""
from __future__ import annotations

import math
import re

import markdown

from tools.docs import site_hooks
from tools.docs.table_width import BUDGET_PX, table_px


# ---------------------------------------------------------------------------------- cells and tables

def cell(value) -> str:
    """A table cell: numbers to 4 significant digits, None as a dash, mappings as `key value` pairs."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    elif isinstance(value, dict):
        text = _summarised(value)
    elif isinstance(value, (list, tuple)):
        text = "; ".join(map(cell, value)) or "-"
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


#: a mapping in a cell shows this many `key value` pairs, then how many more the file holds
CELL_PAIRS = 4


def _summarised(value: dict) -> str:
    """A mapping in one short cell: a named choice (an engine: name, reason, requested) as its name
    and what was requested when that differs; otherwise its first pairs and how many more."""
    if "name" in value:
        if "not used" in str(value.get("reason", "")):
            return "not used"
        requested = value.get("requested")
        asked = f" (requested {cell(requested)})" if requested not in (None, value["name"]) else ""
        return cell(value["name"]) + asked
    pairs = [f"{k} {cell(v)}" for k, v in value.items()]
    more = len(pairs) - CELL_PAIRS
    return ", ".join(pairs[:CELL_PAIRS]) + (f", ... ({more} more in the file)" if more > 0 else "")


def table_columns(rows: list[dict], columns: tuple[str, ...] | None = None) -> list[str]:
    """The `columns` any of `rows` has, in that order; all their keys when None."""
    return list(dict.fromkeys(k for r in rows for k in r)) if columns is None else \
        [c for c in columns if any(c in r for r in rows)]


def table(rows: list[dict], columns: tuple[str, ...] | None = None) -> list[str]:
    """A Markdown table of `rows` (the `columns` any row has, in that order; all keys when None)."""
    keys = table_columns(rows, columns)
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r.get(k)) for k in keys) + " |" for r in rows]
    return lines


def code(text: str) -> str:
    """Inline code that survives backticks inside it."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


#: a cell's edge in a Markdown table's row: a pipe no backslash escapes
CELL_EDGE = re.compile(r"(?<!\\)\|")


def rows_of(text: str) -> tuple[list[dict], tuple[str, ...]]:
    """The rows (header -> cell text, None for a dash) and columns of the Markdown table `text` (as a
    command such as `pazo-report audit-table` prints it), for `fitted` to lay out again."""
    header, _, *body = (line.strip() for line in text.strip().splitlines())
    columns = tuple(_cells(header))
    return [dict(zip(columns, _cells(line))) for line in body], columns


def _cells(line: str) -> list[str | None]:
    """A row's cells, a dash (`cell`'s "no value") as None."""
    return [None if c.strip() == "-" else c.strip().replace("\\|", "|") for c in CELL_EDGE.split(line)[1:-1]]


# ---------------------------------------------------------------------------------- fitting

#: a column of a value longer than this (a command, a timestamp, a list) goes after the others
LONG_VALUE = 24
#: the most columns that name a row before the row's number does instead
MOST_NAMING = 3
#: the column of a row's number, where the columns that name a row do not tell the rows apart
ROW = "row"


def width_px(lines: list[str]) -> float:
    """The estimated narrowest width of the Markdown table `lines`, as the site renders it."""
    html = markdown.markdown("\n".join(lines), extensions=["tables"])
    return table_px(site_hooks.on_page_content(html))


def fits(lines: list[str]) -> bool:
    return width_px(lines) <= BUDGET_PX


def fitted(rows: list[dict], columns: tuple[str, ...] | None = None) -> list[str]:
    """The Markdown of `rows` (the `columns` any row has, in that order; all keys when None) in tables
    that each show whole, as the module says; a single row too wide for a row of columns as a table
    of its columns and values."""
    keys = table_columns(rows, columns)
    whole = table(rows, keys)
    if fits(whole):
        return whole
    if len(rows) == 1:
        return table([{"column": key, "value": rows[0].get(key)} for key in keys])
    lines = []
    for kind in kinds_of_row(rows, keys):
        notes, shown = constants_said_once(kind, keys)
        lines += ([""] if lines else []) + notes + dealt(kind, shown)
    return lines


def kinds_of_row(rows: list[dict], keys: list[str]) -> list[list[dict]]:
    """`rows` by the columns they have values in: a row goes with the first kind (in the order of
    the rows) whose columns include all of its own."""
    filled = [frozenset(key for key in keys if row.get(key) is not None) for row in rows]
    widest = []
    for columns in sorted(filled, key=len, reverse=True):
        if not any(columns <= wider for wider in widest):
            widest.append(columns)
    kinds: dict[frozenset, list[dict]] = {}
    for row, columns in zip(rows, filled):
        kinds.setdefault(next(wider for wider in widest if columns <= wider), []).append(row)
    return list(kinds.values())


def constants_said_once(rows: list[dict], keys: list[str]) -> tuple[list[str], list[str]]:
    """The lines that say the columns with one value in all of `rows` (and those with no value in
    any), and the columns left to show; rows all alike show as a table, only the empty columns said."""
    empty = [key for key in keys if all(row.get(key) is None for row in rows)]
    constant = [key for key in keys if key not in empty and len({cell(row.get(key)) for row in rows}) == 1] \
        if len(rows) > 1 else []
    shown = [key for key in keys if key not in constant and key not in empty]
    if not shown:
        shown, constant = constant, []
    said = [f"{code(key)} {cell(rows[0].get(key))}" for key in constant]
    notes = ([f"In every row: {', '.join(said)}."] if said else []) + \
        ([f"No value in any row: {', '.join(map(code, empty))}."] if empty else [])
    return [" ".join(notes), ""] * bool(notes), shown


def dealt(rows: list[dict], keys: list[str]) -> list[str]:
    """The table of `rows` and `keys`, or where it does not fit, its columns dealt in order into
    tables that do, each led by the columns that name a row, the long ones last and apart."""
    if fits(table(rows, keys)):
        return table(rows, keys)
    long = [key for key in keys if any(len(cell(row.get(key))) > LONG_VALUE for row in rows)]
    naming, unique = naming_columns(rows, [key for key in keys if key not in long])
    if not unique:
        rows, naming = [{ROW: n, **row} for n, row in enumerate(rows, 1)], [ROW, *naming]
    groups: list[list[str]] = []
    for key in [k for k in keys if k not in naming and k not in long] + long:
        joins = groups and (key in long) == (groups[-1][-1] in long)   # (a long value beside numbers
        if joins and fits(table(rows, naming + groups[-1] + [key])):   # wraps into a tall narrow column)
            groups[-1].append(key)
        else:
            groups.append([key])
    lines = []
    for group in groups:
        lines += ([""] if lines else []) + table(rows, naming + group)
    return lines


def naming_columns(rows: list[dict], keys: list[str]) -> tuple[list[str], bool]:
    """The fewest of the first MOST_NAMING of `keys` that can name a row (not a measurement: no
    column of floats all different, as a time is) whose values tell `rows` apart, and True; where
    they do not, all of them (a reader's guide beside the row's number) and False."""
    def measured(key: str) -> bool:
        values = [row.get(key) for row in rows]
        return any(isinstance(v, float) for v in values) and len(set(map(cell, values))) == len(values)

    names = [key for key in keys if not measured(key)][:MOST_NAMING]
    for n in range(1, len(names) + 1):
        if len({tuple(cell(row.get(k)) for k in names[:n]) for row in rows}) == len(rows):
            return names[:n], True
    return names, False
