"""What every training method shares: a typed config that validates itself and says what a step
releases, the context a method runs in, and the interface `step(x, y, t) -> stats`."""
from __future__ import annotations

from abc import ABC, abstractmethod
import numbers
from dataclasses import dataclass, fields

import numpy as np
import torch
from omegaconf import MISSING

from pazo.config_schema import OptimizerSchema
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError, UserCodeError, at_least_one, one_of, positive, require  # noqa: F401 (the methods' checks)
from pazo.methods.update_rule import StepSchedule, UpdateRule
from pazo.models.dropout import is_random_in_training
from pazo.models.functional import FunctionalModel
from pazo.privacy.mechanisms import (LOCAL_SUMS, JointClipPrivatizer, LocalSums, NoiseSpec, Release, ScalarPrivatizer,
                                     VectorPrivatizer)
from pazo.rng import RandomStreams


def boolean_or_auto(value, what: str) -> None:
    require(isinstance(value, bool) or value == "auto", f"{what} must be auto, true or false, got {value!r}")


def public_grads_batched(cfg, model: FunctionalModel) -> bool:
    """Whether PAZO-P/S take their k public gradients in one pass: `method.public_grads_together`
    as asked, or for `auto` (the default) the model's preference,
    `FunctionalModel.grads_together_by_default` (together on CUDA, one by one on CPU)."""
    asked = getattr(cfg, "public_grads_together", "auto")
    return model.grads_together_by_default if asked == "auto" else asked


@dataclass
class MethodConfig:
    """Fields every method has. Each method subclasses this; the subclass is registered as the
    schema of `configs/method/<name>.yaml` (Hydra checks types and unknown keys at compose time),
    and `__post_init__` checks values when the run builds the typed config."""

    name: str = MISSING
    lr: float = MISSING
    clip: float = MISSING   # per-example bound C (unused by the non-private methods)

    #: fields whose default *is* the algorithm (e.g. PAZO-M's sphere of radius d^(1/4)); a run that
    #: overrides one says so in its summary
    DEFINING = ()

    def __post_init__(self):
        positive(self.lr, "method.lr")
        positive(self.clip, "method.clip")

    def release(self) -> Release:
        """What one step releases about the private batch (one noisy query by default)."""
        return Release(queries=1)

    def departures(self) -> list[str]:
        """Notes for each defining field that this config overrides."""
        defaults = {f.name: f.default for f in fields(type(self))}
        return [f"method.{key}={getattr(self, key)!r} overrides {self.name}'s defining default "
                f"{defaults[key]!r}: the run is not the published algorithm"
                for key in self.DEFINING if getattr(self, key) != defaults[key]]


class PublicBatches:
    """Uniform public batches of size b' without replacement within a batch (public data costs no
    privacy, so any sampling is fine; this one is seeded from the run's public stream)."""

    def __init__(self, split: TensorSplit, batch_size: int, rng: np.random.Generator, device):
        if batch_size > len(split):
            raise ConfigError(f"public batch size {batch_size} exceeds the {len(split)} public examples")
        self.split, self.batch_size, self.rng, self.device = split, batch_size, rng, device

    def sample(self):
        idx = self.rng.choice(len(self.split), size=self.batch_size, replace=False)
        return self.split.batch(np.sort(idx), self.device)


def releases_on_device(model: FunctionalModel, device: torch.device) -> bool:
    """Whether a zeroth-order step keeps its per-example values, release, update and statistics on
    the device, never waiting for it: on CUDA, for parameters on that one device in float32 or
    float64 (a half-precision model's update scales in float32, which a 0-dim tensor of its dtype
    would not; MPS has no float64). On CPU the step works on Python floats, which is faster there."""
    return (device.type == "cuda" and len(model.devices) == 1
            and all(p.dtype in (torch.float32, torch.float64) for p in model.params))


def release_block(on_device: bool) -> dict:
    """The summary's engine fact on where a zeroth-order step's release is computed."""
    return {"engine": {"release": "device" if on_device else "host"}}


