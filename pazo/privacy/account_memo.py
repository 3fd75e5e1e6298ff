"""The disk memo of a run's cross-check (`pazo.privacy.plan.cross_check`): each accountant's epsilon
for the run's public numbers (sigma, sample rate, steps, delta, PRV's accuracy), one small JSON file
an account in the cache's accounts/ folder, beside the sigma cache (`sigma_cache`).

An account is a deterministic function of public numbers, the accountant's library and pazo's
accounting code, and every run of a sweep (or of the test suite) asks for the same few: PLD's alone
is one to several seconds a run. The key holds all of them (the library's version, a digest of
pazo's accounting modules' source), so an entry is read only for the very account that wrote it,
and the entry holds a digest of its key and value: a file that does not parse, answers another key,
holds no finite epsilon or fails its digest is one warning line, then the account is computed again
and the entry overwritten, so a damaged cache never changes a printed number.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from pazo.privacy import accountants, planner, rdp
from pazo.privacy.sigma_cache import cache_path, keyed_entry, read_entry, write_entry

if TYPE_CHECKING:
    from pazo.privacy.accountants import Account

log = logging.getLogger(__name__)

#: the cache's folder of accounts
ACCOUNTS_FOLDER = "accounts"
#: the library each accountant's account comes from
LIBRARIES = {"prv": "prv-accountant", "pld": "dp-accounting", "rdp": "dp-accounting"}


@functools.cache
def accounting_code() -> str:
    """A digest of the source of pazo's modules an account runs through: an entry written by other
    accounting code is never read."""
    sources = b"".join(Path(module.__file__).read_bytes() for module in (accountants, planner, rdp))
    return hashlib.sha256(sources).hexdigest()[:24]


def account_key(account: Account, sigma: float) -> dict:
    """Every input of the account's guarantee at `sigma` (`planner.upper_epsilon_of`), and what computes it."""
    accountant = account.accountant
    library = LIBRARIES[accountant]
    return {"accountant": accountant, "sigma": float(sigma), "sample_rate": float(account.sample_rate),
            "steps": int(account.steps), "delta": float(account.delta),
            "eps_error": float(account.eps_error) if accountant == "prv" else None,
            "pld_interval": accountants.PLD_INTERVAL if accountant == "pld" else None,
            "library": f"{library} {version(library)}", "code": accounting_code()}


def _upper_epsilon_of(account: Account, sigma: float) -> float:
    """The account's guarantee at `sigma`, computed: the planner's (its checks first)."""
    return planner.upper_epsilon_of(sigma, account.sample_rate, account.steps, account.delta, account.accountant,
                                    account.eps_error)


def entry_digest(key: dict, epsilon: float) -> str:
    return hashlib.sha256(json.dumps({**key, "epsilon": epsilon}, sort_keys=True).encode()).hexdigest()


def _entry_problem(text: str, key: dict) -> str | None:
    """Why a memo file's text is not the account of `key` (None if it is)."""
    entry, problem = keyed_entry(text, key, "account")
    if problem:
        return problem
    epsilon = entry.get("epsilon")
    if type(epsilon) is not float or not (math.isfinite(epsilon) and epsilon >= 0):
        return f"epsilon={epsilon!r} is not a finite number >= 0"
    if entry.get("digest") != entry_digest(key, epsilon):
        return "its digest does not match its account (the file was changed)"
    return None


def upper_epsilon(account: Account, sigma: float, cache_dir=None) -> float:
    """The guarantee of `account` (of one release a step, by its accountant) at noise multiplier `sigma`
    (`planner.upper_epsilon_of`), read from the memo in `cache_dir` where an earlier run computed it
    (the value it computed, to the last bit), computed and kept there otherwise (no `cache_dir`:
    computed). A refusal (`BudgetError`) is raised as the account raises it, and nothing is kept."""
    if not cache_dir:
        return _upper_epsilon_of(account, sigma)
    key = account_key(account, sigma)
    path = cache_path(cache_dir, key, ACCOUNTS_FOLDER)
    entry, problem = read_entry(path, lambda text: _entry_problem(text, key))
    if entry is not None:
        return entry["epsilon"]
    if problem is not None:   # a file there, but unusable: one warning, then overwritten
        log.warning("account memo entry %s ignored: %s; accounting again and overwriting it", path, problem)
    epsilon = float(_upper_epsilon_of(account, sigma))
    if math.isfinite(epsilon):
        write_entry(path, {**key, "epsilon": epsilon, "digest": entry_digest(key, epsilon)})
    return epsilon
