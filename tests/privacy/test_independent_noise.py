"""Runs of one sweep draw independent secret randomness: the DP noise and the Poisson batches are
seeded from the seed and the run's computation fingerprint (`pazo.run.fingerprint`), so two runs that
differ in a hyperparameter add different noise, while two that differ only in how they compute
(engine, logging, checkpoints, device, paths) draw the same, and the same config and seed give the
same run."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
from omegaconf import OmegaConf

import pazo.run.fingerprint as fingerprint
import pazo.run.loop as training_loop
import pazo.train as train
from pazo.run.fingerprint import NOT_COMPARED
from pazo.errors import ConfigError
from pazo.run.build import build_run
from pazo.run.fingerprint import HOW_KEYS, computation_fingerprint
from pazo.privacy.mechanisms import noise_generator
from pazo.rng import STREAMS, RandomStreams
from pazo.run.typed import run_config, typed_config
from pazo.run.weights import read_weights
from conftest import CONFIG_DIR, ROOT, composed_copy, run_cache
from step_faults import fail_at_step

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

#: keys that change what a run computes: each gives another fingerprint
WHAT = ["method.lr=0.3", "method.clip=2.0", "privacy.epsilon=2.0", "train.batch_size=32", "train.steps=5",
        "model.width=8", "dataset.public_fraction=0.2", "engine.query_dropout=true", "method=dpzero"]
#: keys that say only how, where or with what output: the same fingerprint
HOW = ["seed=7", "engine.name=inplace", "engine.chunk_size=2", "train.log_every=1", "train.evals_per_epoch=1",
       "train.eval_batch_size=7", "train.checkpoint_every=3", "train.keep_checkpoint=true",
       "train.save_model=false", "logger.project=other", "sweep_name=other", "device=auto",
       "warm_start.cache=false", "privacy.cache_dir=/elsewhere"]


def compose_cfg(*overrides, config_name="config"):
    return composed_copy("logger.mode=disabled", "train.steps=4", "train.log_every=2", "device=cpu", *overrides,
                         config_name=config_name)


def secret_draws(r, count=3) -> tuple[list, torch.Tensor]:
    """The first Poisson batches and noise draws of an assembled run (on fresh generators of its
    streams' seeds, leaving the run's own untouched)."""
    sampler = type(r.sampler())(r.n, r.batch_size, np.random.default_rng(r.streams.seeds["data"]))
    noise = torch.randn(5, generator=torch.Generator().manual_seed(r.streams.seeds["noise"]))
    return [sampler.sample().tolist() for _ in range(count)], noise


def test_the_fingerprint_keeps_what_is_computed_and_leaves_out_how(monkeypatch, tmp_path):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    base = computation_fingerprint(compose_cfg())
    assert len(base) == 64 and int(base, 16) >= 0
    for override in WHAT:
        assert computation_fingerprint(compose_cfg(override)) != base, override
    for override in HOW:
        assert computation_fingerprint(compose_cfg(override)) == base, override
    # the order the overrides came in, and an override equal to the default, change nothing
    assert (computation_fingerprint(compose_cfg("method.lr=0.3", "method.clip=2.0"))
            == computation_fingerprint(compose_cfg("method.clip=2.0", "method.lr=0.3")))
    assert computation_fingerprint(compose_cfg("method.lr=0.5")) == base  # PAZO-M's default lr on digits
    plain = OmegaConf.to_container(compose_cfg(), resolve=True)  # a plain dict: the same, and left as it was
    assert computation_fingerprint(plain) == base and plain["train"]["log_every"] == 2


def test_every_key_a_resume_may_change_is_left_out_of_the_fingerprint():
    """Every attempt of one run has one fingerprint (the resume's own check compares the rest)."""
    covered = lambda key: any(key == k or key.startswith(k + ".") for k in HOW_KEYS)  # noqa: E731
    assert all(covered(key) for key in NOT_COMPARED), [k for k in NOT_COMPARED if not covered(k)]


def test_the_fingerprint_is_the_same_in_another_process_with_other_paths(tmp_path):
    """No dependence on dict order, hash randomisation or where the cache and data live."""
    script = ("import sys, pazo.run.validate; from hydra import compose, initialize_config_dir;"
              "from pazo.run.fingerprint import computation_fingerprint\n"
              f"with initialize_config_dir(config_dir={CONFIG_DIR!r}, version_base='1.3'):\n"
              "    print(computation_fingerprint(compose(config_name='config', overrides=sys.argv[1:])))")
    overrides = ["logger.mode=disabled", "train.steps=4", "train.log_every=2", "device=cpu"]
    outs = []
    for hash_seed, cache, order in (("1", tmp_path / "a", 1), ("2", tmp_path / "b" / "c", -1)):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PAZO_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
        args = [*overrides, "method.clip=2.0", "method.lr=0.3"][::order]
        outs.append(subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, env=env, capture_output=True,
                                   text=True, check=True).stdout.strip())
    assert outs[0] == outs[1] == computation_fingerprint(compose_cfg("method.lr=0.3", "method.clip=2.0"))


