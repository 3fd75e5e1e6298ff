"""The library's accountant (`private_zo(..., accountant=...)`), as a run's `privacy.accountant`:
sigma is calibrated with the chosen accountant and meets the target by it (and by no looser margin
than calibration leaves), epsilon is counted with it, `describe()` and the printed guarantee name it,
and a name that is not one is one ConfigError naming the argument and the choices."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_library import SIGMA_CACHE, Tiny, run_all, tiny_data

from pazo.errors import ConfigError
from pazo.models.functional import cross_entropy_per_example
from pazo.privacy import plan as plan_module
from pazo.privacy.accountants import BudgetError, default_eps_error
from pazo.privacy.accountants import ACCOUNTANTS
from pazo.privacy.planner import epsilon_of
from pazo.private import private_zo

N = 60   # tiny_data's private examples


def engine_with(accountant, epsilon=2.0, steps=3, batch_size=16, **kw):
    return private_zo(Tiny(0), cross_entropy_per_example, tiny_data(0), method=kw.pop("method", "dpzero"),
                      epsilon=epsilon, steps=steps, batch_size=batch_size, accountant=accountant, seed=0, lr=0.1,
                      clip=1.0, verbose=kw.pop("verbose", False), cache_dir=SIGMA_CACHE, **kw)


def account(name: str, sigma: float, batch_size: int, steps: int, target: float) -> float:
    """Epsilon of (sigma, q, steps, delta = 1/n) by accountant `name` (PRV at the default accuracy)."""
    return epsilon_of(sigma, batch_size / N, steps, 1 / N, name, default_eps_error(target)).upper


@pytest.fixture
def no_cross_check(monkeypatch):
    """The plan without its cross-check (every accountant's epsilon, printed beside the guarantee:
    seconds of PLD per engine), which these tests of the chosen accountant do not read."""
    monkeypatch.setattr(plan_module, "cross_check", lambda plan, steps, cache_dir=None: None)


def check_calibrated_with(name, epsilon, steps, batch_size):
    """The rule: sigma calibrated by accountant `name` meets the target by it, tightly (5% less
    noise would not), and the engine counts epsilon with it."""
    engine = engine_with(name, epsilon, steps, batch_size)
    sigma = engine.plan.sigma
    assert engine.plan.accountant_name == name and engine.describe()["privacy"]["accountant_name"] == name
    assert account(name, sigma, batch_size, steps, epsilon) <= epsilon
    assert account(name, 0.95 * sigma, batch_size, steps, epsilon) > epsilon   # calibrated by this one, tightly
    run_all(engine)
    assert engine.epsilon() == pytest.approx(account(name, sigma, batch_size, steps, epsilon), rel=1e-3)
    assert engine.epsilon() <= epsilon


CASES = {"epsilon": st.floats(0.5, 4.0), "steps": st.integers(1, 12), "batch_size": st.integers(6, 30)}


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["prv", "rdp"]), **CASES)
@example(name="rdp", epsilon=2.0, steps=3, batch_size=16)   # the reported case: RDP, as Opacus users choose
def test_sigma_calibrated_with_each_accountant_meets_the_target_with_it(no_cross_check, name, epsilon, steps,
                                                                        batch_size):
    check_calibrated_with(name, epsilon, steps, batch_size)


@pytest.mark.slow   # (each PLD calibration is a sequence of PLD accounts: about 10-30 s)
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(**CASES)
@example(epsilon=2.0, steps=3, batch_size=16)
def test_sigma_calibrated_with_pld_meets_the_target_with_it(no_cross_check, epsilon, steps, batch_size):
    check_calibrated_with("pld", epsilon, steps, batch_size)


def test_the_printed_guarantee_names_the_accountant_as_the_librarys_argument(capsys, monkeypatch):
    monkeypatch.setattr(plan_module, "cross_check",
                        lambda plan, steps, cache_dir=None: {"steps": steps, "epsilon": {"rdp": 2.0}})
    engine_with("rdp", verbose=True)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("accountant: "))
    assert line.startswith("accountant: rdp (accountant); cross-check") and "privacy." not in line


@settings(max_examples=25, deadline=None)
@given(name=st.one_of(st.text(max_size=6), st.none(), st.integers(), st.sampled_from(["RDP", "Prv", " pld", "gdp"]))
       .filter(lambda v: v not in ACCOUNTANTS))
def test_an_unknown_accountant_is_one_error_naming_the_argument_and_the_choices(name):
    with pytest.raises(ConfigError) as err:
        engine_with(name)
    said = str(err.value)   # (with the close match where there is one: `unknown_choice`)
    assert said.startswith(f"unknown accountant {name!r}") and said.endswith(" (choices: pld, prv, rdp)")


@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_a_laplace_method_is_accounted_exactly_and_refuses_a_gaussian_accountant(name):
    model = Tiny(0)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(BudgetError, match=f"^accountant={name} accounts Gaussian noise.*leave accountant=prv"):
        private_zo(model, cross_entropy_per_example, tiny_data(0), method="dp_zo", noise="laplace", epsilon=2.0,
                   steps=3, batch_size=16, accountant=name, seed=0, lr=0.1, clip=1.0, verbose=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
