"""Family 1 of the bad-input catalogue: config values of the wrong type or out of range. Each ends
in one `pazo: error:` line and exit 2 from the entry point's pre-launch check, before Hydra makes a
run directory and before any data are read; the schema (pazo/config_schema.py) accepts every
config the project ships."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import run_cache
from fault_inputs_helpers import assert_one_error, run_entry
from hydra import compose, initialize_config_dir

from pazo import CONFIG_DIR
from pazo.audit import command as audit_command
from pazo.config_schema import check_config_values
from pazo.errors import ConfigError
from pazo import train
from pazo.run.validate import validate_config

#: (overrides, words the error line must hold)
BAD_VALUES = [
    # the top level
    ("seed=abc", ["seed", "abc"]),
    ("seed=-1", ["seed", ">= 0"]),
    ("seed=1.5", ["seed", "1.5"]),
    ("seed=true", ["seed"]),
    ("seed=9223372036854775808", ["seed", "2**63"]),
    ("device=tpu", ["device", "tpu"]),
    ("device=cuda:x", ["device"]),
    ("device=cuda:7", ["device=cuda:7"]),   # no CUDA here, or fewer than 8 devices
    ("+bogus=1", ["bogus"]),
    # train
    ("train.eval_batch_size=0", ["train.eval_batch_size", "an integer >= 1"]),
    ("train.batch_size=0", ["train.batch_size"]),
    ("train.batch_size=abc", ["train.batch_size", "abc"]),
    ("train.batch_size=2.5", ["train.batch_size"]),
    ("train.steps=-3", ["train.steps"]),
    ("train.epochs=0", ["train.epochs"]),
    ("train.epochs=nan", ["train.epochs"]),
    ("train.log_every=0", ["train.log_every"]),
    ("train.evals_per_epoch=-1", ["train.evals_per_epoch"]),
    ("train.checkpoint_every=0", ["train.checkpoint_every"]),
    ("train.checkpoint_minutes=0", ["train.checkpoint_minutes"]),
    ("train.distributed_timeout_s=1e300", ["train.distributed_timeout_s", "at most"]),   # (torch overflowed)
    ("train.keep_checkpoint=maybe", ["train.keep_checkpoint", "maybe"]),
    ("train.save_model=perhaps", ["train.save_model"]),
    ("+train.foo=1", ["train.foo", "eval_batch_size"]),
    # warm start
    ("warm_start.epochs=-1", ["warm_start.epochs"]),
    ("warm_start.epochs=1.5", ["warm_start.epochs"]),
    ("warm_start.epochs=1 warm_start.lr=0", ["warm_start.lr"]),
    ("warm_start.batch_size=0", ["warm_start.batch_size"]),
    ("warm_start.cache=sometimes", ["warm_start.cache"]),
    # engine
    ("engine.chunk_size=0", ["engine.chunk_size", "an integer >= 1"]),
    ("engine.chunk_size=-2", ["engine.chunk_size"]),
    ("engine.chunk_size=many", ["engine.chunk_size"]),
    ("engine.name=turbo", ["engine", "turbo"]),
    ("engine.query_dropout=x", ["engine.query_dropout"]),
    # privacy
    ("privacy.delta=1e-300", ["privacy.delta", "1e-10"]),
    ("privacy.delta=2", ["privacy.delta"]),
    ("privacy.delta=abc", ["privacy.delta"]),
    ("privacy.secure_mode=maybe", ["privacy.secure_mode", "maybe"]),
    ("privacy.epsilon=-1", ["privacy.epsilon"]),
    ("privacy.epsilon=abc", ["privacy.epsilon"]),
    ("privacy.sigma=0", ["privacy.sigma"]),
    ("privacy.eps_error=-1", ["privacy.eps_error"]),
    ("privacy.adjacency=neighbours", ["privacy.adjacency"]),
    ("privacy.sampling=random", ["privacy.sampling"]),
    # logger
    ("logger.mode=bogus", ["logger.mode", "bogus"]),
    ("logger.verbose=loud", ["logger.verbose"]),
    ("logger.private_diagnostics=often", ["logger.private_diagnostics"]),
    ("logger.private_diagnostics=2", ["logger.private_diagnostics", "true or false", "2"]),
    ("train.save_model=1", ["train.save_model", "true or false"]),
    ("logger.tags=5", ["logger.tags"]),
    # method (its own typed config)
    ("method=gep method.num_bases=0", ["method.num_bases", ">= 1"]),
    ("method=gep method.num_groups=0", ["method.num_groups"]),
    ("method.lr=0", ["method.lr"]),
    ("method.q=0", ["method.q"]),
    ("method.q=abc", ["method.q"]),
    ("method=dpzero method.direction=spiral", ["method.direction"]),
    # data sets
    ("dataset.val_fraction=1", ["dataset.val_fraction"]),
    ("dataset.public_fraction=0", ["dataset.public_fraction"]),
    ("dataset.public_imbalance=1", ["dataset.public_imbalance"]),
    ("dataset.test_fraction=1.5", ["dataset.test_fraction"]),
    ("dataset=image_folder dataset.root=/x dataset.image_size=0", ["dataset.image_size"]),
    ("dataset=image_folder dataset.root=/x dataset.normalize=maybe", ["dataset.normalize"]),
    ("dataset=cifar10 model=nf_resnet18 dataset.augment_public=x", ["dataset.augment_public"]),
    ("dataset=cifar10 model=nf_resnet18 dataset.public_source=web", ["dataset.public_source"]),
    ("dataset=torchvision dataset.download=perhaps", ["dataset.download"]),
    ("dataset=tiny_imagenet model=vit dataset.public_per_class=0", ["dataset.public_per_class"]),
    ("dataset=imdb model=lstm dataset.vocab_source=x", ["dataset.vocab_source"]),
    ("dataset=imdb model=lstm dataset.max_length=0", ["dataset.max_length"]),
    ("dataset=hf_text dataset.hf_name=x model=lstm dataset.vocab_size=0", ["dataset.vocab_size"]),
    ("dataset=mnli model=roberta_prompt dataset.label_words=[a,b]", ["dataset.label_words"]),
    ("dataset=sst2 model=hf_causal_lm dataset.data_seed=-1", ["dataset.data_seed"]),
    ("dataset=squad model=hf_causal_lm dataset.max_new_tokens=0", ["dataset.max_new_tokens"]),
    # models
    ("model.width=0", ["model.width"]),
    ("model.dropout=1", ["model.dropout"]),
    ("dataset=cifar10 model=nf_resnet18 model.stem=tiny", ["model.stem"]),
    ("dataset=tiny_imagenet model=vit model.attention=flash", ["model.attention"]),
    ("dataset=tiny_imagenet model=vit model.depth=0", ["model.depth"]),
    ("dataset=imdb model=lstm model.layers=0", ["model.layers"]),
    ("dataset=sst2 model=hf_causal_lm model.dtype=float8", ["model.dtype"]),
    ("dataset=sst2 model=hf_causal_lm model.lora.rank=0", ["model.lora.rank"]),
    ("dataset=sst2 model=hf_masked_lm model.attention=flash", ["model.attention"]),
    ("dataset=mnli model=roberta_prompt model.dropout=2", ["model.dropout"]),
]


@pytest.mark.parametrize("overrides,words", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_before_anything_starts(overrides, words, tmp_path, capsys):
    run_dir = tmp_path / "run"
    safe = {"train.steps": "2", "logger.mode": "disabled", "privacy.cache_dir": str(tmp_path / "cache")}
    keys = {o.split("=")[0] for o in overrides.split()}
    argv = [*overrides.split(), *(f"{k}={v}" for k, v in safe.items() if k not in keys), f"hydra.run.dir={run_dir}"]
    code, _, err = run_entry(train.cli, argv, capsys, prog="pazo-train")
    assert_one_error(code, err, *words)
    assert code == 2 and not run_dir.exists()   # refused before Hydra made the run directory


AUDIT_BAD = [("seed=abc", "seed"), ("engine.chunk_size=0", "engine.chunk_size"),
             ("privacy.secure_mode=maybe", "privacy.secure_mode"), ("audit.canaries=abc", "audit.canaries"),
             ("audit.canaries=1", "audit.canaries"), ("audit.threat=grey_box", "audit.threat"),
             ("audit.confidence=1.5", "audit.confidence"), ("audit.canary_scale=0.5", "audit.canary_scale"),
             ("audit.delta=2", "audit.delta"), ("privacy=none", "privacy.epsilon")]


@pytest.mark.parametrize("overrides,word", AUDIT_BAD, ids=[o for o, _ in AUDIT_BAD])
def test_the_audit_checks_values_before_its_run_directory(overrides, word, tmp_path, capsys):
    code, _, err = run_entry(audit_command.cli, [overrides, f"hydra.run.dir={tmp_path / 'audit'}"], capsys,
                             prog="pazo-audit")
    assert_one_error(code, err, word)
    assert not (tmp_path / "audit").exists()


def _composed():
    """Every config group option alone, every experiment, and both top configs."""
    options = [[f"{group}={p.stem}"] for group in ("dataset", "model", "method", "privacy", "experiment")
               for p in sorted((CONFIG_DIR / group).glob("*.yaml"))]
    return [([], "config"), ([], "audit"), *((o, "config") for o in options)]


def test_every_shipped_config_passes_the_schema():
    """The schema names every key of every config file (an unknown key would be refused) and every
    shipped value is in range: no false alarm on what the project ships."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for overrides, name in _composed():
            cfg = compose(config_name=name, overrides=overrides)
            check_config_values(cfg)


