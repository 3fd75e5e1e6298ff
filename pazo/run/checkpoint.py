"""Resume after preemption: what a run needs to continue exactly, when it is saved, and what a
relaunch into an existing run directory does.

A checkpoint (`checkpoint.pt`, written atomically) holds the model's state, every random stream
(the run's numpy streams, the torch generators handed out by `RandomStreams` - noise among them -,
torch's global generators), the sampler's state and the loop's state (step, best accuracies, the
statistics since the last logged row, and how many bytes of `metrics.jsonl` were written). It is
saved every `train.checkpoint_every` steps, or every `train.checkpoint_minutes` of wall time, and
when SIGTERM, SIGUSR1 or SIGUSR2 (a scheduler's warning) or SIGINT arrives, after the step in
progress. It holds the noise stream's state (and torch's generator states, from which the seed can
be read back), so it is as sensitive as the private data and the secret seed: it lives in the run's
private workspace (`private/checkpoint.pt`, `pazo.run.gate`), readable by its owner only (0600 in a 0700
folder), never archived into `attempts/`, deleted when the run finishes
(`train.keep_checkpoint=true` keeps it, 0600 still) and when the run fails (a failed run is not
resumed), and a write that breaks off leaves no `.tmp` file behind. A run directory of an earlier
pazo keeps its checkpoint at `<run dir>/checkpoint.pt`: it is found there and resumed from, and the
next checkpoint goes to `private/` (the old one is deleted). A relaunch that is refused
(another config, another computation) keeps it, so that the run can still be resumed as it ran.

A relaunch into a run directory (the same `hydra.run.dir`, or the same sweep run) resumes from the
checkpoint a preempted, interrupted, killed or faulted (`fault`: the machine refused a write, e.g.
a full disk) run left, when its config is the same; what else it may do (nothing, a replay, a
refusal) is `pazo.run.attempts`' rule. A checkpoint or summary that cannot be read (truncated,
garbage) is refused in one line naming the file, and nothing is moved.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from pazo.commands.interrupts import sigterm_handled_from_now
from pazo.errors import ConfigError
from pazo.files.file_kinds import read_regular_text
from pazo.run import gate
from pazo.files.rundir import MODEL_FILE, OLD_MODEL_FILE

CHECKPOINT = "checkpoint.pt"
#: statuses of a run stopped before its end that resume from their checkpoint
RESUMABLE = ("preempted", "interrupted", "killed", "fault")
#: what a checkpoint must hold, and of which type
CHECKPOINT_KEYS = {"fingerprint": str, "model": dict, "streams": dict, "sampler": dict, "loop": dict,
                   "extra": dict, "torch_rng": torch.Tensor, "cuda_rng": list}
#: an attempt's own files (Hydra's train.log is open by then and keeps every attempt's lines; an
#: attempt of an older pazo saved its model as model.pt)
FILES = ("summary.json", "metrics.jsonl", "config.yaml", MODEL_FILE, OLD_MODEL_FILE, "wandb", "metrics.csv",
         "tensorboard")
HEARTBEAT_SECONDS = 30.0
STALE_AFTER_SECONDS = 4 * HEARTBEAT_SECONDS
@dataclass
class LoopState:
    """The training loop's own state between two steps."""

    step: int = 0
    best_acc: float = -1.0
    best_val_acc: float = -1.0
    last_eval: dict | None = None
    last_val: dict | None = None
    step_times: list[float] = field(default_factory=list)
    window: dict[str, list[float]] = field(default_factory=dict)
    stat_sums: dict[str, float] = field(default_factory=dict)
    last_row: int = 0
    metrics_bytes: int = 0


def heartbeat_age(summary: dict) -> float | None:
    """Seconds since a running run last showed it was alive (None: no heartbeat recorded)."""
    beat = summary.get("heartbeat")
    return None if beat is None else max(0.0, time.time() - float(beat))


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def effective_status(summary: dict) -> str:
    """`killed` for a run still marked running whose process is gone (same host) or whose
    heartbeat stopped (any host); else the recorded status."""
    status = summary.get("status", "incomplete")
    if status == "running":
        if summary.get("host") == socket.gethostname() and summary.get("pid") is not None:
            if not process_alive(int(summary["pid"])):
                return "killed"
        age = heartbeat_age(summary)
        if age is None or age > STALE_AFTER_SECONDS:
            return "killed"
    return status


