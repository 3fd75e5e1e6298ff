"""Cache files of tensors (warm-start weights, decoded images) that a run uses only after checking
them against what they claim: each file holds its kind, the full key it was computed for and the
sha256 of its content besides the value. A file that does not load, holds another kind or key, or
whose content does not hash to the recorded digest (truncated, edited, another run's weights
copied in) is ignored with one warning line and recomputed in place; nothing is trusted blindly.

Writes are atomic (a temporary file in the same folder, then a rename), so parallel sweep jobs
that share a cache never read half a file; a cache that cannot be written is skipped with a
warning (the run does not need it).
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from pazo.files.rundir import write_atomic

log = logging.getLogger(__name__)

FORMAT = "pazo-cache/1"


def digest(value) -> str:
    """sha256 of a nest of dicts, lists, tensors and plain values: equal exactly when the
    contents (keys, dtypes, shapes, bytes) are."""
    h = hashlib.sha256()

    def feed(v) -> None:
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().contiguous()
            h.update(f"tensor {t.dtype} {tuple(t.shape)};".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, dict):
            h.update(f"dict {len(v)};".encode())
            for k in sorted(v, key=repr):
                feed(k)
                feed(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"{type(v).__name__} {len(v)};".encode())
            for item in v:
                feed(item)
        else:
            h.update(f"{type(v).__name__} {v!r};".encode())

    feed(value)
    return h.hexdigest()


def key_digest(key) -> str:
    """The full sha256 of a key's repr (file names carry a prefix of it)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()


def entry_problem(entry, kind: str, key: str) -> str | None:
    """Why a loaded cache file cannot be used as the `kind` entry for `key` (None if it can)."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return "not a pazo cache entry (an older format, or another file put in its place)"
    if entry.get("kind") != kind:
        return f"it holds a {entry.get('kind')!r} entry, not {kind!r}"
    if entry.get("key") != key:
        return "it was computed for another key (another configuration or file list)"
    if "value" not in entry or entry.get("sha256") != digest(entry["value"]):
        return "its content does not hash to the digest it records (truncated or altered)"
    return None


def load_entry(path: Path, kind: str, key: str):
    """The value cached in `path` for (`kind`, `key`), or None: absent, or unusable after one
    warning that says why (it is then recomputed and overwritten by the caller)."""
    if not path.exists():
        return None
    try:
        entry = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unreadable file is the same problem: not usable
        problem = f"unreadable ({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})"
    else:
        problem = entry_problem(entry, kind, key)
        if problem is None:
            return entry["value"]
    log.warning("%s cache entry %s ignored: %s; recomputing and overwriting it", kind, path, problem)
    return None


def save_entry(path: Path, kind: str, key: str, value) -> None:
    """Write `value` as the (`kind`, `key`) entry, atomically; skipped with a warning if the cache
    cannot be written."""
    entry = {"format": FORMAT, "kind": kind, "key": key, "sha256": digest(value), "value": value}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, lambda f: torch.save(entry, f), shared=True)
    except OSError as err:
        log.warning("%s cache %s not written: %s", kind, path, err)
