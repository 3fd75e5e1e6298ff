"""Hugging Face data sets kept on disk with `save_to_disk` under the data root: one loader for
IMDB/Amazon Polarity and MNLI/SNLI, with the download switch and the missing-data message."""
from __future__ import annotations

from pathlib import Path

from pazo.errors import DataMissingError


def load_saved(root: Path, name: str, hub: str, config: str | None, download: bool):
    """`<root>/<name>` as saved by `datasets.load_dataset(hub, config).save_to_disk(...)`; fetched
    and saved there first when `download` is set and it is absent."""
    from datasets import load_dataset, load_from_disk

    path = root / name
    if not path.exists() and download:
        load_dataset(hub, config).save_to_disk(str(path))
    if not path.exists():
        args = f"'{hub}'" + (f", '{config}'" if config else "")
        raise DataMissingError(
            f"{name} is missing: no saved Hugging Face dataset at {path}. Get it with "
            f"dataset.download=true (downloads {hub} from the Hub and saves it there), or run "
            f"`python -c \"import datasets; datasets.load_dataset({args}).save_to_disk('{path}')\"` "
            "on a machine with internet and copy the folder; dataset.root (or $PAZO_DATA) sets where we look.")
    return load_from_disk(str(path))
