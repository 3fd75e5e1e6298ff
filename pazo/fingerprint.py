"""The fingerprint of what a run computes: a stable hash of its resolved config, less the keys that
say only how, where or with what output the same computation runs.

The secret streams (Poisson batches and DP noise, `pazo.rng`) are seeded from the seed *and* this
fingerprint, so runs of one sweep that differ in a hyperparameter draw independent noise and
batches (two models trained with one noise draw at two learning rates would reveal a noise-free
difference of clipped gradients), while the same config and seed give the same run again. The
fingerprint is a hash of the public config, not secret: `summary.json` records it. Callers hash
the config with its values cast to their schema types (`pazo.validate.typed_config`), so that two
spellings of one value (`privacy.epsilon=1`, `1.0`) are one computation; the private data's digest
keys the secret streams beside it (`pazo.rng.RandomStreams.key_to_data`), never in it.

A default step-size schedule and optimiser (`DEFAULT_OPTIONS`) are left out as well: a run that
uses them computes what runs computed before those sections existed.

A key left out (`HOW_KEYS`) must not change the numbers a step computes beyond float rounding: two
runs that differ only in it draw the same noise and batches. The seed is left out too (it is mixed
in beside the fingerprint), and so are the keys a resumed attempt may change (`pazo.checkpoint`'s
NOT_COMPARED), so that every attempt of one run has one fingerprint.
"""
from __future__ import annotations

import hashlib
import json

from omegaconf import DictConfig, OmegaConf

#: keys (dotted; a group's name covers the whole group) that say how or where a run computes, or
#: what it keeps and reports, but not what it computes
HOW_KEYS = (
    "seed",                                    # mixed in beside the fingerprint
    "hydra", "sweep_name", "logger", "audit",  # where results go and how they are reported; the audit's own settings
    "device",                                  # where (a resume may not change it: pazo.train checks the computation)
    "engine.name", "engine.chunk_size",        # vectorised or in place, copies per vmap call: the same losses
    "method.public_grads_together",            # the k public gradients in one pass or one by one
    "method.grad_memory_mb", "method.per_example_chunk",  # per-example gradients in chunks of some size
    "method.clip_engine",                      # the clipped sum by per-example gradients or book-keeping
    "train.log_every", "train.evals_per_epoch", "train.eval_batch_size",  # when and how the loop reports
    "train.checkpoint_every", "train.checkpoint_minutes", "train.keep_checkpoint", "train.save_model",
    "train.progress_seconds",
    "train.threads",                           # CPU threads: the same kernels, sums in another order
    "warm_start.cache",                        # a cached warm start is the warm start recomputed
    "privacy.cache_dir", "dataset.root", "dataset.cache_dir",  # where files are read and kept
    "dataset.download", "model.download",      # whether missing files are fetched first
)


def config_without(cfg, keys) -> dict:
    """The resolved config as plain containers, without `keys` (dotted; absent keys are skipped)."""
    data = (OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig)
            else json.loads(json.dumps(cfg, default=str)))  # a copy: the caller's dict is left as it is
    for dotted in keys:
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return data


#: sections whose default option computes what runs computed before the section existed: left out of
#: the fingerprints while they are that option (a constant step size, plain SGD), so that a default
#: run keeps its fingerprint, hence its noise and batches; any other option is in them
DEFAULT_OPTIONS = {"schedule": "constant", "optimizer": "sgd"}


def without_default_options(data: dict) -> dict:
    """`data` (plain containers) less each `DEFAULT_OPTIONS` section that names its default."""
    return {k: v for k, v in data.items()
            if not (k in DEFAULT_OPTIONS and isinstance(v, dict) and v.get("name") == DEFAULT_OPTIONS[k])}


def canonical_json(data) -> str:
    """One spelling of a config: keys sorted, no whitespace, anything not JSON as its str."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def computation_fingerprint(cfg) -> str:
    """The hex sha256 of the canonical JSON of `cfg` less `HOW_KEYS`: equal for two configs that
    compute the same thing, in any process, whatever the order their keys were given in."""
    return hashlib.sha256(canonical_json(without_default_options(config_without(cfg, HOW_KEYS))).encode()).hexdigest()
