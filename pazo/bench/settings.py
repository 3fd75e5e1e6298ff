"""The benchmarks' settings and what runs on them: synthetic inputs of each paper setting's shapes
(no data set needed) or a registered data set's own examples, its model with random weights, a
method built from its real config (configs/method/*.yaml), and the bare passes of a zeroth-order
step (its floor). Shared by `pazo.bench.methods`, `engines`, `profile_step` and `step_ops`."""
from __future__ import annotations

import sys

import numpy as np
import torch
from hydra import compose, initialize_config_dir

from pazo import CONFIG_DIR
from pazo.data.base import DataBundle, TensorSplit
from pazo.errors import ConfigError
from pazo.run.build import build_run, resolve_device
from pazo.methods import method_info
from pazo.methods.base import public_grads_batched
from pazo.models import build_model
from pazo.run.results import BENCHMARK_PAPER_SETTING
from pazo.run.typed import run_config

class Settings(dict):
    """Setting name -> (input shape, classes, config overrides, expected batch size): the paper's
    settings (synthetic inputs of their shapes) and, once `add_dataset_setting` read them, registered
    data sets (a plugin's too) under their own names."""

    def known(self, name: str) -> bool:
        """A paper setting or a registered data set."""
        from pazo.data import DATASETS

        return name in self or name in DATASETS


SETTINGS = Settings({  # input shape, classes, config overrides, expected batch size
    "digits": ((1, 8, 8), 10, ["model=small_cnn"], 64),
    "cifar_shape": ((3, 32, 32), 10, ["model=small_cnn", "model.width=32"], 256),
    # the paper's CIFAR-10 setting (experiment=cifar10: NF-ResNet18, per-method defaults), at the
    # native 32 px and at the authors' 224 px
    "cifar10_nf32": ((3, 32, 32), 10, ["experiment=cifar10"], 64),
    "cifar10_nf224": ((3, 224, 224), 10, ["experiment=cifar10"], 64),
    # the paper's Tiny-ImageNet setting (experiment=tiny_imagenet: timm vit_tiny_patch16_224, 200 classes)
    "tiny_imagenet_vit": ((3, 224, 224), 200, ["experiment=tiny_imagenet"], 64),
    # the paper's IMDB setting (experiment=imdb: 2-layer LSTM over 290 tokens, 10k vocabulary)
    "imdb_lstm": ((290,), 2, ["experiment=imdb"], 64),
    # the paper's MNLI setting: RoBERTa-base prompt model (random weights of roberta-base's shape,
    # so no download), prompts of 128 tokens with one <mask>
    "mnli_roberta": ((128,), 3, ["experiment=mnli"], 64),
})
#: a data set setting's examples, read once per process
_EXAMPLES: dict[str, DataBundle] = {}


def add_dataset_setting(name: str, overrides=()) -> None:
    """Registered data set `name` as a setting of its own name: its examples at its defaults (seed
    0), read once per process, with the model and the data set's settings the overrides name
    (`model=...`, `dataset.root=...`; else the config's);
    a paper setting keeps its own meaning. A data set whose files are missing is its loader's error."""
    if name in SETTINGS:
        return
    from pazo.data import build_dataset
    from pazo.rng import RandomStreams

    own = [o for o in overrides if o.split("=", 1)[0] in ("model", "model.name") or o.startswith("dataset.")]
    _EXAMPLES[name] = build_dataset(run_config(compose_cfg([f"dataset={name}", *own])).dataset, RandomStreams(0))
    data = _EXAMPLES[name]
    SETTINGS[name] = (tuple(data.input_shape), data.num_classes, [f"dataset={name}", *own], 64)
TEXT_VOCAB = {"imdb_lstm": 10002, "mnli_roberta": 50265}
MASK_ID = 50264  # roberta-base's <mask>
# which column of the paper's Table 5 a setting corresponds to (pazo.run.results)
PAPER_SETTING = BENCHMARK_PAPER_SETTING
ENGINE_NAMES = ("vectorised", "inplace")


def step_passes(name: str, config) -> tuple[int, int]:
    """A zeroth-order method's private forwards and public passes per step, from its registration
    (`MethodInfo.forwards`, `public_passes`): the passes its floor is made of."""
    info = method_info(name)
    return info.forwards(config), info.public_passes(config)


def set_batch_size(b: int) -> None:
    """Every setting's expected batch size (the last field of SETTINGS) set to b, in this process."""
    for name, (shape, classes, overrides, _) in SETTINGS.items():
        SETTINGS[name] = (shape, classes, overrides, b)


