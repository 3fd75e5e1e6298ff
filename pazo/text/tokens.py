"""Token ids every tokenizer user needs alike."""
from __future__ import annotations

from pazo.errors import ConfigError


def pad_token_id(tokenizer) -> int:
    """The pad id, or the end-of-sequence id for tokenizers without one (GPT-2, LLaMA)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ConfigError("the tokenizer has neither a pad nor an end-of-sequence token")
    return int(pad)


def label_word_ids(tokenizer, label_words: list[str]) -> list[int]:
    """One token id per label word, distinct; words keep their leading space (" great", " Yes"), as
    in LM-BFF/MeZO. The prompted causal and masked LMs (`pazo.models.hf_lm`) and the prompt MLM
    (`pazo.models.prompt_mlm`) read their label words' columns through it."""
    ids = []
    for word in label_words:
        toks = tokenizer.encode(word, add_special_tokens=False)
        if len(toks) != 1:
            raise ConfigError(f"label word {word!r} is {len(toks)} tokens for this tokenizer; it must be one")
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise ConfigError(f"label words {label_words} map to repeated token ids {ids}")
    return ids
