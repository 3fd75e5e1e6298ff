"""A Ctrl-C wherever it lands in a launch (`pazo.train.main`): before the launch is accepted (in
set-up), once it is (its first summary written, the loop not started), in the loop, or after the
run wrote its last summary (finished, preempted or failed), with or without an earlier attempt's
summary in the directory. The line it prints is true to the files (the status on disk, whose
attempt wrote it, the steps done) and the exit status is the signal's, or the run's where the run
had ended already (a Ctrl-C after the end said "during set-up ... the earlier attempt's (status
finished)" and exited 130 for a run that had just finished)."""
import json
import logging
import os
import signal
from types import SimpleNamespace

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hypothesis import HealthCheck, given, settings, strategies as st

import pazo.run.launch
import pazo.train
from pazo.train import MultirunProgress
from conftest import tiny_cfg
from fault_runtime_helpers import TINY
from step_faults import fail_at_step, signalled_at_step
from pazo.methods.two_point import TwoPointMethod

STEPS = 6
CFG = [*TINY, f"train.steps={STEPS}", "train.checkpoint_every=2"]


def _signal_at_step(patch, at: int, *signums: int) -> None:
    """Each of `signums` sent to this process, in order, once the run has taken step `at` (the
    method's step: `step_faults.signalled_at_step`)."""
    step = TwoPointMethod.step
    for signum in signums:
        step = signalled_at_step(step, at, signum)
    patch.setattr(TwoPointMethod, "step", step)


def _ctrl_c_in(patch, module, name: str) -> None:
    """A Ctrl-C as `module.name` is called (it runs on; the KeyboardInterrupt lands at once after)."""
    original = getattr(module, name)

    def pressed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)
    patch.setattr(module, name, pressed)


def _ctrl_c_in_the_header(patch) -> None:
    """A Ctrl-C as the run's header is shown: the launch is accepted (its first summary, running,
    written), the loop not started."""
    printer = pazo.train._header_printer

    def pressing(job):
        show = printer(job)

        def shown(*args):
            os.kill(os.getpid(), signal.SIGINT)
            return show(*args)
        return shown
    patch.setattr(pazo.train, "_header_printer", pressing)


def _launch(caplog) -> tuple[int, str]:
    """`pazo.train.main` on the run (Hydra's task, as Hydra calls it for a single run: `_as_hydra`): its
    exit status and the line it logged last."""
    caplog.clear()
    try:
        pazo.train.main(tiny_cfg(*CFG))
        code = 0
    except SystemExit as stop:
        code = stop.code
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)   # (main's last handler ends the process)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    return code, errors[-1] if errors else ""


def _summary(run_dir) -> dict | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def _as_hydra(monkeypatch, run_dir) -> None:
    """Hydra's config of a single run into `run_dir`, as `main` reads it."""
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: SimpleNamespace(
        runtime=SimpleNamespace(output_dir=str(run_dir)), output_subdir=".hydra", mode=RunMode.RUN,
        job=SimpleNamespace(num=0), overrides=SimpleNamespace(task=[]))))


def _earlier_attempt(run_dir, monkeypatch, caplog, how: str, at: int) -> dict:
    """An earlier attempt stopped at step `at`: by a SIGTERM (`preempted`) or one Ctrl-C (`interrupted`)."""
    with monkeypatch.context() as patch:
        _signal_at_step(patch, at, signal.SIGTERM if how == "preempted" else signal.SIGINT)
        _launch(caplog)
    earlier = _summary(run_dir)
    assert earlier["status"] == how
    return earlier


MOMENTS = st.one_of(st.just(("set-up", None, 0)), st.just(("accepted", None, 0)),
                    st.tuples(st.just("loop"), st.none(), st.integers(1, STEPS)),
                    st.tuples(st.just("after the end"), st.sampled_from(["finished", "preempted", "failed"]),
                              st.integers(1, STEPS)))
EARLIER = st.one_of(st.none(), st.tuples(st.sampled_from(["preempted", "interrupted"]), st.integers(1, STEPS - 1)))


