"""Pretrained Hugging Face tokenizers and masked LMs from a local folder or the HF cache: one loader
that both the data side (MNLI's tokenizer) and the model side (the prompt classifier) use, so that
`pazo.data` does not import `pazo.models`."""
from __future__ import annotations

from pathlib import Path

import torch

from pazo.errors import DataMissingError


def load_pretrained(path_or_name: str, kind: str, download: bool = False):
    """A transformers tokenizer (`kind="tokenizer"`) or masked LM from a local folder or the HF
    cache; with `download=false` nothing is fetched, and absence is one clear message."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    local = Path(str(path_or_name)).expanduser()
    source = str(local) if local.exists() else str(path_or_name)
    try:
        if kind == "tokenizer":
            return AutoTokenizer.from_pretrained(source, local_files_only=not download)
        return AutoModelForMaskedLM.from_pretrained(source, local_files_only=not download,
                                                    attn_implementation="eager", dtype=torch.float32)
    except OSError as err:
        raise DataMissingError(
            f"the {kind} of {path_or_name!r} is missing: not a local folder ({local}) and not in the "
            f"Hugging Face cache ({type(err).__name__}). Get it with model.download=true, or on a "
            f"machine with internet run `python -c \"import transformers as t; n='{path_or_name}'; "
            "t.AutoTokenizer.from_pretrained(n).save_pretrained('roberta'); "
            "t.AutoModelForMaskedLM.from_pretrained(n).save_pretrained('roberta')\"` and set "
            "model.path to that roberta/ folder.") from None
