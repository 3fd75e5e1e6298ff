"""The suite's runs share the session's calibrations (tests/conftest.py): a test that draws a seed
only to vary its runs moves it with `next_seed_sharing_digits_size`, so that every run of one method on
digits has the sample rate b / n that keys its calibrated sigma, and calibrates once a session."""
from __future__ import annotations

import functools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import next_seed_sharing_digits_size, tiny_cfg
from pazo.data import build_dataset
from pazo.rng import RandomStreams
from pazo.run.typed import run_config


@functools.cache
def private_size_of_a_run(seed: int) -> int:
    """The private set of a run of the shipped configs with `seed`, built as a run builds it."""
    cfg = run_config(tiny_cfg(f"seed={seed}"))
    return len(build_dataset(cfg.dataset, RandomStreams(cfg.seed)).private)


@settings(max_examples=3)
@given(seed=st.integers(0, 2**62))
@example(seed=2**40)   # (a seed whose own private set is smaller: 1163)
def test_a_seed_moved_to_share_the_digits_size_gives_a_run_seed_0s_private_set(seed):
    moved = next_seed_sharing_digits_size(seed)
    assert moved >= seed and private_size_of_a_run(moved) == private_size_of_a_run(0)
