"""Resume after preemption: what a run needs to continue exactly, when it is saved, and what a
relaunch into an existing run directory does.

A checkpoint (`checkpoint.pt`, written atomically) holds the model's state, every random stream
(the run's numpy streams, the torch generators handed out by `RandomStreams` - noise among them -,
torch's global generators), the sampler's state and the loop's state (step, best accuracies, the
statistics since the last logged row, and how many bytes of `metrics.jsonl` were written). It is
saved every `train.checkpoint_every` steps, or every `train.checkpoint_minutes` of wall time, and
when SIGTERM, SIGUSR1 or SIGUSR2 (a scheduler's warning) or SIGINT arrives, after the step in
progress. It holds the noise stream's state (and torch's generator states, from which the seed can
be read back), so it is as sensitive as the private data and the secret seed: it is readable by its
owner only (0600), never archived into `attempts/`, deleted when the run finishes
(`train.keep_checkpoint=true` keeps it, 0600 still) and when the run fails (a failed run is not
resumed), and a write that breaks off leaves no `.tmp` file behind. A relaunch that is refused
(another config, another computation) keeps it, so that the run can still be resumed as it ran.

A relaunch into a run directory (the same `hydra.run.dir`, or the same sweep run) reads its
`summary.json`: a finished run is not re-run; a run whose heartbeat is fresh is refused (another
process is writing there); a preempted, interrupted or killed run with a checkpoint resumes from it
(its config must be the same); anything else starts over, and the earlier attempt's files are moved
to `attempts/<n>/` first, so nothing written is lost.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from pazo.errors import ConfigError
from pazo.fingerprint import config_without

CHECKPOINT = "checkpoint.pt"
#: an attempt's own files (Hydra's train.log is open by then and keeps every attempt's lines)
FILES = ("summary.json", "metrics.jsonl", "config.yaml", "model.pt", "wandb")
HEARTBEAT_SECONDS = 30.0
STALE_AFTER_SECONDS = 4 * HEARTBEAT_SECONDS
#: config keys that may differ between the attempts of one run (where and how it runs, not what;
#: `method.public_grads_together` too: a run resumed on a smaller GPU may need the public gradients
#: one after another, and checkpoints written before the key existed still resume)
NOT_COMPARED = ("logger", "device", "privacy.cache_dir", "dataset.root", "dataset.cache_dir", "train.checkpoint_every",
                "train.checkpoint_minutes", "train.keep_checkpoint", "train.save_model", "train.eval_batch_size",
                "method.public_grads_together")


def config_fingerprint(cfg) -> str:
    """The resolved config minus where/how keys, as canonical JSON: equal for attempts of one run."""
    return json.dumps(config_without(cfg, NOT_COMPARED), sort_keys=True, default=str)


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


@dataclass
class Start:
    """What a launch into `run_dir` does: `fresh`, `resume` (from `checkpoint`) or `finished`."""

    kind: str
    summary: dict | None = None
    checkpoint: dict | None = None
    moved_to: str | None = None
    #: a fresh start over an earlier attempt: whether that attempt released rows, and whether its
    #: files still wait to be moved to attempts/<n>/ (`archive_attempt`, once the launch is checked)
    released: bool = False
    pending_archive: bool = False


def prepare_run_dir(run_dir: Path, fingerprint: str, secure: bool = False, archive: bool = True) -> Start:
    """Decide, from what `run_dir` holds, whether this launch resumes, starts afresh or has nothing to do.

    `secure` (privacy.secure_mode): a fresh start would draw new secret noise and batches, so an
    earlier attempt that released rows and cannot be resumed is refused rather than started over
    (its releases would be outside the new attempt's epsilon). A seeded run starting over under the
    same computation fingerprint replays the same noise and batches from its seed, which releases
    nothing new only if the computation is the earlier attempt's (the caller checks it:
    `archive=False` leaves the earlier files in place until `archive_attempt`)."""
    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        if (run_dir / "metrics.jsonl").exists():  # written by an attempt that never wrote a summary
            return _start_over(run_dir, secure, archive)
        return Start("fresh")
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return _start_over(run_dir, secure, archive)
    status = effective_status(summary)
    if status == "finished":
        return Start("finished", summary=summary)
    if status == "running":
        raise ConfigError(f"run directory {run_dir} is in use: its run wrote a heartbeat "
                          f"{heartbeat_age(summary):.0f} s ago; wait for it, or give another hydra.run.dir")
    ckpt_path = run_dir / CHECKPOINT
    if status in ("preempted", "interrupted", "killed") and ckpt_path.exists():
        checkpoint = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        if checkpoint["fingerprint"] != fingerprint:
            raise ConfigError(f"run directory {run_dir} holds a checkpoint of a run with another config; "
                              "resume it with the same overrides, or give another hydra.run.dir")
        return Start("resume", summary=summary, checkpoint=checkpoint)
    return _start_over(run_dir, secure, archive, summary)


def released_rows(run_dir: Path, summary: dict | None) -> bool:
    """Whether an attempt in `run_dir` released anything computed from the private data: a row of
    metrics.jsonl (mirrored to W&B and the terminal) or a summary (`summary`, as read) of steps done."""
    metrics = run_dir / "metrics.jsonl"
    return (metrics.exists() and metrics.stat().st_size > 0) or bool((summary or {}).get("steps_done"))


def _start_over(run_dir: Path, secure: bool, archive: bool, summary: dict | None = None) -> Start:
    released = released_rows(run_dir, summary)
    if secure and released:
        raise ConfigError(f"run directory {run_dir} holds an attempt of this secure-mode run that released rows "
                          "and cannot be resumed; starting over would draw new secret noise, and the printed "
                          "epsilon would not count the earlier attempt's releases: give another hydra.run.dir "
                          "and count both runs' privacy yourself")
    if not archive:
        return Start("fresh", summary=summary, released=released, pending_archive=True)
    return Start("fresh", moved_to=_archive(run_dir), released=released)


def archive_attempt(run_dir: Path, start: Start) -> None:
    """Move the earlier attempt's files away (`Start.pending_archive`), now that the launch is checked."""
    if start.pending_archive:
        start.moved_to, start.pending_archive = _archive(Path(run_dir)), False


