"""A language-model run's trained model in the Hugging Face format (`LoadedRun.export_hf`, `pazo-eval
--export-hf`), so that `transformers` and `peft` load it as it is:

- a full fine-tuning run (`model=hf_causal_lm` / `hf_masked_lm`): the LM's `save_pretrained` output
  and its tokenizer; `AutoModelForCausalLM.from_pretrained(folder)` (or `AutoModelForMaskedLM`);
- a LoRA run (`model.lora.enabled=true`): a peft adapter (adapter_config.json,
  adapter_model.safetensors) and the tokenizer; `PeftModel.from_pretrained(base, folder)`, or peft's
  `AutoPeftModelForCausalLM.from_pretrained(folder)` (`AutoPeftModel` for a masked LM), with the
  base model the adapter config names: `model.path` where it holds pretrained weights, else (a
  base of random weights, `model.random_init` or a folder with a config only) the run's own base
  weights, written to `folder/base/`.

Only the trained model leaves (post-processing of the released `model.safetensors`), and it leaves
as the released model does: `transformers`, `peft` and `safetensors` write into a staging folder
inside `folder` (safetensors' own files are owner-only, 0600), and each file goes from there into
`folder` through the release gate (`pazo.run.gate.release_staged`: a released file's mode, 0644,
flushed, renamed in whole: a model's weights are written once)."""
from __future__ import annotations

import copy
import tempfile
from pathlib import Path

from pazo.errors import ConfigError
from pazo.models.hf_lm import has_weights, load_hf_lm
from pazo.run import gate

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def export_hf(run, folder: Path) -> Path:
    """`run`'s (a `pazo.run.loaded.LoadedRun`) language model into `folder` (new or empty)."""
    model_cfg, module = run.config.raw.model, run.model
    lm = getattr(module, "lm", None) or getattr(module, "mlm", None)
    if lm is None or not hasattr(lm, "save_pretrained"):
        raise ConfigError(f"{run.path} is a run of model={model_cfg.name}, not of a Hugging Face language model "
                          "(model=hf_causal_lm or hf_masked_lm): it has no Hugging Face format to export")
    _empty_folder(folder)
    lora = getattr(run.config.model, "lora", None)   # (the typed model section: a Hugging Face model's has one)
    with tempfile.TemporaryDirectory(prefix=".staging-", dir=folder) as staging:
        if lora is not None and lora.enabled:
            kind = "causal" if hasattr(module, "lm") else "masked"
            _write_adapter(lm, model_cfg, kind, module.tokenizer, Path(staging), folder)
        else:
            lm.save_pretrained(staging)
            _save_tokenizer(module.tokenizer, Path(staging))
        gate.release_staged(Path(staging), folder)
    return folder


def _empty_folder(folder: Path) -> None:
    """`folder` made (with its parents), or refused in one line if it holds anything or cannot be made."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{folder} exists and is not an empty folder: give a new folder to export into")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create {folder}: {err.strerror or err}") from None


def _save_tokenizer(tokenizer, folder: Path) -> None:
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def _write_adapter(lm, model_cfg, kind: str, tokenizer, staging: Path, folder: Path) -> None:
    """The LoRA adapter as `PeftModel.save_pretrained` writes it (its config naming the base, its
    weights under peft's key names), and the tokenizer, into `staging` (for `folder`)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    config = copy.deepcopy(lm.peft_config["default"])
    config.base_model_name_or_path = _base_reference(lm, model_cfg, kind, tokenizer, staging, folder)
    config.inference_mode = True
    _name_the_auto_class(config, lm, kind)
    config.save_pretrained(str(staging))
    state = {f"base_model.model.{name}": tensor.detach().cpu().contiguous()
             for name, tensor in get_peft_model_state_dict(lm).items()}
    save_file(state, str(staging / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    _save_tokenizer(tokenizer, staging)


def _name_the_auto_class(config, lm, kind: str) -> None:
    """What peft's `AutoPeftModel*.from_pretrained(folder)` needs to build the base by itself, as
    `PeftModel.save_pretrained` writes it: a causal LM's task type (`AutoPeftModelForCausalLM`); for
    a masked LM, which has no peft task type, the base's transformers class (`AutoPeftModel`)."""
    if kind == "causal":
        config.task_type = "CAUSAL_LM"
    else:
        config.task_type = None
        config.auto_mapping = {"base_model_class": type(lm).__name__, "parent_library": type(lm).__module__}


def _base_reference(lm, model_cfg, kind: str, tokenizer, staging: Path, folder: Path) -> str:
    """Where the adapter's base model is: `model.path` when it holds the pretrained weights the run
    started from (a local folder, absolute; or a Hub name), else the run's base weights written to
    `folder/base/` (random ones, which no other place holds; into `staging/base/` first)."""
    local = Path(str(model_cfg.path)).expanduser()
    if not model_cfg.random_init and (not local.exists() or has_weights(local)):
        return str(local.resolve()) if local.exists() else str(model_cfg.path)
    base = load_hf_lm(model_cfg.path, kind, dtype=model_cfg.dtype, random_init=True, attention=model_cfg.attention)
    state = {name.replace(".base_layer.", "."): tensor for name, tensor in lm.state_dict().items()
             if "lora_" not in name}
    base.load_state_dict(state)
    base.save_pretrained(str(staging / "base"))
    _save_tokenizer(tokenizer, staging / "base")
    return str((folder / "base").resolve())
