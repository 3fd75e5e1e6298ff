"""A finished run loaded back (`pazo.load_run(path)`): its model with the trained weights, its typed
config and the privacy facts its summary records; evaluated again (`LoadedRun.evaluate`, what
`pazo-eval` prints) or exported in the Hugging Face format (`LoadedRun.export_hf`).

Everything here is post-processing of what the run released (the model, `model.safetensors`): it
costs no privacy. The model is built from the run's config and the shape facts its summary records
(`data.input_shape`, `data.num_classes`), without the data; a run written before the summary
recorded them takes them from the data set's registration where it fixes them, else from the data
set itself (`shape_facts`). An evaluation reads the run's test split, or the test split of the data
set that dataset overrides name, and refuses one that holds the run's private training examples
(`check_not_private`): an accuracy on them would be a noiseless statistic of private data."""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from pazo import CONFIG_DIR
from pazo.catalog import DATASETS, pairing_problem
from pazo.run.checkpoint import read_summary
from pazo.run.door import renamed_option
from pazo.config_schema import check_config_values
from pazo.data import DataBundle, build_dataset
from pazo.errors import ConfigError, unknown_key
from pazo.models import build_model, dispatched
from pazo.models.functional import FunctionalModel, cross_entropy_per_example
from pazo.rng import RandomStreams
from pazo.files.rundir import MODEL_FILE, OLD_MODEL_FILE
from pazo.run.typed import RunConfig, run_config
from pazo.run.weights import read_weights

#: what `pazo-eval` says of every evaluation it prints
POST_PROCESSING = ("post-processing of the released model: it costs no privacy beyond the run's own guarantee, "
                   "and the examples evaluated are not the run's private training examples")


@dataclass(frozen=True)
class RunPrivacy:
    """What the run's summary.json says of its privacy: the epsilon spent of the target, delta, the
    noise multiplier, the accountant, the steps run, the run's status, whether the guarantee holds,
    and what the epsilon does not cover (`outside_guarantee`)."""
    private: bool
    epsilon_spent: float | None
    target_epsilon: float | None
    delta: float | None
    sigma: float | None
    accountant: str
    steps: int
    status: str
    guarantee: str
    guarantee_holds: bool | None
    outside_guarantee: list[str]

    @classmethod
    def of(cls, summary: dict) -> RunPrivacy:
        p = summary.get("privacy") or {}
        return cls(private=bool(p.get("private")), epsilon_spent=p.get("epsilon_spent"),
                   target_epsilon=p.get("target_epsilon"), delta=p.get("delta"), sigma=p.get("sigma"),
                   accountant=str(p.get("accountant", "none")), steps=int(summary.get("steps_done") or 0),
                   status=str(summary.get("status")), guarantee=str(p.get("guarantee", "none")),
                   guarantee_holds=p.get("guarantee_holds"),
                   outside_guarantee=list(summary.get("outside_guarantee") or []))

    def line(self) -> str:
        if not self.private:
            return "a non-private run: no privacy guarantee"
        return (f"{self.guarantee} with epsilon {self.epsilon_spent:.4g} spent of {self.target_epsilon:g} "
                f"(delta {self.delta:.3g}, sigma {self.sigma:.4g}, {self.steps} steps)")


