"""The disk cache of calibrated noise multipliers: one small JSON file per calibration request
(written atomically, so parallel sweep jobs can share it) holding the request, sigma and the epsilon
that sigma spent by the accountant when it was written. It is used only if it parses, its inputs
equal the request, the run's own accountant reproduces the recorded epsilon from its sigma, and that
epsilon meets the target without falling below it by more than calibration's slack: a sigma too
small would break the guarantee, one too large would over-noise the run and lose accuracy without a
word. Anything else is one warning line, then calibration again and the entry overwritten.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from pazo.privacy.accountants import SIGMA_MAX, BudgetError
from pazo.files.rundir import write_atomic

if TYPE_CHECKING:
    from pazo.privacy.accountants import Account

log = logging.getLogger(__name__)

#: calibration returns a sigma whose epsilon lies within 0.3% below the target (measured over
#: epsilon 0.1-8, sample rates 0.004-0.2, 50-5000 steps); an entry that spends less than this share
#: of the target has more noise than calibration gives
SPENT_FLOOR = 0.99
#: the recorded epsilon must be reproduced to this relative accuracy (the accountant is deterministic)
REPRODUCE_RTOL = 1e-6


def cache_path(cache_dir: str | os.PathLike, key: dict, folder: str = "sigma") -> Path:
    """The file of `key`'s entry in `folder` of the cache (sigma/: calibrations; accounts/: the
    cross-check's accounts, `pazo.privacy.account_memo`)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return Path(os.path.expanduser(str(cache_dir))) / folder / f"{digest}.json"


def sigma_key(account: Account) -> dict:
    """What a calibration's entry is read by: its account's every input and the library that accounts
    it (and the version of calibration's algorithm), in the order an entry holds them."""
    return {"epsilon": account.target, "delta": account.delta, "sample_rate": float(account.sample_rate),
            "steps": int(account.steps), "eps_error": account.eps_error, "mechanisms": int(account.mechanisms),
            "mechanism": account.mechanism, "prv_accountant": version("prv-accountant"), "algorithm": 3}


def entry_path(cache_dir: str | os.PathLike, account: Account) -> Path:
    """The file of the calibration of `account` in the cache at `cache_dir`."""
    return cache_path(cache_dir, sigma_key(account))


def keyed_entry(text: str, key: dict, asked: str) -> tuple[dict | None, str | None]:
    """(entry, None) where a cache file's text is a JSON object holding `key` exactly (its values of
    the same types); else (None, why not), `asked` naming what asked for it in the reason."""
    try:
        entry = json.loads(text)
    except ValueError:
        return None, "not valid JSON"
    if not isinstance(entry, dict):
        return None, "not a JSON object"
    for name, want in key.items():
        got = entry.get(name)
        if type(got) is not type(want) or got != want:
            return None, f"stored {name}={got!r} does not match the {asked}'s {want!r}"
    return entry, None


def _entry_problem(text: str, key: dict, sigma_max: float) -> str | None:
    """Why a cache file's text cannot be used for `key` (None if it can, pending re-confirmation)."""
    entry, problem = keyed_entry(text, key, "request")
    if problem:
        return problem
    sigma = entry.get("sigma")
    if type(sigma) not in (int, float) or not (math.isfinite(sigma) and 0 < sigma <= sigma_max):
        return f"sigma={sigma!r} is not a finite number in (0, {sigma_max:g}]"
    return None


def _spent_problem(sigma: float, used: float, recorded, target: float) -> str | None:
    """Why a sigma that spends `used` (and recorded `recorded`) is not calibration's answer for
    `target`, or None."""
    if used > target:
        return f"sigma={sigma!r} spends epsilon={used:.6g}, above the target {target:g}"
    if used < SPENT_FLOOR * target:
        return (f"sigma={sigma!r} spends epsilon={used:.6g}, below {SPENT_FLOOR:g} of the target {target:g}: "
                "more noise than calibration gives (the run would be over-noised)")
    if type(recorded) not in (int, float) or not math.isclose(recorded, used, rel_tol=REPRODUCE_RTOL):
        return (f"its recorded epsilon_spent={recorded!r} is not reproduced by the accountant "
                f"({used:.9g} from sigma={sigma!r})")
    return None


def read_entry(path: Path, problem_of) -> tuple[dict | None, str | None]:
    """(the entry, None) where `path` holds one in which `problem_of(text)` finds nothing wrong; (None,
    None) where there is no file; (None, why not) where it cannot be read or is not one."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None, None
    except (OSError, UnicodeDecodeError) as err:
        return None, f"unreadable ({type(err).__name__})"
    problem = problem_of(text)
    return (json.loads(text), None) if problem is None else (None, problem)


def read_cache(path: Path, account: Account) -> float | None:
    """The cached sigma if the entry is well formed, matches the account's key exactly, and the
    account (the run's own accountant) reproduces its recorded epsilon, which meets its target within
    calibration's slack; otherwise None, after one warning."""
    key, sigma_max = sigma_key(account), SIGMA_MAX * math.sqrt(account.mechanisms)
    entry, problem = read_entry(path, lambda text: _entry_problem(text, key, sigma_max))
    if entry is None and problem is None:
        return None
    if entry is not None:
        sigma, recorded = entry["sigma"], entry.get("epsilon_spent")
        try:
            used = account.epsilon(sigma)
        except BudgetError as err:
            problem = f"sigma={sigma!r} cannot be accounted ({err})"
        else:
            problem = _spent_problem(sigma, used, recorded, account.target)
            if problem is None:
                return float(sigma)
    log.warning("sigma cache entry %s ignored: %s; recalibrating and overwriting it", path, problem)
    return None


def write_cache(path: Path, account: Account, sigma: float) -> None:
    """Atomic write (parallel sweep jobs share the cache) of the account's key, sigma and the epsilon
    it spends by the account; a cache that cannot be written is skipped."""
    spent = account.epsilon(sigma)
    write_entry(path, {**sigma_key(account), "sigma": sigma, "epsilon_spent": spent})


def write_entry(path: Path, entry: dict) -> None:
    """One cache entry written atomically (parallel sweep jobs share the cache); a cache that cannot
    be written is skipped, with one warning."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(entry).encode(), shared=True)
    except OSError as err:
        log.warning("%s cache %s not written: %s", path.parent.name, path, err)
