"""What keys the library's secret streams (`pazo.private.library_key`), and what it tells of them.

Two loops that differ in anything that decides a released value (the initial weights and buffers,
the public data, the loss, a setting) draw independent noise and Poisson batches, so two released
models never reveal a noise-free difference; the same loop with the same seed draws the same ones
bit for bit. A loss that cannot be hashed deterministically gets fresh OS entropy instead, and
`describe()` says the loop cannot be replayed. A given seed is a note (printed once and in
`describe()`), and the assumptions line points to `describe()`, which holds them in full."""
from __future__ import annotations

import argparse
import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_library import SIGMA_CACHE, run_all, tiny_data
from torch import nn

from pazo.models.functional import cross_entropy_per_example
from pazo.private import SEED_NOTE, private_zo


class Buffered(nn.Module):
    """A linear model with a buffer its forward reads (a buffer decides the outputs like a weight)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(5, 3, dtype=torch.float64)
        self.register_buffer("scale", torch.ones(5, dtype=torch.float64))

    def forward(self, x):
        return self.layer(x * self.scale)


def tempered(temperature: float):
    """A per-example loss holding a number in its closure."""
    def loss_fn(outputs, targets):
        return cross_entropy_per_example(outputs / temperature, targets)
    return loss_fn


def engine_for(change: dict, epsilon=None, seed=3):
    """A dpzero loop on Buffered, tempered(1.0) and public data, with `change` applied: `weight`
    (tensor name, flat index, delta) added to one initial parameter or buffer value, `public`
    (flat index, delta) to one public input, `temperature` for the loss, `setting` a keyword."""
    model = Buffered()
    x, y = tiny_data(0)
    public_x, public_y = tiny_data(1, n=40)
    if "weight" in change:
        name, index, delta = change["weight"]
        with torch.no_grad():
            model.state_dict(keep_vars=True)[name].view(-1)[index] += delta
    if "public" in change:
        index, delta = change["public"]
        public_x.view(-1)[index] += delta
    options = {"method": "dpzero", "epsilon": epsilon, "steps": 3, "batch_size": 16, "seed": seed, "lr": 0.1,
               "clip": 1.0, "verbose": False, "cache_dir": SIGMA_CACHE, "public": (public_x, public_y),
               **change.get("setting", {})}
    return private_zo(model, tempered(change.get("temperature", 1.0)), (x, y), **options)


def secret_draws(engine) -> tuple:
    """The first Poisson batches and a draw of noise, from the loop's own secret streams."""
    batches = tuple(tuple(engine.sampler.sample().tolist()) for _ in range(4))
    noise = torch.randn(8, generator=engine.streams.torch_generator("noise"), dtype=torch.float64)
    return batches, noise