def read_summary(path: Path) -> dict | None:
    """A run's summary.json as a dict, or None when it cannot be read or is not a JSON object."""
    try:
        summary = json.loads(read_regular_text(path))   # (a FIFO in its place: None, never waited on)
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def read_checkpoint(path: Path) -> dict:
    """A checkpoint as saved by `save_checkpoint`, or a ConfigError naming the file and what is
    wrong with it (truncated, garbage, an older or foreign file): it is kept as it is."""
    how = (f"the run cannot resume from it. Move it away to start the run over (the earlier files then go to "
           f"attempts/<n>/), or give another hydra.run.dir; {path.name} is kept as it is")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch.load's errors differ by damage: RuntimeError, UnpicklingError, EOFError, ...
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise ConfigError(f"checkpoint {path} cannot be read (truncated, or not a pazo checkpoint: "
                          f"{type(err).__name__}: {reason}); {how}") from None
    if not isinstance(checkpoint, dict):
        raise ConfigError(f"checkpoint {path} holds a {type(checkpoint).__name__}, not a pazo checkpoint; {how}")
    wrong = [key for key, kind in CHECKPOINT_KEYS.items() if not isinstance(checkpoint.get(key), kind)]
    loop_keys = set(LoopState.__dataclass_fields__)
    if not wrong and set(checkpoint["loop"]) != loop_keys:
        wrong = ["loop"]
    if wrong:
        raise ConfigError(f"checkpoint {path} is not a complete pazo checkpoint (missing or malformed: "
                          f"{', '.join(wrong)}); {how}")
    return checkpoint


def checkpoint_path(run_dir: Path | str) -> Path:
    """Where the run's checkpoint is: `private/checkpoint.pt`, or `checkpoint.pt` in a run directory
    an earlier pazo wrote (the old layout) when only that one exists."""
    new, old = Path(run_dir) / gate.WORKSPACE / CHECKPOINT, Path(run_dir) / CHECKPOINT
    return old if old.exists() and not new.exists() else new


def archive_files(run_dir: Path) -> str:
    """Move an earlier attempt's files to attempts/<n>/ (nothing already written is lost); its
    checkpoint, which holds the noise stream and will never be resumed, is deleted instead.
    Whether a launch may do so is `pazo.run.attempts`' rule."""
    discard_checkpoint(run_dir)
    attempts = run_dir / "attempts"
    n = 1 + max((int(p.name) for p in attempts.iterdir() if p.name.isdigit()), default=0) if attempts.exists() else 1
    target = attempts / str(n)
    target.mkdir(parents=True)
    for name in FILES:
        if (run_dir / name).exists():
            gate.move_released(run_dir / name, target / name)
    return str(target)


