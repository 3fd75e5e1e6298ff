"""CPU threads are chosen, not inherited: OMP_NUM_THREADS in the environment wins, then train.threads,
then the auto rule (one thread for a small model, else the cores idle at the start, at least 1 and at
most min(cores, 4)); the run says how many in its header line and summary."""
from __future__ import annotations

import logging

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from pazo.threads import (MAX_AUTO_THREADS, SMALL_MODEL_PARAMETERS, auto_threads, choose_threads, core_times,
                          idle_between, idle_cores, usable_cores, valid_threads)
from pazo.train import run

parameters = st.integers(0, 10**10)
large = st.integers(SMALL_MODEL_PARAMETERS, 10**10)
requests = st.one_of(st.just("auto"), st.integers(1, 64))
idles = st.one_of(st.none(), st.floats(0, 64))


def never_measured():
    raise AssertionError("the idle cores are measured only for auto")


@given(parameters=parameters, requested=requests, env=st.integers(1, 64))
def test_omp_num_threads_in_the_environment_wins(parameters, requested, env):
    assert choose_threads(requested, parameters, {"OMP_NUM_THREADS": str(env)}, idle=never_measured) == (
        env, "OMP_NUM_THREADS from the environment")


@given(parameters=parameters, requested=st.integers(1, 64),
       env=st.sampled_from([{}, {"OMP_NUM_THREADS": ""}, {"OMP_NUM_THREADS": "x"}]))
def test_a_number_asked_for_is_taken_without_a_usable_environment_value(parameters, requested, env):
    assert choose_threads(requested, parameters, env, idle=never_measured)[0] == requested


@given(parameters=st.integers(0, SMALL_MODEL_PARAMETERS - 1))
def test_auto_gives_a_small_model_one_thread_without_watching_the_cores(parameters):
    assert choose_threads("auto", parameters, {}, idle=never_measured)[0] == 1


@given(cores=st.integers(1, 128), idle=idles, more=st.floats(0, 4), parameters=large)
def test_auto_gives_a_larger_model_the_idle_cores_between_one_and_its_bound(cores, idle, more, parameters):
    """Never below 1 or above min(cores, 4); all of them where the idle cores are unknown; a busy
    machine (under half a core idle) gets 1; more idle cores never give fewer threads."""
    count = auto_threads(cores, idle, parameters)
    top = min(cores, MAX_AUTO_THREADS)
    assert 1 <= count <= top
    if idle is None:
        assert count == top
    else:
        assert auto_threads(cores, idle + more, parameters) >= count
        if idle < 0.5:
            assert count == 1
        if idle >= top:
            assert count == top


@given(idle=idles, parameters=large)
def test_choose_threads_says_what_auto_saw(idle, parameters):
    count, why = choose_threads("auto", parameters, {}, idle=lambda: idle)
    assert count == auto_threads(usable_cores(), idle, parameters)
    assert why.startswith("auto") and (("not known" in why) if idle is None else f"{idle:.1f} of" in why)


ticks = st.integers(0, 10**6)


@given(cores=st.dictionaries(st.integers(0, 7), st.tuples(ticks, ticks, ticks), min_size=1))
def test_idle_cores_are_each_cores_idle_share_of_its_ticks_summed(cores):
    """From two /proc/stat texts: a core that only idled counts 1, one that only worked 0, and the
    sum lies between 0 and the number of cores; cores outside the process's set are not read."""
    def stat(snapshot):
        return "cpu  9 9 9 9 9 9 9 9 0 0\n" + "".join(
            f"cpu{c} {u} 0 0 {i} {w} 0 0 0 0 0\n" for c, (u, i, w) in snapshot.items()) + "intr 1 2 3\n"

    before = {c: (1, 2, 3) for c in cores}
    after = {c: (1 + busy, 2 + idle, 3 + wait) for c, (busy, idle, wait) in cores.items()}
    seen = idle_between(core_times(stat(before), set(cores)), core_times(stat(after), set(cores) | {99}))
    want = sum(((idle + wait) / (busy + idle + wait)) if busy + idle + wait else 1.0
               for busy, idle, wait in cores.values())
    assert seen == pytest.approx(want) and 0 <= seen <= len(cores)
    assert core_times(stat(after), set()) == {}


def test_idle_cores_measures_this_machine():
    seen = idle_cores(0.05)
    assert seen is None or 0 <= seen <= usable_cores()


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


def test_auto_sizes_the_threads_by_the_whole_model_frozen_weights_included(hydra_cfg, monkeypatch):
    """A LoRA step costs the frozen model's forward: a small trainable part on a large frozen one is
    not a small model."""
    from torch import nn

    from pazo.run.build import build_run
    from pazo.run.typed import run_config
    from pazo.models.small_cnn import SmallCNN

    class FrozenBody(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = SmallCNN(1, 10, 8)
            self.frozen = nn.Linear(1000, SMALL_MODEL_PARAMETERS // 1000)
            self.frozen.requires_grad_(False)

        def forward(self, x):
            return self.cnn(x)

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    try:
        cfg = run_config(hydra_cfg("method=sgd", "privacy=none", "train.steps=1"))
        small = build_run(cfg, module=SmallCNN(1, 10, 8)).threads
        frozen = build_run(cfg, module=FrozenBody()).threads
    finally:
        torch.set_num_threads(before)
    assert small["count"] == 1 and "under 100,000 parameters" in small["why"]
    assert "cores idle" in frozen["why"] or "not known" in frozen["why"]
