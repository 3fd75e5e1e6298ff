"""Interrupted or refused before the run (the faults guide's section of that name): a Ctrl-C while
a plugin imports ends every entry point in one line and exit 130, not a KeyboardInterrupt
traceback (a SIGTERM: one line and 143); the entry modules load no torch or Hydra before pazo's
handler is in place; and a launch refused before it is accepted leaves the output folder as it was:
no new directory, and an existing run directory's files, train.log included, byte for byte."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from conftest import ROOT
from fault_runtime_helpers import TINY, one_error_line, run_cli
from plugin_package import write_package

SLOW_IMPORT = """\
import pathlib, time
pathlib.Path({marker!r}).write_text("importing")
time.sleep(120)
"""

#: every entry point, as `python -m` runs it (the console scripts are the same functions)
ENTRY_POINTS = {
    "pazo-train": ["pazo.train", "method=dpzero", "train.steps=1"],
    "pazo-audit": ["pazo.audit", "method=dpzero", "train.steps=1"],
    "pazo-sweep": ["pazo.sweep", "demo", "--dry-run"],
    "pazo-bench": ["pazo.bench", "methods", "--help"],
    "pazo-report": ["pazo.report", "tables", "nowhere"],
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_ctrl_c_while_a_plugin_imports_is_one_line_and_exit_130(entry, signum, tmp_path):
    """The plugin is an installed package's entry point (`pazo.plugins`) whose module sleeps on
    import; SIGINT is sent once it has started importing (was: a KeyboardInterrupt traceback out
    of the plugin's import, and the process killed by SIGINT, exit -2); a SIGTERM ends it the same
    way, `pazo: terminated before ...` and exit 143 (was: killed silently)."""
    marker = tmp_path / "importing"
    site = write_package(tmp_path / "site", {"slow_plugin": SLOW_IMPORT.format(marker=str(marker))},
                         {"slow": "slow_plugin"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)]), "WANDB_MODE": "disabled"}
    env.pop("PAZO_PLUGINS", None)
    proc = subprocess.Popen([sys.executable, "-m", *ENTRY_POINTS[entry]], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), proc.communicate()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    word, status = ("interrupted", 130) if signum == signal.SIGINT else ("terminated", 143)
    assert proc.returncode == status, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"pazo: {word} before ") and "nothing was run" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["importing", "site"]   # nothing written


def test_the_entry_modules_load_neither_torch_nor_hydra():
    """What runs before pazo's Ctrl-C handler is in place (the module a console script or
    `python -m` imports first) is the standard library: a Ctrl-C while torch loads meets the handler."""
    code = ("import sys\n"
            "import pazo.train, pazo.audit.command, pazo.bench, pazo.report\n"
            "import pazo.commands.start, pazo.commands.interrupts\n"
            "import pazo.privacy.command\n"
            "print(sorted(m for m in ('torch', 'hydra', 'omegaconf', 'numpy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout, done.stderr[-2000:])


# --- a refused launch leaves the output folder as it was ------------------------------------------------

def folder_state(root: Path) -> dict[str, bytes | None]:
    """Every path below `root`: a file's bytes, None for a directory (the lock file aside, which a
    launch makes and removes while it holds the directory)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*")) if p.name != ".pazo.lock"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished run made by the command line (its .hydra/ record and train.log)."""
    folder = tmp_path_factory.mktemp("finished")
    code, _, err = run_cli([*TINY, "train.steps=2", f"privacy.cache_dir={folder / 'cache'}",
                            f"hydra.run.dir={folder / 'run'}"], _Quiet())
    assert code == 0 and (folder / "run" / "train.log").exists(), err
    return folder / "run"


class _Quiet:
    def readouterr(self):
        return "", ""


#: overrides a launch refuses only once it has read the data (after Hydra made the run directory),
#: and overrides it refuses before Hydra runs
LATE = st.one_of(st.integers(1166, 10**7).map(lambda b: [f"train.batch_size={b}"]),
                 st.integers(145, 10**6).map(lambda b: ["method=pazo_m", f"method.public_batch_size={b}"]),
                 st.just(["dataset=torchvision", "dataset.torchvision_name=FashionMNIST", "dataset.root=/nonexistent"]))
EARLY = st.one_of(st.from_regex(r"[a-z]{3,8}", fullmatch=True).map(lambda k: [f"+train.{k}x=1"]),
                  st.from_regex(r"[a-z]{1,6}", fullmatch=True).map(lambda v: [f"train.batch_size={v}"]))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=st.one_of(LATE, EARLY), where=st.sampled_from(["default", "new", "existing"]))
@example(bad=["train.batch_size=100000"], where="default")   # the reported case: a folder holding only train.log
@example(bad=["train.batch_size=100000"], where="existing")
def test_a_refused_launch_leaves_the_output_folder_as_it_was(bad, where, finished_run, tmp_path_factory,
                                                            monkeypatch, capsys):
    root = tmp_path_factory.mktemp("out")
    monkeypatch.chdir(root)   # (the default run directory, outputs/runs/..., is below the working directory)
    target = []
    if where == "new":
        target = [f"hydra.run.dir={root / 'a' / 'b' / 'run'}"]
    elif where == "existing":
        shutil.copytree(finished_run, root / "run")
        target = [f"hydra.run.dir={root / 'run'}"]
    before = folder_state(root)
    code, _, err = run_cli([*TINY, *bad, *target], capsys)
    assert code == 2, err
    one_error_line(err)
    assert folder_state(root) == before