@dataclass
class LoadedRun:
    """A finished run: `model` (an nn.Module in eval mode, the trained weights loaded), `config`
    (`RunConfig`), `privacy` (`RunPrivacy`), `summary` (summary.json as a dict), `path`."""
    path: Path
    model: nn.Module
    config: RunConfig
    privacy: RunPrivacy
    summary: dict

    def evaluate(self, overrides: list[str] = (), batch_size: int | None = None) -> Evaluation:
        """The model's test metrics: on the run's test split, or on the test split of the data set
        `overrides` describe (`dataset=<name>`, `dataset.<key>=<value>`, as pazo-train takes them),
        which must have the run's label space and hold none of its private training examples."""
        cfg = run_config(dataset_overridden(self.config.raw, list(overrides)))
        info = DATASETS.get(cfg.dataset.name)   # (facts its registration fixes: checked before any data is read)
        check_label_space(self, cfg.dataset.name, info.classes, info.input_shape)
        data = build_dataset(cfg.dataset, RandomStreams(cfg.seed))
        check_label_space(self, data.name, data.num_classes, data.input_shape, data.info.get("label_words"))
        if overrides:
            check_not_private(self, data)
        model = FunctionalModel(self.model, loss_fn=getattr(self.model, "loss_fn", cross_entropy_per_example))
        metrics = model.evaluate(data.test, batch_size or self.config.train.eval_batch_size)
        return Evaluation(self.path, cfg.dataset.name, len(data.test), metrics, list(overrides))

    def export_hf(self, folder: str | Path) -> Path:
        """The language model in the Hugging Face format (`pazo.run.hf_export`), into `folder`."""
        from pazo.run.hf_export import export_hf

        return export_hf(self, Path(folder))


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of a loaded run: where, on what, and its metrics (accuracy, loss, and what
    the task adds: SQuAD's f1 and exact_match)."""
    run_dir: Path
    dataset: str
    n: int
    metrics: dict
    overrides: list[str]

    def lines(self) -> list[str]:
        on = f"dataset={self.dataset}" + (f" ({' '.join(self.overrides)})" if self.overrides else ", the run's own")
        values = ", ".join(f"{k} {v:.4f}" for k, v in self.metrics.items())
        return [f"pazo: {self.run_dir}: test split of {on}, {self.n} examples", f"  {values}",
                f"  {POST_PROCESSING}"]


def load_run(path: str | Path, device: str = "cpu") -> LoadedRun:
    """The finished run in `path` (a run directory of pazo-train): its model built from its config
    and loaded with its trained weights (on `device`, in eval mode), its typed config and its
    privacy facts. A folder that is no run, or a run that did not finish or kept no model, is one
    ConfigError naming the folder and what is missing."""
    from pazo.plugins import load_plugins

    if isinstance(path, str) and not path:   # (Path("") is the current folder, which may hold another run)
        raise ConfigError("the run directory's path is empty: give a finished run's directory (pazo-train's "
                          "hydra.run.dir)")
    load_plugins()   # (a plugin's model or data set is built by its own registration)
    run_dir = Path(path)
    summary = finished_summary(run_dir)
    raw = read_config(run_dir)
    config = typed_run_config(raw, run_dir)
    module = trained_model(config, summary, model_file(run_dir, config), torch.device(device))
    return LoadedRun(run_dir, module, config, RunPrivacy.of(summary), summary)


def finished_summary(run_dir: Path) -> dict:
    """summary.json of a finished training run in `run_dir`, or why there is none."""
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a run directory: {'no such folder' if not run_dir.exists() else 'a file'}")
    summary = read_summary(run_dir / "summary.json")
    if summary is None:
        what = "unreadable" if (run_dir / "summary.json").exists() else "missing"
        raise ConfigError(f"{run_dir} is not a pazo run: its summary.json is {what} (a run directory holds "
                          f"config.yaml, summary.json and {MODEL_FILE})")
    if summary.get("kind") == "audit":
        raise ConfigError(f"{run_dir} is a privacy audit (pazo-audit), not a training run: it has no model to load")
    status = summary.get("status")
    if status != "finished":
        why = f": {summary['failure']}" if summary.get("failure") else ""
        raise ConfigError(f"{run_dir} holds a run that did not finish (status {status}{why}, "
                          f"{summary.get('steps_done')} of {summary.get('steps_planned')} steps): it has no trained "
                          "model; the pazo-train command that started it resumes it")
    return summary


def read_config(run_dir: Path) -> DictConfig:
    """config.yaml of the run (written resolved by its recorder)."""
    path = run_dir / "config.yaml"
    if not path.exists():
        raise ConfigError(f"{run_dir} is not a whole pazo run: its config.yaml is missing")
    try:
        cfg = OmegaConf.load(path)
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err} (it is readable by the run's owner only: "
                          "it holds the seed)") from None
    except Exception as err:   # (yaml's and OmegaConf's errors: a damaged file)
        raise ConfigError(f"{path} cannot be read as a config: {str(err).splitlines()[0]}") from None
    if not isinstance(cfg, DictConfig) or "model" not in cfg or "dataset" not in cfg:
        raise ConfigError(f"{path} is not a pazo run's config (no model or dataset section)")
    return cfg


def model_file(run_dir: Path, config: RunConfig) -> Path:
    """The run's weights file: model.safetensors, or an older run's model.pt."""
    for name in (MODEL_FILE, OLD_MODEL_FILE):
        if (run_dir / name).exists():
            return run_dir / name
    if not config.train.save_model:
        raise ConfigError(f"{run_dir} kept no model: the run had train.save_model=false")
    raise ConfigError(f"{run_dir} is not a whole pazo run: its {MODEL_FILE} is missing")


def typed_run_config(cfg: DictConfig, run_dir: Path) -> RunConfig:
    """`cfg` as `RunConfig` (`pazo.run.typed.run_config`): a value its schema refuses is one
    ConfigError naming config.yaml."""
    try:
        check_config_values(cfg)
        return run_config(cfg)
    except ConfigError as err:
        raise ConfigError(f"{run_dir / 'config.yaml'}: {err}") from None


def shape_facts(cfg: RunConfig, summary: dict) -> tuple[tuple[int, ...], int]:
    """(input shape, number of classes) the run's model was built for: from its summary, else from
    the data set's registration, else (an older run of a data set that fixes neither) from the
    data set itself, read as the run read it."""
    data = summary.get("data") or {}
    if data.get("input_shape") is not None and data.get("num_classes") is not None:
        return tuple(data["input_shape"]), int(data["num_classes"])
    info = DATASETS.get(cfg.dataset.name)
    if info.input_shape is not None and info.classes is not None:
        return info.input_shape, info.classes
    bundle = build_dataset(cfg.dataset, RandomStreams(cfg.seed))
    return tuple(bundle.input_shape), bundle.num_classes


