"""Pretrained Hugging Face tokenizers and masked LMs from a local folder or the HF cache: one loader
that both the data side (MNLI's tokenizer) and the model side (the prompt classifier) use, so that
`pazo.data` does not import `pazo.models`."""
from __future__ import annotations

from pathlib import Path

import torch

from pazo.errors import DataCorruptError, DataMissingError


def missing_pretrained(name, local: Path, err: BaseException, *, what: str, key: str, download_key: str,
                       download: bool, model_class: str | None) -> DataMissingError:
    """The one message for a tokenizer or model that is not here: what is missing, where it was looked
    for, and how to get it for this model's family (`model_class`, e.g. AutoModelForCausalLM for OPT;
    None for a tokenizer alone), saved into a folder named after the model; a download that was asked
    for and failed (offline) is said as such, not suggested again."""
    folder = Path(str(name)).name or "model"
    saves = "t.AutoTokenizer.from_pretrained(n).save_pretrained(f)"
    if model_class:
        saves += f"; t.{model_class}.from_pretrained(n).save_pretrained(f)"
    recipe = (f"on a machine with internet run `python -c \"import transformers as t; n='{name}'; f='{folder}'; "
              f"{saves}\"` and set {key} to that {folder}/ folder")
    if not model_class:   # the data side reads the model's tokenizer; the model itself goes in the same folder
        recipe += (", saving the model there too (t.AutoModelForCausalLM for OPT, LLaMA or GPT-2 with "
                   "model=hf_causal_lm; t.AutoModelForMaskedLM for RoBERTa with model=hf_masked_lm or roberta_prompt)")
    how = (f"{download_key}=true could not fetch it ({type(err).__name__}: no network, or no such name on the "
           f"Hugging Face Hub); {recipe}" if download else f"get it with {download_key}=true (online), or {recipe}")
    return DataMissingError(f"the {what} {str(name)!r} is missing: not a local folder ({local}) and not in the "
                            f"Hugging Face cache; {how}")


def load_pretrained(path_or_name: str, kind: str, download: bool = False, *, key: str = "model.path",
                    download_key: str = "model.download", model_class: str | None = "AutoModelForMaskedLM"):
    """A transformers tokenizer (`kind="tokenizer"`) or masked LM from a local folder or the HF
    cache; with `download=false` nothing is fetched, and absence is one clear message
    (`missing_pretrained`) naming the config key to set (`key`, `download_key`) and the model class
    of the family it belongs to (`model_class`; the tokenizer's message shows the whole recipe)."""
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
        raise missing_pretrained(path_or_name, local, err, what=kind, key=key, download_key=download_key,
                                 download=download, model_class=model_class) from None
    except ValueError as err:   # transformers found no tokenizer or model it can build where it looked
        if not local.exists():
            raise missing_pretrained(path_or_name, local, err, what=kind, key=key, download_key=download_key,
                                     download=download, model_class=model_class) from None
        raise unreadable_pretrained(local, err, what=kind, key=key) from None


def unreadable_pretrained(local: Path, err: ValueError, *, what: str, key: str) -> DataCorruptError:
    """The one message for a folder that is there but holds no tokenizer or model transformers can
    read (an empty folder, another kind of file)."""
    reason = str(err).strip().splitlines()[0].rstrip(": ")
    return DataCorruptError(f"the {what} in {local} cannot be read ({reason}): set {key} to a folder written by "
                            "save_pretrained (tokenizer.json or tokenizer_config.json, config.json and the "
                            "weights), or to a Hub id in the Hugging Face cache")
