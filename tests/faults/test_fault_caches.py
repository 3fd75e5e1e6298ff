"""Family 3 of the bad-input catalogue: caches are checked against what they claim, never trusted
blindly. The sigma cache (an entry must reproduce the epsilon it records, within calibration's
slack of the target: a larger, over-noising sigma is refused like a smaller one), the warm-start
cache and the decoded-image cache (each file holds its kind, full key and content sha256; warm-start
tensors must have the model's names and shapes). A bad entry is one warning line, then recomputed
and overwritten; the result is the fresh one."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from fixtures import write_image_folder
from hydra import compose, initialize_config_dir

from pazo import CONFIG_DIR
from pazo.files.cache_files import FORMAT, digest, load_entry, save_entry
from pazo.data import image_folder
from pazo.data.image_folder import read_image_folder
from pazo.run.build import build_run
from pazo.run.typed import run_config
from pazo.privacy import calibration
from pazo.privacy.calibration import calibrate_sigma
from sigma_cache_checks import check_bad_entry_is_recalibrated

# --- the sigma cache -------------------------------------------------------------------------------

CACHE_ARGS = (1.0, 1e-5, 0.05, 60)


@pytest.fixture(scope="module")
def fresh_sigma():
    return calibrate_sigma(*CACHE_ARGS)


def _entry(tmp_path):
    (path,) = (tmp_path / "sigma").glob("*.json")
    return path


SIGMA_POISONS = {
    "2% more noise": lambda e: {**e, "sigma": e["sigma"] * 1.02},
    "1.5x more noise": lambda e: {**e, "sigma": e["sigma"] * 1.5},
    "10x more noise": lambda e: {**e, "sigma": e["sigma"] * 10},
    "more noise, its epsilon recorded to match": lambda e: {**e, "sigma": e["sigma"] * 2, "epsilon_spent": 0.5},
    "recorded epsilon forged": lambda e: {**e, "epsilon_spent": e["epsilon_spent"] * 0.9},
    "recorded epsilon missing (an older entry)": lambda e: {k: v for k, v in e.items() if k != "epsilon_spent"},
    "recorded epsilon a string": lambda e: {**e, "epsilon_spent": str(e["epsilon_spent"])},
    "less noise (over budget)": lambda e: {**e, "sigma": e["sigma"] * 0.7},
}


@pytest.mark.parametrize("poison", sorted(SIGMA_POISONS))
def test_a_sigma_entry_that_is_not_calibrations_answer_is_recalibrated(poison, fresh_sigma, tmp_path,
                                                                       monkeypatch, caplog):
    good = check_bad_entry_is_recalibrated(lambda e: json.dumps(SIGMA_POISONS[poison](e)), fresh_sigma, CACHE_ARGS,
                                           tmp_path, monkeypatch, caplog)
    assert 0.99 <= good["epsilon_spent"] <= 1.0   # the entry records the epsilon its sigma spends


def test_a_sigma_entry_with_more_noise_says_so(fresh_sigma, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(calibration, "_calibrate_uncached", lambda *a, **k: fresh_sigma)
    calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path)
    path = _entry(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "sigma": fresh_sigma * 3}))
    with caplog.at_level(logging.WARNING, logger="pazo.privacy.sigma_cache"):
        calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path)
    (message,) = [r.getMessage() for r in caplog.records]
    assert "over-noised" in message and "\n" not in message


def test_calibrations_own_entry_is_served_without_recomputing(fresh_sigma, tmp_path, monkeypatch):
    calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path)
    monkeypatch.setattr(calibration, "_calibrate_uncached", lambda *a, **k: pytest.fail("recalibrated"))
    assert calibrate_sigma(*CACHE_ARGS, cache_dir=tmp_path) == fresh_sigma


# --- the cache file format shared by the warm-start and image caches ---------------------------------

def test_digest_sees_a_change_of_value_dtype_or_shape():
    base = {"w": torch.arange(6.0).reshape(2, 3), "n": [1, "a"]}
    changed = [{"w": torch.arange(6.0).reshape(3, 2), "n": [1, "a"]},
               {"w": torch.arange(6.0).reshape(2, 3).double(), "n": [1, "a"]},
               {"w": torch.arange(6.0).reshape(2, 3) + 1e-6, "n": [1, "a"]},
               {"w": torch.arange(6.0).reshape(2, 3), "n": [1, "b"]}]
    assert digest(base) == digest({"n": [1, "a"], "w": torch.arange(6.0).reshape(2, 3)})
    assert len({digest(base), *map(digest, changed)}) == 5


def _altered(entry):
    value = {k: v.clone() for k, v in entry["value"].items()}
    first = next(iter(value))
    value[first].view(-1)[0] += 1
    return {**entry, "value": value}


FILE_POISONS = {
    "garbage bytes": lambda path, entry: path.write_bytes(b"\x00\xffnot a torch file" * 10),
    "empty file": lambda path, entry: path.write_bytes(b""),
    "truncated": lambda path, entry: path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2]),
    "a bare value (older format, or another file put there)": lambda path, entry: torch.save(entry["value"], path),
    "another key's entry": lambda path, entry: torch.save({**entry, "key": "0" * 64}, path),
    "another kind's entry": lambda path, entry: torch.save({**entry, "kind": "other"}, path),
    "content altered, digest kept": lambda path, entry: torch.save(_altered(entry), path),
    "a pickled object (not loadable safely)": lambda path, entry: torch.save(
        {**entry, "value": logging.getLogger("x")}, path),
}


@pytest.mark.parametrize("poison", sorted(FILE_POISONS))
def test_a_cache_file_that_is_not_what_it_claims_is_ignored_with_one_warning(poison, tmp_path, caplog):
    path, key = tmp_path / "entry.pt", "a" * 64
    value = {"images": torch.arange(24, dtype=torch.uint8).reshape(2, 3, 2, 2)}
    save_entry(path, "images", key, value)
    entry = torch.load(path, weights_only=True)
    assert entry["format"] == FORMAT and entry["sha256"] == digest(value)
    FILE_POISONS[poison](path, entry)
    with caplog.at_level(logging.WARNING, logger="pazo.files.cache_files"):
        assert load_entry(path, "images", key) is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert str(path) in message and "recomputing" in message and "\n" not in message


# --- the decoded-image cache ------------------------------------------------------------------------

@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "images"
    for part, n in (("train", 4), ("test", 2)):
        write_image_folder(root / part, ["cat", "dog"], per_class=n, size=8)
    return root


@pytest.mark.parametrize("poison", ["garbage bytes", "truncated", "a bare value (older format, or another file "
                                    "put there)", "content altered, digest kept", "another key's entry"])
def test_a_bad_image_cache_is_rebuilt_from_the_images(poison, folder, tmp_path, caplog):
    cache = tmp_path / "cache"
    fresh = read_image_folder(folder, None, cache_dir=str(cache))
    (path,) = (cache / "images").glob("*.pt")
    FILE_POISONS[poison](path, torch.load(path, weights_only=True))
    with caplog.at_level(logging.WARNING, logger="pazo.files.cache_files"):
        again = read_image_folder(folder, None, cache_dir=str(cache))
    assert len([r for r in caplog.records if "ignored" in r.getMessage()]) == 1
    assert all(torch.equal(a, b) for a, b in zip(fresh[:4], again[:4]))
    assert load_entry(path, "images", torch.load(path, weights_only=True)["key"]) is not None  # rewritten whole


def test_a_good_image_cache_is_used_without_decoding(folder, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    fresh = read_image_folder(folder, None, cache_dir=str(cache))
    monkeypatch.setattr(image_folder, "decode_images", lambda *a, **k: pytest.fail("decoded again"))
    again = read_image_folder(folder, None, cache_dir=str(cache))
    assert torch.equal(fresh[0], again[0])


# --- the warm-start cache ---------------------------------------------------------------------------

def _warm_cfg(tmp_path, **extra):
    overrides = ["warm_start.epochs=1", "train.steps=2", "device=cpu", "privacy=none",
                 f"privacy.cache_dir={tmp_path / 'cache'}", *(f"{k}={v}" for k, v in extra.items())]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return run_config(compose(config_name="config", overrides=overrides))


def _weights(run):
    return {k: v.detach().clone() for k, v in run.module.state_dict().items()}


@pytest.fixture(scope="module")
def warm_fresh(tmp_path_factory):
    """A warm-started model's weights, trained (not read from a cache), and its cache file."""
    tmp = tmp_path_factory.mktemp("warm")
    run = build_run(_warm_cfg(tmp))
    assert run.warm_start["cached"] is False
    (path,) = (tmp / "cache" / "warm_start").glob("*.pt")
    return tmp, _weights(run), path.name