def host_stats(stats: dict, method: str | None = None) -> dict:
    """A step's statistics as Python floats: its tensors read in one copy (on an accelerator one
    wait for the device, once the step is done). Each must be one real number (a number, None, or
    a real tensor of one element): a plugin's step that returns more is refused by `method`'s name
    and the statistic's (`check_statistics`), not deep inside the copy."""
    check_statistics(stats, method)
    plain = {k: float(v) for k, v in stats.items() if isinstance(v, numbers.Real) and not isinstance(v, (int, float))}
    keys = [k for k, v in stats.items() if isinstance(v, torch.Tensor)]
    if not keys:
        return {**stats, **plain}
    values = torch.stack([stats[k].detach().double().reshape(()) for k in keys]).tolist()
    return {**stats, **plain, **dict(zip(keys, values))}


def check_statistics(stats: dict, method: str | None = None) -> None:
    """Each of a step's statistics is one real number (`check_statistic`): read without waiting for
    the device (shapes and dtypes only)."""
    for key, value in stats.items():
        check_statistic(key, value, method)


def check_statistic(key, value, method: str | None) -> None:
    """A step's statistic is one real number: None (not measured), a real number, or a real tensor
    of one element; anything else is the step's author's mistake, named as such (UserCodeError)."""
    if value is None or isinstance(value, numbers.Real):
        return
    if isinstance(value, torch.Tensor):
        if value.numel() == 1 and not value.is_complex():
            return
        what = f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    else:
        what = f"a {type(value).__name__}"
    who = f"method {method!r}" if method else "the method"
    raise UserCodeError(f"the step of {who} returned statistic {key!r} as {what}: each statistic of a step must "
                        "be one real number (a float, None, or a real tensor of one element, shape ())")


@dataclass
class MethodContext:
    model: FunctionalModel
    noise: NoiseSpec
    streams: RandomStreams
    public: TensorSplit
    engine: object
    device: torch.device   # where directions, noise and flat vectors are made: `model.device`
    query_train_mode: bool = False
    total_steps: int = 1
    schedule: StepSchedule | None = None   # the step size's schedule (None: constant)
    optimizer: OptimizerSchema | None = None   # the run's typed `optimizer` section (None: sgd)
    sums: LocalSums = LOCAL_SUMS           # how a release adds its batch (a data-parallel run: over the ranks)


