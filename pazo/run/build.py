"""The one place a run is assembled: data, model, privacy plan, engine and method, from a config.

Training (`pazo.train`), the privacy audit (`pazo.audit`) and the benchmarks (`pazo.bench`) all
call `build_run`, so the model an audit attacks, the one a benchmark times and the one a training
run trains are built by the same code: same streams, same placement, same loss, same sigma.

    cfg -> fingerprint -> streams -> data -> model (placed, loss) -> key -> warm start -> plan (sigma)
        -> engine -> method

The fingerprint (`pazo.run.fingerprint`, of the config with its values cast to their schema types)
and, once the model is built, the digests of the private data, the public data and the initial
parameters key the secret streams (noise, Poisson batches; docs/design/noise-key.md): computed
here, they are the same for a run, its audit and its benchmark.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from pazo.data import DataBundle, build_dataset
from pazo.run.digests import data_digest, key_secret_streams
from pazo.run import outlets
from pazo.config_schema import EngineSchema, OptimizerSchema, ScheduleSchema, TopSchema
from pazo.errors import ConfigError
from pazo.run import distributed
from pazo.methods import Method, MethodConfig, MethodInfo, build_method, method_info
from pazo.zo.engines import build_engine, choose_engine
from pazo.zo.memory import check_step_memory
from pazo.models import FunctionalModel, build_model, functional_model
from pazo.privacy.mechanisms import LOCAL_SUMS
from pazo.privacy.plan import PrivacyPlan, make_plan
from pazo.privacy.sampling import SAMPLERS
from pazo.rng import RandomStreams
from pazo.threads import apply_threads
from pazo.run.validate import planned_steps, validate_against_data
from pazo.run.typed import RunConfig
from pazo.run.warm_start import warm_start


@dataclass
class Run:
    """Everything one run is made of, before its first step."""

    cfg: RunConfig         # the run's config, typed once at the door
    info: MethodInfo
    streams: RandomStreams
    data: DataBundle
    module: nn.Module
    model: FunctionalModel
    device: torch.device   # where batches go (the first module's device on a model spread over GPUs)
    warm_start: dict
    plan: PrivacyPlan
    engine: dict           # {requested, name, reason}
    method: Method
    total_steps: int
    threads: dict          # {count, requested, why}: the CPU threads (pazo.threads)
    #: the private data's digest (`data_digest`), which keys the secret streams: never released
    data_digest: str = ""
    #: every digest that keys the secret streams (`key_secret_streams`): kept in the checkpoint only
    key_digests: dict = field(default_factory=dict)
    #: this process's place among the run's processes (torchrun; rank 0 of 1 for one process)
    group: distributed.Group = field(default_factory=distributed.Group)

    @property
    def n(self) -> int:
        return len(self.data.private)

    @property
    def batch_size(self) -> int:
        return self.cfg.train.batch_size

    @property
    def steps_per_epoch(self) -> float:
        return self.n / self.batch_size

    def sampler(self):
        """The private batch sampler the plan's accountant was told about, on the run's data stream."""
        return SAMPLERS[self.cfg.privacy.sampling](self.n, self.batch_size, self.streams.numpy["data"])

    @property
    def computation(self) -> dict:
        """What decides the numbers a step computes, and may be released (summary.json): the
        computation fingerprint of the config (which, with the seed, keys the secret streams), the
        device, how the public gradients are taken, sigma (from the cache or calibration) and where
        the data were read. A replay of steps with the same noise (a resume, a seeded start over)
        releases nothing new only if these are the earlier attempt's."""
        public_grads = self.method.describe().get("public_grads", {})
        return {"fingerprint": self.streams.fingerprint,
                "device": str(self.device), "parameter_devices": [str(d) for d in self.model.devices],
                "sigma": self.plan.sigma, "public_grads_together": public_grads.get("together"),
                "dataset_root": getattr(self.cfg.dataset, "root", None)}

    @functools.cached_property
    def private_computation(self) -> dict:
        """`computation` with the digests that key the secret streams (the private data's, the
        public data's, the initial parameters') in place of where the data were read (a resume may
        read the same data elsewhere): kept in the checkpoint only (0600), since a hash of the
        private data would tell which data set it is."""
        where = {k: v for k, v in self.computation.items() if k != "dataset_root"}
        return {**where, "private_data_sha256": self.data_digest or data_digest(self.data.private),
                **{k: v for k, v in self.key_digests.items() if k != "private_data_sha256"}}

    def rank_facts(self, start_step: int) -> dict[str, str]:
        """What every rank of the run must share (`Group.agree`): the config, the digests that key
        the secret streams (hashed once more: the private data's stays among the run's processes),
        the code, the engine and the step it starts from (a resumed run: its checkpoint's, read on
        every rank)."""
        return {**distributed.run_facts(self.cfg.fingerprint, self.key_digests), "engine": self.engine["name"],
                "start": f"step {start_step}"}

    def describe(self) -> dict:
        """The set-up half of the run's summary (what ran, where, on what, with what guarantee)."""
        method = self.method.describe()
        engine = {**self.engine, **method.pop("engine", {})}  # the method's engine facts beside the ZO engine's
        return {"method": self.cfg.method.name, "dataset": self.cfg.dataset.name, "model": self.cfg.model.name,
                "device": str(self.device), "dim": self.model.dim,
                "parameter_devices": [str(d) for d in self.model.devices],
                "privacy": self.plan.as_dict(), "data": self.data.describe(), "warm_start": self.warm_start,
                "engine": engine, "threads": self.threads, "method_departures": self.cfg.method.departures(),
                "outside_guarantee": self.outside_guarantee(), "computation": self.computation,
                **self.update_rule_block(), **method}

    def update_rule_block(self) -> dict:
        """The summary's `update_rule` (schedule and optimiser) where it is not the default."""
        rule = self.method.update_rule.describe()
        return {"update_rule": rule} if rule else {}

    def outside_guarantee(self) -> list[str]:
        """What a private run computes from its private data and releases without noise, so outside
        the printed epsilon: the data set's own (`DataBundle.info`), the step times and the private
        diagnostics (`pazo.run.outlets`)."""
        if not self.plan.private:
            return []
        return [*self.data.info.get("outside_guarantee", []), *self.method.outside_guarantee(),
                outlets.STEP_TIMES_SENTENCE, outlets.private_diagnostics_sentence()]


