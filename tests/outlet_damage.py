"""Damage to one file a run wrote, as a user's or a disk's mistake does it, for the tests that a
damaged outlet hides no release another still shows (`pazo.run.releases`)."""
from __future__ import annotations

from pathlib import Path

DAMAGE = ("delete", "truncate", "edit")


def damage(path: Path, how: str, at: float, junk: bytes) -> None:
    """Delete `path`, cut it at the fraction `at` of its length, or overwrite its bytes from there
    with `junk`."""
    data = Path(path).read_bytes()
    cut = int(len(data) * at)
    if how == "delete":
        Path(path).unlink()
    elif how == "truncate":
        Path(path).write_bytes(data[:cut])
    else:
        Path(path).write_bytes(data[:cut] + junk + data[cut + len(junk):])
