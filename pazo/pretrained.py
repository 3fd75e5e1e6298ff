"""Pretrained Hugging Face tokenizers and masked LMs from a local folder or the HF cache: one loader
that both the data side (MNLI's tokenizer) and the model side (the prompt classifier) use, so that
`pazo.data` does not import `pazo.models`; and the one policy (`reading_pretrained`) that turns
whatever transformers raises over a bad path into our two one-line errors, for this loader and
`pazo.models.hf_lm`'s."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from pazo.errors import DataCorruptError, DataMissingError

#: what a machine or its software lacks, not a file's fault: never said as an unreadable model (a
#: device's error, CUDA's or another accelerator's, passes too: `not_the_files`)
NOT_THE_FILES = (MemoryError, torch.OutOfMemoryError, torch.AcceleratorError, ImportError, NameError)


def not_the_files(err: Exception) -> bool:
    """Whether `err`, raised while transformers reads a model, is the machine's and not the files':
    a lack of memory, a device's error (torch raises CUDA's as a RuntimeError naming it), a package
    missing (accelerate for `device_map`)."""
    return isinstance(err, NOT_THE_FILES) or (isinstance(err, RuntimeError) and "CUDA" in str(err))


def in_hub_cache(name) -> bool:
    """Whether the Hugging Face cache holds a copy of the Hub id `name` (whatever the copy holds)."""
    import huggingface_hub.constants as hub
    from huggingface_hub.file_download import repo_folder_name

    try:
        return (Path(hub.HF_HUB_CACHE) / repo_folder_name(repo_id=str(name), repo_type="model")).is_dir()
    except ValueError:   # (HFValidationError: a name that cannot be a Hub id)
        return False


def local_path(path_or_name) -> Path:
    """`path_or_name` as a path on this machine, `~` expanded; `~nobody/x` (no such user) stays as
    written, a folder that is not here (expanding it raised RuntimeError)."""
    try:
        return Path(str(path_or_name)).expanduser()
    except RuntimeError:
        return Path(str(path_or_name))


def on_disk(local: Path) -> bool:
    """Whether `local` is there; a name too long to be a file's (ENAMETOOLONG) is not."""
    try:
        return local.exists()
    except OSError:
        return False


def pretrained_source(path_or_name) -> str:
    """What transformers is given: the local folder when there is one, else the name (a Hub id)."""
    local = local_path(path_or_name)
    return str(local) if on_disk(local) else str(path_or_name)


def shown(text) -> str:
    """`text` on one line: a path or a reason with a newline or another control character has it
    escaped, so that the message stays one `pazo: error:` line."""
    text = str(text)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


@contextmanager
def reading_pretrained(path_or_name, *, what: str, key: str, download_key: str, download: bool,
                       model_class: str | None) -> Iterator[None]:
    """Transformers reading the `what` (tokenizer, model) at `path_or_name`, its failure said in one
    line: `missing_pretrained` for a name that is neither here nor in the cache,
    `unreadable_pretrained` for a folder, a file or a cached copy that is there but cannot be read
    (whatever transformers, safetensors or torch raise over malformed files: OSError, ValueError,
    KeyError, TypeError, RuntimeError, ...). What the machine lacks passes as it is (`not_the_files`)."""
    try:
        yield
    except Exception as err:
        if not_the_files(err):
            raise
        raise pretrained_failure(path_or_name, err, what=what, key=key, download_key=download_key,
                                 download=download, model_class=model_class) from err


def pretrained_failure(path_or_name, err: Exception, *, what: str, key: str, download_key: str, download: bool,
                       model_class: str | None) -> DataMissingError:
    """The user's error for transformers' `err` on `path_or_name`, by where the files are, not by
    what transformers raised (it raises OSError for a config that is not JSON too): there on disk (a
    folder, or a file where a folder belongs), unreadable; a Hub id with a copy in the cache, that
    copy unreadable; neither, missing."""
    local = local_path(path_or_name)
    if on_disk(local):
        reason = None if local.is_dir() else "a file, not a folder"
        return unreadable_pretrained(f"in {shown(local)}", err, what=what, key=key, reason=reason)
    if in_hub_cache(path_or_name):
        return unreadable_pretrained(f"{shown(path_or_name)!r} (its copy in the Hugging Face cache)", err,
                                     what=what, key=key)
    return missing_pretrained(path_or_name, local, err, what=what, key=key, download_key=download_key,
                              download=download, model_class=model_class)


