"""The one account a sigma search asks (`pazo.privacy.accountants.Account`): what it answers is the
run's own guarantee, and the sigma cache reads it by the key calibration has always written, so an
entry written before the account existed is still served."""
from __future__ import annotations

import hashlib
import json
from importlib.metadata import version

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import cheap_pld_grid
from pazo.privacy import calibration
from pazo.privacy.accountants import ACCOUNTANTS, MECHANISMS, Account, accountant_for, epsilon_for
from pazo.privacy.calibration import calibrate_sigma


@settings(max_examples=8, deadline=None)
@given(noise=st.sampled_from(MECHANISMS), accountant=st.sampled_from(ACCOUNTANTS), target=st.floats(0.5, 8.0),
       sigma=st.floats(1.5, 3.0), q=st.floats(0.01, 0.2), steps=st.integers(1, 10), mechanisms=st.sampled_from([1, 2]))
def test_the_account_a_search_asks_answers_the_runs_guarantee(noise, accountant, target, sigma, q, steps, mechanisms):
    """A sigma's epsilon by the account calibration makes is, to the bit, the upper bound the run's
    accountant prints after all its steps (PRV at the target's default accuracy)."""
    account = Account.aiming(target, 1e-5, q, steps, None, mechanisms, noise, accountant)
    prv = accountant == "prv" or noise == "laplace"
    eps_error = min(0.01, target / 100) if prv else None
    with cheap_pld_grid():
        run = accountant_for(noise, sigma, q, steps, 1e-5, eps_error, mechanisms, accountant).epsilon(steps).upper
        assert account.epsilon(sigma) == run
        assert account.effective().epsilon(sigma) == epsilon_for(noise, sigma, q, steps, 1e-5, eps_error, 1, accountant)


def _old_key(epsilon: float, delta: float, q: float, steps: int, mechanisms: int, mechanism: str) -> dict:
    """The sigma cache's key as calibration wrote it before it asked an account (literal)."""
    return {"epsilon": epsilon, "delta": delta, "sample_rate": q, "steps": steps, "eps_error": min(0.01, epsilon / 100),
            "mechanisms": mechanisms, "mechanism": mechanism, "prv_accountant": version("prv-accountant"),
            "algorithm": 3}


@settings(max_examples=6, deadline=None)
@given(laplace=st.booleans(), epsilon=st.floats(0.5, 8.0), steps=st.integers(1, 200), mechanisms=st.integers(1, 3))
def test_an_entry_written_before_the_account_is_served(tmp_path_factory, laplace, epsilon, steps, mechanisms):
    """Exact accounts only (Laplace noise at delta 0, a full-batch Gaussian): cheap to calibrate."""
    mechanism, delta, q = ("laplace", 0.0, 0.05) if laplace else ("gaussian", 1e-5, 1.0)
    sigma = calibrate_sigma(epsilon, delta, q, steps, None, mechanisms, mechanism=mechanism)
    key = _old_key(epsilon, delta, q, steps, mechanisms, mechanism)
    cache = tmp_path_factory.mktemp("cache")
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    spent = epsilon_for(mechanism, sigma, q, steps, delta, key["eps_error"], mechanisms)
    (cache / "sigma").mkdir()
    (cache / "sigma" / f"{name}.json").write_text(json.dumps({**key, "sigma": sigma, "epsilon_spent": spent}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(calibration, "_calibrate_uncached", lambda *a, **k: pytest.fail("recalibrated"))
        assert calibrate_sigma(epsilon, delta, q, steps, None, mechanisms, cache, mechanism) == sigma
