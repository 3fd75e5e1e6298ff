"""The library entry (`pazo.private.private_zo`): the guide's example runs as written; the loop gives
bit for bit the framework's model and epsilon on the golden digits cases; and its rules (a step per
fresh Poisson batch, no step beyond the budget, epsilon as the accountant says, streams from the seed
and fingerprint or from the OS, a user's mistake one ConfigError before any step) over random inputs."""
from __future__ import annotations

import importlib.util
import json
import re
import tempfile

import numpy as np
import pytest
import torch
from conftest import ROOT, run_cache
from hydra import compose, initialize_config_dir
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from torch import nn

from pazo.data import build_dataset
from pazo.errors import ConfigError
from pazo.methods import method_info, method_names
from pazo.models import build_model
from pazo.models.functional import cross_entropy_per_example
from pazo.privacy.plan import make_accountant
from pazo.private import private_zo
from pazo.rng import RandomStreams
from pazo.train import run
from pazo.run.typed import run_config
from pazo.run.weights import read_weights

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

_spec = importlib.util.spec_from_file_location("golden_cases", ROOT / "tests/paper/golden/cases.py")
GOLDEN = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(GOLDEN)
#: the golden cases of a zeroth-order method (the loop takes no first-order one)
ZO_CASES = ["pazo_m", "pazo_p_inplace", "pazo_s", "dpzero", "dp_zo_laplace", "mezo"]


def guide_example() -> str:
    page = (ROOT / "docs/guides/library.md").read_text()
    return re.search(r"```python\n(.*?)```", page, re.S).group(1)


def test_the_guides_example_runs_as_written(capsys):
    namespace = {}
    exec(compile(guide_example(), "docs/guides/library.md", "exec"), namespace)
    engine, out = namespace["engine"], capsys.readouterr().out
    assert engine.steps_done == engine.plan.steps == 100
    assert 0 < engine.epsilon() <= 1.0
    assert f"epsilon spent {engine.epsilon():.3f}" in out
    assert out.count("privacy: (epsilon, delta)-DP") == 1 and out.count("assumes: ") == 1
    assert namespace["accuracy"] > 0.5   # it learns (chance is 0.1)


@pytest.fixture
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _setting(overrides) -> dict:
    """A golden case's overrides as private_zo's keywords."""
    values = dict(o.split("=", 1) for o in overrides)
    method = {k.removeprefix("method."): float(v) if k in ("method.lr", "method.clip") else v
              for k, v in values.items() if k.startswith("method.")}
    return {"method": values["method"], "engine": values.get("engine.name", "auto"),
            "epsilon": None if values.get("privacy") == "none" else 1.0, **method}


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == "pazo_m" else pytest.mark.slow) for n in ZO_CASES])
def test_the_loop_equals_the_framework_run_bit_for_bit(name, tmp_path, monkeypatch, float64):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*GOLDEN.COMMON, *GOLDEN.CASES[name]])
    summary = run(cfg, tmp_path / "run")
    trained = read_weights(tmp_path / "run" / "model.safetensors")

    streams = RandomStreams(cfg.seed)   # the splits and the initial weights follow from the seed alone
    typed = run_config(cfg)
    data = build_dataset(typed.dataset, streams)
    torch.manual_seed(streams.seeds["init"])
    model = build_model(typed.model, data.input_shape, data.num_classes)
    engine = private_zo(model, cross_entropy_per_example, (data.private.inputs, data.private.labels),
                        public=(data.public.inputs, data.public.labels), steps=cfg.train.steps,
                        batch_size=cfg.train.batch_size, seed=cfg.seed, device="cpu",
                        fingerprint=summary["computation"]["fingerprint"], verbose=False,
                        **_setting(GOLDEN.CASES[name]))
    for batch in engine.batches():
        engine.step(batch)

    assert summary["status"] == "finished" and engine.steps_done == summary["steps_done"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, trained[key]), f"{name}: {key} differs from the framework's"
    assert engine.epsilon() == summary["privacy"].get("epsilon_spent")
    assert engine.plan.sigma == summary["privacy"]["sigma"]