def missing_pretrained(name, local: Path, err: BaseException, *, what: str, key: str, download_key: str,
                       download: bool, model_class: str | None) -> DataMissingError:
    """The one message for a tokenizer or model that is not here: what is missing, where it was looked
    for, and how to get it for this model's family (`model_class`, e.g. AutoModelForCausalLM for OPT;
    None for a tokenizer alone), saved into a folder named after the model; a download that was asked
    for and failed (offline) is said as such, not suggested again."""
    folder = shown(Path(str(name)).name or "model")
    saves = "t.AutoTokenizer.from_pretrained(n).save_pretrained(f)"
    if model_class:
        saves += f"; t.{model_class}.from_pretrained(n).save_pretrained(f)"
    recipe = (f"on a machine with internet run `python -c \"import transformers as t; n='{shown(name)}'; "
              f"f='{folder}'; {saves}\"` and set {key} to that {folder}/ folder")
    if not model_class:   # the data side reads the model's tokenizer; the model itself goes in the same folder
        recipe += (", saving the model there too (t.AutoModelForCausalLM for OPT, LLaMA or GPT-2 with "
                   "model=hf_causal_lm; t.AutoModelForMaskedLM for RoBERTa with model=hf_masked_lm or roberta_prompt)")
    how = (f"{download_key}=true could not fetch it ({type(err).__name__}: no network, or no such name on the "
           f"Hugging Face Hub); {recipe}" if download else f"get it with {download_key}=true (online), or {recipe}")
    return DataMissingError(f"the {what} {str(name)!r} is missing: not a local folder ({shown(local)}) and not in "
                            f"the Hugging Face cache; {how}")


def unreadable_pretrained(where: str, err: BaseException, *, what: str, key: str,
                          reason: str | None = None) -> DataCorruptError:
    """The one message for a folder, file or cached copy (`where`: "in <folder>", or the Hub id's
    cached copy) that is there but holds no tokenizer or model transformers can read (an empty
    folder, a tokenizer alone, a config that is not JSON or names an unknown model type, broken
    weights); `reason` in place of `err`'s first line."""
    if reason is None:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        said = lines[0].rstrip(": ") if lines else ""
        plain = isinstance(err, (OSError, ValueError)) and said   # (a KeyError's text is the key alone)
        reason = shown(said if plain else f"{type(err).__name__}: {said}".rstrip(": "))
    return DataCorruptError(f"the {what} {where} cannot be read ({reason}): set {key} to a folder written by "
                            "save_pretrained (tokenizer.json or tokenizer_config.json, config.json and the "
                            "weights), or to a Hub id in the Hugging Face cache")


def load_pretrained(path_or_name: str, kind: str, download: bool = False, *, key: str = "model.path",
                    download_key: str = "model.download", model_class: str | None = "AutoModelForMaskedLM"):
    """A transformers tokenizer (`kind="tokenizer"`) or masked LM from a local folder or the HF
    cache; with `download=false` nothing is fetched (the adapter probe included), and a failure is
    one clear message (`reading_pretrained`) naming the config key to set (`key`, `download_key`)
    and the model class of the family it belongs to (`model_class`; the tokenizer's message shows
    the whole recipe)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    source = pretrained_source(path_or_name)
    with reading_pretrained(path_or_name, what=kind, key=key, download_key=download_key, download=download,
                            model_class=model_class):
        if kind == "tokenizer":
            return with_vocabulary(AutoTokenizer.from_pretrained(source, local_files_only=not download))
        return AutoModelForMaskedLM.from_pretrained(source, local_files_only=not download,
                                                    adapter_kwargs={"local_files_only": not download},
                                                    attn_implementation="eager", dtype=torch.float32)


def with_vocabulary(tokenizer):
    """`tokenizer`, refused when it has no vocabulary: transformers builds one from a model's
    config alone (a folder without the tokenizer's files), which makes every text no tokens (a run
    went on to a label word of 0 tokens)."""
    if not tokenizer.encode("a", add_special_tokens=False):
        raise ValueError("no vocabulary: the tokenizer's files (tokenizer.json, or vocab.json and merges.txt) "
                         "are not there")
    return tokenizer
