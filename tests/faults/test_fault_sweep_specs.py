"""A sweep's bad inputs (`pazo-sweep`): a `--out` that cannot be written, a grid too large to run, a
spec whose YAML would expand without bound (aliases), a name that would leave `--out`. Each is one
`pazo: error:` line and exit 2 before any run starts (`launch` is never reached)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pazo.sweep as sweep

#: a spec of one tiny run (`extra` adds its axes)
MINI = "name: mini\nsettings: [digits]\nmethods: [dpsgd]\nepsilons: [1]\ngrid: false\n"


@pytest.fixture
def no_launch(monkeypatch):
    """`launch` fails the test: every case here must end before a run starts."""
    def launch(*args, **kwargs):
        raise AssertionError("a run was launched")
    monkeypatch.setattr(sweep, "launch", launch)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pazo: error: "), err
    return err[0]


# --- a --out that cannot be written ----------------------------------------------------------------

#: capsys and no_launch hold across examples (each example reads its own lines)
ACROSS_EXAMPLES = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(ACROSS_EXAMPLES, max_examples=8)
@given(code=st.sampled_from([errno.EACCES, errno.EPERM, errno.EROFS]), depth=st.integers(0, 2),
       exists=st.booleans())
@example(code=errno.EACCES, depth=0, exists=False)   # the reported case: `chmod -w out`, then --out out
def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_run(code, depth, exists, tmp_path_factory,
                                                                        capsys, no_launch):
    """(root, who runs CI, writes into a chmod -w folder: the refusal is the file system's, played here
    by mkdir and open refusing every path below `--out`.)"""
    out = tmp_path_factory.mktemp("out").joinpath(*["sub"] * depth)
    spec = tmp_path_factory.mktemp("spec") / "mini.yaml"
    spec.write_text(MINI)
    if exists:
        (out / "mini").mkdir(parents=True)
    real_mkdir, real_open = Path.mkdir, os.open

    def below_out(path) -> bool:
        return Path(path).is_relative_to(out)

    def mkdir(self, *args, **kwargs):
        if below_out(self) and not self.exists():
            raise PermissionError(code, os.strerror(code), str(self))
        return real_mkdir(self, *args, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if below_out(path) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", mkdir)
        patch.setattr(os, "open", open_)
        status = sweep.main([str(spec), "--out", str(out), "train.steps=2", "device=cpu", "logger.mode=disabled"])
    assert status == 2
    line = one_error_line(capsys)
    assert str(out / "mini") in line and "you can write to" in line and "--out" in line
