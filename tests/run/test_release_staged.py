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

from hypothesis import example, given, settings
from hypothesis import strategies as st

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