def trained_model(cfg: RunConfig, summary: dict, weights: Path, device: torch.device) -> nn.Module:
    """The run's model built from its config (the global random state left as it was) with the
    weights in `weights` loaded, on `device`, in eval mode."""
    input_shape, num_classes = shape_facts(cfg, summary)
    with torch.random.fork_rng(devices=[]):
        module = build_model(cfg.model, input_shape, num_classes)
    try:
        state = read_weights(weights)
    except Exception as err:   # (a truncated or foreign file: safetensors' and torch's own errors)
        raise ConfigError(f"{weights} cannot be read: {str(err).splitlines()[0]}") from None
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        detail = " ".join(str(err).split())[:300]
        raise ConfigError(f"{weights} does not fit the model that config.yaml builds ({detail})") from None
    if not dispatched(module):
        module = module.to(device)
    return module.eval()


def dataset_overridden(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A copy of the run's config with its data set as `overrides` say (`dataset=<name>` takes that
    data set's config, then `dataset.<key>=<value>` sets a key), checked as pazo-train checks it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as err:
        raise ConfigError(" ".join(str(err).split())) from None
    cfg = copy.deepcopy(cfg)
    for o in parsed:
        if o.key_or_group != "dataset" and not o.key_or_group.startswith("dataset."):
            raise ConfigError(f"pazo-eval takes data set overrides only (dataset=<name>, dataset.<key>=<value>), "
                              f"got {o.input_line}")
    for o in parsed:
        if o.key_or_group == "dataset":
            cfg.dataset = composed_dataset(str(o.value()), cfg)
    for o in parsed:
        renamed = o.key_or_group == "dataset.name" and renamed_option("dataset", str(o.value()), cfg.dataset.name)
        if renamed:
            raise ConfigError(renamed)
    for o in parsed:
        if o.key_or_group != "dataset":
            _set_key(cfg, o.key_or_group, o.value())
    check_config_values(cfg)
    problem = pairing_problem(cfg.dataset.name, cfg.model.name)
    if problem:
        raise ConfigError(problem)
    return cfg


def composed_dataset(name: str, cfg: DictConfig) -> DictConfig:
    """`dataset=<name>`'s config as pazo-train composes it beside the run's model (its
    interpolations, such as `${model.path}`, then read the run's own values)."""
    from hydra import compose, initialize_config_dir

    from pazo.run.cli import check_overrides

    problem = check_overrides([f"dataset={name}", f"model={cfg.model.name}"])
    if problem and problem.startswith(("unknown dataset", "unknown dataset=")):
        raise ConfigError(problem)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        composed = compose(config_name="config", overrides=[f"dataset={name}", f"model={cfg.model.name}"])
    return OmegaConf.create(OmegaConf.to_container(composed.dataset, resolve=False))


def _set_key(cfg: DictConfig, key: str, value) -> None:
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(cfg, parent)
    if not isinstance(node, DictConfig) or name not in node:
        raise ConfigError(unknown_key(key, list(node.keys()) if isinstance(node, DictConfig) else []))
    OmegaConf.update(cfg, key, value, merge=False)


def check_label_space(run: LoadedRun, name: str, num_classes: int | None, input_shape, label_words=None) -> None:
    """The evaluation data's classes, input shape and label words (those known: None is not known
    yet) must be the run's: a model scores the classes it was trained on, and an accuracy against
    other labels means nothing."""
    shape, classes = shape_facts(run.config, run.summary)
    facts = lambda c, s: f"{c} classes of {'x'.join(map(str, s))} inputs"  # noqa: E731
    if (num_classes is not None and num_classes != classes) or (input_shape is not None
                                                                 and tuple(input_shape) != tuple(shape)):
        raise ConfigError(f"dataset={name} has {facts(num_classes or '?', input_shape or ('?',))}; the run's model "
                          f"was trained on {facts(classes, shape)}: evaluate on data of its label space")
    ours = (run.summary.get("data") or {}).get("label_words")
    if ours and label_words and ours != label_words:
        raise ConfigError(f"dataset={name} has the label words {label_words}; the run's model scores {ours}")


def check_not_private(run: LoadedRun, data: DataBundle) -> None:
    """Refuse an evaluation split that holds any of the run's private training (or validation)
    examples, compared as stored (inputs and label); examples of the run's own test split stay
    allowed where the data set has duplicates across its splits."""
    own = build_dataset(run.config.dataset, RandomStreams(run.config.seed))
    private = (example_hashes(own.private) | example_hashes(own.val)) - example_hashes(own.test)
    found = len(example_hashes(data.test) & private)
    if found:
        raise ConfigError(f"{found} of the {len(data.test)} examples the overrides give as the test split are the "
                          "run's private training examples (overrides that re-split its data put them there): an "
                          "accuracy on them is computed from private data without noise and is not covered by the "
                          "run's epsilon; evaluate on data the run was not trained on")


def example_hashes(split) -> set[bytes]:
    """A digest of each stored example of `split` (its input's dtype, shape and bytes, and its label)."""
    inputs, labels = split.inputs, split.labels
    out = set()
    for i in range(len(labels)):
        x = inputs[i].contiguous().cpu()
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{x.dtype}{tuple(x.shape)}{int(labels[i])}".encode())
        h.update(x.numpy().tobytes())
        out.add(h.digest())
    return out
