"""Private zeroth-order optimisation in your own training loop (the library entry).

`private_zo` wraps a user's `nn.Module`, per-example loss and private data (tensors or a
Dataset) the way Opacus's `make_private` wraps a model, an optimiser and a data loader:

    engine = private_zo(model, loss_fn, (x, y), method="pazo_m", epsilon=1.0, delta=1e-5,
                        steps=200, batch_size=64, public=(x_pub, y_pub), seed=secret_seed)
    for batch in engine.batches():   # one Poisson batch per step of the budget
        engine.step(batch)
    engine.epsilon()                  # spent so far

What it returns is made of the pieces a `pazo-train` run is made of (`pazo.run.build`): the
registered method by name on its engine (`assemble_method`), the functional model
(`functional_model`), the privacy plan (sigma calibrated to epsilon and delta for `steps` steps),
the Poisson sampler and accountant the plan was made for, and the run's random streams
(`pazo.rng`). The secret ones (noise, Poisson batches) are keyed, beside the seed, to everything
that decides a released value (`library_key`): the settings, the model's structure and initial
values, the public data and the loss, with the module-level globals the loss and the model's
forward read (a public fingerprint), and the private data's digest (kept inside the process); or
drawn from the operating system's entropy in secure mode. Two loops that
differ in any of these draw independent noise, so two released models never reveal a noise-free
difference; the same loop with the same seed is replayed bit for bit. Given a framework run's
fingerprint, the loop gives bit for bit that run's model (tests/run/test_library.py).

The user's objects are checked before the first step (`pazo.private.checks`), and every message
names the library's own arguments.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import secrets
from collections.abc import Iterator

import numpy as np
import torch
from omegaconf import OmegaConf
from torch import nn

from pazo import CONFIG_DIR
from pazo.config_schema import DEVICE, EngineSchema, PrivacySchema, TrainSchema
from pazo.commands.console import use_console
from pazo.data.base import TensorSplit
from pazo.run.digests import callable_digest, data_digest, key_secret_streams, module_digest, tensors_digest
from pazo.errors import ConfigError, UserCodeError, at_least_one, require, unknown_choice
from pazo.run import distributed
from pazo.run.build import assemble_method, require_shards, resolve_device
from pazo.run.fingerprint import computation_fingerprint
from pazo.private.checks import (check_finite_data, check_finite_model, check_model_and_loss, check_user_objects,
                                 first_line, in_library_terms, library_terms, user_culprit)
from pazo.methods import Method, MethodConfig, method_config, method_info, method_names
from pazo.methods.base import host_stats
from pazo.models import functional_model
from pazo.models.functional import FunctionalModel
from pazo.privacy.mechanisms import LOCAL_SUMS
from pazo.privacy.accountants import BudgetError
from pazo.privacy.plan import EpsilonTracker, PrivacyPlan, make_plan
from pazo.privacy.sampling import PoissonSampler
from pazo.rng import RandomStreams
from pazo.run.summary import privacy_lines
from pazo.run.validate import check_batches_fit
from pazo.zo.engines import choose_engine

log = logging.getLogger("pazo.private")

SECURE_NOTE = ("note: secure mode (secure_mode=True, or no seed given): the noise and the Poisson batches are drawn "
               "from the operating system's entropy: this loop cannot be replayed from a seed")
STATS_OUTSIDE = ("the statistics step() returns (the loss and the method's diagnostics) are computed on the private "
                 "batch without noise: outside the guarantee if you release them")
#: the library's counterpart of the framework's note on its shipped default seed (`SHIPPED_SEED_NOTE`)
SEED_NOTE = ("a seed was given: anyone who learns it can regenerate this loop's noise and Poisson batches (the rest "
             "of their key follows from the model, the data and the loss); keep it secret (draw it with "
             "secrets.randbits(62)), or give secure_mode=True (or no seed) to draw them from the operating system's "
             "entropy")
#: the library's words for the seed_secret assumption (the framework's names config.yaml)
SEED_SECRET = ("the seed stays secret: the noise and the Poisson batches follow from it and the key of the "
               "computation (describe()['key']); secure_mode=True (or no seed) draws them from OS entropy instead")
#: where the library's assumptions are written in full (a run's: summary.json)
ASSUMPTIONS_IN = "engine.describe()['privacy']['assumptions']"
#: what the key of the secret streams covers when pazo computes it (the private data beside it, in the process)
KEY_COVERS = ["the method's settings, the privacy target, steps, batch_size and query_dropout",
              "the model's structure and the initial values of all its parameters and buffers",
              "the public data", "loss_fn (its code and the values it holds)",
              "the module-level globals that loss_fn and the model's forward read by name (and the functions, "
              "methods, class attributes and the model's own instance attributes they name, followed the same way; "
              "dataclass instances by their fields, OmegaConf configs by their resolved values)",
              "the attributes your own modules hold that this code names (config.SCALE, and modules it imports "
              "when it runs); an installed package's or the standard library's module by its name and version",
              "the private data (its digest, beside the public fingerprint: never released)"]


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
    key: dict = dataclasses.field(default_factory=dict)   # what keys the secret streams (`LibraryKey.facts`)
    steps_done: int = 0
    #: the processes sharing each batch (torch.distributed; `library_group`): this one takes its shard
    group: distributed.Group = dataclasses.field(default_factory=distributed.Group)

    def __post_init__(self):
        self._pending: tuple | None = None
        self._pending_digest: str | None = None

    @functools.cached_property
    def _tracker(self) -> EpsilonTracker:
        """One accountant for every `epsilon()`, built at the first."""
        return EpsilonTracker(self.plan)

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, labels) of a fresh Poisson batch for each step the budget has left, on the
        model's input device; hand each to `step` with its content unchanged (checked there: the
        same tensors re-packed, `step((x, y))`, or copied step too). In a group of several processes,
        this rank's shard of the batch (every rank draws the same batch)."""
        for _ in range(self.plan.steps - self.steps_done):
            self._pending = self._fresh_batch()
            self._pending_digest = tensors_digest(*self._pending)
            yield self._pending

    def step(self, batch: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, float]:
        """One private step of the method on `batch` (the one `batches` just gave; None: a fresh
        Poisson batch drawn here); updates the model's parameters in place. The statistics it
        returns are computed on the private batch without noise (`outside_guarantee`). An error
        the step meets in the user's model or loss is a UserCodeError naming it and the step
        (which counts as taken: its batch was drawn and its outcome depends on it)."""
        if self.steps_done >= self.plan.steps:
            raise ConfigError(f"the privacy budget covers {self.plan.steps} steps, all taken: a further step would "
                              f"spend more than epsilon={self.plan.target_epsilon}; make a new engine with more steps")
        batch = self._checked_batch(batch)
        self._pending = self._pending_digest = None
        self.steps_done += 1
        try:
            with in_library_terms():
                stats = self.method.take_step(*batch, self.steps_done)
        except ConfigError:
            raise
        except Exception as err:
            culprit = user_culprit(err, self.model.module, self.model.loss_fn)
            if culprit is None:
                raise
            raise UserCodeError(f"step {self.steps_done}: {culprit} raised {type(err).__name__} on the step's "
                                f"Poisson batch of train_data: {first_line(err)}") from err
        return host_stats(stats, self.method.cfg.name)

    def _checked_batch(self, batch):
        """The batch `batches` just gave, if `batch` holds its content as drawn (its digest then: the
        same tensors re-packed or copied step too; changed in place, they do not), or a fresh
        Poisson batch for None."""
        if batch is None:
            return self._fresh_batch()
        if self._pending_digest is not None and _is_pair(batch) and tensors_digest(*batch) == self._pending_digest:
            return self._pending   # (the drawn tensors: where batches() put them)
        if self._pending is not None and _is_pair(batch) and all(a is b for a, b in zip(batch, self._pending)):
            raise ConfigError("step(): the batch batches() gave was changed in place after it was drawn: the "
                              "accountant counts a step on a Poisson sample as drawn; step on an unchanged batch "
                              "(work on a copy, e.g. x.clone()) or on none")
        raise ConfigError("step() takes the batch batches() just gave (or none): the accountant counts each step "
                          "on a fresh Poisson sample of the private data, not on a batch of one's own")

    def _fresh_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh Poisson batch of the private data (this rank's shard of it), on the input device."""
        return self.data.batch(self.group.shard(self.sampler.sample()), self.device)

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
        """The facts of the optimiser, as a run's summary gives them (no private data, no seed): the
        guarantee with its assumptions and notes in full, and what keys its noise (`key`)."""
        method = self.method.describe()
        shared = {"distributed": self.group.describe(self.steps_done)} if self.group.several else {}
        return {"method": self.method.cfg.name, "dim": self.model.dim, "device": str(self.device),
                "privacy": {**self.plan.as_dict(), "steps_done": self.steps_done, "epsilon_spent": self.epsilon()},
                "engine": {**self.engine, **method.pop("engine", {})}, "fingerprint": self.streams.fingerprint,
                "key": self.key, "method_departures": [library_terms(d) for d in self.method.cfg.departures()],
                "outside_guarantee": self.outside_guarantee(), **shared}


def _is_pair(batch) -> bool:
    """Whether `batch` is (inputs, labels): two tensors in a tuple or a list."""
    return isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)


