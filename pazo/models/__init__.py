"""Models by name, registered with their facts (`pazo.catalog.register_model`: schema, the kinds of
input they accept). Builders take the typed model config (its schema's dataclass, beside the
builder) and the data set's shape facts."""
from __future__ import annotations

from torch import nn

from pazo.errors import ConfigError
from pazo.models.functional import FunctionalModel, cross_entropy_per_example
from pazo.models.hf_lm import HfCausalLmSchema, HfLmSchema
from pazo.models.lstm import LSTMClassifier, LstmSchema
from pazo.models.nf_resnet import NFResNet18, NfResnetSchema
from pazo.models.prompt_mlm import RobertaPromptSchema, build_prompt_mlm
from pazo.models.small_cnn import SmallCNN, SmallCnnSchema
from pazo.models.vit import VitSchema, build_vit
from pazo.catalog import MODELS, register_model

_BATCHNORM = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


@register_model("small_cnn", schema=SmallCnnSchema, accepts="image")
def _small_cnn(cfg: SmallCnnSchema, input_shape, num_classes) -> nn.Module:
    return SmallCNN(in_channels=input_shape[0], num_classes=num_classes,
                    image_size=input_shape[-1], width=cfg.width, dropout=cfg.dropout)


@register_model("nf_resnet18", schema=NfResnetSchema, accepts="image")
def _nf_resnet18(cfg: NfResnetSchema, input_shape, num_classes) -> nn.Module:
    stem = cfg.stem if cfg.stem != "auto" else ("cifar" if input_shape[-1] <= 64 else "imagenet")
    return NFResNet18(num_classes, in_channels=input_shape[0], width=cfg.width, stem=stem,
                      alpha=cfg.alpha, beta=cfg.beta)


@register_model("lstm", schema=LstmSchema, accepts="tokens")
def _lstm(cfg: LstmSchema, input_shape, num_classes) -> nn.Module:
    return LSTMClassifier(cfg.vocab_size + 2, num_classes, embed=cfg.embed, hidden=cfg.hidden,
                          layers=cfg.layers, dropout=cfg.dropout)


@register_model("vit", schema=VitSchema, accepts="image")
def _vit(cfg: VitSchema, input_shape, num_classes) -> nn.Module:
    overrides = {k: getattr(cfg, k) for k in ("patch_size", "depth", "embed_dim", "num_heads")
                 if getattr(cfg, k) is not None}
    return build_vit(cfg.variant, num_classes, image_size=input_shape[-1], in_channels=input_shape[0],
                     pretrained=cfg.pretrained, checkpoint=cfg.checkpoint, attention=cfg.attention,
                     overrides=overrides)


@register_model("roberta_prompt", schema=RobertaPromptSchema, accepts="mlm_prompt")
def _roberta_prompt(cfg: RobertaPromptSchema, input_shape, num_classes) -> nn.Module:
    if not cfg.label_words or len(cfg.label_words) != num_classes:
        raise ConfigError(f"model roberta_prompt needs one label word per class ({num_classes}) from the "
                          f"data set config (dataset.label_words), got {cfg.label_words}; use dataset=mnli")
    return build_prompt_mlm(cfg.path, list(cfg.label_words), download=cfg.download, dropout=cfg.dropout)


@register_model("hf_causal_lm", schema=HfCausalLmSchema, accepts=("lm_prompt", "lm_generation"))
def _hf_causal_lm(cfg: HfCausalLmSchema, input_shape, num_classes) -> nn.Module:
    from pazo.models.hf_lm import build_hf_lm_task

    return build_hf_lm_task(cfg, "causal")


@register_model("hf_masked_lm", schema=HfLmSchema, accepts="lm_prompt")
def _hf_masked_lm(cfg: HfLmSchema, input_shape, num_classes) -> nn.Module:
    from pazo.models.hf_lm import build_hf_lm_task

    return build_hf_lm_task(cfg, "masked")


def check_no_batchnorm(module: nn.Module, model_name: str) -> None:
    """BatchNorm mixes examples of a batch, so per-example clipping no longer bounds one example's
    influence, and its running statistics leak private data: refuse it under a private method."""
    bad = [n for n, m in module.named_modules() if isinstance(m, _BATCHNORM)]
    if bad:
        raise ConfigError(f"model {model_name!r} has BatchNorm layers ({', '.join(bad[:3])}), which break "
                         "differential privacy; use GroupNorm/LayerNorm or a normaliser-free model")


def dispatched(module: nn.Module) -> bool:
    """Whether accelerate has placed the module (or a submodule) over devices (`model.device_map`)."""
    return any(getattr(m, "hf_device_map", None) for m in module.modules())


def place(module: nn.Module, device) -> nn.Module:
    """The module on the run's device, unless accelerate has already spread it over devices
    (`model.device_map`)."""
    if dispatched(module):
        return module
    return module.to(device)


def build_model(cfg, input_shape, num_classes) -> nn.Module:
    """The model `cfg` (the run's typed `model` section: an instance of the model's registered
    schema) describes, for inputs of `input_shape` and `num_classes` classes."""
    return MODELS.get(cfg.name)(cfg, input_shape, num_classes)


def functional_model(module: nn.Module, device, *, private: bool, name: str, loss_fn=None):
    """`module` placed on `device` (unless accelerate spread it over devices), refused under a
    private method if it has BatchNorm, and seen as a function of its parameters with its
    per-example loss (`loss_fn`, else the module's own `loss_fn`, else cross-entropy); returns
    (module, functional model, input device). A run's model and a library user's
    (`pazo.private`) go through here."""
    module = place(module, device)
    if private:
        check_no_batchnorm(module, name)
    loss_fn = loss_fn or getattr(module, "loss_fn", cross_entropy_per_example)
    model = FunctionalModel(module, loss_fn=loss_fn)
    if dispatched(module):  # model.device_map: batches go to the first module's device, as accelerate expects
        if any(d.type == "meta" for d in model.devices):
            raise ConfigError("model.device_map offloads parameters to the CPU or disk (accelerate keeps them on "
                              "the meta device between uses): the zeroth-order step perturbs the parameters in "
                              "place and cannot reach offloaded ones; give a device map within the GPUs' memory")
        device = model.input_device
    return module, model, device


__all__ = ["MODELS", "FunctionalModel", "build_model", "check_no_batchnorm", "dispatched", "functional_model", "place",
           "register_model"]
