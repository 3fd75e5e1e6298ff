"""Resources a setting asks for (round two): a zeroth-order step's memory grows with `method.q` (two
query points each), the batch size and the vectorised engine's perturbed copies per call
(`engine.chunk_size`); it is estimated before the first step and a setting that cannot fit in the
memory available is one line (exit 2) instead of a process that grows until it is killed. The
vectorised engine holds only the directions of the chunk it evaluates."""
from __future__ import annotations

import pytest
import torch
from fault_runtime_helpers import TINY, one_error_line, run_cli
from hypothesis import example, given
from hypothesis import strategies as st

import pazo.zo.memory
from pazo.errors import ConfigError
from pazo.methods.two_point import TwoPointMethod
from pazo.zo.directions import SeededDirections
from pazo.zo.engines import VectorisedEngine
from pazo.zo.memory import SHARE_OF_AVAILABLE, check_step_memory, step_bytes

GIB = 2**30
settings_ = dict(queries=st.integers(1, 10**6), batch=st.integers(1, 4096), dim=st.integers(1, 10**8),
                 element=st.sampled_from([2, 4]), engine=st.sampled_from(["vectorised", "inplace"]),
                 chunk=st.one_of(st.none(), st.integers(1, 10**6)))


@given(**settings_, more=st.integers(1, 1000))
def test_the_estimate_grows_with_queries_and_batch_and_the_chunk_bounds_it(queries, batch, dim, element, engine,
                                                                           chunk, more):
    device, host = step_bytes(queries, batch, dim, element, engine, chunk)
    assert step_bytes(queries + more, batch, dim, element, engine, chunk) >= (device, host)
    assert step_bytes(queries, batch + more, dim, element, engine, chunk)[1] > host
    if engine == "inplace":
        assert device == 0
    elif chunk is not None:   # the copies held at once: at most the chunk's, whatever q is
        assert device <= 4 * chunk * dim * element
        assert step_bytes(queries + more, batch, dim, element, engine, chunk)[0] <= 4 * chunk * dim * element


@given(**settings_, available=st.integers(2**20, 2**40))
def test_a_setting_is_refused_exactly_when_its_estimate_exceeds_the_memory_available(
        queries, batch, dim, element, engine, chunk, available):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(pazo.zo.memory, "available_bytes", lambda device: (None, available))
        need = sum(step_bytes(queries, batch, dim, element, engine, chunk))
        try:
            check_step_memory(queries, batch, dim, element, engine, chunk, torch.device("cpu"))
        except ConfigError as err:
            assert need > SHARE_OF_AVAILABLE * available
            assert f"method.q={queries}" in str(err) and "\n" not in str(err)
        else:
            assert need <= SHARE_OF_AVAILABLE * available


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
def test_dp_aggzo_with_a_huge_q_is_one_line_before_any_step(engine, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pazo.zo.memory, "available_bytes", lambda device: (None, GIB))
    monkeypatch.setattr(TwoPointMethod, "random_directions", lambda self: pytest.fail("a step was started"))
    argv = [*TINY, "method=dp_aggzo", "method.q=100000", f"engine.name={engine}", f"hydra.run.dir={tmp_path / 'r'}"]
    argv = [a for a in argv if a != "method=dpzero"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    line = one_error_line(err)
    assert "method.q=100000" in line and "GiB" in line and "lower method.q" in line, line
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


def test_the_default_q_still_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pazo.zo.memory, "available_bytes", lambda device: (None, 4 * GIB))
    argv = [a for a in TINY if a != "method=dpzero"]
    code, _, err = run_cli([*argv, "method=dp_aggzo", "train.steps=1", f"hydra.run.dir={tmp_path / 'r'}"], capsys)
    assert code == 0, err