@dataclasses.dataclass
class LibraryKey:
    """What keys the secret streams beside the seed: the public fingerprint, and its facts."""

    fingerprint: str
    facts: dict

    @property
    def replayable(self) -> bool:
        return self.facts["replayable"]


def library_key(given: str | None, settings: dict, module: nn.Module, loss_fn, public: TensorSplit,
                secure: bool) -> LibraryKey:
    """The fingerprint that keys the secret streams (with the seed, and the private data's digest):
    as given (hex: you vouch that it names the whole computation, as a framework run's does), or a
    hash of `settings`, the model's structure and initial values, the public data and the loss (with
    the module-level globals the loss and the model's forward read). A part of the loss or the model
    that cannot be hashed deterministically is replaced by fresh OS entropy: the loop then draws
    noise no other loop shares, and cannot be replayed from its seed."""
    if given is not None:   # (hex: checked with the loop's arguments)
        return LibraryKey(given, {"fingerprint": given, "source": "given: it names the whole computation",
                                  "covers": ["what the given fingerprint names", KEY_COVERS[-1]],
                                  "replayable": not secure, "unhashed": []})
    loss, model = callable_digest(loss_fn, "loss_fn"), module_digest(module)
    parts = {**settings, "model": model.hex, "public_data": data_digest(public), "loss_fn": loss.hex}
    unhashed = loss.unhashed + model.unhashed
    if unhashed:
        parts["entropy"] = secrets.token_hex(32)
    fingerprint = computation_fingerprint(parts)
    return LibraryKey(fingerprint, {"fingerprint": fingerprint, "source": "computed", "covers": KEY_COVERS,
                                    "replayable": not secure and not unhashed, "unhashed": unhashed})


