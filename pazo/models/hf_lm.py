"""Hugging Face language models for the DPZero / DP-ZO settings: any causal LM (OPT, the LLaMA
family, GPT-2, Mistral; `model=hf_causal_lm`) or masked LM (RoBERTa; `model=hf_masked_lm`), in
float32, float16 or bfloat16, optionally with LoRA adapters (peft) so that only the adapters are
trained and perturbed.

Two tasks, picked by the data set:

* classification (SST-2 and the GLUE-style tasks): the logits of an example are the LM's scores of
  the label words - at the position after the prompt's last token (causal; MeZO's "<text> It was"
  + " great"/" terrible") or at the `<mask>` token (masked; LM-BFF). Only the label words' rows of
  the output projection are computed; they are the numbers the full head gives at those columns.
* generation (SQuAD): inputs are [B, 2, L] (token ids, answer mask); the per-example loss is the
  mean negative log-likelihood of the answer tokens (teacher forcing), and evaluation decodes
  greedily (`generate_texts`).

Causal inputs are right-padded and run without an attention mask: under causal attention a token
never sees the padding after it, and positions count from 0 as without padding, so every real
token's output is what the unpadded sequence gives (a test checks it). This keeps the forward free
of data-dependent mask logic, so it runs under `vmap` (the vectorised engine, per-example
gradients). Logits are cast to float32 before any loss.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pazo.config_schema import dropout_rate, optional
from pazo.errors import ConfigError, at_least_one, one_of, positive, unknown_choice
from pazo.models.dropout import is_dropout_rate
from pazo.pretrained import local_path, on_disk, pretrained_source, reading_pretrained
from pazo.text.prompts import resolve_label_words, task_spec
from pazo.text import tokens
from pazo.text.tokens import pad_token_id

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.msgpack", "*.h5")


def resolve_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ConfigError(unknown_choice("model.dtype", name, DTYPES))
    return DTYPES[name]


def has_weights(folder: Path) -> bool:
    return any(any(folder.glob(pattern)) for pattern in WEIGHT_FILES)


def load_hf_lm(path: str, kind: str, *, dtype: str = "float32", random_init: bool = False,
               download: bool = False, attention: str = "sdpa", device_map=None) -> nn.Module:
    """`AutoModelForCausalLM` (`kind="causal"`) or `AutoModelForMaskedLM` (`"masked"`) from a local
    folder or the Hub cache. Random weights built from the config when `random_init` is set or
    when `path` is a folder with a config.json and no weights (tiny test models, memory benchmarks
    of large shapes). A path transformers cannot read is one line (`reading_pretrained`, the data
    side's tokenizer's policy too)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    auto = AutoModelForCausalLM if kind == "causal" else AutoModelForMaskedLM
    torch_dtype = resolve_dtype(dtype)
    if attention not in ("eager", "sdpa"):
        raise ConfigError(unknown_choice("model.attention", attention, ("eager", "sdpa")))
    local, source = local_path(path), pretrained_source(path)
    config_only = on_disk(local) and local.is_dir() and (local / "config.json").exists() and not has_weights(local)
    with reading_pretrained(path, what="model", key="model.path", download_key="model.download",
                            download=download, model_class=auto.__name__):
        if not (random_init or config_only):
            return auto.from_pretrained(source, local_files_only=not download, attn_implementation=attention,
                                        dtype=torch_dtype, device_map=device_map,
                                        adapter_kwargs={"local_files_only": not download})
        config = AutoConfig.from_pretrained(source, local_files_only=not download)
        model = auto.from_config(config, attn_implementation=attention, dtype=torch_dtype)
    return model if device_map is None else dispatch(model, device_map)


def set_dropout(model: nn.Module, p: float, path: str) -> None:
    """`model.dropout=p` on a pretrained model: every `nn.Dropout` module and every float dropout
    rate its layers keep for `nn.functional.dropout` (OPT, Llama). Setting the modules alone left
    models whose dropout is functional unchanged, silently; a model with nowhere to put a nonzero
    rate is refused."""
    places = 0
    for module in model.modules():
        if isinstance(module, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)):
            module.p, places = p, places + 1
        for name, value in list(vars(module).items()):
            if isinstance(value, float) and is_dropout_rate(name):
                setattr(module, name, p)
                places += 1
    if places == 0 and p > 0:
        raise ConfigError(f"model.dropout={p} has nothing to set: the model at {path} has no dropout (no "
                          "dropout module and no dropout rate in its layers); leave model.dropout unset")


