"""pazo-sweep's counts are counts (issue #60, round three's catalogue: `--max-runs -1` was taken as
a limit and every grid refused as "more than the limit of -1"): a count out of its range, or not an
integer, is one line naming the option before the spec is read."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pazo.sweep.command as sweep

#: option -> the least value it takes
COUNTS = {"--max-runs": 1, "--show": 0}


def refused_line(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        sweep.main(argv)
    assert stop.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(lines)
    return lines[-1]


#: capsys and tmp_path hold across examples (each example reads its own lines; nothing is written)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(sorted(COUNTS)),
       value=st.one_of(st.integers(-10**6, 0), st.sampled_from(["1.5", "x", "1e3", ""])))
@example(option="--max-runs", value=-1)   # the catalogue's case
def test_a_count_out_of_range_is_one_line_naming_its_option(option, value, tmp_path, capsys):
    if isinstance(value, int):
        value = min(value, COUNTS[option] - 1)
    line = refused_line(["demo", "--dry-run", "--out", str(tmp_path / "out"), option, str(value)], capsys)
    assert f"argument {option}: must be an integer >= {COUNTS[option]}" in line, line
    assert not (tmp_path / "out").exists()