@settings(max_examples=24, deadline=None, suppress_health_check=list(HealthCheck))   # (the fixtures: each
# example its own directory, patches and records; the runs: a second each)
@given(moment=MOMENTS, earlier=EARLIER)
def test_a_ctrl_c_says_what_the_files_hold_wherever_it_lands(moment, earlier, hydra_cfg, tmp_path_factory,
                                                              monkeypatch, caplog):
    where, ending, at = moment
    first = earlier[1] + 1 if earlier else 1   # (a resumed attempt's first step)
    at = first + (at - 1) % (STEPS - first + 1)
    run_dir = tmp_path_factory.mktemp("run")
    _as_hydra(monkeypatch, run_dir)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    before = _earlier_attempt(run_dir, monkeypatch, caplog, *earlier) if earlier else None
    with monkeypatch.context() as patch:
        if where == "set-up":
            _ctrl_c_in(patch, pazo.run.launch, "build_run")
        elif where == "accepted":
            _ctrl_c_in_the_header(patch)
        elif where == "loop":
            _signal_at_step(patch, at, signal.SIGINT, signal.SIGINT)   # a stop, then a second Ctrl-C: at once
        else:
            if ending == "preempted":
                _signal_at_step(patch, at, signal.SIGTERM)
            elif ending == "failed":
                fail_at_step(patch, TwoPointMethod, "step", at, RuntimeError("a bug in the step"))
            _ctrl_c_in(patch, pazo.run.launch, "drop_hydra_record")   # (the launch's last act, the summary written)
        code, line = _launch(caplog)
    on_disk = _summary(run_dir)
    assert line.startswith("pazo: interrupted") and "\n" not in line, line
    if where == "set-up":
        assert code == 130 and on_disk == before   # nothing of this attempt was written
        assert "during set-up" in line and "nothing was trained" in line
        assert (f"earlier attempt's (status {before['status']})" in line) if before else "earlier" not in line
    elif where == "accepted":
        assert code == 130 and on_disk["status"] == "running" and on_disk != before
        assert f"before this attempt recorded how it stopped: {run_dir}/summary.json still says running" in line
    elif where == "loop":
        assert code == 130 and on_disk["status"] == "interrupted" and on_disk != before
        assert line.startswith("pazo: interrupted; ") and "records the steps done" in line
    else:
        assert on_disk["status"] == ending and code == pazo.train.EXIT_CODES[ending]
        assert (f"after the run ended: {run_dir}/summary.json records status {ending} after step "
                f"{on_disk['steps_done']} of {STEPS}") in line
        assert "set-up" not in line and "earlier" not in line


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])   # (caplog cleared for each)
@given(ending=st.sampled_from(["finished", "preempted", "failed", "fault"]), jobs=st.integers(1, 4),
       data=st.data())
def test_a_ctrl_c_after_a_multirun_job_ended_stops_the_multirun_saying_how_the_job_ended(ending, jobs, data,
                                                                                         tmp_path_factory, caplog):
    """In a multirun, a Ctrl-C after a job wrote its last summary stops the multirun (exit 130) with
    the job counted as its summary says (was: counted as interrupted, or for a finished job, said to
    have been interrupted in its set-up)."""
    from pazo.run.cli import MultirunJob

    job = data.draw(st.integers(0, jobs - 1))
    run_dir = tmp_path_factory.mktemp("job")
    progress = MultirunProgress([MultirunJob(n, [f"method.lr={n}"], [f"method.lr={n}"]) for n in range(jobs)])
    progress.ended.update({n: "finished" for n in range(job)})
    mine = {"status": ending, "steps_done": 3, "steps_planned": 4, "failure": "fault after step 3: disk"}
    saved, pazo.train._MULTIRUN = pazo.train._MULTIRUN, progress
    caplog.clear()
    try:
        with pytest.raises(SystemExit) as stop:
            pazo.train._interrupted(run_dir, KeyboardInterrupt(), mine, job)
    finally:
        pazo.train._MULTIRUN = saved
        signal.signal(signal.SIGINT, signal.default_int_handler)
    said, report = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR][-2:]
    assert stop.value.code == 130 and progress.ended[job] == ending
    assert f"after the run ended: {run_dir}/summary.json records status {ending} after step 3 of 4" in said
    assert f"stopped (interrupted after job {job + 1} of {jobs} ended)" in report
    finished = job + (ending == "finished")
    assert f"{finished} of {jobs} jobs finished" in report
    assert (f"(method.lr={job}) ({ending})" not in report) if ending == "finished" else \
        f"method.lr={job} ({ending})" in report
