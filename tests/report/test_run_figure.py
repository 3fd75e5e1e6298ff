"""`pazo-report run <run dir>`: a run's curves drawn from its metrics.jsonl into a PNG beside it,
whatever the run logged (a non-private run has no epsilon, an evaluation row comes every few steps),
and a metrics file still being written is read up to its last whole row."""
import json

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pazo.run.metrics_file import read_metric_rows
from pazo.report.run_figure import FILE, main, series

PNG = b"\x89PNG\r\n\x1a\n"

row = st.fixed_dictionaries(
    {"step": st.integers(1, 500)},
    optional={"epsilon": st.floats(0, 10), "train_loss": st.floats(0, 5), "test_accuracy": st.floats(0, 1),
              "val_accuracy": st.floats(0, 1), "test_loss": st.floats(0, 5), "val_loss": st.floats(0, 5)})


def write_rows(path, rows, torn: str = ""):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(row, min_size=1, max_size=40), torn=st.sampled_from(["", '{"step": 9', '{"st']))
def test_each_step_is_read_once_its_last_row_kept_and_a_torn_last_line_left(tmp_path, rows, torn):
    path = tmp_path / "metrics.jsonl"
    write_rows(path, rows, torn)
    got = read_metric_rows(path)
    assert got.torn == bool(torn)
    read = got.rows
    last = {r["step"]: r for r in rows}
    assert [r["step"] for r in read] == sorted(last)
    assert read == [last[s] for s in sorted(last)]
    for key in ("epsilon", "test_accuracy"):
        steps, values = series(read, key)
        assert steps == sorted(s for s, r in last.items() if key in r)
        assert values == [last[s][key] for s in steps]


def test_the_png_is_written_beside_the_run_and_replaced_whole(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "epoch": s / 18, "epsilon": 0.01 * s, "train_loss": 2.3 - 0.01 * s}
            | ({"test_accuracy": 0.1 + 0.01 * s, "val_accuracy": 0.12 + 0.01 * s} if s % 10 == 0 else {})
            for s in range(1, 61)]
    write_rows(run / "metrics.jsonl", rows)
    assert main([str(run)]) == 0
    png = run / FILE
    assert png.read_bytes().startswith(PNG) and str(png) in capsys.readouterr().out
    assert sorted(p.name for p in run.iterdir()) == [FILE, "metrics.jsonl"]     # no temporary file left
    write_rows(run / "metrics.jsonl", rows[:5])                                 # a non-private run, say: fewer rows
    out = tmp_path / "elsewhere.png"
    assert main([str(run), "--out", str(out)]) == 0 and out.read_bytes().startswith(PNG)


@pytest.mark.parametrize("content, expected", [
    (None, "no metrics.jsonl"),
    ('{"step": 1, "epoch": 0.1}\n', "no accuracy, loss or epsilon"),
])
def test_a_directory_without_curves_is_one_error_line(tmp_path, capsys, content, expected):
    if content is not None:
        (tmp_path / "metrics.jsonl").write_text(content)
    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("pazo: error:") and expected in err[0]
    assert not (tmp_path / FILE).exists()
