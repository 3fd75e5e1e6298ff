"""The memo of the cross-check's accounts (pazo.privacy.account_memo): a run reads each account an
earlier run of the same public numbers computed, the very value the accountant gives, and a damaged
entry never changes a printed number."""
from __future__ import annotations

import json
import logging

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.privacy import account_memo, calibration, planner
from pazo.privacy.account_memo import ACCOUNTS_FOLDER, upper_epsilon
from pazo.privacy.accountants import Account
from pazo.privacy.plan import PrivacyPlan, cross_check
from conftest import CHEAP_PLD_INTERVAL, cheap_pld_grid

#: public numbers whose three accounts are cheap (a large sigma, few steps: PLD's grid is small)
PUBLIC = st.tuples(st.floats(2.0, 20.0), st.floats(0.005, 0.5), st.integers(1, 40), st.floats(1e-7, 1e-3))


def memo(sigma, q, steps, delta, accountant, eps_error, cache_dir=None) -> float:
    """`upper_epsilon` of the account of these public numbers (one release a step)."""
    return upper_epsilon(Account("gaussian", q, steps, delta, eps_error, accountant=accountant), sigma, cache_dir)


def entries(cache_dir) -> list:
    return sorted((cache_dir / ACCOUNTS_FOLDER).glob("*.json"))


def count_accounts(monkeypatch) -> list:
    """The accounts computed from now on (each a call of `planner.upper_epsilon_of`)."""
    computed, account = [], planner.upper_epsilon_of

    def counted(*args):
        computed.append(args)
        return account(*args)
    monkeypatch.setattr(planner, "upper_epsilon_of", counted)
    return computed


@settings(max_examples=5)
@given(PUBLIC, st.sampled_from(["prv", "pld", "rdp"]))
@example((0.8099850194450303, 64 / 1165, 3, 1 / 1165), "pld")   # (the default digits run's sigma)
def test_a_memo_hit_is_the_accountants_value_to_the_last_bit(tmp_path_factory, public, accountant):
    """The rule: for any public numbers, the value read back is the one the accountant computes for
    them, and it is read, not computed again."""
    sigma, q, steps, delta = public
    cache = tmp_path_factory.mktemp("cache")
    live = planner.upper_epsilon_of(sigma, q, steps, delta, accountant, 0.01)
    with pytest.MonkeyPatch.context() as patch:
        computed = count_accounts(patch)
        first = memo(sigma, q, steps, delta, accountant, 0.01, cache)
        second = memo(sigma, q, steps, delta, accountant, 0.01, cache)
    assert first == second == live and type(second) is float
    assert len(computed) == 1 and len(entries(cache)) == 1


def test_each_public_number_and_the_accounting_code_is_in_the_key(tmp_path, monkeypatch):
    """Another sigma, sample rate, step count, delta, PRV accuracy or accountant is another account;
    so is another version of pazo's accounting code (an entry it did not write is never read)."""
    base = (4.0, 0.05, 10, 1e-5, "prv", 0.01)
    others = [(4.1, 0.05, 10, 1e-5, "prv", 0.01), (4.0, 0.06, 10, 1e-5, "prv", 0.01),
              (4.0, 0.05, 11, 1e-5, "prv", 0.01), (4.0, 0.05, 10, 2e-5, "prv", 0.01),
              (4.0, 0.05, 10, 1e-5, "prv", 0.02), (4.0, 0.05, 10, 1e-5, "rdp", 0.01)]
    for args in [base, *others]:
        memo(*args, tmp_path)
    assert len(entries(tmp_path)) == 1 + len(others)
    live = planner.upper_epsilon_of(*base)
    monkeypatch.setattr(account_memo, "accounting_code", lambda: "other code")
    computed = count_accounts(monkeypatch)
    assert memo(*base, tmp_path) == live
    assert len(computed) == 1


def damaged_epsilon(entry: dict) -> dict:
    return {**entry, "epsilon": entry["epsilon"] * 0.5}


DAMAGES = {
    "not JSON": lambda text: text[: len(text) // 2],
    "a list": lambda text: "[1.0]",
    "another epsilon, its digest kept": lambda text: json.dumps(damaged_epsilon(json.loads(text))),
    "no epsilon": lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "epsilon"}),
    "a string epsilon": lambda text: json.dumps({**json.loads(text), "epsilon": "0.5"}),
    "another sigma": lambda text: json.dumps({**json.loads(text), "sigma": 1.0}),
    "no digest": lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "digest"}),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_entry_is_one_warning_then_the_account_again(tmp_path, caplog, damage):
    """A damaged entry is named in one warning, the account is computed again, and the entry
    overwritten with it."""
    args = (5.0, 0.05, 20, 1e-5, "rdp", 0.01)
    live = memo(*args, tmp_path)
    (path,) = entries(tmp_path)
    path.write_text(DAMAGES[damage](path.read_text()))
    with caplog.at_level(logging.WARNING, logger="pazo.privacy.account_memo"):
        assert memo(*args, tmp_path) == live
    assert [r.getMessage().count(str(path)) for r in caplog.records] == [1]
    assert memo(*args, tmp_path) == live and json.loads(path.read_text())["epsilon"] == live