def _wrong_shape(path, entry):
    value = dict(entry["value"])
    name = next(iter(value))
    value[name] = torch.zeros(3, 3)
    torch.save({**entry, "value": value, "sha256": digest(value)}, path)


WARM_POISONS = {**{k: FILE_POISONS[k] for k in ("garbage bytes", "truncated", "content altered, digest kept",
                                                "another key's entry")},
                "other weights of the same shapes": lambda path, entry: torch.save(
                    {k: torch.randn_like(v) for k, v in entry["value"].items()}, path),
                "a tensor of the wrong shape, digest recomputed to match": _wrong_shape}


@pytest.mark.parametrize("poison", sorted(WARM_POISONS))
def test_a_bad_warm_start_cache_is_trained_again(poison, warm_fresh, tmp_path, caplog):
    source, fresh, name = warm_fresh
    path = tmp_path / "cache" / "warm_start" / name
    path.parent.mkdir(parents=True)
    path.write_bytes((source / "cache" / "warm_start" / name).read_bytes())
    WARM_POISONS[poison](path, torch.load(path, weights_only=True))
    with caplog.at_level(logging.WARNING):
        run = build_run(_warm_cfg(tmp_path))
    warned = [r.getMessage() for r in caplog.records if "warm_start cache entry" in r.getMessage()]
    assert len(warned) == 1 and run.warm_start["cached"] is False
    assert all(torch.equal(fresh[k], v) for k, v in _weights(run).items())   # the fresh warm start, not the file's
    assert build_run(_warm_cfg(tmp_path)).warm_start["cached"] is True        # the file was rewritten whole


def test_a_good_warm_start_cache_is_used(warm_fresh):
    source, fresh, _ = warm_fresh
    run = build_run(_warm_cfg(source))
    assert run.warm_start["cached"] is True
    assert all(torch.equal(fresh[k], v) for k, v in _weights(run).items())


def test_another_configurations_warm_start_is_not_used(warm_fresh, tmp_path):
    """A warm start of another learning rate has another key: its file is never read for this one."""
    source, fresh, name = warm_fresh
    other = build_run(_warm_cfg(source, **{"warm_start.lr": 0.05}))
    assert other.warm_start["cached"] is False
    assert not all(torch.equal(fresh[k], v) for k, v in _weights(other).items())
    assert np.isfinite([v.float().sum().item() for v in _weights(other).values()]).all()