def test_the_vectorised_engine_draws_only_the_chunks_directions(monkeypatch):
    """The directions held at once are the chunk's (each regenerated from its seed), not all q."""
    from pazo.models.functional import FunctionalModel, cross_entropy_per_example
    module = torch.nn.Linear(5, 3)
    model = FunctionalModel(module, loss_fn=cross_entropy_per_example)
    directions = SeededDirections(model.shapes, range(40))
    points = [(j, s) for j in range(40) for s in (1e-3, -1e-3)]
    x, y = torch.randn(4, 5), torch.randint(0, 3, (4,))
    whole = VectorisedEngine().losses(model, x, y, directions, points)
    drawn, original = [], SeededDirections.vector

    def vector(self, j):
        drawn.append(j)
        return original(self, j)

    monkeypatch.setattr(SeededDirections, "vector", vector)
    chunked = VectorisedEngine(chunk_size=8).losses(model, x, y, directions, points)
    assert torch.equal(whole, chunked)
    assert sorted(drawn) == list(range(40)) and max(map(len, [drawn])) == 40   # each once, a chunk at a time


# --- the audit's canaries ------------------------------------------------------------------------------

canary_settings = dict(threat=st.sampled_from(["white_box", "black_box"]), worst_case=st.booleans(),
                       zeroth_order=st.booleans(), steps=st.integers(1, 10**5), queries=st.integers(1, 1000),
                       rate=st.floats(1e-6, 1.0), example=st.integers(4, 10**6))


@given(**canary_settings, more_steps=st.integers(1, 1000))
def test_a_canary_costs_at_least_its_inclusion_draw_and_more_steps_never_cost_less(
        threat, worst_case, zeroth_order, steps, queries, rate, example, more_steps):
    from pazo.audit.memory import bytes_per_canary
    per = bytes_per_canary(threat, worst_case, zeroth_order, steps, queries, rate, example)
    assert per >= 9   # (a float64 draw and a flag, at least)
    assert bytes_per_canary(threat, worst_case, zeroth_order, steps + more_steps, queries, rate, example) >= per
    if threat == "black_box":   # each canary is an example, held by the canaries and the data set
        assert per >= 2 * example


@given(**canary_settings, canaries=st.integers(2, 10**12), available=st.integers(2**20, 2**40))
@example(threat="white_box", worst_case=False, zeroth_order=False, steps=46593, queries=1, rate=1.0, example=4,
         canaries=2, available=2**20)   # not even two canaries fit (the line once told to use <= 2)
def test_canaries_are_refused_exactly_when_they_cannot_fit_and_the_line_names_a_count_that_fits(
        threat, worst_case, zeroth_order, steps, queries, rate, example, canaries, available):
    import re

    from pazo.audit.memory import bytes_per_canary, check_canary_memory
    per = bytes_per_canary(threat, worst_case, zeroth_order, steps, queries, rate, example)
    try:
        check_canary_memory(canaries, per, available, steps)
    except ConfigError as err:
        assert canaries * per > SHARE_OF_AVAILABLE * available and "\n" not in str(err)
        named = re.search(r"use audit.canaries <= (\d+)$", str(err))
        if named is None:   # the line says that not even the fewest fit, and is right
            assert "not even the fewest, audit.canaries=2, fit" in str(err)
            assert 2 * per > SHARE_OF_AVAILABLE * available
        else:               # the count it names fits, one more would not, and it is fewer than asked
            most = int(named.group(1))
            assert 2 <= most < canaries
            assert most * per <= SHARE_OF_AVAILABLE * available < (most + 1) * per
    else:
        assert canaries * per <= SHARE_OF_AVAILABLE * available
    check_canary_memory(canaries, per, None, steps)   # memory that cannot be read refuses nothing


@pytest.mark.parametrize("threat", ["white_box", "black_box"])
def test_an_audit_with_more_canaries_than_fit_is_one_line_before_any_canary_is_drawn(threat, tmp_path, capsys,
                                                                                   monkeypatch):
    from fault_inputs_helpers import run_entry

    from pazo.audit import command as audit_command
    from pazo.audit import run as audit_run
    monkeypatch.setattr(audit_run, "available_bytes", lambda device: (None, GIB))
    monkeypatch.setattr(audit_run, "train_with_canaries", lambda *a, **k: pytest.fail("the audit trained"))
    argv = ["method=dpzero", "audit.canaries=200000000", f"audit.threat={threat}", "train.steps=2",
            "logger.mode=disabled", f"hydra.run.dir={tmp_path / 'a'}"]
    code, _, err = run_entry(audit_command.cli, argv, capsys)
    assert code == 2
    line = one_error_line(err)
    assert "audit.canaries=200000000" in line and "GiB" in line and "audit.canaries <=" in line, line
