"""The gate's release of a staged folder (`pazo.run.gate.release_staged`, what the Hugging Face export
leaves through): every file another program wrote into the staging folder, at any depth, is at its
place in the export with the same bytes and a released file's mode, written once (moved there, the
same file, not copied a second time), and a link in the staging folder leaves as its file's bytes,
never as a link to somewhere else."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.files.file_kinds import NotRegularFile
from pazo.run import gate

names = st.text("abcxyz._-", min_size=1, max_size=6).filter(lambda name: name not in (".", ".."))
#: a staged tree: a path (its parts) -> (its bytes, its mode as the writing program left it, a link?)
trees = st.dictionaries(st.lists(names, min_size=1, max_size=3).map(tuple),
                        st.tuples(st.binary(max_size=64), st.sampled_from([0o600, 0o644, 0o640]), st.booleans()),
                        min_size=1, max_size=6)


def _plain(tree: dict) -> dict:
    """The tree less the paths that are a folder of another path (a file and a folder of one name)."""
    return {path: what for path, what in tree.items()
            if not any(other[:len(path)] == path and other != path for other in tree)}


@settings(max_examples=40, deadline=None)
@given(tree=trees)
@example(tree={("model.safetensors",): (b"weights", 0o600, False), ("base", "config.json"): (b"{}", 0o644, False),
               ("tokenizer.json",): (b"tok", 0o644, True)})
def test_every_staged_file_leaves_once_whole_with_a_released_mode_and_no_link(tree):
    tree = _plain(tree)
    with tempfile.TemporaryDirectory() as top:
        folder, outside = Path(top) / "export", Path(top) / "elsewhere"
        staging = folder / ".staging-x"
        staged = {}
        for index, (parts, (data, mode, link)) in enumerate(tree.items()):
            path = staging.joinpath(*parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            if link:   # (its file outside the staging folder: a link must not leave as one)
                outside.mkdir(exist_ok=True)
                (outside / str(index)).write_bytes(data)
                path.symlink_to(outside / str(index))
            else:
                path.write_bytes(data)
                os.chmod(path, mode)
                staged[parts] = path.stat().st_ino
        gate.release_staged(staging, folder)
        for parts, (data, _, link) in tree.items():
            target = folder.joinpath(*parts)
            assert not target.is_symlink() and target.read_bytes() == data
            assert stat.S_IMODE(target.stat().st_mode) == gate.released_mode(target)
            if not link:
                assert target.stat().st_ino == staged[parts]   # the file the program wrote: not a second copy
        assert not [path for path in staging.rglob("*") if path.is_file() and not path.is_symlink()]


def test_a_staged_file_with_another_name_elsewhere_leaves_that_name_as_it_was(tmp_path):
    """A staged hard link (a program that linked a file in place of writing it) is copied out, not
    moved: a chmod of the shared file would change the mode of the name outside the export too."""
    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"weights")
    os.chmod(outside, 0o600)
    folder = tmp_path / "export"
    staging = folder / ".staging-x"
    staging.mkdir(parents=True)
    os.link(outside, staging / "model.safetensors")
    gate.release_staged(staging, folder)
    target = folder / "model.safetensors"
    assert target.read_bytes() == b"weights" and stat.S_IMODE(target.stat().st_mode) == gate.released_mode(target)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600 and outside.read_bytes() == b"weights"
    assert target.stat().st_ino != outside.stat().st_ino


def test_what_stands_at_a_place_and_is_no_regular_file_is_refused_not_replaced(tmp_path):
    """A FIFO (or a device) where a staged file would go is refused, as every released write refuses it."""
    folder = tmp_path / "export"
    staging = folder / ".staging-x"
    staging.mkdir(parents=True)
    (staging / "config.json").write_bytes(b"{}")
    os.mkfifo(folder / "config.json")
    with pytest.raises(NotRegularFile):
        gate.release_staged(staging, folder)
    assert stat.S_ISFIFO((folder / "config.json").stat().st_mode)
