"""The release gate: what files each computation leaves, and the one place that writes them.

`FILES` lists, for each kind of computation (a run's directory, a selection's release, an audit's
directory, a sweep's records), every file it may hold, with its status and, where the file carries
keys, the outlet list of `pazo.run.outlets` that says which keys may be in it. The statuses:

- `released`: leaves the computation (what its epsilon covers, the test metrics, the outlet lists'
  keys); mode 0644;
- `public`: from the config, the machine or a clock, never from private examples; mode 0644;
- `private-workspace`: must not leave (a selection's draw, its unreleased runs): owner-only;
- `secret`: holds a secret the guarantee assumes (the seed, the private data's digest, the noise
  stream's state): owner-only.

Owner-only is 0600 for a file and 0700 for its folder: a run keeps its checkpoint and the record of
its private computation in `private/` (`workspace`), a sweep its selections' runs in `.private/`
(`SWEEP_WORKSPACE`). Every file in a sweep's `.private/` is owner-only from its creation, whatever
its status would be in a run of its own: the gate writes it so, and a run launched there writes
under an owner-only umask (`umask_for`), so that nothing there is ever readable by others, even
before the sweep seals the folder or where it never does (an interrupted launch).
The functions below are how pazo writes, copies, moves or seals a file of a run, an audit, a sweep
or a release; a test over the package's source (tests/privacy/test_gate_source.py) fails when
another module does so. Files written by Hydra's and W&B's own code (`writer`) are listed too, and
the gate sets the owner-only ones' modes.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from pazo.files import rundir
from pazo.files.file_kinds import refuse_special
from pazo.files.rundir import writing

RELEASED, PUBLIC, PRIVATE_WORKSPACE, SECRET = "released", "public", "private-workspace", "secret"
#: a file's permission bits by its status (an owner-only file's folder is 0700)
MODES = {RELEASED: 0o644, PUBLIC: 0o644, PRIVATE_WORKSPACE: 0o600, SECRET: 0o600}
OWNER_ONLY = (PRIVATE_WORKSPACE, SECRET)
#: a run's private workspace (0700): what must never leave it
WORKSPACE = "private"
#: a sweep's private workspace (0700): its selections' draws and their K runs, never released
SWEEP_WORKSPACE = ".private"
#: the umask of a process that writes into a sweep's private workspace: what it creates is owner-only
OWNER_ONLY_UMASK = 0o077
#: the step of every row a run lets out, one a line, written before the row reaches any outlet
LEDGER = f"{WORKSPACE}/released_steps"


@dataclass(frozen=True)
class File:
    """One file (a glob below the computation's folder) a computation may hold: its status, the
    outlet list of its keys (`pazo.run.outlets.OUTLETS`, "config" for the resolved config; None: no
    key rule), why it has that status, and whose code writes it."""
    pattern: str
    status: str
    why: str
    keys: str | None = None
    writer: str = "pazo"

    @property
    def mode(self) -> int:
        return MODES[self.status]


_SEED = "holds the seed, which the guarantee assumes secret (seed_secret)"
_RUN_FILES = (
    File("metrics.jsonl", RELEASED, "a row per logged step; its private keys are named in outside_guarantee",
         "metrics"),
    File("summary.json", RELEASED, "how the run ended, its epsilon, the test metrics", "summary"),
    File("metrics.csv", RELEASED, "the rows' released keys (`logger.report_to` with csv)", "metrics"),
    File("model.safetensors", RELEASED, "the released model (train.save_model)"),
    File("model.pt", RELEASED, "the released model, as an older pazo saved it"),
    File("wandb/**", RELEASED, "W&B's local copy of what it receives: the rows' and the summary's keys "
         "`pazo.run.outlets.released_row` lets out, the config less the seed", "metrics, summary", writer="wandb"),
    File("tensorboard/**", RELEASED, "TensorBoard's event files: the rows' released numbers as scalars "
         "(`logger.report_to` with tensorboard)", "metrics", writer="tensorboard"),
    File("config.yaml", SECRET, f"the resolved config: {_SEED}", "config"),
    File(".hydra/*.yaml", SECRET, f"Hydra's launch record: {_SEED}", writer="hydra"),
    File(f"{WORKSPACE}/checkpoint.pt", SECRET, "the noise stream's state and torch's generators (the seed)"),
    File(f"{WORKSPACE}/private_computation.json", SECRET, "the private data's digest"),
    File(LEDGER, PRIVATE_WORKSPACE, "the step of each row the run's attempts let out, written before the row "
         "reaches metrics.jsonl, W&B or another logger: a relaunch counts what a kill kept W&B from writing to "
         "its local log, or what a deleted file no longer shows"),
    File("train.log", PUBLIC, "Hydra's log of the run's lines: what the console prints", writer="hydra"),
    File(".pazo.lock", PUBLIC, "the launch holding the directory (pid, host), while it runs"),
    File("attempts/*/metrics.jsonl", RELEASED, "an earlier attempt's rows (they left: kept)", "metrics"),
    File("attempts/*/summary.json", RELEASED, "an earlier attempt's summary", "summary"),
    File("attempts/*/metrics.csv", RELEASED, "an earlier attempt's rows as CSV", "metrics"),
    File("attempts/*/model.safetensors", RELEASED, "an earlier attempt's model"),
    File("attempts/*/model.pt", RELEASED, "an earlier attempt's model, as an older pazo saved it"),
    File("attempts/*/wandb/**", RELEASED, "an earlier attempt's W&B files", "metrics, summary", writer="wandb"),
    File("attempts/*/tensorboard/**", RELEASED, "an earlier attempt's TensorBoard files", "metrics",
         writer="tensorboard"),
    File("attempts/*/config.yaml", SECRET, f"an earlier attempt's config: {_SEED}", "config"),
    File("attempts/*/.hydra/*.yaml", SECRET, f"an earlier attempt's launch record: {_SEED}"),
)
#: every file of each kind of computation, relative to its folder
FILES = {
    "run": _RUN_FILES,
    "audit": (
        File("summary.json", RELEASED, "the audit's result and the run's epsilon", "audit_summary"),
        File("audit.json", RELEASED, "the audit's bounds and scores (summary.json's `audit` block)"),
        File("config.yaml", SECRET, f"the resolved config: {_SEED}", "config"),
        File(".hydra/*.yaml", SECRET, f"Hydra's launch record: {_SEED}", writer="hydra"),
        File("train.log", PUBLIC, "Hydra's log of the audit's lines: what the console prints", writer="hydra"),
        File(".pazo.lock", PUBLIC, "the launch holding the directory (pid, host), while it runs"),
    ),
    "selection release": (
        File("summary.json", RELEASED, "the chosen run's summary: `pazo.run.outlets.RELEASE`'s keys, the selection's "
             "record", "summary"),
        File("metrics.jsonl", RELEASED, "the chosen run's rows: their released and public keys", "metrics"),
        File("metrics.csv", RELEASED, "the chosen run's rows as CSV (where it logged them so)", "metrics"),
        File("config.yaml", RELEASED, "the chosen run's config less the seed", "config"),
        File("model.safetensors", RELEASED, "the chosen model"),
    ),
    "sweep": (
        File("*/stdout.log", PUBLIC, "a run's console output, the command line without its seed"),
        File(f"{SWEEP_WORKSPACE}/**", PRIVATE_WORKSPACE, "the selections' draws (K) and their K runs: never released"),
        File(".submitit/**", PUBLIC, "the scheduler's job records and logs (`launcher=submitit`)", writer="submitit"),
    ),
}


#: each kind's folder, for the page
KINDS = {"run": "A run's directory (`pazo-train`, `hydra.run.dir`)",
         "audit": "An audit's directory (`pazo-audit`)",
         "selection release": "A private selection's release (`<sweep>/<cell>/selected,seed=<s>/`)",
         "sweep": "A sweep's own records (`pazo-sweep --out <dir>`, beside its runs' directories)"}


def entry(kind: str, relative: str | Path) -> File | None:
    """The listed file of computation `kind` that `relative` (a path below its folder) is, or None."""
    relative = Path(relative).as_posix()
    return next((f for f in FILES[kind] if _matches(relative, f.pattern)), None)


def _matches(relative: str, pattern: str) -> bool:
    if pattern.endswith("/**"):
        return relative.startswith(pattern[:-2])
    return fnmatch(relative, pattern) and relative.count("/") == pattern.count("/")


# ------------------------------------------------------------------ writes of released and public files

def in_sweep_workspace(path: Path | str) -> bool:
    """Whether `path` lies in a sweep's private workspace (`<sweep>/.private/`), where every file is
    owner-only: a K run's released and public files are the workspace's, never released as they are."""
    path = Path(path)
    with contextlib.suppress(OSError):   # (a working directory since removed: the path as given)
        path = path.absolute()
    return SWEEP_WORKSPACE in path.parts[:-1]


def umask_for(folder: Path | str) -> int:
    """The umask for a process that writes into `folder` (`subprocess.Popen`'s `umask`): owner-only in
    a sweep's private workspace (the files other programs' code writes there, Hydra's log and launch
    record, are then owner-only from creation); -1 elsewhere (the parent's)."""
    return OWNER_ONLY_UMASK if in_sweep_workspace(Path(folder) / "file") else -1


@contextlib.contextmanager
def umask_in(folder: Path | str):
    """This process's umask, while it has other programs' code write into `folder`, `umask_for`'s
    (submitit's job records and logs in a sweep's private workspace: owner-only from creation; the
    jobs it submits inherit it). The umask is the process's: only around work of one thread."""
    mask = umask_for(folder)
    before = os.umask(mask) if mask >= 0 else None
    try:
        yield
    finally:
        if before is not None:
            os.umask(before)


def released_mode(path: Path | str) -> int:
    """A released or public file's mode: 0644, or 0600 in a sweep's private workspace."""
    return MODES[PRIVATE_WORKSPACE] if in_sweep_workspace(path) else MODES[RELEASED]


def write_released(path: Path | str, content) -> None:
    """A released or public file, whole or not at all (`pazo.files.rundir.write_atomic`), mode
    `released_mode` from its creation. `content`: bytes, or a function writing into the open binary file."""
    mode = released_mode(path)
    rundir.write_atomic(path, content, mode=mode)


def open_released(path: Path | str, append: bool = False):
    """A released or public file opened for binary writing (metrics.jsonl, a run's stdout.log), mode
    `released_mode` (also where an earlier launch left it with another)."""
    return rundir.open_file(path, released_mode(path), append=append)   # (the module's: what a test patches)


def cut_back(path: Path | str, size: int) -> None:
    """A released file cut back to its first `size` bytes (a row a kill or a full disk left half written)."""
    os.truncate(path, size)


def move_released(source: Path | str, target: Path | str) -> None:
    """An earlier attempt's file or folder moved into `target` (attempts/<n>/), modes kept."""
    shutil.move(str(source), str(target))


def release_staged(staging: Path, folder: Path) -> None:
    """Each file another program wrote into `staging` (a folder inside `folder`, so on its file system)
    put at its place in `folder` as a released file, written once: its mode `released_mode`, its bytes
    flushed to the disk, then renamed there whole. A link, or a file with another name elsewhere (whose
    mode a chmod would change there too), is never moved: its bytes are copied. What stands at the
    place and is not a regular file is refused, as every released write refuses it."""
    for written in sorted(path for path in staging.rglob("*") if path.is_file()):
        target = folder / written.relative_to(staging)
        refuse_special(target)
        with writing(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            if written.is_symlink() or written.stat().st_nlink > 1:
                write_released(target, written.read_bytes())
                continue
            os.chmod(written, released_mode(target))
            with open(written, "rb") as staged:
                os.fsync(staged.fileno())
            os.replace(written, target)


def release_into(staging: Path, files: dict[str, bytes], stamp: float) -> None:
    """A release's files written into the empty folder `staging` (0755), each 0644, every time set
    to `stamp` (the files' own times would tell how long what ran before them took)."""
    for name, data in files.items():
        write_released(staging / name, data)
    os.chmod(staging, 0o755)
    for path in [*staging.iterdir(), staging]:
        os.utime(path, (stamp, stamp))


def new_staging(staging: Path) -> None:
    """An empty folder `staging` for a release (what a broken-off earlier release left there goes)."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)


def publish(staging: Path, public: Path, top: Path, stamp: float) -> None:
    """A release's staged folder put in `public`'s place whole (what `public` held goes); the times
    of the folders from `top` down to `public` set to `stamp`."""
    shutil.rmtree(public, ignore_errors=True)
    staging.rename(public)
    relative = public.relative_to(top)
    for folder in [relative, *relative.parents]:
        os.utime(top / folder, (stamp, stamp))


# ------------------------------------------------------------------ the private workspace

def workspace(run_dir: Path | str) -> Path:
    """The run's private workspace `<run_dir>/private/`, made if needed, owner-only (0700)."""
    folder = Path(run_dir) / WORKSPACE
    with writing(folder):
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    return folder


def write_private(path: Path | str, content) -> None:
    """An owner-only file (0600), whole or not at all; its folder, where it is a run's `private/`,
    made owner-only first."""
    path = Path(path)
    if path.parent.name == WORKSPACE:
        workspace(path.parent.parent)
    rundir.write_atomic(path, content, mode=MODES[SECRET])


def open_private(path: Path | str, append: bool = True):
    """An owner-only file (0600) opened for binary writing, unbuffered (a kill loses nothing written);
    its folder, where it is a run's `private/`, made owner-only first."""
    path = Path(path)
    if path.parent.name == WORKSPACE:
        workspace(path.parent.parent)
    return rundir.open_file(path, MODES[SECRET], append=append)


def make_owner_only(path: Path | str) -> None:
    """A file another program wrote (Hydra's launch record) made readable by its owner alone."""
    os.chmod(path, MODES[SECRET])


def owner_only_dirs(path: Path, top: str) -> Path:
    """`path` made, with every folder from its part named `top` down owner-only (0700)."""
    path.mkdir(parents=True, exist_ok=True)
    parts = path.parts
    for i in range(parts.index(top) + 1, len(parts) + 1):
        os.chmod(Path(*parts[:i]), 0o700)
    return path


def seal(folder: Path) -> None:
    """Every file under `folder` 0600 and every folder 0700: a workspace stays its owner's."""
    for root, _, files in os.walk(folder):
        os.chmod(root, 0o700)
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                os.chmod(path, MODES[SECRET])


def as_markdown() -> str:
    """`FILES` as the page "What leaves a run": a table per kind of computation."""
    lines = ["## The files of each computation", "",
             "Every file each kind of computation may hold (`pazo.run.gate.FILES`, through which pazo writes them), "
             "its status and its mode. `released` and `public` files may leave (0644); `private-workspace` "
             "and `secret` ones are readable by their owner alone (0600, in a folder that is 0700 where it is "
             "a run's `private/` or a sweep's `.private/`). The keys column names the list above that decides "
             "which keys the file may hold; `config`: the resolved config, its secret keys withheld wherever "
             "it leaves.", ""]
    for kind, files in FILES.items():
        lines += [f"### {KINDS[kind]}", "", "| file | status | mode | keys | written by | why |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| `{f.pattern}` | {f.status} | {f.mode:04o} | {f.keys or '-'} | {f.writer} | {f.why} |"
                  for f in files]
        lines.append("")
    return "\n".join(lines)
