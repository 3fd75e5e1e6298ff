"""Prompt-based classification with a masked language model (setting 4 of the PAZO paper, after
LM-BFF / MeZO / DPZero): the logits of an example are the MLM scores of the label words at the
`<mask>` token of its template.

Only the label words' rows of the output projection are computed (3 instead of 50k columns);
the scores are the same numbers the full head gives at those columns. The mask position is
selected by a one-hot product rather than indexing, so the model stays vmap-friendly, and
attention runs in its eager form (the fused kernel has no vmap batching rule).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pazo.config_schema import dropout_rate, optional
from pazo.errors import ConfigError
from pazo.models.hf_lm import set_dropout
from pazo.pretrained import load_pretrained
from pazo.text.tokens import label_word_ids


class PromptMaskedLM(nn.Module):
    """RoBERTa-style masked LM -> class logits [B, num_labels] from input ids [B, L]."""

    def __init__(self, mlm: nn.Module, label_word_ids: list[int], pad_id: int, mask_id: int):
        super().__init__()
        head = getattr(mlm, "lm_head", None)
        if head is None or not all(hasattr(head, a) for a in ("dense", "layer_norm", "decoder")):
            raise ConfigError(f"{type(mlm).__name__} has no RoBERTa-style lm_head (dense, layer_norm, "
                              "decoder); the prompt model supports the RoBERTa family")
        self.mlm, self.pad_id, self.mask_id = mlm, pad_id, mask_id
        self.register_buffer("label_word_ids", torch.tensor(label_word_ids, dtype=torch.long), persistent=False)

    def additive_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """The [B, 1, 1, L] additive padding mask, built here: transformers accepts a ready 4-D mask
        as is, while building it from a 2-D one inspects its values (`mask.all()`), which vmap over
        examples cannot do."""
        dtype = self.mlm.get_input_embeddings().weight.dtype
        padding = (ids == self.pad_id).to(dtype)[:, None, None, :]
        return padding * torch.finfo(dtype).min

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.mlm.base_model(input_ids=ids, attention_mask=self.additive_mask(ids)).last_hidden_state
        at_mask = (ids == self.mask_id).to(hidden.dtype).unsqueeze(-1)        # one <mask> per row
        h = (hidden * at_mask).sum(dim=1)
        head = self.mlm.lm_head
        h = head.layer_norm(F.gelu(head.dense(h)))
        bias = head.decoder.bias[self.label_word_ids] if head.decoder.bias is not None else None
        return F.linear(h, head.decoder.weight[self.label_word_ids], bias)


@dataclass
class RobertaPromptSchema:
    name: str = "roberta_prompt"
    path: str = ""
    download: bool = False
    label_words: list[str] | None = None
    dropout: float | None = None

    def __post_init__(self):
        optional(dropout_rate, self.dropout, "model.dropout")


def build_prompt_mlm(path: str, label_words: list[str], download: bool = False,
                     dropout: float | None = None) -> PromptMaskedLM:
    tokenizer = load_pretrained(path, "tokenizer", download)
    mlm = load_pretrained(path, "model", download)
    if dropout is not None:  # the checkpoint's dropout unless set
        set_dropout(mlm, dropout, path)
    ids = label_word_ids(tokenizer, label_words)
    return PromptMaskedLM(mlm, ids, tokenizer.pad_token_id, tokenizer.mask_token_id)
