"""Private zeroth-order optimisation in your own training loop (the library entry).

`private_zo` wraps a user's `nn.Module`, per-example loss and private data (tensors or a
Dataset) the way Opacus's `make_private` wraps a model, an optimiser and a data loader:

    engine = private_zo(model, loss_fn, (x, y), method="pazo_m", epsilon=1.0, delta=1e-5,
                        steps=200, batch_size=64, public=(x_pub, y_pub), seed=secret_seed)
    for batch in engine.batches():   # one Poisson batch per step of the budget
        engine.step(batch)
    engine.epsilon()                  # spent so far

What it returns is made of the pieces a `pazo-train` run is made of (`pazo.experiment`): the
registered method by name on its engine (`assemble_method`), the functional model
(`functional_model`), the privacy plan (sigma calibrated to epsilon and delta for `steps` steps),
the Poisson sampler and accountant the plan was made for, and the run's random streams
(`pazo.rng`: the secret ones from the seed and the computation's fingerprint, keyed to the private
data's digest, or from the operating system's entropy in secure mode). So the same settings, seed
and fingerprint give bit for bit the model of the framework's run (tests/run/test_library.py).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import secrets
from collections.abc import Iterator

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import nn

from pazo import CONFIG_DIR
from pazo.config_schema import EngineSchema, PrivacySchema
from pazo.console import use_console
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError, require
from pazo.experiment import assemble_method, data_digest, functional_model, resolve_device
from pazo.fingerprint import computation_fingerprint
from pazo.methods import Method, MethodConfig, method_config, method_info, method_names
from pazo.methods.base import host_stats
from pazo.models.functional import FunctionalModel
from pazo.privacy.plan import EpsilonTracker, PrivacyPlan, make_plan
from pazo.privacy.sampling import PoissonSampler
from pazo.rng import RandomStreams
from pazo.summary import privacy_lines
from pazo.validate import validate_against_data
from pazo.zo.engines import ENGINES, choose_engine

log = logging.getLogger("pazo.private")

SECURE_NOTE = ("note: secure mode (secure_mode=True, or no seed given): the noise and the Poisson batches are drawn "
               "from the operating system's entropy: this loop cannot be replayed from a seed")
STATS_OUTSIDE = ("the statistics step() returns (the loss and the method's diagnostics) are computed on the private "
                 "batch without noise: outside the guarantee if you release them")


@dataclasses.dataclass
class PrivateZO:
    """A private zeroth-order optimiser over a user's model: Poisson batches of the private data,
    the method's private step, and the epsilon its steps have spent."""

    method: Method
    plan: PrivacyPlan
    model: FunctionalModel
    streams: RandomStreams
    sampler: PoissonSampler
    data: TensorSplit
    device: torch.device     # where batches go (the model's input device)
    engine: dict             # {requested, name, reason}: the zeroth-order engine
    steps_done: int = 0

    def __post_init__(self):
        self._pending: tuple | None = None

    @functools.cached_property
    def _tracker(self) -> EpsilonTracker:
        """One accountant for every `epsilon()`, built at the first."""
        return EpsilonTracker(self.plan)

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, labels) of a fresh Poisson batch for each step the budget has left, on the
        model's input device; hand each to `step`."""
        for _ in range(self.plan.steps - self.steps_done):
            self._pending = self.data.batch(self.sampler.sample(), self.device)
            yield self._pending

    def step(self, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, float]:
        """One private step of the method on `batch` (the one `batches` just gave; None: a fresh
        Poisson batch drawn here); updates the model's parameters in place. The statistics it
        returns are computed on the private batch without noise (`outside_guarantee`)."""
        if self.steps_done >= self.plan.steps:
            raise ConfigError(f"the privacy budget covers {self.plan.steps} steps, all taken: a further step would "
                              f"spend more than epsilon={self.plan.target_epsilon}; make a new engine with more steps")
        if batch is None:
            batch = self.data.batch(self.sampler.sample(), self.device)
        elif batch is not self._pending:
            raise ConfigError("step() takes the batch batches() just gave (or none): the accountant counts each step "
                              "on a fresh Poisson sample of the private data, not on a batch of one's own")
        self._pending = None
        x, y = batch
        stats = host_stats(self.method.step(x, y, self.steps_done + 1))
        self.steps_done += 1
        return stats

    def epsilon(self) -> float | None:
        """Epsilon spent by the steps taken so far (the accountant's upper bound at the plan's delta;
        None without privacy)."""
        return self._tracker.final(self.steps_done) if self.plan.private else None

    def outside_guarantee(self) -> list[str]:
        """What this loop computes from the private data without noise (not covered by epsilon)."""
        if not self.plan.private:
            return []
        return [*self.method.outside_guarantee(), STATS_OUTSIDE]

    def describe(self) -> dict:
        """The facts of the optimiser, as a run's summary gives them (no private data, no seed)."""
        method = self.method.describe()
        return {"method": self.method.cfg.name, "dim": self.model.dim, "device": str(self.device),
                "privacy": {**self.plan.as_dict(), "steps_done": self.steps_done, "epsilon_spent": self.epsilon()},
                "engine": {**self.engine, **method.pop("engine", {})}, "fingerprint": self.streams.fingerprint,
                "method_departures": self.method.cfg.departures(), "outside_guarantee": self.outside_guarantee()}


