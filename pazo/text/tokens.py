"""Token ids every tokenizer user needs alike."""
from __future__ import annotations

from pazo.errors import ConfigError


def pad_token_id(tokenizer) -> int:
    """The pad id, or the end-of-sequence id for tokenizers without one (GPT-2, LLaMA)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ConfigError("the tokenizer has neither a pad nor an end-of-sequence token")
    return int(pad)
