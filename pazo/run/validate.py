"""Clear errors for bad input, before any data is loaded or any compute starts.

Every key's type and range is checked by the typed schema (`pazo/config_schema.py`), each method's
fields by its typed config (`pazo/methods/`); what is checked here spans several config groups or
needs a registry (data set, model, method and engine names, and their facts: the kind of input a data
set produces against the kinds a model accepts) or the data set's sizes."""
from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig

from pazo.config_schema import check_named_sections
from pazo.catalog import pairing_problem
from pazo.data import DATASETS
from pazo.errors import ConfigError, one_of
from pazo.methods import METHODS, MethodConfig, method_config, method_info
from pazo.models import MODELS
from pazo.privacy.accountants import BudgetError, check_accountant, check_delta, check_target_epsilon
from pazo.privacy.planner import steps_from_epochs
from pazo.privacy.sampling import SAMPLERS
from pazo.run.door import check_run_sections, schedule_problem
from pazo.run.typed import RunConfig, run_config


def validate_config(cfg) -> None:
    """Checks that need only the config, in one order: the run's own sections and the schedule
    against the steps (`check_run_sections`, all that the refusal before torch loads checks: both
    name the same mistake first), then the registered names and their sections, then what spans
    groups."""
    data = check_run_sections(cfg)
    one_of(cfg.dataset.name, DATASETS.names(), "dataset")
    one_of(cfg.model.name, MODELS.names(), "model")
    one_of(cfg.method.name, METHODS.names(), "method")
    check_named_sections(data)  # every other key's type and range (pazo/config_schema.py)
    m, p = cfg.method, cfg.privacy
    method = method_config(m)  # the method's own checks (its typed config)
    d = cfg.dataset
    pairing = pairing_problem(d.name, cfg.model.name)   # the data set's input kind, the model's accepted ones
    if pairing:
        raise ConfigError(pairing)
    if "device_map" in cfg.model:
        if cfg.model.device_map not in (None, "auto") and not isinstance(cfg.model.device_map, Mapping):
            raise ConfigError(f"model.device_map must be null, auto or a mapping of modules to devices, "
                              f"got {cfg.model.device_map!r}")
    if method_info(m.name).uses_public and not DATASETS.get(d.name).public_split:
        raise ConfigError(f"method {m.name!r} needs public data but dataset={d.name} has no public split")
    if d.get("public_source") == "folder" and not d.public_folder:
        raise ConfigError("dataset.public_source=folder needs dataset.public_folder=<folder of class sub-folders>")

    one_of(p.sampling, SAMPLERS, "privacy.sampling")
    if p.epsilon is not None:
        try:   # the accountant's range, checked with the config (a multirun's every job before the first)
            check_target_epsilon(p.epsilon, "privacy.epsilon")
        except BudgetError as err:
            raise ConfigError(str(err)) from None
        if not method_info(m.name).private:
            raise ConfigError(f"method {m.name!r} is non-private; run it with privacy=none "
                              "(or privacy.epsilon=null)")
    if p.delta is not None:  # the one delta rule, shared with the plan and the calibration
        check_delta(p.delta, method.release().noise, name="privacy.delta", error=ConfigError)
    if p.epsilon is not None:   # the accountant's rule, shared with the plan: rdp and pld for Gaussian noise only
        try:
            check_accountant(p.get("accountant", "prv"), method.release().noise, p.eps_error)
        except BudgetError as err:
            raise ConfigError(str(err)) from None
    if p.sigma is not None and p.epsilon is None:
        raise ConfigError("privacy.sigma is set but privacy.epsilon is null: give the target epsilon "
                          "the given sigma must meet")


def validate_against_data(train, method, schedule, n_private: int, n_public: int) -> int:
    """Checks that need the data set's sizes, of a run's typed `train`, `method` and `schedule`
    sections, and the run's planned steps they checked the schedule against (`planned_steps`), so
    that a run gets its steps with its checks (a library loop, which has no schedule, checks its
    batches alone: `check_batches_fit`)."""
    check_batches_fit(train.batch_size, method, n_private, n_public)
    steps = planned_steps(train, n_private)
    check_schedule_fits(train, schedule, steps)
    return steps


def check_batches_fit(batch_size: int, method: MethodConfig, n_private: int, n_public: int) -> None:
    """The private batch within the private examples; the public batch of a method that reads
    public data within the public examples (a run's and a library loop's)."""
    if batch_size > n_private:
        raise ConfigError(f"train.batch_size={batch_size} exceeds the {n_private} private training examples")
    if not method_info(method.name).uses_public:
        return
    if n_public == 0:
        raise ConfigError(f"method {method.name!r} needs public data but the data set has none")
    public_batch = getattr(method, "public_batch_size", None)
    if public_batch is not None and public_batch > n_public:
        raise ConfigError(f"method.public_batch_size={public_batch} exceeds the {n_public} public examples")


def planned_steps(train_cfg, n: int) -> int:
    """`train.steps`, or `train.epochs` passes of expected batches over n private examples (epochs
    that give no step: a ConfigError, `steps_from_epochs`)."""
    if train_cfg.steps:
        return train_cfg.steps
    try:
        return steps_from_epochs(train_cfg.epochs, train_cfg.batch_size / n, "train.epochs", "train.steps")
    except BudgetError as err:
        raise ConfigError(str(err)) from None


def check_schedule_fits(train, schedule, steps: int) -> None:
    """The step-size schedule (the `schedule` section) fits the run's `steps` (from its `train`
    section): a warm-up longer than the run would end it still warming up, and a step decay at
    intervals no shorter than it would never decay; either is a ConfigError naming the fix (the
    schedule's own ranges: its schema)."""
    how = f"train.steps={steps}" if train.steps else f"train.epochs={train.epochs:g}"
    problem = schedule_problem(schedule, steps, how)
    if problem:
        raise ConfigError(problem)


def validated_run_config(cfg: DictConfig) -> RunConfig:
    """A launch's door: `cfg` checked (`validate_config`) and typed once (`run_config`)."""
    validate_config(cfg)
    return run_config(cfg)
