"""Every file a sweep writes into its private workspace (`<sweep>/.private/`: a selection's draw and its
K runs) is readable by its owner alone from the moment it is created, not made so afterwards: a run's
stdout.log, the files its training writes through the gate (metrics.jsonl, summary.json, ...) and those
other programs write there (Hydra's log and launch record, the run's lock). The sweep seals the folder
once the selection is released, but an interrupted or failed launch never gets there, and a file open
in a folder whose mode someone changes can be read meanwhile."""
from __future__ import annotations

import os
import stat
import sys
import types
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.run import gate
from pazo.sweep import launchers, selection

#: the writes pazo makes through the gate, each as (how, whether it leaves the file open to look at)
WRITES = ["write_released", "open_released", "open_released appending", "write_private", "open_private"]
parts = st.lists(st.text("abcxyz=,-", min_size=1, max_size=6), min_size=0, max_size=3)
names = st.sampled_from(["stdout.log", "metrics.jsonl", "summary.json", "config.yaml", "model.safetensors",
                         "selection.json", "train.log"])
earlier_modes = st.sampled_from([None, 0o644, 0o666, 0o600, 0o640])


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write(how: str, path: Path) -> int:
    """`path` written through the gate as `how` says; the mode it has while still open (or once written)."""
    if how.startswith("write_"):
        getattr(gate, how)(path, b"bytes\n")
        return mode_of(path)
    opener = gate.open_private if how == "open_private" else gate.open_released
    with opener(path, append=how.endswith("appending")) as handle:
        mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
        handle.write(b"bytes\n")
    return mode


