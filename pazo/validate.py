"""Clear errors for bad input, before any data is loaded or any compute starts."""
from __future__ import annotations

import math

from pazo.data import DATASETS
from pazo.errors import ConfigError
from pazo.methods import METHODS, method_class
from pazo.methods.engines import ENGINES
from pazo.models import MODELS
from pazo.privacy.sampling import SAMPLERS


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
    t, m, p = cfg.train, cfg.method, cfg.privacy
    _positive(t.batch_size, "train.batch_size", integer=True)
    if t.steps is not None:
        _positive(t.steps, "train.steps", integer=True)
    else:
        _positive(t.epochs, "train.epochs")
    _positive(t.log_every, "train.log_every", integer=True)
    if t.evals_per_epoch is not None and t.evals_per_epoch < 0:
        raise ConfigError(f"train.evals_per_epoch must be >= 0, got {t.evals_per_epoch}")
    _positive(m.lr, "method.lr")
    _positive(m.clip, "method.clip")
    for key in ("q", "k", "public_batch_size", "num_groups", "power_iters"):
        if key in m:
            if not isinstance(m[key], int) or m[key] < 1:
                raise ConfigError(f"method.{key} must be an integer >= 1, got {m[key]!r}")
    if "alpha" in m and not (isinstance(m.alpha, (int, float)) and 0 <= m.alpha <= 1):
        raise ConfigError(f"method.alpha must be in [0, 1], got {m.alpha!r}")
    for key in ("grad_memory_mb", "clip0"):
        if m.get(key) is not None:
            _positive(m[key], f"method.{key}")
    if "num_bases" in m and not (isinstance(m.num_bases, int) and m.num_bases >= 0):
        raise ConfigError(f"method.num_bases must be an integer >= 0, got {m.num_bases!r}")
    if m.get("per_example_chunk") is not None:
        _positive(m.per_example_chunk, "method.per_example_chunk", integer=True)
    if "smoothing" in m:
        _positive(m.smoothing, "method.smoothing")
    if "perturbation" in m and not (isinstance(m.perturbation, (int, float)) and m.perturbation >= 0):
        raise ConfigError(f"method.perturbation must be >= 0, got {m.perturbation!r}")
    if "direction" in m:
        _choice(m.direction, ("gaussian", "sphere", "orthogonal"), "method.direction")
        if m.direction in ("sphere", "orthogonal") and m.radius not in ("sqrt_d", "fourth_root_d"):
            try:
                _positive(float(m.radius), "method.radius")
            except (TypeError, ValueError):
                raise ConfigError(f"method.radius must be sqrt_d, fourth_root_d or a positive number, "
                                  f"got {m.radius!r}") from None
    if "noise" in m:
        _choice(m.noise, ("gaussian", "laplace"), "method.noise")
    if "beta" in m and not (isinstance(m.beta, (int, float)) and 0 < m.beta <= 1):
        raise ConfigError(f"method.beta must be in (0, 1] (beta = 0 has no composition guarantee), "
                          f"got {m.beta!r}")
    if m.get("projection_radius") is not None:
        _positive(m.projection_radius, "method.projection_radius")
    if "coef_distribution" in m:
        _choice(m.coef_distribution, ("gaussian", "sphere"), "method.coef_distribution")

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
    if d.get("image_size") is not None:
        _positive(d.image_size, "dataset.image_size", integer=True)
    if d.name == "mnli" and cfg.model.name != "roberta_prompt":
        raise ConfigError(f"dataset=mnli is a prompt task for model=roberta_prompt, not model={cfg.model.name}")
    if d.name in ("imdb", "hf_text") and cfg.model.name != "lstm":
        raise ConfigError(f"dataset={d.name} is token ids for model=lstm, not model={cfg.model.name}")
    if "vocab_source" in d:
        _choice(d.vocab_source, ("public", "private"), "dataset.vocab_source")
    if "public_source" in d:
        _choice(d.public_source, ("split", "folder"), "dataset.public_source")
        if d.public_source == "folder" and not d.public_folder:
            raise ConfigError("dataset.public_source=folder needs dataset.public_folder=<folder of class sub-folders>")
    for key in ("public_per_class", "k_shot", "test_size", "public_size", "max_length", "premise_limit", "vocab_size"):
        if d.get(key) is not None:
            _positive(d[key], f"dataset.{key}", integer=True)

    _choice(p.adjacency, ("add_remove", "replace_one"), "privacy.adjacency")
    _choice(p.sampling, SAMPLERS, "privacy.sampling")
    if p.epsilon is not None:
        _positive(p.epsilon, "privacy.epsilon")
        if not method_class(m.name).supports_privacy:
            raise ConfigError(f"method {m.name!r} is non-private; run it with privacy=none "
                              "(or privacy.epsilon=null)")
    if p.delta is not None:
        laplace = method_class(m.name).release_for(m).noise == "laplace"
        if not (isinstance(p.delta, (int, float)) and (0 < p.delta < 1 or (p.delta == 0 and laplace))):
            raise ConfigError(f"privacy.delta must be in (0, 1) (0 only for pure DP with Laplace noise), "
                              f"got {p.delta!r}")
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
    uses_public = method_class(m.name).uses_public
    if uses_public and n_public == 0:
        raise ConfigError(f"method {m.name!r} needs public data but the data set has none")
    if uses_public and "public_batch_size" in m and m.public_batch_size > n_public:
        raise ConfigError(f"method.public_batch_size={m.public_batch_size} exceeds the {n_public} "
                          "public examples")