def test_the_fingerprint_keys_only_the_secret_streams():
    plain, keyed, other = (RandomStreams(3, fingerprint=f) for f in (None, "ab" * 32, "cd" * 32))
    for name in STREAMS:
        if name in RandomStreams.SECRET:
            assert len({plain.seeds[name], keyed.seeds[name], other.seeds[name]}) == 3, name
        else:
            assert plain.seeds[name] == keyed.seeds[name] == other.seeds[name], name
    assert RandomStreams(3, fingerprint="ab" * 32).seeds == keyed.seeds  # reproducible
    assert RandomStreams(4, fingerprint="ab" * 32).seeds["noise"] != keyed.seeds["noise"]
    a = noise_generator(keyed)
    b = noise_generator(RandomStreams(3, fingerprint="ab" * 32))
    assert torch.equal(torch.randn(4, generator=a), torch.randn(4, generator=b))
    secure = RandomStreams(3, secure=True, fingerprint="ab" * 32)  # OS entropy, whatever the fingerprint
    assert all(secure.seeds[n] != keyed.seeds[n] for n in RandomStreams.SECRET)


def test_runs_that_differ_in_the_learning_rate_draw_other_noise_and_batches(monkeypatch, tmp_path):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    base = build_run(run_config(compose_cfg("method=dpzero")))
    lr = build_run(run_config(compose_cfg("method=dpzero", "method.lr=0.3")))
    how = build_run(run_config(compose_cfg("method=dpzero", "engine.name=inplace", "train.log_every=1", "seed=0")))
    (batches, noise), (lr_batches, lr_noise), (how_batches, how_noise) = map(secret_draws, (base, lr, how))
    assert batches != lr_batches and not torch.equal(noise, lr_noise)
    assert batches == how_batches and torch.equal(noise, how_noise)
    for name in set(STREAMS) - set(RandomStreams.SECRET):  # the same splits, initial model and directions
        assert base.streams.seeds[name] == lr.streams.seeds[name], name
    assert torch.equal(base.data.private.inputs, lr.data.private.inputs)
    assert base.computation["fingerprint"] != lr.computation["fingerprint"]
    assert base.computation["fingerprint"] == how.computation["fingerprint"]


def test_a_how_key_leaves_the_run_bit_identical(hydra_cfg, tmp_path):
    """log_every changes the reporting only (rows average the steps since the last one): the same
    model, step for step; a run records its fingerprint, and the same config and seed give the same run."""
    a = train.run(hydra_cfg("method=dpzero", "train.log_every=4"), tmp_path / "a")
    b = train.run(hydra_cfg("method=dpzero", "train.log_every=1"), tmp_path / "b")
    again = train.run(hydra_cfg("method=dpzero", "train.log_every=4"), tmp_path / "again")

    def row(name, step=4):
        lines = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return next({k: v for k, v in r.items() if k != "s_per_iter"} for r in map(json.loads, lines)
                    if r["step"] == step)
    assert row("a") == row("again")
    assert all(row("a")[k] == row("b")[k] for k in ("test_loss", "test_accuracy", "val_loss", "epsilon"))
    assert a["computation"]["fingerprint"] == b["computation"]["fingerprint"]
    assert a["computation"]["fingerprint"] == computation_fingerprint(typed_config(hydra_cfg("method=dpzero")))
    models = [read_weights(tmp_path / d / "model.safetensors") for d in ("a", "b", "again")]
    assert all(torch.equal(models[0][k], m[k]) for m in models[1:] for k in models[0])
    assert again["final_test_accuracy"] == b["final_test_accuracy"] == a["final_test_accuracy"]


