"""Hugging Face data sets kept on disk with `save_to_disk` under the data root: one loader for
IMDB/Amazon Polarity, MNLI/SNLI, the prompted tasks and `dataset=hf_text`, with the download
switch, the missing-data message, and one line naming the file when a saved data set is corrupt."""
from __future__ import annotations

import json
from pathlib import Path

from pazo.errors import DataCorruptError, DataMissingError


def _get_command(hub: str, config: str | None, path: Path) -> str:
    args = f"'{hub}'" + (f", '{config}'" if config else "")
    return (f"`python -c \"import datasets; datasets.load_dataset({args}).save_to_disk('{path}')\"` on a machine "
            "with internet and copy the folder")


def load_saved(root: Path, name: str, hub: str, config: str | None, download: bool):
    """`<root>/<name>` as saved by `datasets.load_dataset(hub, config).save_to_disk(...)`; fetched
    and saved there first when `download` is set and it is absent."""
    from datasets import load_dataset

    path = root / name
    if not path.exists() and download:
        load_dataset(hub, config).save_to_disk(str(path))
    if not path.exists():
        raise DataMissingError(
            f"{name} is missing: no saved Hugging Face dataset at {path}. Get it with "
            f"dataset.download=true (downloads {hub} from the Hub and saves it there), or run "
            f"{_get_command(hub, config, path)}; dataset.root (or $PAZO_DATA) sets where we look.")
    again = (f"get it again: delete {path} and run with dataset.download=true (downloads {hub} from the Hub and saves "
             f"it there), or run {_get_command(hub, config, path)}")
    return read_saved(path, again)


def read_saved(path: Path, again: str):
    """`datasets.load_from_disk(path)`, or a DataCorruptError naming the damaged file (a JSON file
    that does not parse, an Arrow file that does not read, a file listed but absent) and `again`:
    how to get it again."""
    from datasets import load_from_disk

    try:
        return load_from_disk(str(path))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:  # ArrowInvalid is a ValueError
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        where = damaged_file(Path(path))
        what = f"{where[0]} {where[1]}" if where else f"it does not load ({type(err).__name__}: {reason})"
        raise DataCorruptError(f"saved Hugging Face data set {path} is corrupt: {what}; {again}") from None


def damaged_file(folder: Path) -> tuple[Path, str] | None:
    """The first file of a saved data set that does not read, and why (None: none found)."""
    import pyarrow as pa

    if not (folder / "dataset_dict.json").exists() and not (folder / "state.json").exists():
        return folder, "holds neither dataset_dict.json nor state.json (not a save_to_disk folder, or cut short)"
    for path in sorted(folder.rglob("*.json")):
        try:
            json.loads(path.read_text())
        except (OSError, ValueError) as err:
            return path, f"is not valid JSON ({' '.join(str(err).split())[:80]})"
    listing = folder / "dataset_dict.json"
    splits = json.loads(listing.read_text()).get("splits", []) if listing.exists() else []
    for split in splits if isinstance(splits, list) else []:
        if not (folder / str(split) / "state.json").exists():
            return folder / str(split) / "state.json", f"is absent (split {split!r} is listed in dataset_dict.json)"
    for state_path in sorted(folder.rglob("state.json")):
        state = json.loads(state_path.read_text())
        for entry in state.get("_data_files", []) if isinstance(state, dict) else []:
            data = state_path.parent / str(entry.get("filename", ""))
            if not data.is_file():
                return data, "is listed in state.json but absent"
        for name in ("dataset_info.json",):
            if not (state_path.parent / name).exists():
                return state_path.parent / name, "is absent"
    for path in sorted(folder.rglob("*.arrow")):
        try:
            with pa.memory_map(str(path)) as source:
                pa.ipc.open_stream(source).read_all()
        except (OSError, ValueError, pa.ArrowException) as err:
            reason = " ".join(str(err).split())[:80]
            return path, f"is not a readable Arrow file ({reason}; {path.stat().st_size} bytes)"
    return None
