"""The fingerprint of what a run computes: a stable hash of its resolved config, less the keys that
say only how, where or with what output the same computation runs.

The secret streams (Poisson batches and DP noise, `pazo.rng`) are seeded from the seed *and* this
fingerprint, so runs of one sweep that differ in a hyperparameter draw independent noise and
batches (two models trained with one noise draw at two learning rates would reveal a noise-free
difference of clipped gradients), while the same config and seed give the same run again. The
fingerprint is a hash of the public config, not secret: `summary.json` records it. Callers hash
the config with its values cast to their schema types (`pazo.run.typed.typed_config`), so that two
spellings of one value (`privacy.epsilon=1`, `1.0`) are one computation; the digests of the
private data, the public data and the initial parameters key the secret streams beside it
(`pazo.rng.RandomStreams.key_to`), never in it.

Keys and sections added after runs were recorded are left out at the value that computes what
runs computed before they existed (`ADDED_AT_DEFAULT`: the PRV accountant, a constant step size,
plain SGD).

A key left out (`HOW_KEYS`) must not change the numbers a step computes beyond float rounding: two
runs that differ only in it draw the same noise and batches. The seed is left out too (it is mixed
in beside the fingerprint), and so are the keys a resumed attempt may change (`NOT_COMPARED`, left
out of `config_fingerprint` too, the key a checkpoint resumes by), so that every attempt of one run
has one fingerprint.
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
    "train.distributed_timeout_s",             # how long a rank waits for the others
    "warm_start.cache",                        # a cached warm start is the warm start recomputed
    "privacy.cache_dir", "dataset.root", "dataset.cache_dir",  # where files are read and kept
    "dataset.download", "model.download",      # whether missing files are fetched first
)


#: keys and sections added after runs were recorded, with the value (for a section: the option
#: `name`) that computes what the config computed before they existed: there they are left out of
#: the hashes (`config_without`), so that runs and checkpoints recorded before keep their
#: fingerprints (their resumes); any other value is in them
ADDED_AT_DEFAULT = {"privacy.accountant": "prv", "schedule": "constant", "optimizer": "sgd"}


def config_without(cfg, keys) -> dict:
    """The resolved config as plain containers, without `keys` (dotted; absent keys are skipped) and
    without the keys of `ADDED_AT_DEFAULT` at their old behaviour's value."""
    data = (OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig)
            else json.loads(json.dumps(cfg, default=str)))  # a copy: the caller's dict is left as it is
    keys = [*keys, *(key for key, value in ADDED_AT_DEFAULT.items() if _at_default(_value_at(data, key), value))]
    for dotted in keys:
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return data


def _at_default(found, default: str) -> bool:
    """A key at its default value, or a section whose option (`name`) is the default."""
    return found == default or (isinstance(found, dict) and found.get("name") == default)


def _value_at(data, dotted: str):
    """The value at a dotted key of plain containers (None where absent)."""
    for key in dotted.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


#: config keys that may differ between the attempts of one run (where and how it runs, not what;
#: `method.public_grads_together` too: a run resumed on a smaller GPU may need the public gradients
#: one after another, and checkpoints written before the key existed still resume)
NOT_COMPARED = ("logger", "device", "privacy.cache_dir", "dataset.root", "dataset.cache_dir", "train.checkpoint_every",
                "train.progress_seconds",
                "train.checkpoint_minutes", "train.keep_checkpoint", "train.save_model", "train.eval_batch_size",
                "method.public_grads_together", "train.threads", "train.distributed_timeout_s")


def config_fingerprint(cfg) -> str:
    """The resolved config minus where/how keys, as canonical JSON: equal for attempts of one run."""
    return json.dumps(config_without(cfg, NOT_COMPARED), sort_keys=True, default=str)


def canonical_json(data) -> str:
    """One spelling of a config: keys sorted, no whitespace, anything not JSON as its str."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def computation_fingerprint(cfg) -> str:
    """The hex sha256 of the canonical JSON of `cfg` less `HOW_KEYS`: equal for two configs that
    compute the same thing, in any process, whatever the order their keys were given in."""
    return hashlib.sha256(canonical_json(config_without(cfg, HOW_KEYS)).encode()).hexdigest()
