"""Clear errors for bad input, before any data is loaded or any compute starts.

Each method checks its own fields (its typed config, `pazo/methods/`); what is checked here spans
several config groups."""
from __future__ import annotations

import math
from collections.abc import Mapping

from pazo.config_schema import check_config_values
from pazo.data import DATASETS
from pazo.data.validation import check_validation_size
from pazo.errors import ConfigError
from pazo.methods import METHODS, method_config, method_info
from pazo.models import MODELS
from pazo.privacy.accountants import check_delta
from pazo.privacy.sampling import SAMPLERS
from pazo.zo.engines import ENGINES


def _positive(value, what: str, integer: bool = False) -> None:
    ok = value is not None and (isinstance(value, int) if integer else isinstance(value, (int, float)))
    if not ok or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} must be a positive {'integer' if integer else 'number'}, got {value!r}")


def _choice(value, choices, what: str) -> None:
    if value not in choices:
        raise ConfigError(f"unknown {what} {value!r}; choices: {', '.join(sorted(choices))}")


def validate_config(cfg) -> None:
    """Checks that need only the config."""
    _choice(cfg.dataset.name, DATASETS.names(), "dataset")
    _choice(cfg.model.name, MODELS.names(), "model")
    _choice(cfg.method.name, METHODS.names(), "method")
    _choice(cfg.engine.name, ENGINES, "engine")
    check_config_values(cfg)  # every key's type and range (pazo/config_schema.py)
    t, m, p = cfg.train, cfg.method, cfg.privacy
    _positive(t.batch_size, "train.batch_size", integer=True)
    if t.steps is not None:
        _positive(t.steps, "train.steps", integer=True)
    else:
        _positive(t.epochs, "train.epochs")
    _positive(t.log_every, "train.log_every", integer=True)
    if t.evals_per_epoch is not None and t.evals_per_epoch < 0:
        raise ConfigError(f"train.evals_per_epoch must be >= 0, got {t.evals_per_epoch}")
    method = method_config(m)  # the method's own checks (its typed config)

    w = cfg.warm_start
    if not (isinstance(w.epochs, int) and w.epochs >= 0):
        raise ConfigError(f"warm_start.epochs must be an integer >= 0, got {w.epochs!r}")
    if w.epochs:
        _positive(w.lr, "warm_start.lr")
        _positive(w.batch_size, "warm_start.batch_size", integer=True)
    d = cfg.dataset
    if "public_fraction" in d and not (isinstance(d.public_fraction, float) and 0 < d.public_fraction < 1):
        raise ConfigError(f"dataset.public_fraction must be in (0, 1), got {d.public_fraction!r}")
    if "public_imbalance" in d and not (isinstance(d.public_imbalance, (int, float)) and 0 <= d.public_imbalance < 1):
        raise ConfigError(f"dataset.public_imbalance must be in [0, 1), got {d.public_imbalance!r}")
    check_validation_size(d)
    if d.get("image_size") is not None:
        _positive(d.image_size, "dataset.image_size", integer=True)
    if d.name == "mnli" and cfg.model.name != "roberta_prompt":
        raise ConfigError(f"dataset=mnli is a prompt task for model=roberta_prompt, not model={cfg.model.name}")
    prompted = ("sst2", "squad", "glue_prompt")
    if d.name in prompted and cfg.model.name not in ("hf_causal_lm", "hf_masked_lm"):
        raise ConfigError(f"dataset={d.name} is a prompted task for model=hf_causal_lm or hf_masked_lm, "
                          f"not model={cfg.model.name}")
    if cfg.model.name in ("hf_causal_lm", "hf_masked_lm") and d.name not in prompted:
        raise ConfigError(f"model={cfg.model.name} runs prompted tasks (dataset=sst2, squad, glue_prompt), "
                          f"not dataset={d.name}")
    if d.name == "squad" and cfg.model.name != "hf_causal_lm":
        raise ConfigError("dataset=squad is answered by generation: use model=hf_causal_lm")
    if cfg.model.name in ("hf_causal_lm", "hf_masked_lm"):
        _choice(cfg.model.dtype, ("float32", "float16", "bfloat16"), "model.dtype")
        if cfg.model.lora.enabled:
            _positive(cfg.model.lora.rank, "model.lora.rank", integer=True)
            _positive(cfg.model.lora.alpha, "model.lora.alpha")
        if cfg.model.device_map not in (None, "auto") and not isinstance(cfg.model.device_map, Mapping):
            raise ConfigError(f"model.device_map must be null, auto or a mapping of modules to devices, "
                              f"got {cfg.model.device_map!r}")
    if d.name in ("imdb", "hf_text") and cfg.model.name != "lstm":
        raise ConfigError(f"dataset={d.name} is token ids for model=lstm, not model={cfg.model.name}")
    if "vocab_source" in d:
        _choice(d.vocab_source, ("public", "private"), "dataset.vocab_source")
    if "public_source" in d:
        _choice(d.public_source, ("split", "folder", "none") if d.name in prompted else ("split", "folder"),
                "dataset.public_source")
        if d.public_source == "folder" and not d.public_folder:
            raise ConfigError("dataset.public_source=folder needs dataset.public_folder=<folder of class sub-folders>")
    for key in ("n_train", "n_val", "public_size", "public_per_class", "k_shot", "test_size", "max_length",
                "premise_limit", "vocab_size"):
        if d.get(key) is not None:
            _positive(d[key], f"dataset.{key}", integer=True)

    _choice(p.adjacency, ("add_remove", "replace_one"), "privacy.adjacency")
    _choice(p.sampling, SAMPLERS, "privacy.sampling")
    if p.epsilon is not None:
        _positive(p.epsilon, "privacy.epsilon")
        if not method_info(m.name).private:
            raise ConfigError(f"method {m.name!r} is non-private; run it with privacy=none "
                              "(or privacy.epsilon=null)")
    if p.delta is not None:  # the one delta rule, shared with the plan and the calibration
        check_delta(p.delta, method.release().noise, name="privacy.delta", error=ConfigError)
    if p.sigma is not None:
        _positive(p.sigma, "privacy.sigma")
        if p.epsilon is None:
            raise ConfigError("privacy.sigma is set but privacy.epsilon is null: give the target epsilon "
                              "the given sigma must meet")
    if p.eps_error is not None:
        _positive(p.eps_error, "privacy.eps_error")


def validate_against_data(cfg, n_private: int, n_public: int) -> None:
    """Checks that need the data set's sizes."""
    b = cfg.train.batch_size
    if b > n_private:
        raise ConfigError(f"train.batch_size={b} exceeds the {n_private} private training examples")
    m = cfg.method
    uses_public = method_info(m.name).uses_public
    if uses_public and n_public == 0:
        raise ConfigError(f"method {m.name!r} needs public data but the data set has none")
    if uses_public and "public_batch_size" in m and m.public_batch_size > n_public:
        raise ConfigError(f"method.public_batch_size={m.public_batch_size} exceeds the {n_public} "
                          "public examples")
