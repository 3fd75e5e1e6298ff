"""An output folder the machine will not make is one line that says why once (issue #60, round
three's catalogue: `pazo-sweep ... --out /proc/nope` said "No such file or directory (No such file
or directory)"): the system's words, after pazo's plainer ones where it has them."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.errors import ConfigError
from pazo.files import rundir

#: what the system may answer a mkdir with, but a full disk or an I/O error (a WriteFault, exit 75)
REFUSALS = [errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP, errno.EINVAL,
            errno.EMLINK]


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(REFUSALS), st.sampled_from(["the sweep folder", "the run directory"]),
       st.sampled_from(["--out", "hydra.run.dir"]))
@example(errno.ENOENT, "the sweep folder", "--out")   # the catalogue's case
def test_a_refused_folder_says_why_once(code, what, option):
    def refuse(self, *args, **kwargs):
        raise OSError(code, os.strerror(code), str(self))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "mkdir", refuse)
        with pytest.raises(ConfigError) as err:
            rundir.check_output_dir(Path("/nowhere/x"), what, option)
    line = str(err.value)
    assert line.startswith(f"cannot create {what} /nowhere/x: ")
    assert line.endswith(f"; give a {option} you can write to")
    assert line.count(os.strerror(code)) == 1, line