def test_a_resume_whose_fingerprint_changed_is_refused(hydra_cfg, tmp_path, monkeypatch):
    """The checkpoint records the fingerprint its streams were keyed by: an attempt that would key
    them otherwise (here: a version of pazo that counts log_every as a computing key) is refused."""
    cfg = hydra_cfg("method=dpzero", "train.steps=6", "train.checkpoint_every=2")
    real = fail_at_step(monkeypatch, training_loop, "timed_step", 5, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        train.run(cfg, tmp_path)
    monkeypatch.setattr(training_loop, "timed_step", real)
    monkeypatch.setattr(fingerprint, "HOW_KEYS", tuple(k for k in HOW_KEYS if k != "train.log_every"))
    with pytest.raises(ConfigError, match="fingerprint: "):
        train.run(cfg, tmp_path)
    monkeypatch.undo()
    s = train.run(cfg, tmp_path)
    assert s["status"] == "finished" and s["resumed_from_step"] == 4


def test_a_failed_run_started_over_with_another_learning_rate_is_refused(hydra_cfg, tmp_path, monkeypatch):
    """(Was: accepted with fresh noise, the earlier attempt archived and its releases uncounted.)
    Under another fingerprint (here another lr) a start over would draw independent noise, which
    the printed epsilon would not compose with the earlier attempt's releases: it is refused, and
    nothing is moved."""
    fail_at_step(monkeypatch, training_loop, "timed_step", 3, RuntimeError("injected fault"))
    with pytest.raises(RuntimeError):
        train.run(hydra_cfg("method=pazo_p", "train.steps=6", "method.public_grads_together=true"), tmp_path)
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="method.lr: "):
        train.run(hydra_cfg("method=pazo_p", "train.steps=6", "method.public_grads_together=true",
                            "method.lr=0.3"), tmp_path)
    assert not (tmp_path / "attempts").exists()


FLOAT_KEYS = ["privacy.epsilon", "method.lr", "method.clip", "train.epochs", "warm_start.lr",
              "dataset.public_imbalance"]


@settings(max_examples=10, deadline=None, derandomize=True)   # three Hydra composes an example (about 1.4 s)
@given(key=st.sampled_from(FLOAT_KEYS), value=st.integers(0, 50))
def test_one_value_spelt_as_an_integer_or_a_float_is_one_computation(key, value):
    """Values are cast to their schema types before hashing: `key=3` and `key=3.0` are one config,
    so one noise, and a relaunch of one with the other replays rather than being refused."""
    from pazo.run.fingerprint import config_fingerprint

    as_int, as_float = compose_cfg(f"{key}={value}"), compose_cfg(f"{key}={float(value)}")
    assert computation_fingerprint(typed_config(as_int)) == computation_fingerprint(typed_config(as_float))
    assert config_fingerprint(typed_config(as_int)) == config_fingerprint(typed_config(as_float))
    assert computation_fingerprint(typed_config(as_int)) != computation_fingerprint(
        typed_config(compose_cfg(f"{key}={value + 0.5}")))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31), digests=st.lists(st.binary(min_size=32, max_size=32), min_size=2, max_size=2,
                                                      unique=True))
def test_the_private_data_keys_the_secret_streams_and_only_those(seed, digests):
    """The same seed and fingerprint on other data draw other noise and batches; the public
    streams follow from the seed alone; the same data draw the same again."""
    fp = "ab" * 32
    keyed = []
    for digest in (*digests, digests[0]):
        streams = RandomStreams(seed, fingerprint=fp)
        streams.key_to(digest.hex())
        keyed.append(streams.seeds)
    assert keyed[0] == keyed[2]
    assert all(keyed[0][name] != keyed[1][name] for name in RandomStreams.SECRET)
    assert all(keyed[0][name] == keyed[1][name] for name in STREAMS if name not in RandomStreams.SECRET)
    secure = RandomStreams(seed, secure=True, fingerprint=fp)
    before = dict(secure.seeds)
    secure.key_to(digests[0].hex())
    assert secure.seeds == before   # secure mode's secret streams come from the OS, not the data


def test_a_seeded_run_on_other_data_draws_other_noise_and_releases_no_data_hash(monkeypatch, tmp_path):
    import pazo.run.build as experiment

    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    cfg = run_config(compose_cfg("method=dpzero"))
    real = experiment.build_dataset

    def other_data(dataset_cfg, streams):
        data = real(dataset_cfg, streams)
        data.private.labels[0] = (data.private.labels[0] + 1) % 10   # one example changed
        return data
    same, again = build_run(cfg), build_run(cfg)
    monkeypatch.setattr(experiment, "build_dataset", other_data)
    other = build_run(cfg)
    (batches, noise), (batches_again, noise_again) = secret_draws(same), secret_draws(again)
    assert batches == batches_again and torch.equal(noise, noise_again)
    assert not torch.equal(secret_draws(same)[1], secret_draws(other)[1])
    assert same.computation == other.computation   # the public fingerprint is the config's only
    assert same.private_computation["private_data_sha256"] != other.private_computation["private_data_sha256"]
    assert all(same.data_digest not in json.dumps(r.describe(), default=str) for r in (same, other))