def private_zo(model: nn.Module, loss_fn, train_data, *, method: str = "pazo_m", epsilon: float | None = 1.0,
               delta: float | None = None, steps: int, batch_size: int, public=None, sigma: float | None = None,
               seed: int | None = None, secure_mode: bool = False, fingerprint: str | None = None,
               engine: str = "auto", chunk_size: int | None = None, query_dropout: bool = False,
               adjacency: str = "add_remove", eps_error: float | None = None, cache_dir: str | None = None,
               device: str | torch.device | None = None, verbose: bool = True, **method_settings) -> PrivateZO:
    """A private zeroth-order optimiser for `model` on `train_data`.

    Its arguments:

    - `model`: the `nn.Module` to train (its trainable parameters are updated in place).
    - `loss_fn`: `loss_fn(outputs, targets) -> [B]` per-example losses (`reduction="none"`).
    - `train_data`: the private examples: `(inputs, labels)` tensors or a map-style Dataset of pairs.
    - `method`: a registered zeroth-order method (`pazo.methods.method_names("zeroth_order")`);
      its settings (lr, clip, q, k, ...) as keywords, defaults from `configs/method/<name>.yaml`.
    - `epsilon, delta`: the target guarantee for `steps` steps (delta None: 1 / n); epsilon None:
      non-private (MeZO).
    - `steps, batch_size`: the number of steps the budget covers and the expected Poisson batch size.
    - `public`: public examples (tensors or a Dataset), from which PAZO-M/P/S sample public batches.
    - `sigma`: a noise multiplier to use as given (it must meet epsilon); None: calibrated.
    - `seed`: seeds the streams; the secret ones (noise, Poisson batches) from it with `fingerprint`
      and the private data's digest. Keep it secret. None: a fresh seed, and secure mode.
    - `secure_mode`: the secret streams from the operating system's entropy.
    - `fingerprint`: the computation's public fingerprint (hex), mixed into the secret streams' seeds
      (a framework run's is its summary's `computation.fingerprint`); None: a hash of these settings.
    - `engine, chunk_size, query_dropout`: the zeroth-order engine (`engine.*` of a run).
    - `device`: where the model is put and batches go; None: where its parameters are.
    - `verbose`: print the guarantee, what it assumes and the plan's notes once.
    """
    method_cfg = _method_config(method, method_settings)
    info = method_info(method_cfg.name)
    require(info.zeroth_order, f"method {method!r} is first-order; private_zo takes a zeroth-order method: "
            f"{', '.join(method_names('zeroth_order'))}")
    require(epsilon is None or info.private, f"method {method!r} is non-private: give epsilon=None")
    require(sigma is None or epsilon is not None, "sigma is set but epsilon is None: give the target epsilon the "
            "given sigma must meet")
    for value, what in ((steps, "steps"), (batch_size, "batch_size")):
        require(isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                f"{what} must be an integer >= 1, got {value!r}")
    require(engine in ENGINES, f"unknown engine {engine!r}; choices: {', '.join(sorted(ENGINES))}")
    require(seed is None or (isinstance(seed, int) and 0 <= seed < 2 ** 63),
            f"seed must be an integer in [0, 2**63), got {seed!r}")
    private = as_split(train_data, "train_data")
    public_split = as_split(public, "public") if public is not None else private.subset(np.empty(0, dtype=np.int64))
    validate_against_data(OmegaConf.create({"train": {"batch_size": batch_size},
                                            "method": dataclasses.asdict(method_cfg)}),
                          len(private), len(public_split))
    secure = secure_mode or seed is None
    privacy = PrivacySchema(epsilon=epsilon, delta=delta, sigma=sigma, adjacency=adjacency, eps_error=eps_error,
                            secure_mode=secure, cache_dir=cache_dir)
    device = resolve_device(str(device)) if device is not None else _parameter_device(model)
    module, fmodel, input_device = functional_model(model, device, private=epsilon is not None,
                                                    name=type(model).__name__, loss_fn=loss_fn)
    _check_per_example(fmodel, private, input_device)
    fingerprint = _fingerprint(fingerprint, method_cfg, privacy, steps, batch_size, fmodel)
    streams = RandomStreams(secrets.randbits(62) if seed is None else seed, secure=secure, fingerprint=fingerprint)
    streams.key_to_data(data_digest(private))   # (before the sampler and the noise draw anything)
    plan = make_plan(privacy, len(private), batch_size, steps, method_cfg.release(), PoissonSampler,
                     info.privacy_note)
    engine_cfg = OmegaConf.structured(EngineSchema(name=engine, chunk_size=chunk_size, query_dropout=query_dropout))
    name, reason = choose_engine(engine_cfg, fmodel, zeroth_order=True, queries=method_cfg.release().queries)
    zo_method = assemble_method(method_cfg, model=fmodel, plan=plan, streams=streams, public=public_split,
                                engine_cfg=engine_cfg, engine_name=name, batch_size=batch_size)
    module.train()
    optimiser = PrivateZO(method=zo_method, plan=plan, model=fmodel, streams=streams,
                          sampler=PoissonSampler(len(private), batch_size, streams.numpy["data"]), data=private,
                          device=input_device, engine={"requested": engine, "name": name, "reason": reason})
    if verbose:
        use_console(log.name)
        log.info(f"pazo: {method_cfg.name} on your model (d={fmodel.dim}, device {input_device}); "
                 f"private {len(private)}, public {len(public_split)}")
        for line in privacy_lines(plan, method_cfg.departures(), secure_note=SECURE_NOTE):
            log.info(line)
    return optimiser