# ------------------------------------------------------------------------------------------- rules

class Tiny(nn.Module):
    def __init__(self, seed: int, features: int = 5, classes: int = 3):
        super().__init__()
        torch.manual_seed(seed)
        self.layer = nn.Linear(features, classes, dtype=torch.float64)

    def forward(self, x):
        return self.layer(x)


def tiny_data(seed: int, n: int = 60, features: int = 5, classes: int = 3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g, dtype=torch.float64), torch.randint(0, classes, (n,), generator=g)


#: sigma calibrated once per setting for the whole file (the rules' engines share a few settings)
SIGMA_CACHE = tempfile.mkdtemp(prefix="pazo-library-sigma-")


def tiny_engine(seed=0, data_seed=0, steps=4, method="dpzero", **kw):
    x, y = tiny_data(data_seed)
    public = tiny_data(data_seed + 1, n=40)
    options = {"epsilon": 2.0, "steps": steps, "batch_size": 16, "seed": seed, "verbose": False, "lr": 0.1,
               "clip": 1.0, "engine": "inplace", "cache_dir": SIGMA_CACHE, **kw}
    if method.startswith("pazo"):
        options["public"] = public
    return private_zo(Tiny(0), cross_entropy_per_example, (x, y), method=method, **options)


def params(engine) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in engine.model.params])


def run_all(engine) -> torch.Tensor:
    for batch in engine.batches():
        engine.step(batch)
    return params(engine)


#: each private engine builds an accountant (about a second): a few examples, and non-private engines
#: (epsilon=None, same streams) where the rule is about the streams only
FAST = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(FAST, max_examples=3)
@given(steps=st.integers(1, 6), method=st.sampled_from(["dpzero", "dp_zo", "pazo_m", "pazo_p"]),
       accountant=st.sampled_from(["prv", "rdp", "pld"]))
def test_epsilon_is_the_accountants_at_every_step_and_no_step_beyond_the_budget(steps, method, accountant):
    """Whichever accountant is asked for calibrates sigma to the target, counts every step and is
    the one the facts name."""
    engine = tiny_engine(steps=steps, method=method, accountant=accountant)
    assert engine.plan.accountant_name == accountant == engine.describe()["privacy"]["accountant_name"]
    accountant = make_accountant(engine.plan)
    assert engine.epsilon() == 0.0
    for t, batch in enumerate(engine.batches(), start=1):
        engine.step(batch)
        assert engine.epsilon() == pytest.approx(accountant.epsilon(t).upper, rel=1e-12)
    assert engine.steps_done == steps and engine.epsilon() <= engine.plan.target_epsilon
    assert list(engine.batches()) == []
    with pytest.raises(ConfigError, match=f"covers {steps} steps"):
        engine.step()


@FAST
@given(seed=st.integers(0, 2**62), other=st.integers(0, 2**62))
def test_the_seed_and_fingerprint_decide_the_noise_and_batches(seed, other):
    fp_a, fp_b = "ab" * 32, "cd" * 32
    same = run_all(tiny_engine(seed=seed, fingerprint=fp_a))
    assert torch.equal(same, run_all(tiny_engine(seed=seed, fingerprint=fp_a)))
    secret = tiny_engine(seed=seed, fingerprint=fp_a, epsilon=None).streams.seeds
    for changed in ({"fingerprint": fp_b}, {"seed": other}, {"data_seed": 7}):   # other private data too
        if changed.get("seed") == seed:
            continue
        seeds = tiny_engine(**{"seed": seed, "fingerprint": fp_a, "epsilon": None, **changed}).streams.seeds
        assert (seeds["noise"], seeds["data"]) != (secret["noise"], secret["data"])
        assert (seeds["directions"] == secret["directions"]) == ("seed" not in changed)   # public: the seed's


