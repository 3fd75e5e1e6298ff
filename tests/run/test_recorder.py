"""The Recorder is the one writer of a run's files, the audit's included: a record other than the
summary (`write_record`) reads back as the JSON of what was given (non-finite numbers as null), and a
run that logs no rows (`rows=False`, the audit) has no metrics.jsonl."""
from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from pazo.recorder import Recorder

DISABLED = OmegaConf.create({"mode": "disabled"})
values = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                   max_size=3), max_leaves=12)


def finite(value):
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


@settings(max_examples=30, deadline=None)
@given(record=st.dictionaries(st.text(min_size=1, max_size=6), values, max_size=4), rows=st.booleans())
def test_a_record_reads_back_as_written_and_rows_only_when_asked(tmp_path_factory, record, rows):
    run_dir = tmp_path_factory.mktemp("run")
    recorder = Recorder(run_dir, OmegaConf.create({"seed": 3}), DISABLED, rows=rows)
    recorder.write_record("audit.json", record)
    recorder.write_summary({"status": "finished", "audit": record})
    recorder.close(failed=False)
    assert json.loads((run_dir / "audit.json").read_text()) == finite(record)
    assert json.loads((run_dir / "summary.json").read_text())["audit"] == finite(record)
    assert (run_dir / "metrics.jsonl").exists() == rows
    assert "seed: 3" in (run_dir / "config.yaml").read_text()
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp") or ".tmp." in p.name]
