"""pazo-report tables and figures: a file where the --out folder (or a folder above it) would be
is one line naming --out and the file, exit 2, before anything is read or written (issue #60,
round three's catalogue: `pazo-report tables sw --out afile` ended in `afile: File exists`, exit
75, the status of a machine that refused a write)."""
from __future__ import annotations

import itertools

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo.report import figures, tables

COMMANDS = {"tables": tables.main, "figures": figures.main}
NUMBERS = itertools.count()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(sorted(COMMANDS)), below=st.lists(st.sampled_from(["a", "b", "ü x"]), max_size=3))
@example(command="tables", below=[])   # the catalogue's case: --out names a file
def test_a_file_in_the_out_folders_place_is_one_line_before_any_work(command, below, tmp_path, capsys):
    case = tmp_path / f"case{next(NUMBERS)}"
    sweep = case / "sweep"
    sweep.mkdir(parents=True)
    blocker = case / "afile"
    blocker.write_text("mine")
    out = blocker.joinpath(*below)
    assert COMMANDS[command]([str(sweep), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pazo: error: --out {out}: {blocker} is a file, not a folder; give another --out"]
    assert blocker.read_text() == "mine" and sorted(p.name for p in case.iterdir()) == ["afile", "sweep"]