def save_checkpoint(run_dir: Path, *, fingerprint: str, module: torch.nn.Module, streams, sampler,
                    loop: LoopState, extra: dict) -> None:
    """Everything the run needs to continue exactly from here, written atomically into the private
    workspace (0600): a full disk or a kill during the write leaves the previous checkpoint (a
    WriteFault names the file); one of the old layout goes once this one is written."""
    state = {"fingerprint": fingerprint, "model": module.state_dict(), "streams": streams.state(),
             "sampler": sampler.state(), "loop": asdict(loop), "extra": extra,
             "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    gate.write_private(Path(run_dir) / gate.WORKSPACE / CHECKPOINT, lambda f: torch.save(state, f))
    (Path(run_dir) / CHECKPOINT).unlink(missing_ok=True)


def _checkpoint_files(run_dir: Path) -> list[Path]:
    """Every place a checkpoint or a broken-off write of one may be, in either layout."""
    return [folder / name for folder in (Path(run_dir) / gate.WORKSPACE, Path(run_dir))
            for name in (CHECKPOINT, CHECKPOINT + ".tmp", "checkpoint.tmp")]


def remove_tmp_checkpoint(run_dir: Path) -> None:
    """Delete a checkpoint write a kill broke off (never resumed from)."""
    for path in _checkpoint_files(run_dir):
        if path.name != CHECKPOINT:
            path.unlink(missing_ok=True)


def discard_checkpoint(run_dir: Path) -> None:
    """Delete a run's checkpoint and any half-written one (they hold the noise stream)."""
    for path in _checkpoint_files(run_dir):
        path.unlink(missing_ok=True)


def resume_state(run, sampler, checkpoint: dict, path: Path | None = None) -> LoopState:
    """The run (`pazo.run.build.Run`: its model, every stream, the optimiser's moments, none under
    sgd) and its sampler put back where `checkpoint` (read from `path`) left them, as
    `pazo.run.recorder.Recorder.checkpoint` saved them; the loop's state. A checkpoint whose contents
    do not fit this run (another model's weights, damaged states) is a ConfigError naming the file."""
    try:
        run.module.load_state_dict(checkpoint["model"])
        run.streams.load_state(checkpoint["streams"])
        sampler.load_state(checkpoint["sampler"])
        torch.set_rng_state(checkpoint["torch_rng"])
        if checkpoint["cuda_rng"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(checkpoint["cuda_rng"])
        loop = LoopState(**checkpoint["loop"])
    except (RuntimeError, KeyError, TypeError, ValueError, IndexError) as err:
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise ConfigError(f"checkpoint {path or CHECKPOINT} does not fit this run ({type(err).__name__}: {reason}); "
                          "the run cannot resume from it. Move it away to start the run over, or give another "
                          "hydra.run.dir; it is kept as it is") from None
    run.method.update_rule.load_state_dict(checkpoint["extra"].get("optimizer"))
    return loop


class StopRequests:
    """Turns SIGTERM/SIGUSR1/SIGUSR2 (`preempted`) and SIGINT (`interrupted`) into a request the
    loop honours after the step in progress; a second SIGINT during a step interrupts at once.
    Once the run is writing its last files (`shield()`: the checkpoint and summary of a stop, the
    record of an interruption or crash, the finished run's files), further signals are noted
    and ignored, so that the shutdown completes and the summary says how the run ended."""

    SIGNALS = {"SIGTERM": "preempted", "SIGUSR1": "preempted", "SIGUSR2": "preempted", "SIGINT": "interrupted"}
    SHUTTING_DOWN = (b"pazo: already stopping: writing the run's checkpoint and summary; further Ctrl-C is "
                     b"ignored until they are written\n")

    def __init__(self):
        self.reason: str | None = None
        self.shielded = False
        self._told = False
        self._previous: dict = {}

    def shield(self) -> None:
        self.shielded = True

    def _handle(self, signum, frame):
        if self.shielded:
            if not self._told:
                self._told = True
                os.write(2, self.SHUTTING_DOWN)  # (no logging or print in a handler: they take locks)
            return
        if self.reason == "interrupted" and signum == signal.SIGINT:
            self.shielded = True   # the KeyboardInterrupt's own record is not interrupted again
            raise KeyboardInterrupt
        self.reason = self.reason or self.SIGNALS[signal.Signals(signum).name]

    def __enter__(self):
        sigterm_handled_from_now()   # (pazo's SIGTERM of the set-up, `Terminated`, is done: not put back after)
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        return False


class Heartbeat:
    """Calls `beat()` every HEARTBEAT_SECONDS from a daemon thread, so that a run killed outright
    (SIGKILL, a lost node) is recognisable by its stale heartbeat, even during a long step."""

    def __init__(self, beat, interval: float = HEARTBEAT_SECONDS):
        self._beat, self._interval, self._stop = beat, interval, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="pazo-heartbeat")

    def _run(self):
        while not self._stop.wait(self._interval):
            self._beat()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)
        return False
