"""CPU threads are chosen, not inherited: OMP_NUM_THREADS in the environment wins, then train.threads,
then the auto rule (one thread for a small model, else min(cores, 4)); the run says how many in its
header line and summary."""
from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pazo.threads import MAX_AUTO_THREADS, SMALL_MODEL_PARAMETERS, choose_threads, usable_cores, valid_threads
from pazo.train import run

parameters = st.integers(0, 10**10)
requests = st.one_of(st.just("auto"), st.integers(1, 64))


@given(parameters=parameters, requested=requests, env=st.integers(1, 64))
def test_omp_num_threads_in_the_environment_wins(parameters, requested, env):
    assert choose_threads(requested, parameters, {"OMP_NUM_THREADS": str(env)}) == (
        env, "OMP_NUM_THREADS from the environment")


@given(parameters=parameters, requested=st.integers(1, 64), env=st.sampled_from([{}, {"OMP_NUM_THREADS": ""},
                                                                                   {"OMP_NUM_THREADS": "x"}]))
def test_a_number_asked_for_is_taken_without_a_usable_environment_value(parameters, requested, env):
    assert choose_threads(requested, parameters, env)[0] == requested


@given(parameters=parameters)
def test_auto_gives_one_thread_to_a_small_model_and_a_few_cores_to_a_large_one(parameters):
    count, why = choose_threads("auto", parameters, {})
    if parameters < SMALL_MODEL_PARAMETERS:
        assert count == 1
    else:
        assert count == min(usable_cores(), MAX_AUTO_THREADS) and 1 <= count <= MAX_AUTO_THREADS
    assert why.startswith("auto")


@given(value=st.one_of(st.integers(-5, 0), st.booleans(), st.text(max_size=5).filter(lambda s: s != "auto"),
                       st.floats(allow_nan=True)))
def test_anything_but_auto_or_a_positive_integer_is_refused(value):
    assert not valid_threads(value)


def test_a_run_prints_and_records_its_threads(hydra_cfg, tmp_path, caplog, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO):
            summary = run(hydra_cfg("method=sgd", "privacy=none", "train.steps=2", "train.threads=2"), tmp_path)
        assert summary["threads"] == {"count": 2, "requested": 2, "why": "train.threads"}
        assert any("device cpu, 2 CPU threads)" in r.getMessage() for r in caplog.records)
    finally:
        torch.set_num_threads(before)


def test_a_bad_thread_count_is_one_line_before_compute(hydra_cfg, tmp_path):
    from pazo.errors import ConfigError

    with pytest.raises(ConfigError, match="train.threads must be auto or an integer >= 1"):
        run(hydra_cfg("method=sgd", "privacy=none", "train.threads=0"), tmp_path)