def private_zo(model: nn.Module, loss_fn, train_data, *, method: str = "pazo_m", epsilon: float | None = 1.0,
               delta: float | None = None, steps: int, batch_size: int, public=None, sigma: float | None = None,
               seed: int | None = None, secure_mode: bool = False, fingerprint: str | None = None,
               engine: str = "auto", chunk_size: int | None = None, query_dropout: bool = False,
               adjacency: str = "add_remove", accountant: str = "prv", eps_error: float | None = None,
               cache_dir: str | None = None, device: str | torch.device | None = None, verbose: bool = True,
               **method_settings) -> PrivateZO:
    """A private zeroth-order optimiser for `model` on `train_data`. Its arguments:

    - `model`: the `nn.Module` to train (its trainable parameters are updated in place).
    - `loss_fn`: `loss_fn(outputs, targets) -> [B]` per-example losses (`reduction="none"`).
    - `train_data`: the private examples: `(inputs, labels)` tensors or a map-style Dataset of pairs.
    - `method`: a registered zeroth-order method (`pazo.methods.method_names("zeroth_order")`); its settings
      (lr, clip, q, k, ...) as keywords, defaults from `configs/method/<name>.yaml`.
    - `epsilon, delta`: the target guarantee for `steps` steps (delta None: 1 / n); epsilon None: non-private (MeZO).
    - `steps, batch_size`: the number of steps the budget covers and the expected Poisson batch size.
    - `public`: public examples (tensors or a Dataset), from which PAZO-M/P/S sample public batches.
    - `sigma`: a noise multiplier to use as given (it must meet epsilon); None: calibrated.
    - `accountant`: "prv" (the default), "rdp" or "pld" (dp-accounting's), as a run's
      `privacy.accountant`: sigma is calibrated and epsilon counted with it (Gaussian noise only;
      a Laplace method is accounted exactly); `eps_error` is PRV's accuracy.
    - `seed`: seeds the streams; the secret ones (noise, Poisson batches) with the computation's key (`library_key`)
      and the private data's digest. Keep it secret. None, or `secure_mode`: those from the operating system's entropy.
    - `fingerprint`: the computation's public fingerprint (hex), used as the key in place of
      pazo's hash (a framework run's is its summary's `computation.fingerprint`): give it only
      where it names the whole computation; None: pazo's hash of everything that decides it.
    - `engine, chunk_size, query_dropout, device`: the zeroth-order engine (`engine.*` of a run);
      where the model is put and batches go (None: where its parameters are).
    - `verbose`: print the guarantee, what it assumes and the plan's notes once.

    In a torch.distributed group (yours, or torchrun's) each rank steps on its shard: the one-process loop, bit for bit.
    A mistake is one ConfigError naming these arguments before any step (BudgetError: a target out
    of reach; UserCodeError: an error inside `model` or `loss_fn`).
    """
    with _told_to_the_group() as group, in_library_terms():
        private, public_split, method_cfg, engine_cfg = _checked_arguments(
            model, loss_fn, train_data, method=method, settings=method_settings, epsilon=epsilon, sigma=sigma,
            steps=steps, batch_size=batch_size, public=public, seed=seed, secure_mode=secure_mode,
            fingerprint=fingerprint, engine=engine, chunk_size=chunk_size, query_dropout=query_dropout,
            cache_dir=cache_dir, device=device)
        secure = secure_mode or seed is None
        privacy = PrivacySchema(epsilon=epsilon, delta=delta, sigma=sigma, adjacency=adjacency, eps_error=eps_error,
                                secure_mode=secure, cache_dir=cache_dir, accountant=accountant)
        module, fmodel, input_device = _checked_model(model, loss_fn, device, epsilon is not None, private,
                                                      public_split)
        settings = {"method": dataclasses.asdict(method_cfg), "privacy": dataclasses.asdict(privacy), "steps": steps,
                    "batch_size": batch_size, "engine": {"query_dropout": query_dropout}}
        key = library_key(fingerprint, settings, module, fmodel.loss_fn, public_split, secure)
        streams = _keyed_streams(seed, secure, key, private, public_split, module)
        plan = _library_plan(privacy, len(private), batch_size, steps, method_cfg, key, seeded=not secure)
        _check_group_shares(group, method_cfg, secure, key, query_dropout)
        zo_method, engine_facts = _method_on_engine(method_cfg, fmodel, plan, streams, public_split, engine_cfg,
                                                    batch_size, group, lambda: _rank_facts(key, private, seed))
    module.train()
    optimiser = PrivateZO(method=zo_method, plan=plan, model=fmodel, streams=streams,
                          sampler=PoissonSampler(len(private), batch_size, streams.numpy["data"]), data=private,
                          device=input_device, engine=engine_facts, key=key.facts, group=group)
    if verbose and group.leader:
        _announce(optimiser, len(public_split))
    return optimiser


