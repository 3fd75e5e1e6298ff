"""No function in the package is over 60 lines (issue #57): a function that long does more than one
job, and a reader cannot hold it. Counted as `ast` sees it: `end_lineno - lineno + 1`, the
docstring included (a decorator's lines not)."""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT
from hypothesis import example, given, settings
from hypothesis import strategies as st

MAX_LINES = 60


def long_functions(package: Path) -> list[str]:
    """`path:line name (N lines)` for each function (nested ones and methods too) over MAX_LINES
    lines in the .py files below `package`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_the_package_is_over_60_lines():
    too_long = long_functions(ROOT / "pazo")
    assert not too_long, (f"functions over {MAX_LINES} lines (split them into functions with one job "
                          "each):\n" + "\n".join(too_long))


def _function(name: str, body_lines: int, indent: str = "") -> str:
    """A function of `body_lines + 2` lines: def, docstring, body."""
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))
    return f'{indent}def {name}():\n{indent}    """Doc."""\n{body}'


@settings(deadline=None, max_examples=25)
@given(lines=st.integers(3, 2 * MAX_LINES), nested=st.booleans(), async_def=st.booleans())
@example(lines=MAX_LINES, nested=False, async_def=False)
@example(lines=MAX_LINES + 1, nested=True, async_def=False)
def test_a_function_is_named_exactly_when_over_the_limit(tmp_path_factory, lines, nested, async_def):
    package = tmp_path_factory.mktemp("pkg") / "pkg"
    (package / "sub").mkdir(parents=True)
    source = _function("inner", lines - 2, "    ") if nested else _function("f", lines - 2)
    if nested:
        source = "class C:\n" + source
    if async_def:
        source = source.replace("def ", "async def ")
    (package / "sub" / "mod.py").write_text(source)
    named = long_functions(package)
    assert bool(named) == (lines > MAX_LINES)
    if named:
        assert named == [f"pkg/sub/mod.py:{1 + nested} {'inner' if nested else 'f'} ({lines} lines)"]
