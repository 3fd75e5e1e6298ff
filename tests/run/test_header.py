"""What a run prints before its first step: the assumptions of its guarantee once, in one line, each
in words, their whole text in summary.json."""
import pytest

from pazo.privacy.plan import guarantee_assumptions
from pazo.summary import ASSUMPTION_WORDS, assumptions_line


@pytest.mark.parametrize("secure_mode", [False, True])
def test_every_assumption_is_named_in_words_on_one_line(secure_mode):
    assumptions = guarantee_assumptions(secure_mode)
    line = assumptions_line(assumptions)
    assert "\n" not in line and line.startswith("assumes: ") and len(line) <= 160
    assert set(assumptions) <= set(ASSUMPTION_WORDS)   # a new assumption needs its words here
    assert all(ASSUMPTION_WORDS[name] in line for name in assumptions)
    assert ("secret" in line) == (not secure_mode)