def test_a_sweep_checks_every_run_against_the_schema(capsys):
    from pazo.sweep import command as sweep
    code = sweep.main(["demo", "--dry-run", "--methods", "dpzero", "engine.chunk_size=0"])
    assert_one_error(code, capsys.readouterr().err, "engine.chunk_size")


def test_validate_config_takes_plain_dicts_as_the_sweep_gives_them():
    """The sweep validates its runs as plain attribute dicts, not DictConfigs."""
    from pazo.sweep.checks import _view
    from omegaconf import OmegaConf
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["privacy.delta=1e-5"])
    plain = _view(OmegaConf.to_container(cfg, resolve=True))
    validate_config(plain)
    plain["train"]["eval_batch_size"] = 0
    with pytest.raises(ConfigError, match="train.eval_batch_size"):
        validate_config(plain)


def test_the_real_entry_point_refuses_in_one_line(tmp_path):
    """One subprocess: `python -m pazo.train seed=abc` as a user types it."""
    env = {**os.environ, "WANDB_MODE": "disabled", "PAZO_CACHE_DIR": str(run_cache(tmp_path / "cache"))}
    done = subprocess.run([sys.executable, "-m", "pazo.train", "seed=abc", f"hydra.run.dir={tmp_path / 'r'}"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert_one_error(done.returncode, done.stderr, "seed", "abc")
    assert done.returncode == 2 and not (tmp_path / "r").exists()