def as_split(data, what: str) -> TensorSplit:
    """`(inputs, labels)` tensors, a map-style Dataset of such pairs, or a TensorSplit, as a TensorSplit
    (labels are class indices, as the framework's data sets give them)."""
    if isinstance(data, TensorSplit):
        return data
    if isinstance(data, (tuple, list)) and len(data) == 2 and all(isinstance(t, torch.Tensor) for t in data):
        inputs, labels = data
    elif hasattr(data, "__getitem__") and hasattr(data, "__len__") and not isinstance(data, (str, bytes, dict)):
        require(len(data) > 0, f"{what} is empty")
        pairs = [data[i] for i in range(len(data))]
        require(all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs),
                f"{what}: a Dataset must give (input, label) pairs")
        inputs = torch.stack([torch.as_tensor(x) for x, _ in pairs])
        labels = torch.as_tensor(np.asarray([int(y) for _, y in pairs]))
    else:
        raise ConfigError(f"{what} must be (inputs, labels) tensors or a Dataset of (input, label) pairs, "
                          f"got {type(data).__name__}")
    require(len(inputs) == len(labels), f"{what}: {len(inputs)} inputs but {len(labels)} labels")
    require(not labels.is_floating_point(), f"{what}: labels must be integer class indices, got {labels.dtype}")
    return TensorSplit(inputs, labels)


def _method_config(name: str, settings: dict) -> MethodConfig:
    """The method's typed config: its yaml's values (configs/method/<name>.yaml), `settings` over them."""
    require(name in method_names(), f"unknown method {name!r}; choices: {', '.join(method_names('zeroth_order'))}")
    path = CONFIG_DIR / "method" / f"{name}.yaml"
    defaults = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
    defaults.pop("defaults", None)
    return method_config({**defaults, **settings, "name": name})


def _parameter_device(model: nn.Module) -> torch.device:
    first = next((p for p in model.parameters() if p.requires_grad), None)
    require(first is not None, "the model has no trainable parameters")
    return first.device


def _check_per_example(model: FunctionalModel, private: TensorSplit, device) -> None:
    """The loss gives one value per example (a mean would not be clipped per example); checked on two
    examples in eval mode (no dropout draw), before any step."""
    x, y = private.batch(np.arange(min(2, len(private))), device)
    was_training = model.module.training
    model.module.eval()
    with torch.no_grad():
        losses = model.current_losses(x, y)
    model.module.train(was_training)
    require(tuple(losses.shape) == (len(y),), f"loss_fn must return one loss per example (reduction='none'): "
            f"got shape {tuple(losses.shape)} for {len(y)} examples")


def _fingerprint(given: str | None, method_cfg: MethodConfig, privacy: PrivacySchema, steps: int, batch_size: int,
                 model: FunctionalModel) -> str:
    """The computation's fingerprint: as given (hex), or a hash of what decides the numbers here (the
    method's settings, the privacy target, steps, batch size, the parameters' names and shapes)."""
    if given is not None:
        try:
            int(given, 16)
        except (TypeError, ValueError):
            raise ConfigError(f"fingerprint must be a hex string, got {given!r}") from None
        return given
    settings = {"method": dataclasses.asdict(method_cfg), "privacy": dataclasses.asdict(privacy), "steps": steps,
                "batch_size": batch_size, "parameters": [[n, list(s)] for n, s in zip(model.names, model.shapes)]}
    return computation_fingerprint(settings)   # (less privacy.cache_dir: where sigma is cached, not what is computed)
