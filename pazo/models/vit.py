"""Vision Transformers from timm (setting 2 of the PAZO paper, Tiny-ImageNet).

The authors' code builds `vit_tiny_patch16_224` (5.7M parameters) while the paper's text says
"ViT-small (10M)"; both variants (and any other timm ViT) are selectable by name. Initial weights:
random (the paper's text), timm's pretrained weights (downloaded when online), or a local
checkpoint (e.g. a Places365-pretrained ViT, as the paper's Table 2 caption describes; the
authors did not publish theirs). A checkpoint's classifier head is dropped when its class count
differs, and its position embedding is resampled to the image size.

Attention runs as explicit matmul + softmax by default: under torch.func.vmap (parameter sets of
the zeroth-order queries, per-example gradients of DP-SGD) the fused kernel has no batching rule
and falls back to a Python loop over the vmapped dimension.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from pazo.config_schema import optional
from pazo.errors import ConfigError, DataMissingError, at_least_one, one_of


def _read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            return state[key]
    return state


def load_vit_checkpoint(model: nn.Module, path: str | Path) -> dict:
    """Load a timm-format ViT state dict into `model`; the head is re-initialised when it does
    not fit. Anything else that does not fit is an error, never a silent partial load."""
    from timm.models.vision_transformer import checkpoint_filter_fn

    path = Path(str(path)).expanduser()
    if not path.is_file():
        raise DataMissingError(f"ViT checkpoint {path} does not exist; set model.checkpoint to a timm-format "
                               "state dict (.pt/.pth/.safetensors), or null for a random initialisation")
    state = checkpoint_filter_fn(_read_state_dict(path), model)
    own = model.state_dict()
    dropped = [k for k in list(state) if k.startswith("head.") and k in own and state[k].shape != own[k].shape]
    for k in dropped:
        del state[k]
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if k not in dropped]
    if missing or result.unexpected_keys:
        raise ConfigError(f"checkpoint {path} does not fit model {type(model).__name__}: missing "
                          f"{missing[:5]}, unexpected {result.unexpected_keys[:5]}")
    return {"checkpoint": str(path), "head_reinitialised": bool(dropped)}


@dataclass
class VitSchema:
    name: str = "vit"
    variant: str = "vit_tiny_patch16_224"
    pretrained: bool = False
    checkpoint: str | None = None
    attention: str = "eager"
    patch_size: int | None = None
    depth: int | None = None
    embed_dim: int | None = None
    num_heads: int | None = None

    def __post_init__(self):
        one_of(self.attention, ("eager", "fused"), "model.attention")
        for key in ("patch_size", "depth", "embed_dim", "num_heads"):
            optional(at_least_one, getattr(self, key), f"model.{key}")


def build_vit(variant: str, num_classes: int, image_size: int, in_channels: int = 3, *,
              pretrained: bool = False, checkpoint: str | None = None, attention: str = "eager",
              overrides: dict | None = None) -> nn.Module:
    import timm

    if attention not in ("eager", "fused"):
        raise ConfigError(f"model.attention must be eager or fused, got {attention!r}")
    if not variant.startswith("vit_") or variant not in timm.list_models("vit_*"):
        raise ConfigError(f"unknown ViT variant {variant!r}; e.g. vit_tiny_patch16_224, vit_small_patch16_224")
    try:
        model = timm.create_model(variant, pretrained=pretrained, num_classes=num_classes,
                                  img_size=image_size, in_chans=in_channels, **(overrides or {}))
    except (OSError, RuntimeError) as err:
        if not pretrained:
            raise
        raise DataMissingError(f"timm could not fetch the pretrained weights of {variant} ({err}); "
                               "run once online (they land in the Hugging Face cache), or set "
                               "model.pretrained=false and model.checkpoint=<local file>") from None
    if checkpoint:
        model.pazo_init = load_vit_checkpoint(model, checkpoint)
    if attention == "eager":
        for module in model.modules():
            if hasattr(module, "fused_attn"):
                module.fused_attn = False
    return model