def synthetic_inputs(setting, n, device="cpu"):
    """Random inputs of a setting's shapes: images in [0, 1), or token ids for text settings."""
    shape, classes, _, _ = SETTINGS[setting]
    if setting in _EXAMPLES:   # a data set setting: its own examples, drawn with replacement
        private = _EXAMPLES[setting].private
        idx = torch.randint(0, len(private), (n,), generator=torch.Generator().manual_seed(n))
        return private.batch(idx.numpy(), device)
    if setting in TEXT_VOCAB:
        x = torch.randint(5, TEXT_VOCAB[setting], (n, *shape), device=device)
        if setting == "mnli_roberta":
            x[:, 0], x[:, shape[0] // 2], x[:, -1] = 0, MASK_ID, 2  # <s> ... <mask> ... </s>
    else:
        x = torch.rand(n, *shape, device=device)
    return x, torch.randint(0, classes, (n,), device=device)


def compose_cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def check_overrides_for(methods, settings, extra) -> None:
    """Refuse, before any job starts, an `--override` that a (method, setting) pair's config has no
    key for or whose value is of the wrong type or out of range: one ConfigError naming the
    override and the method (each job would otherwise fail alone, or silently run without it)."""
    if not extra:
        return
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pazo.run.cli import explain_unknown_key
    from pazo.config_schema import check_config_values
    from pazo.methods import method_config

    for setting in settings:
        for name in methods:
            try:
                cfg = compose_cfg([f"method={name}", *SETTINGS[setting][2], *extra])
                check_config_values(cfg)
                method_config(cfg.method)
            except ConfigError as err:
                raise ConfigError(f"--override {' '.join(extra)}: {err} (method {name}, setting {setting})") from None
            except (HydraException, OmegaConfBaseException) as err:
                unknown = explain_unknown_key(err, [f"method={name}", *SETTINGS[setting][2], *extra], compose_cfg)
                if unknown:
                    raise ConfigError(f"--override {' '.join(extra)}: {unknown} (method {name}, setting {setting})"
                                      ) from None
                line = " ".join(str(err).split("\n")[0].split())
                cause = f"; {str(err.__cause__).splitlines()[0]}" if err.__cause__ else ""
                raise ConfigError(f"--override {' '.join(extra)}: {line}{cause} (method {name}, setting {setting}; "
                                  "give --methods of those that have the key)") from None


def device_or_exit(name: str) -> torch.device:
    """A benchmark's `--device` (`pazo.run.build.resolve_device`), checked in this process before
    anything is measured or a measuring child starts: a device this machine lacks is one line,
    `pazo: error: ...`, and exit 2 (not CUDA's traceback in each child)."""
    try:
        return resolve_device(name, option="--device ")
    except ConfigError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def make_module(model_cfg, setting):
    """The setting's model from its typed `model` section (random weights, seed 0)."""
    shape, classes, _, _ = SETTINGS[setting]
    torch.manual_seed(0)
    if setting == "mnli_roberta":
        from transformers import RobertaConfig, RobertaForMaskedLM

        from pazo.models.prompt_mlm import PromptMaskedLM

        mlm = RobertaForMaskedLM(RobertaConfig(vocab_size=50265, max_position_embeddings=514, pad_token_id=1,
                                               bos_token_id=0, eos_token_id=2, type_vocab_size=1,
                                               attn_implementation="eager"))
        # 3 label-word rows; the ids do not matter for timing
        return PromptMaskedLM(mlm, [100, 200, 300], pad_id=1, mask_id=MASK_ID)
    return build_model(model_cfg, shape, classes)


def bare_model(setting, device):
    """The setting's model as a run assembles it (placed, with its own loss), for the floor's passes."""
    return build_benchmark_method("dpzero", setting, device)[2]


def synthetic_data(setting, b) -> DataBundle:
    """A data set of the setting's shapes for a benchmark run: b private examples (the benchmark
    feeds its own batch; q = 1 is never accounted: sigma is fixed), 512 public ones, no test set."""
    shape, classes, _, _ = SETTINGS[setting]
    private, public = TensorSplit(*synthetic_inputs(setting, b)), TensorSplit(*synthetic_inputs(setting, 512))
    return DataBundle(name=f"synthetic_{setting}", private=private, public=public, test=private.subset(np.arange(0)),
                      num_classes=classes, input_shape=shape)


def build_benchmark_method(name, setting, device, engine=None, extra=()):
    """Method `name` from its real config on the setting's model (random weights, seed 0), with
    sigma = 1 (if private), 512 synthetic public examples and the given engine (in-place for
    first-order methods, which do not use it), in train mode: (method, its config, the model).
    Assembled as a training run is (`pazo.run.build.build_run`), on synthetic data."""
    _, _, model_overrides, b = SETTINGS[setting]
    cfg = compose_cfg([f"method={name}", *model_overrides, *extra, f"engine.name={engine or 'inplace'}",
                       f"device={torch.device(device)}", f"train.batch_size={b}", "train.steps=1000", "seed=0",
                       "warm_start.epochs=0"])
    torch.manual_seed(0)
    typed = run_config(cfg)
    r = build_run(typed, data=synthetic_data(setting, b), module=make_module(typed.model, setting), sigma=1.0,
                  time_engines=False)
    r.module.train()
    return r.method, r.cfg.method, r.model


def public_passes(setting, device, public_batch_size, batches, model, together=None):
    """The public passes of one step, as the methods take them: the mean loss's gradient of one
    batch of b' public examples (PAZO-M), or of `batches` batches (PAZO-P/S:
    `FunctionalModel.mean_loss_grads`), in one vmapped pass or one after another as `together`
    says (the method's choice: `public_grads_batched`; None, the model's preference)."""
    data = [synthetic_inputs(setting, public_batch_size, device) for _ in range(batches)]
    if batches == 1:
        return lambda: model.mean_loss_grad(*data[0])
    return lambda: model.mean_loss_grads(data, batched=together)


def bare_passes(setting, device, name, config, model, x, y):
    """The bare passes of one step of zeroth-order method `name` (its floor), back to back: its
    private no-grad forwards of (x, y), switching to eval mode and back only where the engines do
    too (`train_mode_matters`) and as they do, then its public passes (`public_passes`)."""
    n_fwd, n_pub = step_passes(name, config)
    public_pass = public_passes(setting, device, config.public_batch_size, n_pub, model,
                                public_grads_batched(config, model)) if n_pub else None

    def passes():
        if model.train_mode_matters:
            model.set_training(False)
        with torch.no_grad():
            for _ in range(n_fwd):
                model.current_losses(x, y)
        if model.train_mode_matters:
            model.set_training(True)
        if public_pass is not None:
            public_pass()
    return passes
