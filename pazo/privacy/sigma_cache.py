"""The disk cache of calibrated noise multipliers: one small JSON file per calibration request
(written atomically, so parallel sweep jobs can share it), used only if it parses, its inputs equal
the request and its sigma still meets the target by the run's own accountant.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path

from pazo.privacy.accountants import SIGMA_MAX, BudgetError

log = logging.getLogger(__name__)


def cache_path(cache_dir: str | os.PathLike, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return Path(os.path.expanduser(str(cache_dir))) / "sigma" / f"{digest}.json"


def _entry_problem(text: str, key: dict, sigma_max: float) -> str | None:
    """Why a cache file's text cannot be used for `key` (None if it can, pending re-confirmation)."""
    try:
        entry = json.loads(text)
    except ValueError:
        return "not valid JSON"
    if not isinstance(entry, dict):
        return "not a JSON object"
    for name, want in key.items():
        got = entry.get(name)
        if type(got) is not type(want) or got != want:
            return f"stored {name}={got!r} does not match the request's {want!r}"
    sigma = entry.get("sigma")
    if type(sigma) not in (int, float) or not (math.isfinite(sigma) and 0 < sigma <= sigma_max):
        return f"sigma={sigma!r} is not a finite number in (0, {sigma_max:g}]"
    return None


def read_cache(path: Path, key: dict, target: float, spent) -> float | None:
    """The cached sigma if the entry is well formed, matches `key` exactly and still meets the
    target by `spent` (the run's own accountant); otherwise None, after one warning."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        problem = f"unreadable ({type(err).__name__})"
    else:
        problem = _entry_problem(text, key, SIGMA_MAX * math.sqrt(key["mechanisms"]))
        if problem is None:
            sigma = json.loads(text)["sigma"]
            try:
                used = spent(sigma)
            except BudgetError as err:
                problem = f"sigma={sigma!r} cannot be accounted ({err})"
            else:
                if used <= target:
                    return float(sigma)
                problem = f"sigma={sigma!r} spends epsilon={used:.6g}, above the target {target:g}"
    log.warning("sigma cache entry %s ignored: %s; recalibrating and overwriting it", path, problem)
    return None


def write_cache(path: Path, key: dict, sigma: float) -> None:
    """Atomic write (parallel sweep jobs share the cache); a cache that cannot be written is skipped."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as tmp:
            json.dump({**key, "sigma": sigma}, tmp)
        os.replace(tmp.name, path)
    except OSError as err:
        log.warning("sigma cache %s not written: %s", path, err)
        if tmp is not None and os.path.exists(tmp.name):
            os.unlink(tmp.name)
