"""What keys the library's secret streams (`pazo.private.library_key`), and what it tells of them.

Two loops that differ in anything that decides a released value (the initial weights and buffers,
the public data, the loss, a setting) draw independent noise and Poisson batches, so two released
models never reveal a noise-free difference; the same loop with the same seed draws the same ones
bit for bit. A loss that cannot be hashed deterministically gets fresh OS entropy instead, and
`describe()` says the loop cannot be replayed. A given seed is a note (printed once and in
`describe()`), and the assumptions line points to `describe()`, which holds them in full."""
from __future__ import annotations

import argparse
import dataclasses
import re
import types

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
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


# ------------------------------------------------------------- module-level globals the loss and the model read

#: a user's module (exec'd with its own globals, as a script's or a notebook's): a loss that reads LOSS_GLOBAL
#: through a helper function, and a model whose forward reads MODEL_GLOBAL through a method
USER_CODE = '''
import torch
from torch import nn
from pazo.models.functional import cross_entropy_per_example

def loss_fn(outputs, targets):
    return cross_entropy_per_example(outputs * scale(), targets)

def scale():
    used = LOSS_GLOBAL
    return 1.0

class Reading(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(5, 3, dtype=torch.float64)

    def forward(self, x):
        return self.layer(x) * self.factor()

    def factor(self):
        used = MODEL_GLOBAL
        return 1.0
'''


def user_code(loss_global=1.0, model_global=1.0) -> dict:
    namespace = {"__name__": "user_code", "LOSS_GLOBAL": loss_global, "MODEL_GLOBAL": model_global}
    exec(USER_CODE, namespace)
    return namespace


def user_loop(namespace: dict, seed=3, **options):
    """A loop on USER_CODE's model and loss (non-private unless `options` say: the same streams)."""
    x, y = tiny_data(0)
    options = {"method": "dpzero", "epsilon": None, "steps": 3, "batch_size": 16, "seed": seed, "lr": 0.1,
               "clip": 1.0, "verbose": False, "cache_dir": SIGMA_CACHE, **options}
    return private_zo(namespace["Reading"](), namespace["loss_fn"], (x, y), **options)


global_values = st.one_of(
    st.integers(), st.floats(allow_nan=False), st.text(max_size=3), st.binary(max_size=3), st.booleans(), st.none(),
    st.lists(st.floats(-2, 2), min_size=1, max_size=3).map(torch.tensor),
    st.lists(st.integers(-3, 3), min_size=1, max_size=3).map(np.array),
    st.dictionaries(st.sampled_from(["w", "b"]), st.lists(st.floats(-2, 2), min_size=1, max_size=2).map(
        torch.tensor), min_size=1))


def bits(value):
    """What decides a global's value bit for bit (the key's view of it)."""
    if isinstance(value, torch.Tensor | np.ndarray):
        return type(value).__name__, str(value.dtype), tuple(value.shape), np.asarray(value).tobytes()
    if isinstance(value, dict):
        return tuple(sorted((key, bits(item)) for key, item in value.items()))
    return type(value).__name__, repr(value)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(["loss_global", "model_global"]), a=global_values, b=global_values,
       seed=st.integers(0, 2**62))
@example(which="loss_global", a=2.0, b=3.0, seed=1)
def test_loops_that_differ_in_a_global_the_loss_or_the_forward_reads_draw_other_noise_and_batches(which, a, b, seed):
    one, again, other = (user_loop(user_code(**{which: value}), seed=seed) for value in (a, a, b))
    assert one.streams.fingerprint == again.streams.fingerprint
    assert (one.streams.fingerprint == other.streams.fingerprint) == (bits(a) == bits(b))
    if bits(a) != bits(b):
        assert secret_draws(one)[0] != secret_draws(other)[0] and not torch.equal(secret_draws(one)[1],
                                                                                   secret_draws(other)[1])
    assert one.describe()["key"]["unhashed"] == [] and one.describe()["key"]["replayable"]


def test_a_loop_whose_globals_are_equal_is_replayed_bit_for_bit():
    private = {"epsilon": 2.0, "sigma": 4.0}
    first = user_loop(user_code({"w": torch.ones(2)}, np.arange(3)), **private)
    second = user_loop(user_code({"w": torch.ones(2)}, np.arange(3)), **private)
    assert first.streams.fingerprint == second.streams.fingerprint
    assert torch.equal(run_all(first), run_all(second))


def test_a_global_rebound_between_two_loops_of_the_same_loss_changes_the_key():
    namespace = user_code(loss_global=2.0)
    before = user_loop(namespace)
    namespace["LOSS_GLOBAL"] = 3.0
    after = user_loop(namespace)
    assert before.streams.fingerprint != after.streams.fingerprint
    assert secret_draws(before)[0] != secret_draws(after)[0]


