"""A built run's attempt starts in one step (`pazo.run.attempts.start_attempt`): checked against
what an earlier attempt computed, its loop state read from the checkpoint it resumes, the ranks'
agreement, then the first writes. Nothing in the run directory changes before the agreement: a
refused agreement (another rank's facts differ) leaves the directory's files as they were, fresh
or resumed; an agreement is followed by the first writes (the summary says running, config.yaml
is its owner's alone), and the ranks agreed on the step the attempt starts from. Over random
earlier attempts (none, or one preempted at a random step) and agreements given or refused."""
import json
import os
import signal
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pazo.errors import ConfigError
from pazo.files.rundir import check_output_dir
from pazo.methods import method_info
from pazo.run.attempts import plan_launch, start_attempt
from pazo.run.build import build_run
from pazo.run.validate import validated_run_config
from pazo.train import run
from step_faults import signalled_at_step


def files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by its path, with its content."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(preempted_at=st.none() | st.integers(1, 5), agreed=st.booleans())
def test_nothing_is_written_before_the_ranks_agree_and_the_first_writes_follow_the_agreement(
        preempted_at, agreed, hydra_cfg, tmp_path, monkeypatch):
    cfg = hydra_cfg("method=dpzero", "train.steps=6", "train.checkpoint_every=1")
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    if preempted_at is not None:   # a preempted attempt, with its checkpoint at that step
        owner = method_info("dpzero").cls
        with monkeypatch.context() as patch:
            patch.setattr(owner, "step", signalled_at_step(owner.step, preempted_at, signal.SIGTERM))
            assert run(cfg, run_dir)["status"] == "preempted"
    check_output_dir(run_dir)
    typed = validated_run_config(cfg)
    start = plan_launch(run_dir, typed)
    r = build_run(typed, earlier_engine=(start.summary or {}).get("engine") if start.resuming else None)
    before, told = files(run_dir), []

    def agree(facts):
        told.append((facts, files(run_dir)))
        if not agreed:
            raise ConfigError("rank 1 runs another config")

    if not agreed:
        with pytest.raises(ConfigError, match="rank 1"):
            start_attempt(run_dir, start, r, r.sampler(), agree)
        assert files(run_dir) == before
    else:
        loop, recorder, summary = start_attempt(run_dir, start, r, r.sampler(), agree)
        recorder.close(failed=False)
        assert start.resuming == (preempted_at is not None) and loop.step == (preempted_at or 0)
        assert told[0][0] == r.rank_facts(loop.step) and told[0][0]["start"] == f"step {loop.step}"
        assert summary["status"] == json.loads((run_dir / "summary.json").read_text())["status"] == "running"
        assert stat.S_IMODE(os.stat(run_dir / "config.yaml").st_mode) == 0o600
    assert len(told) == 1 and told[0][1] == before   # the ranks agree before the first write