class Method(ABC):
    """One optimisation method. `step` consumes a private batch and updates the model in place.

    The contract the audit relies on: a private method whose registration says its release is
    `scalar`, `joint_scalar` or `vector` (`MethodInfo.release`) makes every release of a step through
    `self.privatizer`, of that kind, read anew at each call (the white-box audit replaces it with one
    that adds its canaries' contributions)."""

    #: the one object a step's noisy release passes through (None: a non-private method, or one
    #: whose releases do not pass through one privatiser)
    privatizer: ScalarPrivatizer | JointClipPrivatizer | VectorPrivatizer | None = None
    #: whether every sum of a step over its private batch goes through `ctx.sums`, so that the ranks of
    #: a data-parallel run can each take a shard of the batch (`pazo.run.distributed`)
    shards_batches: bool = False
    #: whether the model's training forward draws random numbers (`public_forward_random`; None: not read yet)
    _public_forward_random: bool | None = None

    def __init__(self, cfg: MethodConfig, ctx: MethodContext):
        self.cfg, self.ctx, self.model = cfg, ctx, ctx.model
        self.lr = cfg.lr
        self.update_rule = UpdateRule(cfg.lr, ctx.schedule, ctx.optimizer)

    def take_step(self, x: torch.Tensor, y: torch.Tensor, step: int) -> dict[str, float]:
        """Step `step` (1-based) as a run takes it: the step size lr * schedule(step) in `self.lr`,
        the method's `step` with its update held (`UpdateRule.held`), its statistics checked
        (`check_statistics`: shapes and dtypes, no wait for the device), then the update applied
        and the optimiser's move of the parameters. A step that fails, a plugin's statistic that is
        not one number included, applies no update (the in-place engine's queries, x + lam u and
        back, may leave a last-bit rounding). The loop, the library and the
        audit step through here."""
        self.lr = self.update_rule.lr_at(step)
        with self.update_rule.held():
            stats = self.step(x, y, step)
            check_statistics(stats, self.cfg.name)
        self.apply_pending_update()
        return stats

    def apply_update(self, g: torch.Tensor, weight: float = 1.0) -> None:
        """x <- x - lr * weight * g for a flat [d] update g: at once under SGD, else summed into the
        step's update for the optimiser. Every method's update goes through here or `descend`."""
        self.update_rule.flat(self.model, g, self.lr, weight)

    def descend(self, u, coefs) -> None:
        """x <- x - lr * sum_j coefs[j] u_j (under SGD each u_j regenerated, never stored whole)."""
        self.update_rule.directional(self.model, u, coefs, self.lr)

    def apply_pending_update(self) -> None:
        """Move the parameters by the optimiser's transform of the update handed over so far (none
        under SGD); a method that changes the parameters after its update (a projection) calls it
        first, `take_step` after every step."""
        self.update_rule.apply_pending(self.model, self.lr)

    def public_batches(self) -> PublicBatches:
        """Sampler of public batches of size cfg.public_batch_size from the run's public stream, put
        where the model takes its input (`model.input_device`: on a model spread over devices, the
        input embeddings', which need not be where the method's vectors are made)."""
        return PublicBatches(self.ctx.public, self.cfg.public_batch_size, self.ctx.streams.numpy["public"],
                             self.model.input_device)

    def public_grads(self, public: PublicBatches, k: int) -> torch.Tensor:
        """Flat gradients [k, d] of k public batches, drawn in order, computed together
        (`FunctionalModel.mean_loss_grads`: one vmapped pass, which holds the activations of all k
        batches) or one after another (one batch's activations), as `public_grads_batched` says;
        the same gradients up to float rounding, and dropout masks drawn otherwise. On several
        processes every rank draws the k batches (the public stream stays the same on every rank)
        and computes its share of the gradients, which the ranks gather (`ctx.sums.computed_rows`);
        a model whose training forward is random (dropout) has every rank compute all k, so that
        the masks are drawn from the generator as one process draws them. Out of memory taking them
        together: a one-line error that names the switch."""
        batches = [public.sample() for _ in range(k)]
        batched = public_grads_batched(self.cfg, self.model)

        def grads_of(share: list[int]) -> torch.Tensor:
            if not share:
                return self.model.zeros((0, self.model.dim))
            return self.model.mean_loss_grads([batches[j] for j in share], batched=batched)

        try:
            if self.public_forward_random():
                return grads_of(list(range(k)))
            return self.ctx.sums.computed_rows(k, grads_of)
        except torch.OutOfMemoryError as err:
            if not self.model.grads_together(batches, batched):
                raise
            raise ConfigError(f"the {k} public gradients taken together (one vmapped pass over {k} batches of "
                              f"{public.batch_size}) ran out of memory on {self.model.device}: set "
                              "method.public_grads_together=false to take them one after another "
                              "(one batch's activations at a time)") from err

    def public_forward_random(self) -> bool:
        """Whether the public passes draw random numbers (a dropout of nonzero rate): read once."""
        if self._public_forward_random is None:
            self._public_forward_random = is_random_in_training(self.model.module)
        return self._public_forward_random

    def public_grads_choice(self) -> dict:
        """How this attempt takes its k public gradients (PAZO-P/S): what `method.public_grads_together`
        asked, and whether the pass is really taken together (k > 1, parameters on one device)."""
        together = self.model.takes_together(self.cfg.k, public_grads_batched(self.cfg, self.model))
        return {"requested": self.cfg.public_grads_together, "together": together}

    def describe(self) -> dict:
        """Fields this method adds to the run's summary when the run starts (none by default)."""
        return {}

    def outside_guarantee(self) -> list[str]:
        """What this method computes from the private data and releases without noise (the run's
        summary lists it; nothing by default)."""
        return []

    def outcome(self, stat_sums: dict[str, float], steps_done: int) -> dict:
        """Fields this method adds to the run's summary when it ends: how the engine ran
        half-precision queries, if it ran any (merged into the summary's `engine` block)."""
        how = getattr(self.ctx.engine, "half_precision_queries", None)
        return {"engine": {"half_precision_queries": how}} if how else {}

    @abstractmethod
    def step(self, x: torch.Tensor, y: torch.Tensor, step: int) -> dict[str, float]:
        """One update from a private batch, at the step size `self.lr`, handed over through
        `apply_update` / `descend` (so that the optimiser sees it); returns numeric stats, at least
        `loss`. Runs call it through `take_step`."""