@FAST
@given(seed=st.integers(0, 2**62))
def test_secure_mode_and_no_seed_draw_the_secret_streams_from_the_os(seed):
    a, b = (tiny_engine(seed=seed, secure_mode=True, epsilon=None) for _ in range(2))
    assert a.streams.seeds["noise"] != b.streams.seeds["noise"]
    assert a.streams.seeds["directions"] == b.streams.seeds["directions"]   # the public ones from the seed
    assert a.plan.noise_seed.startswith("os entropy")
    unseeded = tiny_engine(seed=None, epsilon=None)
    assert unseeded.streams.secure and unseeded.plan.noise_seed.startswith("os entropy")


def test_a_secure_run_does_not_assume_a_secret_seed():
    assert "seed_secret" in tiny_engine(seed=1).plan.assumptions
    assert "seed_secret" not in tiny_engine(seed=1, secure_mode=True).plan.assumptions


@FAST
@given(seed=st.integers(0, 2**20), n=st.integers(20, 50))
def test_a_dataset_and_its_tensors_train_the_same_model(seed, n):
    x, y = tiny_data(seed, n=n)
    pairs = [(x[i], int(y[i])) for i in range(n)]
    common = {"method": "dpzero", "epsilon": None, "steps": 3, "batch_size": 8, "seed": seed, "verbose": False,
              "lr": 0.1, "clip": 1.0}   # (the same Poisson batches and directions, without an accountant to build)
    from_tensors = private_zo(Tiny(1), cross_entropy_per_example, (x, y), **common)
    from_dataset = private_zo(Tiny(1), cross_entropy_per_example, pairs, **common)
    assert from_tensors.streams.fingerprint == from_dataset.streams.fingerprint
    assert torch.equal(run_all(from_tensors), run_all(from_dataset))


@FAST
@given(seed=st.integers(0, 2**20))
def test_step_takes_only_the_batch_the_sampler_just_gave(seed):
    engine = tiny_engine(seed=seed)
    x, y = tiny_data(seed)
    with pytest.raises(ConfigError, match="fresh Poisson sample"):
        engine.step((x[:16], y[:16]))
    batches = engine.batches()
    first = next(batches)
    second = next(batches)
    with pytest.raises(ConfigError, match="fresh Poisson sample"):
        engine.step(first)   # an earlier batch, not the one just drawn
    engine.step(second)
    assert engine.steps_done == 1


def mean_loss(outputs, targets):
    return nn.functional.cross_entropy(outputs, targets)


class WithBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.layer = nn.BatchNorm1d(5, dtype=torch.float64), nn.Linear(5, 3, dtype=torch.float64)

    def forward(self, x):
        return self.layer(self.norm(x))


@pytest.mark.parametrize("change, message", [
    ({"method": "dpsgd"}, "first-order"),
    ({"method": "no_such"}, "unknown method 'no_such'"),
    ({"method": "mezo"}, "non-private: give epsilon=None"),
    ({"method": "pazo_m"}, "needs public data"),
    ({"loss": mean_loss}, "one loss per example"),
    ({"labels": "float"}, "labels must be integer class indices"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"batch_size": 61}, "exceeds the 60 private training examples"),
    ({"steps": 2.5}, "steps must be an integer >= 1"),
    ({"engine": "fast"}, "unknown engine 'fast'"),
    ({"fingerprint": "not hex"}, "fingerprint must be a hex string"),
    ({"seed": -1}, "seed must be an integer"),
    ({"model": WithBatchNorm}, "BatchNorm"),
    ({"sigma": 1.0, "epsilon": None}, "sigma is set but epsilon is None"),
    ({"lr": -1.0}, "lr must be a positive number"),
    ({"data": "text"}, "train_data must be"),
    ({"accountant": "moments"}, "unknown accountant 'moments' (choices: pld, prv, rdp)"),
])
def test_a_users_mistake_is_one_config_error_before_any_step(change, message):
    x, y = tiny_data(0)
    change = dict(change)
    if change.pop("labels", None):
        y = y.double()
    data = change.pop("data", (x, y))
    model = change.pop("model", lambda: Tiny(0))()
    loss = change.pop("loss", cross_entropy_per_example)
    before = [p.detach().clone() for p in model.parameters()]
    options = {"method": "dpzero", "epsilon": 1.0, "steps": 3, "batch_size": 16, "seed": 0, "verbose": False,
               "lr": 0.1, "clip": 1.0, "cache_dir": SIGMA_CACHE, **change}
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        private_zo(model, loss, data, **options)
    assert "\n" not in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


