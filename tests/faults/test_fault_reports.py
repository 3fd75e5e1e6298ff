"""Reports and figures killed while writing (round two): every output of `pazo-report` and of the
benchmarks' own files goes through `pazo.files.rundir.write_atomic`, so a write the disk refuses part-way
leaves the earlier file whole (never a 0-byte csv, png or pdf, never a `.tmp`) and ends in one line."""
from __future__ import annotations

import errno

import pytest
from fault_inputs_helpers import assert_one_error, run_entry
from fault_runtime_helpers import Disk, leftovers, snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fault_tools import good_run

from pazo import report
from pazo.files.rundir import save_figure_atomic, write_text_atomic


FIGURE2 = "figure2_accuracy_vs_epsilon"


@pytest.mark.parametrize("command,outputs", [("tables", ("table1_demo_digits.csv", "table1_demo_digits.md")),
                                             ("figures", (f"{FIGURE2}.png", f"{FIGURE2}.pdf"))])
@pytest.mark.parametrize("refuse", [None, errno.EIO])
def test_a_report_on_a_disk_that_fills_keeps_its_earlier_outputs_whole(command, outputs, refuse, tmp_path,
                                                                       monkeypatch, capsys):
    root, out = tmp_path / "table1_demo", tmp_path / "out"
    good_run(root)
    code, _, err = run_entry(report.main, [command, str(root), "--out", str(out)], capsys)
    assert code == 0, err
    before = snapshot(out)
    assert all(before.get(name) for name in outputs), before
    Disk(monkeypatch, free=7, refuse=refuse)   # the next write runs out of space after a few bytes
    code, _, err = run_entry(report.main, [command, str(root), "--out", str(out)], capsys)
    assert code == 75
    assert_one_error(code, err, "could not write", str(out))
    assert snapshot(out) == before and not leftovers(out)
    assert all((out / name).stat().st_size > 0 for name in outputs)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(old=st.text(min_size=1, max_size=200), new=st.text(max_size=400), free=st.integers(0, 400))
def test_a_text_output_is_the_old_or_the_new_text_never_a_part(old, new, free, tmp_path_factory):
    """The rule over random texts and disk room: after a write, the file holds the old text or the new."""
    path = tmp_path_factory.mktemp("out") / "table.md"
    path.write_bytes(old.encode())
    with pytest.MonkeyPatch.context() as mp:
        Disk(mp, free=free)
        try:
            write_text_atomic(path, new)
        except OSError:
            pass
    assert path.read_bytes() in (old.encode(), new.encode()) and not leftovers(path.parent)
    assert path.read_bytes() == new.encode() or len(new.encode()) > free


def test_a_figure_is_drawn_before_its_file_is_opened(tmp_path, monkeypatch):
    """A figure that fails while drawing (a kill, a bad glyph) never opened its file: the old one stays."""
    path = tmp_path / "figure2.png"
    path.write_bytes(b"old figure")

    class Broken:
        def savefig(self, f, **kwargs):
            f.write(b"half a png")
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_figure_atomic(Broken(), path)
    assert path.read_bytes() == b"old figure" and not leftovers(tmp_path)