@pytest.mark.parametrize("which", ["loss_global", "model_global"])
def test_a_global_that_cannot_be_hashed_draws_fresh_entropy_and_is_named_in_the_note(which, capsys):
    opaque = argparse.Namespace(temperature=1.0)
    first = user_loop(user_code(**{which: opaque}), verbose=True, epsilon=2.0, sigma=4.0)
    second = user_loop(user_code(**{which: opaque}), epsilon=2.0, sigma=4.0)
    part = ("loss_fn's global 'scale''s global 'LOSS_GLOBAL'" if which == "loss_global"
            else "model's Reading.factor's global 'MODEL_GLOBAL'")
    key = first.describe()["key"]
    assert key["unhashed"] == [f"{part} (Namespace: an object pazo cannot hash deterministically)"]
    assert not key["replayable"] and first.streams.fingerprint != second.streams.fingerprint
    assert secret_draws(first)[0] != secret_draws(second)[0]
    subject = "loss_fn" if which == "loss_global" else "model"
    note = next(n for n in first.plan.notes if n.startswith(f"{subject} could not be hashed"))
    assert part in note and capsys.readouterr().out.count(note) == 1


# ------------------------------------------- config objects and the attributes of the user's modules the loss reads

#: a loss that reads a global config object and an attribute of the user's module `settings` (`import settings`)
CONFIG_CODE = '''
from pazo.models.functional import cross_entropy_per_example

def loss_fn(outputs, targets):
    used = (CONFIG, settings.SCALE)
    return cross_entropy_per_example(outputs, targets)
'''


@dataclasses.dataclass
class LossConfig:
    """A researcher's config object, as a loss reads it."""
    temperature: object = 1.0
    kinds: tuple = ("a", "b")


def config_loss(where: str, value):
    """CONFIG_CODE's loss with `value` held where `where` says: a dataclass's field, an OmegaConf
    config's value (read through an interpolation), or the user's module's attribute `settings.SCALE`."""
    config = {"dataclass": lambda: LossConfig(value),
              "omegaconf": lambda: OmegaConf.create({"temperature": value, "read": "${temperature}"})}
    settings_module = types.ModuleType("settings")   # (no file: the user's, as a notebook's module)
    settings_module.SCALE = value if where == "module attribute" else 1.0
    namespace = {"__name__": "user_code", "CONFIG": config.get(where, lambda: None)(), "settings": settings_module}
    exec(CONFIG_CODE, namespace)
    return namespace["loss_fn"]


def config_loop(loss_fn, seed=3, **options):
    """A loop on Buffered with `loss_fn` (non-private unless `options` say: the same streams)."""
    x, y = tiny_data(0)
    options = {"method": "dpzero", "epsilon": None, "steps": 3, "batch_size": 16, "seed": seed, "lr": 0.1,
               "clip": 1.0, "verbose": False, "cache_dir": SIGMA_CACHE, **options}
    return private_zo(Buffered(), loss_fn, (x, y), **options)


config_values = st.one_of(st.integers(), st.floats(allow_nan=False), st.text("abc", max_size=3), st.booleans(),
                          st.none())
PLACES = ["dataclass", "omegaconf", "module attribute"]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(PLACES), a=config_values, b=config_values, seed=st.integers(0, 2**62))
@example(where="dataclass", a=1.0, b=2.0, seed=1)
@example(where="omegaconf", a=1.0, b=2.0, seed=1)
@example(where="module attribute", a=1.0, b=2.0, seed=1)
def test_loops_that_differ_in_a_config_object_or_a_user_module_attribute_draw_other_noise_and_equal_ones_the_same(
        where, a, b, seed):
    one, again, other = (config_loop(config_loss(where, value), seed=seed) for value in (a, a, b))
    assert one.describe()["key"]["unhashed"] == [] and one.describe()["key"]["replayable"]
    assert one.streams.fingerprint == again.streams.fingerprint
    assert secret_draws(one)[0] == secret_draws(again)[0]
    assert (one.streams.fingerprint == other.streams.fingerprint) == (bits(a) == bits(b))
    if bits(a) != bits(b):
        assert secret_draws(one)[0] != secret_draws(other)[0] and not torch.equal(secret_draws(one)[1],
                                                                                   secret_draws(other)[1])


@pytest.mark.parametrize("where", PLACES)
def test_a_loop_whose_config_object_or_module_attribute_is_equal_is_replayed_bit_for_bit(where):
    private = {"epsilon": 2.0, "sigma": 4.0}
    first, second = (config_loop(config_loss(where, 2.0), **private) for _ in range(2))
    assert first.streams.fingerprint == second.streams.fingerprint
    assert torch.equal(run_all(first), run_all(second))
