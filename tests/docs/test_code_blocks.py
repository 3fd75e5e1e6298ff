"""Every code block of the README, the CHANGELOG and docs/ opens and closes on a fence line of its
own: a closing fence with text after it is read by Markdown as the opening of another block, which
turns the rest of the page inside out (MkDocs' strict build does not see it)."""
import re

import pytest

from pazo import REPO_ROOT

PAGES = sorted([REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", *(REPO_ROOT / "docs").rglob("*.md")])
#: a fence: three backticks, then nothing, or a language and an optional title
FENCE = re.compile(r'\s*```(\w+( title="[^"]+")?)?\s*')


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_code_blocks_open_and_close_on_their_own_lines(page):
    lines = [(number, line) for number, line in enumerate(page.read_text().splitlines(), 1)
             if line.lstrip().startswith("```")]
    bad = [f"{page.name}:{number}: {line.strip()}" for number, line in lines if not FENCE.fullmatch(line)]
    assert not bad, bad
    opened = None
    for number, line in lines:
        if opened is None:
            opened = number
        else:
            assert line.strip() == "```", f"{page.name}:{number}: a block opened on line {opened} closes with {line!r}"
            opened = None
    assert opened is None, f"{page.name}: the block opened on line {opened} never closes"