def dispatch(model: nn.Module, device_map) -> nn.Module:
    """Place a model built in memory over devices with accelerate (`auto`: the node's GPUs, then
    CPU), as `from_pretrained(device_map=...)` does for a loaded one."""
    from accelerate import dispatch_model, infer_auto_device_map

    if device_map == "auto":
        no_split = getattr(model, "_no_split_modules", None) or []
        device_map = infer_auto_device_map(model, no_split_module_classes=no_split)
    return dispatch_model(model, device_map=dict(device_map))


def add_lora(model: nn.Module, rank: int, alpha: float, dropout: float = 0.0, target_modules=None,
             adapter_dtype: torch.dtype | None = torch.float32) -> nn.Module:
    """LoRA adapters injected into `model` in place (peft); every other parameter is frozen, so
    the trainable set - what the methods perturb, clip and update - is the adapters alone. B starts
    at zero: the adapted model starts equal to the base model. Adapters are kept in float32 by
    default, as peft does for half-precision base models."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(r=int(rank), lora_alpha=alpha, lora_dropout=dropout, bias="none",
                        target_modules=list(target_modules) if target_modules else None)
    if config.target_modules is None:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

        model_type = getattr(model.config, "model_type", None)
        if model_type not in DEFAULTS:
            raise ConfigError(f"no default LoRA target modules for model type {model_type!r}; set "
                              "model.lora.target_modules (e.g. [q_proj, v_proj])")
        config.target_modules = set(DEFAULTS[model_type])
    try:
        model = inject_adapter_in_model(config, model)
    except ValueError as err:
        raise ConfigError(f"model.lora: {str(err).splitlines()[0]}") from None
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
        if "lora_" in name and adapter_dtype is not None:
            p.data = p.data.to(adapter_dtype)
    return model


def label_word_columns(head: nn.Module, h: torch.Tensor, word_ids: torch.Tensor, device) -> torch.Tensor:
    """[B, C] float32 label-word columns of the output layer's [B, V] logits for hidden states h
    [B, H] (one position per example). The layer is called as a module, so that its weights are
    read by its own forward (as the half-precision engine's on-the-fly queries and accelerate's
    device hooks expect); the [B, V] product is a small part of a forward over whole prompts."""
    logits = head(h)
    return logits[:, word_ids.to(logits.device)].float().to(device)


class CausalLMTask(nn.Module):
    """A causal LM seen as a classifier over label words, or as a generator of answers."""

    def __init__(self, lm: nn.Module, tokenizer, task: str, label_words: list[str] | None = None,
                 stop: str = "\n", max_new_tokens: int = 50, *, pad_id: int | None = None,
                 label_word_ids: list[int] | None = None):
        """`pad_id` and `label_word_ids` given, no tokenizer is needed to train (memory benchmarks
        of random-weight models); generation still decodes with it."""
        super().__init__()
        if task not in ("classification", "generation"):
            raise ConfigError(unknown_choice("model.task", task, ("classification", "generation")))
        self.lm, self.task, self.tokenizer = lm, task, tokenizer
        self.pad_id = pad_token_id(tokenizer) if pad_id is None else int(pad_id)
        self.max_new_tokens = int(max_new_tokens)
        stop_ids = tokenizer.encode(stop, add_special_tokens=False) if stop and tokenizer is not None else []
        self.stop_id = stop_ids[-1] if stop_ids else getattr(tokenizer, "eos_token_id", None)
        if task == "classification":
            if label_word_ids is not None:
                ids = list(label_word_ids)
            elif not label_words:
                raise ConfigError("a classification task needs label words (dataset.label_words)")
            else:
                ids = tokens.label_word_ids(tokenizer, list(label_words))
            self.register_buffer("label_word_ids", torch.tensor(ids, dtype=torch.long), persistent=False)

    @property
    def input_device(self) -> torch.device:
        """The device of the input embeddings: where token ids go (the first module of a model
        spread over devices by `model.device_map`)."""
        return self.lm.get_input_embeddings().weight.device

    def hidden(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm.base_model(input_ids=ids).last_hidden_state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.task == "classification":
            return self.label_word_logits(x)
        return self.answer_nll(x)

    def label_word_logits(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, C] scores of the label words as the next token after each (right-padded) prompt."""
        h = self.hidden(ids)                  # on the last layer's device (model.device_map)
        last = (ids != self.pad_id).sum(dim=1).to(h.device) - 1                          # [B]
        at_last = (torch.arange(ids.shape[1], device=h.device) == last[:, None]).to(h.dtype)
        h = (h * at_last.unsqueeze(-1)).sum(dim=1)                                       # [B, H]
        return label_word_columns(self.lm.get_output_embeddings(), h, self.label_word_ids, ids.device)

    def answer_nll(self, x: torch.Tensor) -> torch.Tensor:
        """[B] mean negative log-likelihood (float32) of the answer tokens (mask x[:, 1])."""
        ids, mask = x[:, 0], x[:, 1].float()
        logits = self.lm.get_output_embeddings()(self.hidden(ids)).float()            # [B, L, V]
        ids, mask = ids.to(logits.device), mask.to(logits.device)       # the head's device (model.device_map)
        nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")  # [B, L-1]
        target = mask[:, 1:]
        return ((nll * target).sum(dim=1) / target.sum(dim=1).clamp(min=1.0)).to(x.device)

    @staticmethod
    def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-example losses: cross-entropy of the label-word logits, or the answer NLL as is."""
        if outputs.dim() == 1:
            return outputs
        return F.cross_entropy(outputs, targets, reduction="none")

    @torch.no_grad()
    def generate_texts(self, prompts: list[list[int]]) -> list[str]:
        """Greedy continuations of token-id prompts, cut at the stop token (MeZO: newline),
        decoded and stripped."""
        device = self.input_device
        longest = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), longest), self.pad_id, dtype=torch.long, device=device)
        attention = torch.zeros_like(ids)
        for i, p in enumerate(prompts):                        # left padding for generation
            ids[i, longest - len(p):] = torch.tensor(p, device=device)
            attention[i, longest - len(p):] = 1
        out = self.lm.generate(input_ids=ids, attention_mask=attention, max_new_tokens=self.max_new_tokens,
                               do_sample=False, num_beams=1, eos_token_id=self.stop_id, pad_token_id=self.pad_id)
        texts = []
        for row in out[:, longest:].tolist():
            if self.stop_id in row:
                row = row[:row.index(self.stop_id)]
            texts.append(self.tokenizer.decode([t for t in row if t != self.pad_id], skip_special_tokens=True).strip())
        return texts

    @torch.no_grad()
    def evaluate_generation(self, split, batch_size: int) -> dict[str, float]:
        """F1 and exact match of greedy answers (SQuAD normalisation) and the mean answer NLL."""
        from pazo.text.squad_metric import exact_match, f1_score

        device = self.input_device
        preds, nll = [], 0.0
        for start in range(0, len(split), batch_size):
            idx = torch.arange(start, min(start + batch_size, len(split)))
            x, _ = split.batch(idx, device)
            nll += float(self.answer_nll(x).sum())
            preds += self.generate_texts([split.prompt_ids(int(i)) for i in idx])
        golds = [split.answers[i] for i in range(len(split))]
        n = max(len(split), 1)
        f1 = sum(f1_score(p, g) for p, g in zip(preds, golds)) / n
        em = sum(exact_match(p, g) for p, g in zip(preds, golds)) / n
        return {"accuracy": f1, "f1": f1, "exact_match": em, "loss": nll / n}


class MaskedLMTask(nn.Module):
    """A masked LM as a classifier: the label words' scores at the `<mask>` token (LM-BFF). The
    RoBERTa family's head (dense, gelu, layer norm, decoder) is applied to the mask position
    only; other heads run in full and the label-word columns are taken."""

    def __init__(self, mlm: nn.Module, tokenizer, label_words: list[str]):
        super().__init__()
        self.mlm, self.tokenizer = mlm, tokenizer
        self.pad_id, self.mask_id = tokenizer.pad_token_id, tokenizer.mask_token_id
        if self.mask_id is None:
            raise ConfigError("the tokenizer has no mask token: model=hf_masked_lm needs a masked LM's tokenizer")
        ids = tokens.label_word_ids(tokenizer, list(label_words))
        self.register_buffer("label_word_ids", torch.tensor(ids, dtype=torch.long), persistent=False)
        head = getattr(mlm, "lm_head", None)
        self.roberta_head = head is not None and all(hasattr(head, a) for a in ("dense", "layer_norm", "decoder"))

    @property
    def input_device(self) -> torch.device:
        """The device of the input embeddings (see `CausalLMTask.input_device`)."""
        return self.mlm.get_input_embeddings().weight.device

    def additive_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """The [B, 1, 1, L] additive padding mask, built here (vmap cannot run transformers' own
        construction, which inspects the mask's values)."""
        dtype = self.mlm.get_input_embeddings().weight.dtype
        return (ids == self.pad_id).to(dtype)[:, None, None, :] * torch.finfo(dtype).min

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        at_mask = (ids == self.mask_id)
        if not self.roberta_head:
            logits = self.mlm(input_ids=ids, attention_mask=self.additive_mask(ids)).logits
            picked = (logits * at_mask.to(device=logits.device, dtype=logits.dtype).unsqueeze(-1)).sum(dim=1)
            return picked[:, self.label_word_ids.to(logits.device)].float().to(ids.device)
        hidden = self.mlm.base_model(input_ids=ids, attention_mask=self.additive_mask(ids)).last_hidden_state
        h = (hidden * at_mask.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(-1)).sum(dim=1)
        head = self.mlm.lm_head
        h = h.to(head.dense.weight.device)                   # the head's device (model.device_map)
        h = head.layer_norm(F.gelu(head.dense(h)))
        return label_word_columns(head.decoder, h, self.label_word_ids, ids.device)


@dataclass
class LoraSchema:
    enabled: bool = False
    rank: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: list[str] | None = None

    def __post_init__(self):
        at_least_one(self.rank, "model.lora.rank")
        positive(self.alpha, "model.lora.alpha")
        dropout_rate(self.dropout, "model.lora.dropout")


@dataclass
class HfLmSchema:
    name: str = ""
    path: str = ""
    download: bool = False
    random_init: bool = False
    dtype: str = "float32"
    attention: str = "sdpa"
    device_map: Any = None
    dropout: float | None = None
    lora: LoraSchema = field(default_factory=LoraSchema)
    task: str | None = None
    label_words: list[str] | None = None

    def __post_init__(self):
        one_of(self.dtype, ("float32", "float16", "bfloat16"), "model.dtype")
        one_of(self.attention, ("sdpa", "eager"), "model.attention")
        optional(dropout_rate, self.dropout, "model.dropout")


@dataclass
class HfCausalLmSchema(HfLmSchema):
    stop: str = "\n"
    max_new_tokens: int = 50

    def __post_init__(self):
        super().__post_init__()
        at_least_one(self.max_new_tokens, "model.max_new_tokens")


def build_hf_lm_task(cfg: HfLmSchema, kind: str) -> nn.Module:
    """The model of `model=hf_causal_lm` / `model=hf_masked_lm` from its typed config."""
    from pazo.pretrained import load_pretrained

    auto = "AutoModelForCausalLM" if kind == "causal" else "AutoModelForMaskedLM"
    tokenizer = load_pretrained(cfg.path, "tokenizer", cfg.download, model_class=auto)
    lm = load_hf_lm(cfg.path, kind, dtype=cfg.dtype, random_init=cfg.random_init, download=cfg.download,
                    attention=cfg.attention, device_map=cfg.device_map)
    if cfg.dropout is not None:
        set_dropout(lm, cfg.dropout, cfg.path)
    lora = cfg.lora
    if lora.enabled:
        lm = add_lora(lm, lora.rank, lora.alpha, lora.dropout, lora.target_modules)
    else:
        lm.requires_grad_(True)
    words, generation = _task_words(cfg, kind)
    if kind == "causal":
        return CausalLMTask(lm, tokenizer, "generation" if generation else "classification", words,
                            stop=cfg.stop, max_new_tokens=cfg.max_new_tokens)
    if generation:
        raise ConfigError(f"model=hf_masked_lm scores label words (classification); task {cfg.task!r} is "
                          "answered by generation: use model=hf_causal_lm")
    if not words:
        raise ConfigError("model=hf_masked_lm needs label words: a prompted task (dataset=sst2, glue_prompt) "
                          "or model.label_words")
    return MaskedLMTask(lm, tokenizer, words)


def _task_words(cfg: HfLmSchema, kind: str) -> tuple[list[str] | None, bool]:
    """(label words, whether the task is generation) of the data set's prompted task
    (`model.task`, from `dataset.task`), or the config's own label words without one."""
    override = cfg.label_words
    if cfg.task is None:
        return override, False
    spec = task_spec(cfg.task)
    if spec.generation:
        return None, True
    return resolve_label_words(spec.name, kind, override), False