def _archive(run_dir: Path) -> str:
    """Move an earlier attempt's files to attempts/<n>/ (nothing already written is lost); its
    checkpoint, which holds the noise stream and will never be resumed, is deleted instead."""
    discard_checkpoint(run_dir)
    attempts = run_dir / "attempts"
    n = 1 + max((int(p.name) for p in attempts.iterdir() if p.name.isdigit()), default=0) if attempts.exists() else 1
    target = attempts / str(n)
    target.mkdir(parents=True)
    for name in FILES:
        if (run_dir / name).exists():
            shutil.move(str(run_dir / name), str(target / name))
    return str(target)


def save_checkpoint(run_dir: Path, *, fingerprint: str, module: torch.nn.Module, streams, sampler,
                    loop: LoopState, extra: dict) -> None:
    """Everything the run needs to continue exactly from here, written atomically."""
    state = {"fingerprint": fingerprint, "model": module.state_dict(), "streams": streams.state(),
             "sampler": sampler.state(), "loop": asdict(loop), "extra": extra,
             "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}
    path = Path(run_dir) / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # also when an earlier .tmp was left with other bits
            torch.save(state, f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def discard_checkpoint(run_dir: Path) -> None:
    """Delete a run's checkpoint and any half-written one (they hold the noise stream)."""
    for name in (CHECKPOINT, Path(CHECKPOINT).with_suffix(".tmp").name):
        (Path(run_dir) / name).unlink(missing_ok=True)


def restore_checkpoint(checkpoint: dict, *, module: torch.nn.Module, streams, sampler) -> LoopState:
    """Put the model, every stream and the sampler back where the checkpoint left them."""
    module.load_state_dict(checkpoint["model"])
    streams.load_state(checkpoint["streams"])
    sampler.load_state(checkpoint["sampler"])
    torch.set_rng_state(checkpoint["torch_rng"])
    if checkpoint["cuda_rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(checkpoint["cuda_rng"])
    return LoopState(**checkpoint["loop"])


class StopRequests:
    """Turns SIGTERM/SIGUSR1/SIGUSR2 (`preempted`) and SIGINT (`interrupted`) into a request the
    loop honours after the step in progress; a second SIGINT interrupts at once."""

    SIGNALS = {"SIGTERM": "preempted", "SIGUSR1": "preempted", "SIGUSR2": "preempted", "SIGINT": "interrupted"}

    def __init__(self):
        self.reason: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.reason == "interrupted" and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.reason = self.reason or self.SIGNALS[signal.Signals(signum).name]

    def __enter__(self):
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