def a_file(top: Path, inside: list[str], name: str, earlier: int | None) -> Path:
    """`top/inside.../name`, its folders made as the sweep makes its private ones; a file an earlier
    launch (or an earlier pazo) left there with mode `earlier`, where not None."""
    path = top.joinpath(*inside, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if earlier is not None:
        path.write_bytes(b"earlier\n")
        os.chmod(path, earlier)
    return path


@settings(max_examples=60, deadline=None)
@given(how=st.sampled_from(WRITES), inside=parts, name=names, earlier=earlier_modes)
@example(how="open_released appending", inside=["cell", "seed=0", "run-0a1b"], name="stdout.log", earlier=None)
@example(how="open_released appending", inside=["cell", "seed=0", "run-0a1b"], name="stdout.log", earlier=0o644)
def test_a_file_the_gate_writes_in_a_sweeps_private_workspace_is_owner_only_from_creation(
        tmp_path_factory, how, inside, name, earlier):
    sweep = tmp_path_factory.mktemp("sweep")
    workspace = selection.private_dir(sweep / selection.PRIVATE)
    path = a_file(workspace, inside, name, earlier)
    assert write(how, path) & 0o077 == 0, f"{how} {path.relative_to(sweep)}: {write(how, path):04o}"
    assert mode_of(path) & 0o077 == 0


@settings(max_examples=30, deadline=None)
@given(how=st.sampled_from(WRITES), inside=parts, name=names)
def test_outside_a_private_workspace_a_file_keeps_its_status_mode(tmp_path_factory, how, inside, name):
    """(The rule's other side: a run's released files stay readable by others, 0644.)"""
    path = a_file(tmp_path_factory.mktemp("sweep"), inside, name, None)
    wanted = gate.MODES[gate.SECRET if how.endswith("private") else gate.RELEASED]
    assert write(how, path) == wanted == mode_of(path)


#: what a training writes besides the gate's files, as other programs' code does (Hydra's log, its
#: launch record folder, the lock): plain `open` and `mkdir`, whose modes follow the process's umask
CHILD = '''
import os, sys
run_dir = sys.argv[1]
print("a line of the run's console")
os.makedirs(os.path.join(run_dir, ".hydra"), exist_ok=True)
for name in sys.argv[2:]:
    with open(os.path.join(run_dir, name), "w") as handle:
        handle.write("written by another program\\n")
'''


@settings(max_examples=8, deadline=None)
@given(others=st.lists(st.sampled_from(["train.log", ".hydra/config.yaml", ".pazo.lock", "notes.txt"]),
                       min_size=1, max_size=3, unique=True), earlier=earlier_modes)
@example(others=["train.log"], earlier=0o644)
def test_every_file_a_private_run_leaves_is_owner_only_without_the_seal(tmp_path_factory, others, earlier):
    """A K run launched as the sweep launches it (`launchers.run_one`), the workspace never sealed
    (an interrupted launch): its stdout.log and whatever the run wrote there are owner-only."""
    sweep = tmp_path_factory.mktemp("sweep")
    run_dir = selection.private_dir(sweep / selection.PRIVATE / "cell" / "seed=0" / "run-0a1b")
    a_file(run_dir, [], "stdout.log", earlier)   # (a relaunch appends to what an earlier launch wrote)
    assert launchers.run_one([sys.executable, "-c", CHILD, str(run_dir), *others], str(run_dir)) == 0
    assert "a line of the run's console" in (run_dir / "stdout.log").read_text()
    readable = [f"{path.relative_to(sweep)} {mode_of(path):04o}" for path in sweep.rglob("*")
                if mode_of(path) & 0o077]
    assert not readable, f"files and folders others may read in the private workspace: {readable}"


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("private", [True, False])
def test_a_selections_scheduler_jobs_leave_nothing_others_can_read(tmp_path, private):
    """The scheduler's launcher (submitit; its `debug` cluster runs the job in this process): in a
    selection, its job records and logs under `.private/.submitit/` are owner-only from creation, as
    the run's files are; a sweep's ordinary jobs keep the process's umask, restored after."""
    before = current_umask()
    top = tmp_path / (selection.PRIVATE if private else "sweep")
    run_dir = selection.private_dir(top / "cell" / "seed=0" / "run-0a1b") if private else top / "run"
    cmd = [sys.executable, "-c", CHILD, str(run_dir), "train.log"]
    launchers.launch([(types.SimpleNamespace(sweep="sel"), run_dir, cmd)],
                     {"launcher": "submitit", "cluster": "debug", "wait": True}, top, quiet=True)
    written = list(top.rglob("*"))
    readable = [f"{path.relative_to(tmp_path)} {mode_of(path):04o}" for path in written if mode_of(path) & 0o077]
    assert any(".submitit" in path.parts for path in written) and current_umask() == before
    if private:
        assert not readable, f"files and folders others may read in the private workspace: {readable}"
    else:
        assert readable   # (outside it, what others may read: the run's stdout.log is a public file)


@pytest.mark.slow
def test_a_selection_whose_workspace_is_never_sealed_leaves_nothing_others_can_read(tmp_path, monkeypatch):
    """A whole private selection (one cell, K drawn as 2, each run a real training subprocess) with
    the seal taken away, as after a launch that never reached it: every file and folder its runs
    wrote under `.private/` is owner-only all the same."""
    from pazo.privacy.selection import KDistribution
    from pazo.sweep import command as sweep

    spec = tmp_path / "sel.yaml"
    spec.write_text("name: sel\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\nseeds: [0]\ngrid: false\n"
                    "selection: private\nk: {distribution: geometric, mean: 2}\n")
    monkeypatch.setattr(KDistribution, "draw", lambda distribution, rng=None: 2)
    monkeypatch.setattr(gate, "seal", lambda folder: None)
    assert sweep.main([str(spec), "--out", str(tmp_path / "out"), "train.steps=3", "device=cpu"]) == 0
    private = tmp_path / "out" / "sel" / selection.PRIVATE
    written = list(private.rglob("*"))
    readable = [f"{path.relative_to(private)} {mode_of(path):04o}" for path in written if mode_of(path) & 0o077]
    assert any(path.name == "stdout.log" for path in written) and any(path.name == "train.log" for path in written)
    assert not readable, f"files and folders others may read in the private workspace: {readable}"