#: one mistake in each argument checked before anything runs, in the order of private_zo's signature
MISTAKES = [("model", "mlp", "model must be a torch.nn.Module"),
            ("loss_fn", 3, "loss_fn must be callable"),
            ("train_data", "text", "train_data must be"),
            ("method", "no_such", "unknown method 'no_such'"),
            ("steps", 0, "steps must be an integer >= 1"),
            ("batch_size", 0, "batch_size must be an integer >= 1"),
            ("public", "text", "public must be"),
            ("seed", -1, "seed must be an integer"),
            ("secure_mode", "yes", "secure_mode must be True or False"),
            ("fingerprint", "not hex", "fingerprint must be a hex string"),
            ("engine", "fast", "unknown engine 'fast'"),
            ("chunk_size", 0, "chunk_size must be an integer >= 1"),
            ("query_dropout", "no", "query_dropout must be True or False"),
            ("cache_dir", 3, "cache_dir must be a folder's path"),
            ("device", "gpu9", "unknown device 'gpu9'")]


@settings(max_examples=40, deadline=None)
@given(mistakes=st.lists(st.sampled_from(range(len(MISTAKES))), min_size=1, max_size=4, unique=True))
@example(mistakes=[0, 3])    # a model given as a name, and an unknown method: the method was named
@example(mistakes=[2, 12])   # train_data and query_dropout: query_dropout was named
@example(mistakes=[11, 14])  # chunk_size: checked only after the noise was calibrated
def test_of_several_mistakes_the_first_arguments_is_named(mistakes):
    x, y = tiny_data(0)
    given = {"model": Tiny(0), "loss_fn": cross_entropy_per_example, "train_data": (x, y), "method": "dpzero",
             "epsilon": 1.0, "steps": 3, "batch_size": 16, "seed": 0, "verbose": False, "lr": 0.1, "clip": 1.0,
             "cache_dir": SIGMA_CACHE}
    given.update({MISTAKES[i][0]: MISTAKES[i][1] for i in mistakes})
    model, loss_fn, train_data = given.pop("model"), given.pop("loss_fn"), given.pop("train_data")
    with pytest.raises(ConfigError) as err:
        private_zo(model, loss_fn, train_data, **given)
    assert str(err.value).startswith(MISTAKES[min(mistakes)][2]), str(err.value)


def test_the_facts_are_those_of_the_plan_and_name_what_is_outside_the_guarantee():
    engine = tiny_engine(steps=2)
    run_all(engine)
    facts = engine.describe()
    assert facts["privacy"]["sigma"] == engine.plan.sigma and facts["privacy"]["steps_done"] == 2
    assert facts["privacy"]["epsilon_spent"] == engine.epsilon()
    assert any("step() returns" in s for s in facts["outside_guarantee"])
    assert json.loads(json.dumps(facts)) == facts   # plain data: nothing private, nothing opaque
    assert np.isfinite(params(engine).numpy()).all()


@pytest.mark.parametrize("method", method_names("zeroth_order"))
def test_every_registered_zeroth_order_method_steps_in_your_loop(method):
    private = method_info(method).private
    engine = tiny_engine(method=method, steps=2, epsilon=2.0 if private else None, public=tiny_data(1, n=40))
    before = params(engine).clone()
    stats = [engine.step(batch) for batch in engine.batches()]
    assert engine.steps_done == 2 and all(np.isfinite(s["loss"]) for s in stats)
    assert not torch.equal(before, params(engine))
    assert (engine.epsilon() is not None) == private
