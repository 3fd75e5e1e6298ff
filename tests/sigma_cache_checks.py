"""The sigma cache's one rule for a bad entry, shared by the accountant's tests and the bad-input
catalogue's: whatever is wrong with it, it is one warning line, recalibrated once and overwritten
with calibration's own answer."""
from __future__ import annotations

import json
import logging

from pazo.privacy import calibration
from pazo.privacy.calibration import calibrate_sigma


def check_bad_entry_is_recalibrated(poison, sigma: float, args: tuple, cache_dir, monkeypatch, caplog) -> dict:
    """Calibrate `args` into `cache_dir`, replace the entry's text with `poison(entry)`, then
    calibrate twice more: both give `sigma`, after one recalibration and one warning line, and the
    entry is written back as it was. Calibration answers `sigma` without solving again; returns the
    entry as calibration wrote it."""
    calls = []

    def calibrate(*a, **kwargs):   # calibration's real answer, without paying for the solve again
        calls.append(a)
        return sigma
    monkeypatch.setattr(calibration, "_calibrate_uncached", calibrate)
    calibrate_sigma(*args, cache_dir=cache_dir)
    (path,) = (cache_dir / "sigma").glob("*.json")
    entry = json.loads(path.read_text())
    path.write_text(poison(entry))
    with caplog.at_level(logging.WARNING, logger="pazo.privacy.sigma_cache"):
        assert calibrate_sigma(*args, cache_dir=cache_dir) == sigma
        assert calibrate_sigma(*args, cache_dir=cache_dir) == sigma
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1 and len(calls) == 2   # one line, recalibrated once, then served
    assert json.loads(path.read_text()) == entry
    return entry
