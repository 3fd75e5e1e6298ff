"""The suite's outcome does not depend on the machine's load: one Hypothesis profile for every test
(tests/conftest.py), and a collection check that refuses a test whose settings bring a deadline or a
generation-timing health check back."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from conftest import load_dependent_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import DeadlineExceeded


def test_the_suite_runs_under_one_profile_without_deadline_or_timing_checks():
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


@given(deadline_ms=st.none() | st.integers(1, 10_000),
       suppressed=st.lists(st.sampled_from(list(HealthCheck)), unique=True))
def test_the_collection_check_flags_exactly_the_load_dependent_settings(deadline_ms, suppressed):
    deadline = None if deadline_ms is None else timedelta(milliseconds=deadline_ms)
    problems = load_dependent_settings(settings(deadline=deadline, suppress_health_check=suppressed))
    assert bool(problems) == (deadline is not None or HealthCheck.too_slow not in suppressed)


def test_a_test_inheriting_the_profile_passes_where_a_deadline_fails_it():
    """An example slower than Hypothesis's stock 200 ms (a loaded machine) fails under the stock
    profile and passes under the suite's."""
    def slow_test():
        def slow(_):
            time.sleep(0.25)
        return slow

    given(st.just(0))(settings(max_examples=1)(slow_test()))()
    with pytest.raises(DeadlineExceeded):
        given(st.just(0))(settings(settings.get_profile("default"), max_examples=1)(slow_test()))()
