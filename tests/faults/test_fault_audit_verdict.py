"""`pazo-audit`'s command line (`pazo.audit.command`): its exit status says the verdict (4: the run
is NOT as private as printed, 0: no evidence against it), so that a script or CI can gate on it;
its --help lists the statuses; a multirun exits 4 when any job's verdict was 4."""
from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import given, settings, strategies as st

from fault_inputs_helpers import run_entry
from pazo.audit import command


@pytest.mark.parametrize("extra", [[], ["audit.debug_break=noise_div10"]])
def test_the_exit_status_is_4_exactly_when_the_verdict_is_not_as_private_as_printed(extra, tmp_path, capsys):
    """A correct run and a run whose noise is a tenth of the claimed one (was: both exit 0)."""
    run_dir = tmp_path / "audit"
    code, out, err = run_entry(command.cli, ["method=dpzero", "train.steps=3", "audit.canaries=50",
                                             "device=cpu", f"hydra.run.dir={run_dir}", *extra], capsys)
    audit = json.loads((run_dir / "summary.json").read_text())["audit"]
    assert code == (command.NOT_AS_PRIVATE if audit["exceeds_printed"] else 0), err[-2000:]
    assert audit["exceeds_printed"] == bool(extra)   # (the break is caught; the correct run is not flagged)
    verdict = [line for line in (out + err).splitlines() if "verdict:" in line]
    assert len(verdict) == 1 and ("NOT as private" in verdict[0]) == audit["exceeds_printed"]
    assert "Traceback" not in err


@settings(deadline=None)
@given(verdicts=st.lists(st.booleans(), min_size=1, max_size=6), sweeping=st.booleans())
def test_the_status_follows_the_verdicts_of_a_run_and_of_a_multirun(verdicts, sweeping):
    """One audit: 4 iff its verdict says NOT as private; a multirun: every job runs, then 4 iff any
    job's did, naming those jobs' directories."""
    summaries = [{"run_dir": f"/audits/{i}", "audit": {"exceeds_printed": v, "epsilon_audited": float(i)}}
                 for i, v in enumerate(verdicts)]
    if not sweeping:
        with pytest.raises(SystemExit) if verdicts[0] else _nothing() as stop:
            command._verdict(summaries[0], sweeping=False)
        assert (stop.value.code if verdicts[0] else 0) == (4 if verdicts[0] else 0)
        return
    assert [command._verdict(s, sweeping=True) for s in summaries] == [float(i) for i in range(len(verdicts))]
    said = io.StringIO()
    with pytest.raises(SystemExit) if any(verdicts) else _nothing() as stop, contextlib.redirect_stderr(said):
        command._multirun_verdict()
    err = said.getvalue()
    if any(verdicts):
        assert stop.value.code == 4 and err.count("\n") == 1
        assert all((f"/audits/{i}" in err) == v for i, v in enumerate(verdicts))
    assert command._NOT_AS_PRIVATE == []


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_help_lists_every_exit_status_and_no_path_of_a_checkout(capsys):
    code, out, err = run_entry(command.cli, ["--help"], capsys)
    assert code == 0 and err == ""
    for meaning, status in command.EXIT_CODES.items():
        assert f"{status:>3}  {meaning}" in out
    assert "NOT as private as printed" in out and "docs/" not in out
