"""One exit status for a report's input it cannot use (issue #60): `pazo-report tables|figures|
llm-table|audit-table|run` given folders that hold nothing usable (none at all, only corrupt or
unfinished run directories, a run without metrics) end with one `pazo: error:` line and exit 2, as a
folder that does not exist and every other mistake in a pazo command's input do; tables, figures and
the LLM table exited 1."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo import report

CONFIG = "dataset: {name: digits}\nmethod: {name: dpzero}\nprivacy: {epsilon: 1.0}\nseed: 0\n"
#: what a folder holds: run directories' files, none of them usable by any report
UNUSABLE = {
    "nothing": {},
    "a stray file": {"notes.txt": "hello"},
    "summary cut short": {"config.yaml": CONFIG, "summary.json": '{"status": '},
    "config not YAML": {"config.yaml": ": : :\n  - [", "summary.json": "{}"},
    "run unfinished": {"config.yaml": CONFIG, "summary.json": json.dumps({"status": "failed"})},
}
COMMANDS = ["tables", "figures", "llm-table", "audit-table", "run"]


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(COMMANDS), content=st.sampled_from(sorted(UNUSABLE)), missing=st.booleans())
@example(command="tables", content="summary cut short", missing=False)   # the bad-inputs guide's transcript
@example(command="figures", content="nothing", missing=False)
@example(command="llm-table", content="run unfinished", missing=False)
@example(command="tables", content="run unfinished", missing=False)   # (wrote tables of no run, exit 0)
@example(command="figures", content="run unfinished", missing=False)   # (drew empty figures, exit 0)
def test_a_report_with_nothing_usable_is_one_line_and_exit_2(command, content, missing, tmp_path_factory, capsys):
    folder = tmp_path_factory.mktemp("sweep") / "x"
    if not missing:
        run_dir = folder / "digits" / "dpzero" / "r" if command != "run" else folder
        run_dir.mkdir(parents=True)
        for name, text in UNUSABLE[content].items():
            (run_dir / name).write_text(text)
    out = ["--out", str(tmp_path_factory.mktemp("out") / ("figure.png" if command == "run" else "tables"))]
    code = report.main([command, str(folder), *(out if command in ("tables", "figures", "run") else [])])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("pazo: error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, (code, err)
