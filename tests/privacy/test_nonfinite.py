"""Non-finite contributions: an example whose value is NaN or infinite contributes zero to the
release, so the release is finite and equal, draw for draw, to the release of the same batch
without those examples. Checked over random batches with random NaN/inf positions for each
privatiser (`pazo.privacy.mechanisms`) and through the methods' own steps (the first-order ones'
per-example clipping, the zeroth-order ones' finite differences), which also report the count as
the private diagnostic `nonfinite_examples`."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pazo.data.base import TensorSplit
from pazo.methods.per_example import clipped_sum
from pazo.privacy.mechanisms import JointClipPrivatizer, NoiseSpec, ScalarPrivatizer, clip_factors
from pazo.run.outlets import PRIVATE, status
from conftest import quadratic_model

NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
VALUES = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@st.composite
def batches(draw, max_queries: int = 4, max_examples: int = 12):
    """(rows [Q][B] of finite scalars with some examples' values made NaN or infinite, the set of
    those examples, the rows of the others alone)."""
    q = draw(st.integers(1, max_queries))
    b = draw(st.integers(1, max_examples))
    rows = [[draw(VALUES) for _ in range(b)] for _ in range(q)]
    bad = draw(st.sets(st.integers(0, b - 1), max_size=b))
    for i in bad:  # at least one non-finite value in each bad example, in random queries
        for j in draw(st.sets(st.integers(0, q - 1), min_size=1)):
            rows[j][i] = draw(NON_FINITE)
    rest = [[v for i, v in enumerate(row) if i not in bad] for row in rows]
    return rows, bad, rest


def privatiser(kind: str, q: int, seed: int, clip: float):
    mechanism = "laplace" if kind == "laplace" else "gaussian"
    spec = NoiseSpec(sigma=1.3, clip=clip, expected_batch_size=8, mechanism=mechanism)
    gen = torch.Generator().manual_seed(seed)
    return JointClipPrivatizer(spec, gen) if kind == "joint" else ScalarPrivatizer(spec, q, gen)


@settings(max_examples=150, deadline=None)
@given(batch=batches(), kind=st.sampled_from(["gaussian", "laplace", "joint"]), seed=st.integers(0, 2**31),
       clip=st.floats(1e-3, 1e3))
def test_each_privatiser_releases_as_if_the_non_finite_examples_were_not_there(batch, kind, seed, clip):
    rows, bad, rest = batch
    got = privatiser(kind, len(rows), seed, clip).release(rows)
    want = privatiser(kind, len(rows), seed, clip).release(rest)
    assert all(math.isfinite(v) for v in got) and got == want


@settings(max_examples=100, deadline=None)
@given(norms=st.lists(st.one_of(st.floats(0, 1e30), NON_FINITE), min_size=1, max_size=20), bound=st.floats(1e-3, 1e3))
def test_clip_factors_are_zero_exactly_for_non_finite_norms(norms, bound):
    norms = torch.tensor(norms, dtype=torch.float64)
    factors = clip_factors(norms, bound)
    assert torch.equal(factors == 0, ~torch.isfinite(norms))
    finite = torch.isfinite(norms)
    assert (factors[finite] * norms[finite] <= bound * (1 + 1e-12)).all() and (factors <= 1).all()


D, B = 5, 10


@st.composite
def poisoned_batches(draw):
    """(a batch of B inputs to the quadratic model with some examples' inputs NaN or infinite in
    random coordinates, which examples, the batch without them)."""
    seed = draw(st.integers(0, 2**31))
    scale = draw(st.floats(0.1, 100))
    x = torch.randn(B, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale
    bad = sorted(draw(st.sets(st.integers(0, B - 1), min_size=1, max_size=B)))
    for i in bad:
        for c in draw(st.sets(st.integers(0, D - 1), min_size=1)):
            x[i, c] = draw(NON_FINITE)
    keep = [i for i in range(B) if i not in bad]
    return x, bad, x[keep]


@settings(max_examples=40, deadline=None)
@given(batch=poisoned_batches(), chunk=st.integers(1, B))
def test_clipped_sum_leaves_non_finite_gradients_out(batch, chunk):
    x, bad, rest = batch
    model = quadratic_model(d=D)
    total, _, count = clipped_sum(model, x, torch.zeros(len(x)), chunk, 0.5)
    want, _, none = clipped_sum(model, rest, torch.zeros(len(rest)), chunk, 0.5)
    assert int(count) == len(bad) and int(none) == 0
    assert torch.isfinite(total).all() and torch.allclose(total, want, rtol=1e-12, atol=1e-14)


CFG = {"lr": 0.1, "clip": 0.5}
METHODS = [("dpsgd", {}), ("dpmd", {"public_batch_size": 4}), ("dope_sgd", {"public_batch_size": 4}),
           ("gep", {"public_batch_size": 4, "num_bases": 2, "num_groups": 1}),
           ("dpzero", {"q": 3}), ("dp_zo", {"q": 2, "noise": "laplace"}), ("dp_aggzo", {"q": 3}),
           ("pazo_m", {"q": 2, "public_batch_size": 4}), ("pazo_p", {"q": 2, "k": 2, "public_batch_size": 4}),
           ("pazo_s", {"k": 2, "public_batch_size": 4})]


@pytest.mark.parametrize("method,cfg", METHODS, ids=[m for m, _ in METHODS])
@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=poisoned_batches())
def test_a_step_moves_the_model_as_the_batch_without_the_non_finite_examples_does(make_method, method, cfg, batch):
    """Same seed, same public data: one private step on the poisoned batch and one on the batch
    without the poisoned examples leave the same finite parameters, and the step counts them."""
    x, bad, rest = batch
    public = TensorSplit(torch.randn(16, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64),
                         torch.zeros(16))
    after, stats = [], []
    for inputs in (x, rest):
        model = quadratic_model(d=D)
        m = make_method(method, model, {**CFG, **cfg}, sigma=1.0, b=B, public=public, seed=3)
        stats.append(m.step(inputs, torch.zeros(len(inputs)), 1))
        after.append(model.flat_params())
    assert torch.isfinite(after[0]).all()
    assert torch.allclose(after[0], after[1], rtol=1e-12, atol=1e-14), method
    assert stats[0]["nonfinite_examples"] == len(bad) and stats[1]["nonfinite_examples"] == 0
    assert status("metrics", "nonfinite_examples") == PRIVATE  # never a released W&B value by default