@settings(max_examples=25)
@given(st.data())
def test_no_damage_to_an_entry_changes_the_epsilon_it_answers(tmp_path_factory, data):
    """The rule: whatever bytes of an entry are changed, the epsilon answered is the accountant's."""
    cache = tmp_path_factory.mktemp("cache")
    args = (6.0, 0.02, 15, 1e-6, data.draw(st.sampled_from(["prv", "rdp"])), 0.01)
    live = memo(*args, cache)
    (path,) = entries(cache)
    raw = bytearray(path.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255).filter(lambda b, old=raw[at]: b != old))
    path.write_bytes(bytes(raw))
    assert memo(*args, cache) == live


def test_a_runs_cross_check_is_computed_once_for_its_public_numbers(tmp_path, monkeypatch):
    """Two runs of the same public numbers: the second's cross-check reads the first's three accounts,
    and says what the first said."""
    plan = PrivacyPlan(private=True, sample_rate=0.05, steps=12, sigma=3.0, delta=1e-5, target_epsilon=1.0,
                       eps_error=0.01, accountant_name="prv")
    computed = count_accounts(monkeypatch)
    first = cross_check(plan, 12, tmp_path)
    second = cross_check(plan, 12, tmp_path)
    assert first == second == cross_check(plan, 12)
    assert len(computed) == 3 + 3   # (the first run's three, then the third call's, without the memo)


def test_a_run_stopped_early_cross_checks_its_steps_through_the_memo(tmp_path, monkeypatch):
    """A run stopped before its last step cross-checks the steps it counted; a second run stopped
    at the same step reads the first's accounts, and says what the first said."""
    from pazo.privacy.plan import EpsilonTracker
    from pazo.run.checkpoint import LoopState
    from pazo.run.summary import outcome

    plan = PrivacyPlan(private=True, sample_rate=0.05, steps=12, sigma=3.0, delta=1e-5, target_epsilon=1.0,
                       eps_error=0.01, accountant_name="prv")
    plan.cross_check = cross_check(plan, 12, tmp_path)
    computed = count_accounts(monkeypatch)
    stopped = [outcome(plan, EpsilonTracker(plan), LoopState(step=5), 12, "stopped", [1], cache_dir=tmp_path)
               for _ in range(2)]
    assert stopped[0]["privacy"]["cross_check"] == stopped[1]["privacy"]["cross_check"] == cross_check(plan, 5)
    assert stopped[0]["privacy"]["cross_check"]["steps"] == 5
    assert len(computed) == 3 + 3   # (the first stop's three, then the last call's, without the memo)


def test_the_pld_grid_is_in_the_key(tmp_path):
    """A PLD account on another grid (the tests' cheap one) is another account: read under the
    package's grid key, a coarse account would print another run's cross-check."""
    args = (4.0, 0.05, 10, 1e-5, "pld", 0.01)
    memo(*args, tmp_path)
    with cheap_pld_grid():
        assert memo(*args, tmp_path) == planner.upper_epsilon_of(*args)   # (its own grid's, not read)
    assert len(entries(tmp_path)) == 2


def test_pld_calibration_accounts_on_the_grid_its_check_reads(monkeypatch):
    """dp-accounting's PLD calibration builds its accountants on `accountants.PLD_INTERVAL` as it is
    when it runs, as the check of its answer does (a value frozen at import left the tests' cheap
    grid to the check alone)."""
    import dp_accounting.pld
    grids = []
    real = dp_accounting.pld.PLDAccountant

    def recording(*args, value_discretization_interval, **kwargs):
        grids.append(value_discretization_interval)
        return real(*args, value_discretization_interval=value_discretization_interval, **kwargs)

    monkeypatch.setattr(dp_accounting.pld, "PLDAccountant", recording)
    with cheap_pld_grid():
        calibration.dp_accounting_sigma(Account.aiming(1.0, 1e-5, 0.05, 20, accountant="pld"))
    assert grids and set(grids) == {CHEAP_PLD_INTERVAL}