#: a private seeded run on the shipped default seed: its seed is no secret, whatever config.yaml's mode
SHIPPED_SEED_NOTE = (f"seed={TopSchema.seed} is the shipped default: anyone can regenerate this run's noise and "
                     "batches; give a secret seed (seed=$(python -c 'import secrets; print(secrets.randbits(62))')) "
                     "or privacy.secure_mode=true")


def resolve_device(name: str, option: str = "device=") -> torch.device:
    """The one resolver of a device name (`auto`: CUDA where there is one), checked against this
    machine before any compute: a name torch does not know, or a device this machine lacks, is one
    ConfigError naming the option as the user spelled it (`device=` in a run's config, `--device `
    on a benchmark's command line)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"unknown device {name!r}; choices: auto, cpu, cuda, cuda:N, mps") from None
    asked, instead = f"{option}{name} asked for but", f"use {option}auto or {option}cpu"
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{asked} CUDA is not available; {instead}")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ConfigError(f"{asked} this machine has {torch.cuda.device_count()} CUDA "
                          f"device(s) (cuda:0 ... cuda:{torch.cuda.device_count() - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"{asked} MPS is not available; {instead}")
    return device


def run_privacy_plan(cfg: RunConfig, n_private: int, steps: int, sigma: float | None = None) -> PrivacyPlan:
    """The privacy plan of the run `cfg` describes on `n_private` private examples over its planned
    `steps` (`planned_steps`): q, T, sigma (calibrated by its accountant, given and checked, or a
    benchmark's `sigma`, not accounted) and its notes (`SHIPPED_SEED_NOTE` among them). A run makes
    it in `build_run`; `pazo-train ... --plan` prints it without training."""
    info, release = method_info(cfg.method.name), cfg.method.release()
    if sigma is None:
        plan = make_plan(cfg.privacy, n_private, cfg.train.batch_size, steps, release,
                         SAMPLERS[cfg.privacy.sampling], info.privacy_note)
    else:
        plan = PrivacyPlan.with_sigma(sigma if info.private else None, cfg.train.batch_size, release, steps=steps)
    if plan.private and not cfg.privacy.secure_mode and cfg.seed == TopSchema.seed:
        plan.notes.append(SHIPPED_SEED_NOTE)
    return plan


def build_run(cfg: RunConfig, *, earlier_engine: dict | None = None, time_engines: bool = True,
              data: DataBundle | None = None, module: nn.Module | None = None,
              sigma: float | None = None, device: torch.device | None = None) -> Run:
    """Assemble the run `cfg` describes (checked and typed at the door of the command that runs it:
    `pazo.run.validate.validated_run_config`, or `run_config`).

    earlier_engine: a resumed run's first-attempt engine choice, kept so that its steps stay those
    of one engine. time_engines: let `engine.name=auto` time the engines on CUDA (off in an audit).
    device: `cfg.device` as its launch resolved it (`resolve_device`; None: resolved here).
    data, module, sigma: a benchmark's synthetic data and model, and a fixed noise multiplier
    (nothing calibrated or accounted); a run never passes them. A run sets its CPU threads
    (`train.threads`, `pazo.threads`) once its model is built, before the warm start and the
    calibration; a benchmark (given its data) keeps the threads it set itself.
    """
    own_data = data is None
    info = method_info(cfg.method.name)
    group = distributed.current()
    require_shards(info, group, cfg.privacy.secure_mode, cfg.engine.query_dropout)
    device = resolve_device(cfg.device) if device is None else device
    streams = RandomStreams(cfg.seed, secure=cfg.privacy.secure_mode, fingerprint=cfg.computation)
    if data is None:
        data = build_dataset(cfg.dataset, streams)
        total_steps = validate_against_data(cfg.train, cfg.method, cfg.schedule, len(data.private),
                                            len(data.public))
    else:   # a benchmark's own data, sized by the benchmark: only its steps
        total_steps = planned_steps(cfg.train, len(data.private))
    if module is None:   # from the run's init stream
        torch.manual_seed(streams.seeds["init"])
        module = build_model(cfg.model, data.input_shape, data.num_classes)
    module, model, device = functional_model(module, device, private=cfg.privacy.epsilon is not None,
                                             name=cfg.model.name)
    # (before the sampler and the noise draw anything)
    key_digests = key_secret_streams(streams, data.private, data.public, module)
    # by the whole model's size, frozen weights included: a LoRA step's cost is the full forward
    size = sum(p.numel() for p in module.parameters())
    threads = (apply_threads(cfg.train.threads, size) if own_data else
               {"count": torch.get_num_threads(), "requested": None, "why": "set by the benchmark"})
    warm = warm_start(model, data.public, cfg, streams, device)
    plan = run_privacy_plan(cfg, len(data.private), total_steps, sigma)
    # the zeroth-order engine (`engine.name`, or what `auto` picks) and why, for the summary
    if cfg.engine.name == "auto" and earlier_engine and earlier_engine.get("requested") == "auto":   # (a resume's)
        engine = {**earlier_engine, "reason": f"kept from the first attempt ({earlier_engine['reason']})"}
    else:   # timed on non-private examples on CUDA (several ranks: not timed, a choice all make alike)
        timed = time_engines and not group.several and model.device.type == "cuda" and len(data.test)
        sample = (data.test.batch(np.arange(min(cfg.train.batch_size, len(data.test))), model.input_device)
                  if timed else None)
        name, reason = choose_engine(cfg.engine, model, zeroth_order=info.family == "zeroth_order",
                                     queries=cfg.method.release().queries, sample=sample)
        engine = {"requested": cfg.engine.name, "name": name, "reason": reason}
    method = assemble_method(cfg.method, model=model, plan=plan, streams=streams, public=data.public,
                             engine_cfg=cfg.engine, engine_name=engine["name"], batch_size=cfg.train.batch_size,
                             schedule=cfg.schedule, optimizer=cfg.optimizer,
                             sums=distributed.ShardSums(group) if group.several else LOCAL_SUMS)
    return Run(cfg=cfg, info=info, streams=streams, data=data, module=module, model=model,
               device=device, warm_start=warm, plan=plan, engine=engine, method=method, total_steps=total_steps,
               threads=threads, data_digest=key_digests["private_data_sha256"], key_digests=key_digests, group=group)


def require_shards(info: MethodInfo, group: distributed.Group, secure_mode: bool, query_dropout: bool = False) -> None:
    """Several processes share a batch only with a method whose sums over it they can add, and only
    drawing it and its noise from the seeded streams every rank shares (secure mode draws each
    process's own from the operating system), and with queries in eval mode (dropout masks drawn in
    train mode are drawn for a rank's shard, so each example's mask depends on how the batch is split)."""
    if not group.several:
        return
    if not info.cls.shards_batches:
        raise ConfigError(f"method {info.name!r} does not run on several processes yet (torchrun with "
                          f"WORLD_SIZE={group.world_size}): the zeroth-order methods, DP-SGD, DPMD, DOPE-SGD and "
                          "GEP do; run it as one process")
    if secure_mode:
        raise ConfigError("privacy.secure_mode=true draws each process's batches and noise from its own "
                          "entropy, so the ranks of a torchrun would not share them: run it as one process")
    if query_dropout:
        raise ConfigError("engine.query_dropout=true draws the queries' dropout masks for each rank's shard of a "
                          f"batch, not for the whole batch as one process does, so the {group.world_size} processes "
                          "would not compute one run: run it as one process, or with engine.query_dropout=false")


def assemble_method(method_cfg: MethodConfig, *, model: FunctionalModel, plan: PrivacyPlan, streams: RandomStreams,
                    public, engine_cfg: EngineSchema, engine_name: str, batch_size: int,
                    schedule: ScheduleSchema | None = None, optimizer: OptimizerSchema | None = None,
                    sums=LOCAL_SUMS) -> Method:
    """The method on its engine, once what its step holds is known to fit (a zeroth-order step
    grows with method.q and the batch: refused in one line if it cannot), with the run's step-size
    schedule and optimiser (None: constant, sgd). A run's method and a library user's
    (`pazo.private`) are assembled here."""
    if method_info(method_cfg.name).zeroth_order:
        check_step_memory(method_cfg.release().queries, batch_size, model.dim, model.params[0].element_size(),
                          engine_name, engine_cfg.chunk_size, model.device)
    # batches go to the input's device; directions, noise and updates are made where the trainable
    # parameters start (model.device: with LoRA on a model spread over GPUs, possibly another GPU)
    return build_method(method_cfg, model=model, plan=plan, streams=streams, public=public, device=model.device,
                        engine=build_engine(engine_cfg, engine_name),
                        query_train_mode=engine_cfg.query_dropout, schedule=schedule, optimizer=optimizer,
                        sums=sums)