def _checked_model(model: nn.Module, loss_fn, device, private_run: bool, private, public_split):
    """(module, functional model, input device): the model as the steps take it, once its initial
    parameters are finite and it and the loss take both splits (else one error naming the argument)."""
    device = resolve_device(str(device)) if device is not None else _parameter_device(model)
    check_finite_model(model)
    module, fmodel, input_device = functional_model(model, device, private=private_run, name=type(model).__name__,
                                                    loss_fn=loss_fn)
    check_model_and_loss(fmodel, {"train_data": private, "public": public_split}, input_device)
    return module, fmodel, input_device


def _checked_arguments(model, loss_fn, train_data, *, method: str, settings: dict, epsilon, sigma, steps, batch_size,
                       public, seed, secure_mode, fingerprint, engine, chunk_size, query_dropout, cache_dir,
                       device) -> tuple[TensorSplit, TensorSplit, MethodConfig, EngineSchema]:
    """(private split, public split, method config, engine config): the arguments checked before
    anything of the user's runs, each fact once, in the order of `private_zo`'s signature, so that of
    several mistakes the first argument's is named (the privacy settings are their schema's, after)."""
    check_user_objects(model, loss_fn)
    private = _checked_split(train_data, "train_data")
    method_cfg = _method_config(method, settings, epsilon, sigma)
    at_least_one(steps, "steps")
    at_least_one(batch_size, "batch_size")
    public_split = _checked_split(public, "public") if public is not None else private.subset(np.empty(0, np.int64))
    check_batches_fit(batch_size, method_cfg, len(private), len(public_split))
    return private, public_split, method_cfg, _engine_and_settings(
        seed=seed, secure_mode=secure_mode, fingerprint=fingerprint, engine=engine, chunk_size=chunk_size,
        query_dropout=query_dropout, cache_dir=cache_dir, device=device)


def _checked_split(data, what: str) -> TensorSplit:
    """`data` as a split (`as_split`), its inputs finite."""
    split = as_split(data, what)
    check_finite_data(split, what)
    return split


