"""Every result file under scripts/results/ says what produced it: the command, the commit, the date
and the machine (with its device details), or, for a file measured before the benchmarks wrote one
of them, `"not recorded"` with a `provenance_note` that says so in words (never a bare null); and
the benchmarks' writer fills them for every new measurement."""
import datetime
import json
import re

import pytest
from hypothesis import given, strategies as st

from pazo.bench.common import write_result
from tools.docs.results import provenance, result_files

COMMIT = re.compile(r"^[0-9a-f]{7,40}(\+dirty)?$")
KEYS = ("command", "commit", "date", "machine")
NOT_RECORDED = "not recorded"


def check_provenance(data: dict) -> list[str]:
    problems = [f"no {key!r}" for key in KEYS if key not in data]
    if problems:
        return problems
    problems += [f"{key} is null: write {NOT_RECORDED!r} and say why in provenance_note"
                 for key in KEYS if data[key] is None]
    unrecorded = [key for key in KEYS if data[key] == NOT_RECORDED]
    note = data.get("provenance_note")
    if unrecorded and not (isinstance(note, str) and all(key in note for key in unrecorded)):
        problems.append(f"{', '.join(unrecorded)} not recorded, and no provenance_note naming them")
    if problems:
        return problems
    if data["command"] != NOT_RECORDED and (not isinstance(data["command"], str) or not data["command"].strip()):
        problems.append(f"command {data['command']!r} is not a command line")
    if data["commit"] != NOT_RECORDED and not COMMIT.match(str(data["commit"])):
        problems.append(f"commit {data['commit']!r} is not a git commit")
    if data["date"] != NOT_RECORDED:
        try:
            datetime.datetime.fromisoformat(data["date"])
        except (TypeError, ValueError):
            problems.append(f"date {data['date']!r} is not ISO 8601")
    machine = data["machine"]
    if machine != NOT_RECORDED and not (isinstance(machine, dict) and {"platform", "device"} & set(machine)):
        problems.append(f"machine {machine!r} is neither {NOT_RECORDED!r} nor a dict naming its platform or device")
    return problems


def test_committed_result_files_carry_their_provenance():
    files = result_files()
    assert len(files) >= 20     # the top level and its result subfolders (not the audits' run directories)
    bad = {str(path): problems for path in files if (problems := check_provenance(json.loads(path.read_text())))}
    assert not bad, f"result files without their provenance: {bad}"


def test_the_writer_records_command_commit_date_and_machine(tmp_path):
    out = tmp_path / "r.json"
    write_result(out, {"results": [{"x": 1}], "machine": {"device": "cpu x2", "threads": 1}})
    data = json.loads(out.read_text())
    assert list(data)[:4] == ["command", "commit", "date", "machine"]
    assert check_provenance(data) == []
    assert data["machine"]["device"] == "cpu x2" and data["machine"]["threads"] == 1 and data["machine"]["platform"]
    age = datetime.datetime.now(datetime.UTC) - datetime.datetime.fromisoformat(data["date"])
    assert datetime.timedelta(0) <= age < datetime.timedelta(minutes=5)
    assert data["results"] == [{"x": 1}]


def test_the_writer_keeps_what_a_benchmark_gives(tmp_path):
    out = tmp_path / "r.json"
    write_result(out, {"command": "pazo-bench x --y", "commit": None, "date": "2026-01-02T03:04:05+00:00"})
    data = json.loads(out.read_text())
    assert data["command"] == "pazo-bench x --y" and data["commit"] is None
    assert data["date"] == "2026-01-02T03:04:05+00:00"


@pytest.mark.parametrize("data, problem", [
    ({"command": "", "commit": "abc1234", "date": "2026-01-02", "machine": {"device": "cpu"}}, "not a command line"),
    ({"command": "x", "commit": "abc1234", "date": "2026-01-02"}, "no 'machine'"),
    ({"command": "x", "commit": "not a hash", "date": "2026-01-02", "machine": {"device": "cpu"}}, "not a git commit"),
    ({"command": "x", "commit": "abc1234", "date": "yesterday", "machine": {"device": "cpu"}}, "not ISO 8601"),
    ({"command": "x", "commit": "abc1234", "date": "2026-01-02", "machine": "Linux"}, "neither"),
    ({"command": "x", "commit": None, "date": "2026-01-02", "machine": {"device": "cpu"}}, "commit is null"),
    ({"command": "x", "commit": "abc1234", "date": "not recorded", "machine": {"device": "cpu"}}, "no provenance_note"),
    ({"command": "x", "commit": "not recorded", "date": "not recorded", "machine": {"device": "cpu"},
      "provenance_note": "date not recorded"}, "no provenance_note naming them"),
])
def test_the_check_names_what_is_missing_or_wrong(data, problem):
    assert any(problem in p for p in check_provenance(data))


def test_a_memory_rerun_keeps_the_earlier_result_with_its_commit_and_date(tmp_path):
    from pazo.bench.memory import earlier_results

    out = tmp_path / "memory.json"
    write_result(out, {"command": "pazo-bench memory", "commit": "abc1234", "date": "2026-01-02T03:04:05+00:00",
                       "rows": [{"what": "forward", "peak_bytes": 10, "ratio": 1.0, "seconds": 2.0}]})
    history = earlier_results(out)
    assert history == [{"note": "the run before, commit abc1234", "command": "pazo-bench memory",
                        "date": "2026-01-02T03:04:05+00:00",
                        "rows": [{"what": "forward", "peak_bytes": 10, "ratio": 1.0}]}]


@given(st.sets(st.sampled_from(KEYS)), st.booleans())
def test_a_key_not_recorded_passes_only_with_a_note_naming_it_and_the_page_says_so(unrecorded, with_note):
    data = {"command": "pazo-bench x", "commit": "abc1234", "date": "2026-01-02T03:04:05+00:00",
            "machine": {"device": "cpu x2"}}
    data.update({key: NOT_RECORDED for key in unrecorded})
    if with_note:
        data["provenance_note"] = f"{', '.join(sorted(unrecorded))} not recorded when measured"
    assert (check_provenance(data) == []) == (with_note or not unrecorded)
    page = "\n".join(provenance(data))
    assert page.count(NOT_RECORDED) >= len(unrecorded)
    if unrecorded and with_note:
        assert data["provenance_note"] in page
