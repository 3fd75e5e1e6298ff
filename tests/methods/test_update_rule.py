"""Step-size schedules and optimisers (`pazo.methods.update_rule`): each schedule is its formula;
momentum and Adam move the parameters as torch.optim does on the same updates; and for every
registered method they are post-processing: a step releases what the constant-lr SGD step
releases, and the parameters differ only through the update rule."""
import dataclasses
import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from conftest import quadratic_model
from pazo.config_schema import OptimizerSchema, ScheduleSchema
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError
from pazo.run.fingerprint import computation_fingerprint
from pazo.methods import build_method, method_config, method_info, method_names
from pazo.methods.update_rule import Adam, Momentum, StepSchedule
from pazo.privacy.plan import PrivacyPlan
from pazo.rng import RandomStreams
from pazo.zo.engines import VectorisedEngine

STEPS, DIM = 3, 6
SCHEDULE_CFGS = st.one_of(
    st.just({"name": "constant"}), st.just({"name": "inv_sqrt"}),
    st.builds(lambda w: {"name": "warmup", "warmup_steps": w}, st.integers(1, 4)),
    st.builds(lambda w, f: {"name": "cosine", "warmup_steps": w, "final": f}, st.integers(0, 2),
              st.floats(0, 1)),
    st.builds(lambda e, g: {"name": "step", "decay_every": e, "gamma": g}, st.integers(1, 3),
              st.floats(0.01, 1)))
OPTIMIZER_CFGS = st.one_of(
    st.just({"name": "sgd"}),
    st.builds(lambda b: {"name": "momentum", "beta": b}, st.floats(0, 0.99)),
    st.builds(lambda b1, b2: {"name": "adam", "beta1": b1, "beta2": b2, "eps": 1e-8},
              st.floats(0, 0.99), st.floats(0, 0.999)))


# ---------------------------------------------------------------------------- the schedules' formulas

@given(t=st.integers(1, 10_000), total=st.integers(1, 10_000))
@settings(deadline=None)
def test_constant_and_inverse_square_root(t, total):
    assert StepSchedule("constant", total=total).factor(t) == 1.0
    assert StepSchedule("inv_sqrt", total=total).factor(t) == 1 / math.sqrt(t)


@given(t=st.integers(1, 1000), warmup=st.integers(1, 100))
@settings(deadline=None)
def test_warmup_is_linear_then_constant(t, warmup):
    assert StepSchedule("warmup", warmup_steps=warmup).factor(t) == (t / warmup if t <= warmup else 1.0)


@given(t=st.integers(1, 1000), every=st.integers(1, 50), gamma=st.floats(0.01, 1))
@settings(deadline=None)
def test_step_decay_multiplies_by_gamma_every_decay_every_steps(t, every, gamma):
    assert StepSchedule("step", decay_every=every, gamma=gamma).factor(t) == gamma ** ((t - 1) // every)


@given(total=st.integers(2, 500), warmup=st.integers(0, 20), final=st.floats(0, 1), data=st.data())
@settings(deadline=None)
@example(total=10, warmup=0, final=0.0, data=None)
def test_cosine_warms_up_then_decays_from_one_towards_final(total, warmup, final, data):
    s = StepSchedule("cosine", warmup_steps=warmup, final=final, total=total)
    factors = [s.factor(t) for t in range(1, total + 1)]
    assert factors[:warmup] == [t / warmup for t in range(1, min(warmup, total) + 1)]
    after = factors[warmup:]
    if after:
        assert after[0] == 1.0   # the first step after the warm-up takes the whole lr
        assert all(a >= b for a, b in zip(after, after[1:]))
        assert all(final - 1e-12 <= f <= 1.0 for f in after)
    t = warmup + 1 + (data.draw(st.integers(0, max(0, total - warmup - 1))) if data else 0)
    if t <= total:
        progress = (t - 1 - warmup) / max(1, total - warmup)
        assert s.factor(t) == pytest.approx(final + (1 - final) * (1 + math.cos(math.pi * progress)) / 2)


# ---------------------------------------------------------------------------- the optimisers against torch.optim

def torch_reference(optimizer: dict) -> tuple[torch.nn.Parameter, torch.optim.Optimizer]:
    p = torch.nn.Parameter(torch.zeros(DIM, dtype=torch.float64))
    if optimizer["name"] == "momentum":
        return p, torch.optim.SGD([p], lr=1.0, momentum=optimizer["beta"])
    if optimizer["name"] == "adam":
        return p, torch.optim.Adam([p], lr=1.0, betas=(optimizer["beta1"], optimizer["beta2"]), eps=optimizer["eps"])
    return p, torch.optim.SGD([p], lr=1.0)


def torch_step(p, opt, start: torch.Tensor, g: torch.Tensor, lr: float) -> torch.Tensor:
    """What torch.optim makes of update `g` at step size `lr` from parameters `start`."""
    with torch.no_grad():
        p.copy_(start)
    p.grad = g.clone()
    opt.param_groups[0]["lr"] = lr
    opt.step()
    return p.detach().clone()


@given(optimizer=OPTIMIZER_CFGS.filter(lambda o: o["name"] != "sgd"), seed=st.integers(0, 2 ** 16),
       lrs=st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=8))
