"""The suite's outcome does not depend on the machine's load: one Hypothesis profile for every test
(tests/conftest.py), and a collection hook that takes a deadline or a generation-timing health check
out of any test whose own settings bring one back."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from conftest import load_dependent_settings, load_independent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import DeadlineExceeded


def test_the_suite_runs_under_one_profile_without_deadline_or_timing_checks():
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


@given(deadline_ms=st.none() | st.integers(1, 10_000),
       suppressed=st.lists(st.sampled_from(list(HealthCheck)), unique=True))
def test_the_collection_hook_makes_any_settings_load_independent_and_keeps_the_rest(deadline_ms, suppressed):
    deadline = None if deadline_ms is None else timedelta(milliseconds=deadline_ms)
    given_settings = settings(deadline=deadline, suppress_health_check=suppressed, max_examples=7)
    problems = load_dependent_settings(given_settings)
    assert bool(problems) == (deadline is not None or HealthCheck.too_slow not in suppressed)
    fixed = load_independent(given_settings)
    assert load_dependent_settings(fixed) == []
    assert set(suppressed) <= set(fixed.suppress_health_check) and fixed.max_examples == 7


def test_every_collected_hypothesis_test_runs_load_independent(request):
    tests = [item.obj for item in request.session.items
             if hasattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings")]
    assert tests and all(load_dependent_settings(t._hypothesis_internal_use_settings) == [] for t in tests)


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