def _keyed_streams(seed: int | None, secure: bool, key: LibraryKey, private: TensorSplit, public: TensorSplit,
                   module: nn.Module) -> RandomStreams:
    """The loop's streams: the secret ones keyed to `key`, the private data, the public data and the
    initial parameters, as a framework run's are (`key_secret_streams`; or from OS entropy)."""
    streams = RandomStreams(secrets.randbits(62) if seed is None else seed, secure=secure, fingerprint=key.fingerprint)
    key_secret_streams(streams, private, public, module)   # (before the sampler and the noise draw anything)
    return streams


def _method_on_engine(method_cfg: MethodConfig, model: FunctionalModel, plan: PrivacyPlan, streams: RandomStreams,
                      public: TensorSplit, engine_cfg: EngineSchema, batch_size: int, group: distributed.Group,
                      rank_facts) -> tuple[Method, dict]:
    """The method on the zeroth-order engine asked for (or the one `auto` picks), and that choice; in a
    group of several processes its sums over a batch added over the ranks (`ShardSums`), once every
    rank is known to run this loop (`rank_facts()`, the engine with them: computed only then)."""
    name, reason = choose_engine(engine_cfg, model, zeroth_order=True, queries=method_cfg.release().queries)
    if group.several:
        group.agree({**rank_facts(), "engine": name})
    method = assemble_method(method_cfg, model=model, plan=plan, streams=streams, public=public,
                             engine_cfg=engine_cfg, engine_name=name, batch_size=batch_size,
                             sums=distributed.ShardSums(group) if group.several else LOCAL_SUMS)
    return method, {"requested": engine_cfg.name, "name": name, "reason": reason}


@contextlib.contextmanager
def _told_to_the_group() -> Iterator[distributed.Group]:
    """The loop's torch.distributed group (`distributed.library_group`; one process: none), an error
    inside (building the loop) told to its other ranks, which end at once (`distributed.telling`)."""
    group = distributed.library_group(TrainSchema.distributed_timeout_s)
    with distributed.telling(group, (ConfigError, BudgetError)):
        yield group


def _check_group_shares(group: distributed.Group, method_cfg: MethodConfig, secure: bool, key: LibraryKey,
                        query_dropout: bool) -> None:
    """The torch.distributed group the loop runs in (`distributed.library_group`) can share every
    batch and its noise: drawn alike on every rank from the seed and the key, never from a rank's
    own entropy (secure mode, an unhashable loss_fn), its queries in eval mode (`require_shards`)."""
    if not group.several:
        return
    require_shards(method_info(method_cfg.name), group, secure_mode=False, query_dropout=query_dropout)
    require(not secure, f"secure_mode=True (or no seed) draws each process's Poisson batches and noise from its own "
            f"entropy: the {group.world_size} processes of this torch.distributed group would not share them; give "
            "every rank the same secret seed, or run the loop as one process")
    require(not key.facts["unhashed"], f"loss_fn could not be hashed deterministically "
            f"({'; '.join(key.facts['unhashed'])}): each of the {group.world_size} processes of this "
            "torch.distributed group would key its noise with its own entropy; give fingerprint= (the same on every "
            "rank), or run the loop as one process")