@settings(deadline=None, max_examples=60)
@example(optimizer={"name": "adam", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}, seed=0, lrs=[0.1] * 5)
@example(optimizer={"name": "momentum", "beta": 0.9}, seed=0, lrs=[0.1] * 5)
def test_momentum_and_adam_move_the_parameters_as_torch_optim_does(optimizer, seed, lrs):
    gen = torch.Generator().manual_seed(seed)
    ours = (Momentum(optimizer["beta"]) if optimizer["name"] == "momentum"
            else Adam(optimizer["beta1"], optimizer["beta2"], optimizer["eps"]))
    p, opt = torch_reference(optimizer)
    x = torch.randn(DIM, generator=gen, dtype=torch.float64)
    for lr in lrs:
        scale = 10 ** float(torch.randint(-3, 3, (1,), generator=gen))
        g = torch.randn(DIM, generator=gen, dtype=torch.float64) * scale
        expected = torch_step(p, opt, x, g, lr)
        x = x - lr * ours.direction(g.clone())
        torch.testing.assert_close(x, expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------- post-processing, for every method

class Recording:
    """A privatiser that keeps a copy of everything it returns (the step's released values)."""

    def __init__(self, inner):
        self.inner, self.released = inner, []

    def keep(self, value):
        self.released.append(torch.as_tensor(value, dtype=torch.float64).clone())
        return value

    def __call__(self, *args, **kwargs):
        return self.keep(self.inner(*args, **kwargs))

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr
        return lambda *args, **kwargs: self.keep(attr(*args, **kwargs))


def build(name: str, lr: float, schedule=None, optimizer=None):
    """`name` on a 6-parameter quadratic, noise multiplier 1 if private, its privatiser recorded and
    its materialised updates (the optimiser's input) kept in `.updates`."""
    info = method_info(name)
    fields = {f.name for f in dataclasses.fields(info.config)}
    small = {"public_batch_size": 4} if "public_batch_size" in fields else {}
    config = method_config({"name": name, "lr": lr, "clip": 1.0, **small})
    gen = torch.Generator().manual_seed(1)
    public = TensorSplit(torch.randn(16, DIM, generator=gen, dtype=torch.float64), torch.zeros(16))
    plan = PrivacyPlan.with_sigma(1.0 if info.private else None, 8, config.release(), steps=STEPS)
    method = build_method(config, model=quadratic_model(DIM), plan=plan, streams=RandomStreams(7), public=public,
                          device=torch.device("cpu"), engine=VectorisedEngine(),
                          schedule=ScheduleSchema(**schedule) if schedule else None,
                          optimizer=OptimizerSchema(**optimizer) if optimizer else None)
    if method.privatizer is not None:
        method.privatizer = Recording(method.privatizer)
    method.updates = []
    rule, apply_pending = method.update_rule, method.update_rule.apply_pending

    def recorded(model, lr):
        if rule.pending is not None:
            method.updates.append(rule.pending.clone())
        apply_pending(model, lr)
    rule.apply_pending = recorded
    return method


def batch(step: int):
    gen = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, DIM, generator=gen, dtype=torch.float64), torch.zeros(8)


