"""A step-size schedule that does not fit the run is refused before compute (issue #60:
`schedule=cosine schedule.warmup_steps=500 train.steps=5` was accepted, and the run ended still
warming up): a warm-up longer than the run, or a step decay that would never come."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from pazo.config_schema import ScheduleSchema
from pazo.errors import ConfigError
from pazo.methods.update_rule import StepSchedule
from pazo.run.cli import check_overrides
from pazo.run.validate import check_schedule_fits, validate_against_data


def run_config(schedule: dict, steps: int | None = None, epochs: float = 1.0, batch: int = 10):
    return OmegaConf.create({"schedule": schedule, "method": {"name": "sgd"},
                             "train": {"steps": steps, "epochs": epochs, "batch_size": batch}})


def ends_as_planned(schedule: dict, steps: int) -> bool:
    """What the rule guards, read off the factors the run would use: a warm-up reaches the full step
    size within the run, and a step decay comes within it."""
    factors = [StepSchedule.of(ScheduleSchema(**schedule), steps).factor(t) for t in range(1, steps + 1)]
    if schedule["name"] in ("warmup", "cosine"):
        return 1.0 in factors
    if schedule["name"] == "step":
        return min(factors) < 1.0
    return True


SCHEDULES = st.one_of(
    st.builds(lambda w: {"name": "warmup", "warmup_steps": w}, st.integers(1, 60)),
    st.builds(lambda w: {"name": "cosine", "warmup_steps": w, "final": 0.0}, st.integers(0, 60)),
    st.builds(lambda n: {"name": "step", "decay_every": n, "gamma": 0.5}, st.integers(1, 60)),
    st.just({"name": "constant"}), st.just({"name": "inv_sqrt"}))


@settings(max_examples=200, deadline=None)
@given(SCHEDULES, st.integers(1, 50))
@example({"name": "cosine", "warmup_steps": 500, "final": 0.0}, 5)
def test_a_schedule_is_refused_exactly_when_the_run_would_not_end_as_it_plans(schedule, steps):
    """The rule, over random (schedule, steps): refused, with the key, its value, the run's steps and
    a fix, exactly when the warm-up outlasts the run or the step decay never comes."""
    try:
        cfg = run_config(schedule, steps=steps)
        check_schedule_fits(cfg.train, cfg.schedule, steps)
    except ConfigError as err:
        key = "warmup_steps" if schedule["name"] != "step" else "decay_every"
        assert f"schedule.{key}={schedule[key]} " in str(err) and f"the run's {steps} steps (train.steps={steps})" \
            in str(err) and "; give " in str(err)
        assert not ends_as_planned(schedule, steps)
    else:
        assert ends_as_planned(schedule, steps)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 400), st.sampled_from([0.5, 1.0, 2.0]), st.integers(1, 64))
def test_steps_from_epochs_are_the_run_the_schedule_must_fit(warmup, epochs, batch):
    """With `train.epochs`, the steps are known once the data are: the check with the data's sizes
    uses the steps the run would plan, and gives them to the run's assembly."""
    n = 320
    cfg = run_config({"name": "warmup", "warmup_steps": warmup}, epochs=epochs, batch=batch)
    steps = round(epochs / (batch / n))
    if warmup > steps:
        with pytest.raises(ConfigError, match=rf"the run's {steps} steps \(train.epochs={epochs:g}\)"):
            validate_against_data(cfg.train, cfg.method, cfg.schedule, n, 0)
    else:
        assert validate_against_data(cfg.train, cfg.method, cfg.schedule, n, 0) == steps


def test_the_reported_command_line_is_one_line_before_compute():
    problem = check_overrides(["schedule=cosine", "schedule.warmup_steps=500", "train.steps=5"])
    assert problem == ("schedule.warmup_steps=500 is longer than the run's 5 steps (train.steps=5): the run would "
                       "end before its warm-up does; give schedule.warmup_steps=5 or fewer, or more steps")


def test_a_step_schedule_that_never_decays_is_refused_with_its_fix():
    assert "schedule=step would never decay; give schedule.decay_every=4 or fewer, or schedule=constant" in \
        check_overrides(["schedule=step", "train.steps=5"])