def _rank_facts(key: LibraryKey, private: TensorSplit, seed: int | None) -> dict[str, str]:
    """What every rank of a loop must share, hashed (the seed's and the private data's stay among the
    group's processes): the key's fingerprint, the private data, the seed and pazo's code."""
    def hashed(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()
    return {"fingerprint": key.fingerprint, "train_data": hashed(data_digest(private)), "seed": hashed(str(seed)),
            "code": distributed.code_digest()}


def _library_plan(privacy: PrivacySchema, n: int, batch_size: int, steps: int, method_cfg: MethodConfig,
                  key: LibraryKey, seeded: bool) -> PrivacyPlan:
    """The privacy plan, in the library's terms: its notes as the library's arguments name them, the
    seed_secret assumption in the library's words, a note that a given seed must stay secret, and
    one where the key holds fresh entropy."""
    plan = make_plan(privacy, n, batch_size, steps, method_cfg.release(), PoissonSampler,
                     method_info(method_cfg.name).privacy_note)
    plan.notes = [library_terms(note) for note in plan.notes]
    if "seed_secret" in plan.assumptions:
        plan.assumptions["seed_secret"] = SEED_SECRET
    if seeded and plan.private:
        plan.notes.append(SEED_NOTE)
    if seeded and key.facts["unhashed"]:
        plan.notes.append(f"{_unhashed_subject(key.facts['unhashed'])} could not be hashed deterministically "
                          f"({'; '.join(key.facts['unhashed'])}): "
                          "fresh entropy from the operating system is mixed into the key of the noise and the "
                          "Poisson batches, so this loop cannot be replayed from its seed")
    return plan


def _unhashed_subject(unhashed: list[str]) -> str:
    """Which of the library's arguments the unhashed parts belong to: "loss_fn", "model" or both."""
    subjects = [name for name in ("loss_fn", "model") if any(part.startswith(name) for part in unhashed)]
    return " and ".join(subjects) or "loss_fn"


def _announce(optimiser: PrivateZO, n_public: int) -> None:
    """The guarantee, what it assumes and the plan's notes, once (the library's header)."""
    use_console(log.name)
    log.info(f"pazo: {optimiser.method.cfg.name} on your model (d={optimiser.model.dim}, device {optimiser.device}); "
             f"private {len(optimiser.data)}, public {n_public}")
    departures = [library_terms(d) for d in optimiser.method.cfg.departures()]
    for line in privacy_lines(optimiser.plan, departures, secure_note=SECURE_NOTE, assumptions_in=ASSUMPTIONS_IN):
        log.info(library_terms(line) if line.startswith("accountant: ") else line)   # (accountant=, not privacy.)


def _engine_and_settings(*, seed, secure_mode, fingerprint, engine, chunk_size, query_dropout, cache_dir,
                         device) -> EngineSchema:
    """The loop's own settings, in the order of the signature; the engine's section as a run's
    `engine` section is checked (its schema), returned."""
    require(seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2 ** 63),
            f"seed must be an integer in [0, 2**63), got {seed!r}")
    require(isinstance(secure_mode, bool), f"secure_mode must be True or False, got {secure_mode!r}")
    require(fingerprint is None or _is_hex(fingerprint), f"fingerprint must be a hex string, got {fingerprint!r}")
    engine_cfg = EngineSchema(name=engine, chunk_size=chunk_size, query_dropout=query_dropout)
    require(isinstance(query_dropout, bool), f"query_dropout must be True or False, got {query_dropout!r}")
    require(cache_dir is None or isinstance(cache_dir, (str, os.PathLike)),
            f"cache_dir must be a folder's path or None, got {cache_dir!r}")
    require(device is None or isinstance(device, torch.device) or
            (isinstance(device, str) and DEVICE.fullmatch(device) is not None),
            f"unknown device {device!r}; choices: None (where the model's parameters are), auto, cpu, cuda, "
            "cuda:N, mps, or a torch.device")
    return engine_cfg


def _is_hex(text) -> bool:
    """Whether `text` reads as a hexadecimal number (a fingerprint given)."""
    try:
        int(text, 16)
    except (TypeError, ValueError):
        return False
    return True


def as_split(data, what: str) -> TensorSplit:
    """`(inputs, labels)` tensors, a map-style Dataset of such pairs, or a TensorSplit, as a TensorSplit
    (labels are class indices, as the framework's data sets give them)."""
    if isinstance(data, TensorSplit):
        require(len(data) > 0, f"{what} is empty")
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
    require(len(inputs) > 0, f"{what} is empty")   # (in any form: a batch size would be said to exceed it)
    require(not labels.is_floating_point(), f"{what}: labels must be integer class indices, got {labels.dtype}")
    return TensorSplit(inputs, labels)


def _method_config(name: str, settings: dict, epsilon, sigma) -> MethodConfig:
    """The method's typed config: its yaml's values (configs/method/<name>.yaml), `settings` over them;
    a zeroth-order method, private where `epsilon` is given."""
    require(name in method_names(), unknown_choice("method", name, method_names("zeroth_order")))
    info = method_info(name)
    require(info.zeroth_order, f"method {name!r} is first-order; private_zo takes a zeroth-order method: "
            f"{', '.join(method_names('zeroth_order'))}")
    require(epsilon is None or info.private, f"method {name!r} is non-private: give epsilon=None")
    require(sigma is None or epsilon is not None, "sigma is set but epsilon is None: give the target epsilon the "
            "given sigma must meet")
    path = CONFIG_DIR / "method" / f"{name}.yaml"
    defaults = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
    defaults.pop("defaults", None)
    return method_config({**defaults, **settings, "name": name})


def _parameter_device(model: nn.Module) -> torch.device:
    first = next((p for p in model.parameters() if p.requires_grad), None)
    require(first is not None, "the model has no trainable parameters")
    return first.device