def released(method) -> list[torch.Tensor]:
    return method.privatizer.released if method.privatizer is not None else []


@given(name=st.sampled_from(method_names()), schedule=SCHEDULE_CFGS, optimizer=OPTIMIZER_CFGS,
       lr=st.floats(1e-3, 0.2))
@settings(deadline=None, max_examples=40)
@example(name="dpzero", schedule={"name": "cosine", "warmup_steps": 0, "final": 0.0},
         optimizer={"name": "adam", "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}, lr=0.05)
@example(name="pazo_m", schedule={"name": "warmup", "warmup_steps": 2},
         optimizer={"name": "momentum", "beta": 0.9}, lr=0.05)
def test_schedules_and_optimisers_change_only_the_update(name, schedule, optimizer, lr):
    """Step 1 from the same state releases bit for bit what the constant-lr SGD step at
    lr * schedule(1) releases (the SGD one moves the parameters bit for bit alike, the others
    by the optimiser's transform of that same update); over 3 steps each parameter change is
    what torch.optim makes of the method's update at lr * schedule(t)."""
    ruled = build(name, lr, schedule, optimizer)
    lr1 = ruled.update_rule.lr_at(1)
    plain = build(name, lr1)
    start = ruled.model.flat_params().detach().clone()
    plain.take_step(*batch(1), 1)
    p, opt = torch_reference(optimizer)
    theta = start
    for t in range(1, STEPS + 1):
        ruled.take_step(*batch(t), t)
        after = ruled.model.flat_params().detach().clone()
        if t == 1:
            assert len(released(ruled)) == len(released(plain))
            assert all(torch.equal(a, b) for a, b in zip(released(ruled), released(plain)))
            if optimizer["name"] == "sgd":
                assert torch.equal(after, plain.model.flat_params())
            else:   # the materialised update is the method's own (its SGD step's, up to summation order)
                torch.testing.assert_close(ruled.updates[0], (start - plain.model.flat_params()) / lr1,
                                           rtol=1e-6, atol=1e-9)
        if optimizer["name"] != "sgd" and len(ruled.updates) == t:
            torch.testing.assert_close(after, torch_step(p, opt, theta, ruled.updates[-1], ruled.update_rule.lr_at(t)),
                                       rtol=1e-6, atol=1e-9)
        theta = after


# ---------------------------------------------------------------------------- config

@pytest.mark.parametrize("values,match", [
    ({"name": "linear"}, "schedule.name"), ({"name": "warmup", "warmup_steps": 0}, "schedule.warmup_steps"),
    ({"name": "step", "gamma": 1.5}, r"schedule.gamma must be in \(0, 1\]"),
    ({"name": "cosine", "final": -0.1}, "schedule.final")])
def test_a_bad_schedule_is_one_config_error(values, match):
    with pytest.raises(ConfigError, match=match):
        ScheduleSchema(**values)


def test_a_bad_optimizer_is_refused_before_compute(hydra_cfg, tmp_path):
    from pazo.train import run
    with pytest.raises(ConfigError, match=r"optimizer.beta2 must be in \[0, 1\)"):
        run(hydra_cfg("optimizer=adam", "optimizer.beta2=1.0"), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_the_default_rule_keeps_the_fingerprint_and_another_changes_it(hydra_cfg):
    """A constant schedule and SGD leave a run's fingerprint (hence its noise) as it was before they
    existed; another schedule or optimiser is another computation, with its own noise."""
    from pazo.run.typed import typed_config
    base = typed_config(hydra_cfg())
    without = {k: v for k, v in base.items() if k not in ("schedule", "optimizer")}
    assert computation_fingerprint(base) == computation_fingerprint(without)
    others = {computation_fingerprint(typed_config(hydra_cfg(*o))) for o in
              (["schedule=cosine"], ["optimizer=adam"], ["optimizer=momentum", "optimizer.beta=0.5"])}
    assert len(others) == 3 and computation_fingerprint(base) not in others