WEIGHTS = ["layer.weight", "layer.bias", "scale"]
deltas = st.sampled_from([1e-12, -1e-6, 0.5, 3.0])
CHANGES = st.one_of(
    st.tuples(st.sampled_from(WEIGHTS), st.integers(0, 2), deltas).map(lambda w: {"weight": w}),
    st.tuples(st.integers(0, 40 * 5 - 1), deltas).map(lambda p: {"public": p}),
    st.sampled_from([0.5, 2.0, 1.0 + 1e-9]).map(lambda t: {"temperature": t}),
    st.sampled_from([{"lr": 0.2}, {"clip": 2.0}, {"steps": 4}, {"batch_size": 15}, {"q": 2},
                     {"query_dropout": True}, {"accountant": "rdp"}]).map(lambda s: {"setting": s}),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(change=CHANGES, seed=st.integers(0, 2**62))
def test_loops_that_differ_in_any_one_input_draw_other_noise_and_batches_and_equal_ones_the_same(change, seed):
    base = engine_for({}, seed=seed)
    again = engine_for({}, seed=seed)
    other = engine_for(change, seed=seed)
    assert base.streams.fingerprint == again.streams.fingerprint != other.streams.fingerprint
    assert base.streams.seeds["directions"] == other.streams.seeds["directions"]   # public: from the seed alone
    base_batches, base_noise = secret_draws(base)
    again_batches, again_noise = secret_draws(again)
    other_batches, other_noise = secret_draws(other)
    assert base_batches == again_batches and torch.equal(base_noise, again_noise)
    assert base_batches != other_batches and not torch.equal(base_noise, other_noise)


def test_the_same_private_loop_with_the_same_seed_is_replayed_bit_for_bit():
    given_sigma = {"setting": {"sigma": 4.0}}   # (checked against epsilon, not calibrated: a quicker accountant)
    first, second = engine_for(given_sigma, epsilon=2.0), engine_for(given_sigma, epsilon=2.0)
    assert torch.equal(run_all(first), run_all(second))
    assert first.describe()["key"]["replayable"] and first.describe()["key"]["unhashed"] == []


def opaque_loss():
    """A loss holding an object pazo cannot hash deterministically (an argparse namespace)."""
    options = argparse.Namespace(temperature=1.0)

    def loss_fn(outputs, targets):
        return cross_entropy_per_example(outputs / options.temperature, targets)
    return loss_fn


def test_a_loss_that_cannot_be_hashed_draws_fresh_entropy_and_says_the_loop_cannot_be_replayed(capsys):
    x, y = tiny_data(0)
    options = {"method": "dpzero", "epsilon": 2.0, "sigma": 4.0, "steps": 2, "batch_size": 16, "seed": 5, "lr": 0.1,
               "clip": 1.0, "cache_dir": SIGMA_CACHE}
    first = private_zo(Buffered(), opaque_loss(), (x, y), verbose=True, **options)
    second = private_zo(Buffered(), opaque_loss(), (x, y), verbose=False, **options)
    key = first.describe()["key"]
    assert not key["replayable"] and key["unhashed"] == [
        "loss_fn's closure cell 'options' (Namespace: an object pazo cannot hash deterministically)"]
    assert first.streams.fingerprint != second.streams.fingerprint   # the entropy: no two such loops share noise
    assert secret_draws(first)[0] != secret_draws(second)[0]
    note = next(n for n in first.plan.notes if n.startswith("loss_fn could not be hashed"))
    assert "cannot be replayed from its seed" in note and capsys.readouterr().out.count(note) == 1


def test_a_given_fingerprint_is_the_key_as_given():
    """(The framework's fingerprint, given, replays its run: test_library's bit-for-bit test.)"""
    fingerprint = "ab" * 32
    one = engine_for({"setting": {"fingerprint": fingerprint}})
    two = engine_for({"setting": {"fingerprint": fingerprint}, "temperature": 2.0})
    assert one.streams.fingerprint == two.streams.fingerprint == fingerprint
    assert one.describe()["key"]["source"].startswith("given")


# ------------------------------------------------------------------------- what it tells

@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(seed=st.one_of(st.none(), st.integers(0, 2**62)), secure=st.booleans(), private=st.booleans())
def test_a_given_seed_is_a_note_printed_once_and_in_describe(capsys, seed, secure, private):
    capsys.readouterr()   # (one example's output at a time)
    x, y = tiny_data(0)
    engine = private_zo(Buffered(), cross_entropy_per_example, (x, y), method="dpzero" if private else "mezo",
                        epsilon=2.0 if private else None, steps=2, batch_size=16, seed=seed, secure_mode=secure,
                        lr=0.1, clip=1.0, cache_dir=SIGMA_CACHE)
    noted = seed is not None and not secure and private   # (a non-private loop adds no noise to regenerate)
    out = capsys.readouterr().out
    assert out.count(SEED_NOTE) == int(noted)
    assert (SEED_NOTE in engine.describe()["privacy"]["notes"]) == noted


def test_the_assumptions_line_points_to_describe_which_holds_them_in_full(capsys):
    x, y = tiny_data(0)
    engine = private_zo(Buffered(), cross_entropy_per_example, (x, y), method="dpzero", epsilon=2.0, steps=2,
                        batch_size=16, seed=1, lr=0.1, clip=1.0, cache_dir=SIGMA_CACHE)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("assumes: "))
    where = re.fullmatch(r"assumes: .* \(each in full: (.*)\)", line).group(1)
    assert "summary.json" not in line
    in_full = eval(where, {"engine": engine})   # the pointer, followed as written
    assert in_full == engine.plan.assumptions and set(in_full) == {"n_private_public", "no_selection", "seed_secret"}
    assert all(len(text) > 40 for text in in_full.values())
    assert "config.yaml" not in in_full["seed_secret"] and "secure_mode=True" in in_full["seed_secret"]


@pytest.mark.parametrize("secure", [False, True])
def test_describe_says_what_keys_the_noise(secure):
    facts = engine_for({"setting": {"secure_mode": secure}}).describe()
    key = facts["key"]
    assert key["fingerprint"] == facts["fingerprint"] and key["source"] == "computed"
    assert key["replayable"] == (not secure)
    for part in ("initial values", "public data", "loss_fn", "private data"):
        assert any(part in covered for covered in key["covers"])
    assert not re.search(r"\b(train|privacy|engine|method)\.[a-z_]", str(facts["privacy"]["notes"]))
