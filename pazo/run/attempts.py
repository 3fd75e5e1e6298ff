"""One rule for a launch into a run directory: what an earlier attempt released decides what this
launch may do, so that the printed epsilon covers every attempt of the directory.

An attempt *released* something when it wrote a row of metrics.jsonl (mirrored to W&B and the
terminal) or a summary of steps done: those rows were computed from the private data with that
attempt's noise, and cannot be taken back. What earlier attempts released is read from every outlet
the directory holds (`pazo.run.releases.earlier_releases`: metrics.jsonl, summary.json, W&B's local
files, train.log and stdout.log, the archived attempts), so that a file deleted, cut short or edited
hides no release another still shows; the highest step among them is what a later attempt's epsilon
covers (`privacy.steps_released`). A launch into a directory

- that holds nothing, or only an attempt that released nothing, starts afresh (the earlier files,
  if any, go to `attempts/<n>/`);
- whose run finished has nothing to do (with another config: refused);
- whose run is alive is refused;
- whose run stopped with a checkpoint *resumes* it: the same config (the checkpoint's fingerprint)
  and the same computation (device, sigma, public gradients, the private data read), so the rest
  of its steps follow from the saved noise stream and every step is counted once;
- whose earlier attempt released rows and cannot be resumed either *replays* it or is refused.
  A replay is a seeded (not secure-mode) launch of the same config, seed and computation: it draws
  the earlier attempt's noise and batches again from step 1, so its releases are the earlier
  ones again and the steps count once (the earlier rows are copied back to metrics.jsonl, so the
  directory's last row keeps covering them, and the replay writes rows only past them).
  Everything else is refused with one line that names what differs and suggests a new
  `hydra.run.dir`, and nothing is moved: an earlier secure-mode attempt
  (its noise came from the operating system and cannot be drawn again), a secure-mode launch after
  a seeded attempt, another config (any compared key, the seed included), another spelling of one
  that hashes differently, another device, data or sigma, and an earlier attempt whose summary or
  config cannot be read (what it computed cannot be told). A seeded attempt never continues a
  secure one.

The check has two halves: `plan_launch` before any compute (from the files), `check_launch` once
the run is built (the computation: sigma, device, the private data's digest), and only then
`accept_launch` moves the earlier files away and starts the attempt's records. The private data's
digest of the attempt that ran last is kept in the run's private workspace,
`private/private_computation.json` (`pazo.run.gate`), readable by its owner only (0600), like the
checkpoint: a hash of the private data would tell which data set it is. A run directory of an
earlier pazo keeps it beside summary.json: it is read there until this launch writes its own.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from pazo.commands.console import open_run_logs
from pazo.files.rundir import WriteFault, accept_hydra_record
from pazo.run import gate
from pazo.run.checkpoint import (RESUMABLE, LoopState, archive_files, checkpoint_path, effective_status,
                                 heartbeat_age, read_checkpoint, read_summary, remove_tmp_checkpoint, resume_state)
from pazo.errors import ConfigError
from pazo.run.fingerprint import NOT_COMPARED, canonical_json, config_fingerprint
from pazo.run.metrics_file import FILE as METRICS, CorruptMetrics, read_metric_rows
from pazo.run.recorder import LastSummary, Recorder
from pazo.run.releases import Release, earlier_releases, summary_step
from pazo.run.summary import launch_summary
from pazo.run.typed import RunConfig, typed_config

#: the private record of the last attempt's computation (its data digest among it): 0600, never archived
PRIVATE_RECORD = "private_computation.json"
#: config keys whose value is not shown in a refusal (the seed is secret: `assumes (seed_secret)`)
SECRET_KEYS = ("seed",)
NEW_DIRECTORY = "nothing was moved: give another hydra.run.dir"


@dataclass
class Start:
    """What a launch into a run directory does: `fresh`, `resume` (from `checkpoint`), `replay`
    (a seeded start over of the same computation, after rows were released) or `finished`."""

    kind: str
    summary: dict | None = None
    checkpoint: dict | None = None
    moved_to: str | None = None
    #: earlier files wait to be moved to attempts/<n>/ (`accept_launch`, once the launch is checked)
    pending_archive: bool = False
    #: what the directory's earlier attempts released (this attempt's epsilon covers it)
    released: Release = Release()

    @property
    def resuming(self) -> bool:
        return self.kind == "resume"

    @property
    def replaying(self) -> bool:
        """Steps of an earlier attempt run again with its noise (a resume's, or a replay's from step 1)."""
        return self.kind in ("resume", "replay")


def secure_run(values: dict) -> bool:
    """Whether the typed values of a config (`RunConfig.values`, `earlier_config`) draw its secret
    streams from the OS."""
    privacy = values.get("privacy") or {}
    return bool(privacy.get("secure_mode") and privacy.get("epsilon") is not None)


def plan_launch(run_dir: Path, cfg: RunConfig) -> Start:
    """What a launch of `cfg` (resumed by `cfg.fingerprint`, its `config_fingerprint`) into `run_dir` does, decided
    from the directory's files before any compute; a ConfigError (one line, nothing moved) where the
    rule refuses it."""
    run_dir = Path(run_dir)
    summary_path, ckpt_path = run_dir / "summary.json", checkpoint_path(run_dir)
    if not summary_path.exists():
        released = earlier_releases(run_dir)
        if released or (run_dir / "metrics.jsonl").exists():  # by an attempt that never wrote a summary
            return _start_over(run_dir, cfg, None, released)
        return Start("fresh")
    summary = read_summary(summary_path)
    if summary is None:
        if ckpt_path.exists():  # the checkpoint may be good: never delete it on a guess
            raise ConfigError(f"{summary_path} cannot be read (truncated or not a pazo summary), and {run_dir} "
                              f"holds a checkpoint: restore summary.json to resume, or move {ckpt_path} away to "
                              "start the run over (the earlier files then go to attempts/<n>/)")
        return _start_over(run_dir, cfg, None, earlier_releases(run_dir))
    status = effective_status(summary)
    if status == "finished":
        changed = config_changes(run_dir, cfg.values)
        if changed:
            raise ConfigError(f"run directory {run_dir} holds a finished run of another config ({shown(changed)}); "
                              "its files are kept as they are: give another hydra.run.dir")
        return Start("finished", summary=summary)
    if status == "running":
        raise ConfigError(f"run directory {run_dir} is in use: its run wrote a heartbeat "
                          f"{heartbeat_age(summary):.0f} s ago; wait for it, or give another hydra.run.dir")
    if status in RESUMABLE and ckpt_path.exists():
        checkpoint = read_checkpoint(ckpt_path)
        if checkpoint["fingerprint"] != cfg.fingerprint:
            changed = differences(earlier_config(run_dir), cfg.values)
            raise ConfigError(f"run directory {run_dir} holds a checkpoint of a run with another config"
                              f"{f' ({shown(changed)})' if changed else ''}; resume it with the same overrides, "
                              "or give another hydra.run.dir")
        remove_tmp_checkpoint(run_dir)  # a write a kill broke off: never resumed from
        refuse_corrupt_rows(run_dir)
        return Start("resume", summary=summary, checkpoint=checkpoint, released=earlier_releases(run_dir))
    return _start_over(run_dir, cfg, summary, earlier_releases(run_dir))


def released_rows(run_dir: Path, summary: dict | None = None) -> bool:
    """Whether an attempt in `run_dir` released anything computed from the private data, as any of
    its outlets shows (`earlier_releases`) or `summary` (a summary of steps done the caller holds)."""
    return bool(earlier_releases(run_dir)) or summary_step(summary) > 0


def _start_over(run_dir: Path, cfg, summary: dict | None, released: Release) -> Start:
    """A launch over an attempt that cannot be resumed: afresh if no outlet shows a release
    (`released`), a replay if this launch is its computation again, seeded; refused otherwise."""
    if not released:
        return Start("fresh", summary=summary, pending_archive=True)
    earlier = earlier_config(run_dir)
    if secure_run(earlier or {}):
        _refuse(run_dir, released, "of a secure-mode run", "its noise came from the operating system and cannot "
                "be drawn again, so a start over would release new noise that the printed epsilon does not count "
                "with the earlier releases")
    if summary is None or earlier is None:
        missing = "summary.json" if summary is None else "config.yaml"
        _refuse(run_dir, released, "", f"its {missing} cannot be read, so whether this launch computes the same "
                "cannot be told, and its releases would not be counted")
    if secure_run(cfg.values):
        _refuse(run_dir, released, "of a seeded run", "this launch is in secure mode: it would draw new noise, and "
                "the printed epsilon would not count the earlier releases")
    changed = config_changes(run_dir, cfg.values)
    if changed:
        _refuse(run_dir, released, f"of another config ({shown(changed)})", "this launch would draw other noise, "
                "and the printed epsilon would not count the earlier releases (relaunch it as it ran to replay it)")
    refuse_corrupt_rows(run_dir)
    return Start("replay", summary=summary, pending_archive=True, released=released)


def refuse_corrupt_rows(run_dir: Path) -> None:
    """A resume or a replay carries the directory's metrics.jsonl on (its rows were released): one
    with a bad line before its last (`pazo.run.metrics_file`: edited or damaged) is refused before any
    compute, as the reports refuse it, rather than cut at the bad line with the released rows after
    it. A torn last row (what a kill leaves) is no reason: the recorder cuts it."""
    metrics = Path(run_dir) / METRICS
    try:
        if metrics.exists():
            read_metric_rows(metrics)
    except CorruptMetrics as err:
        raise ConfigError(f"{err}; nothing was moved: restore the file to relaunch this run, or give another "
                          "hydra.run.dir") from None
    except OSError as err:
        raise ConfigError(f"{metrics} cannot be read ({err.strerror}); {NEW_DIRECTORY}") from None


def check_launch(run_dir: Path, start: Start, run) -> None:
    """Once the run is built, before anything is moved: a launch that replays an earlier
    attempt's noise (a resume from its checkpoint, a seeded replay from step 1) must compute what
    that attempt computed, else two releases with one noise draw reveal their difference without
    noise. A replay must also draw that attempt's noise (the same computation fingerprint)."""
    if start.resuming:
        same_computation(start.checkpoint.get("extra", {}).get("computation"), run.private_computation, run_dir)
    elif start.kind == "replay":
        then = (start.summary or {}).get("computation")
        if not then:
            _refuse(run_dir, start.released, "", "it recorded no computation (an older run), so whether this launch "
                    "replays its noise cannot be told")
        same_computation(then, run.computation, run_dir)
        private = read_private_record(run_dir)
        missing = [key for key in run.private_computation if key not in (private or {})]
        if missing:
            _refuse(run_dir, start.released, "", f"its private record lacks {', '.join(missing)} (a run from before "
                    "these keyed the secret streams), so this launch would not draw its noise again")
        same_computation(private, run.private_computation, run_dir)


def same_computation(then: dict | None, now: dict, run_dir: Path) -> None:
    """Refuse where the computation `then` (an earlier attempt's, as recorded) differs from `now`
    in a key `then` holds: another computation fingerprint, device, data read, sigma or way of
    taking the public gradients."""
    then = then or {}
    changed = [key for key in then if then[key] != now.get(key)]
    if changed:
        listed = "; ".join(f"{key}: {then[key]!r} -> {now.get(key)!r}" for key in changed
                           if key != "private_data_sha256")
        data = "the private data read differs" if "private_data_sha256" in changed else ""
        raise ConfigError(f"run directory {run_dir} holds an attempt whose computation differs from this "
                          f"launch's ({'; '.join(x for x in (listed, data) if x)}): going on would replay its "
                          f"noise on other numbers; relaunch as it ran, or give another hydra.run.dir")


def start_attempt(run_dir: Path, start: Start, run, sampler, agree: Callable[[dict], None],
                  hydra_record: str | Path | None = None,
                  last: LastSummary | None = None) -> tuple[LoopState, Recorder, dict]:
    """A planned launch (`plan_launch`) of a built run, started in one step: checked against what
    the earlier attempt computed (`check_launch`), its loop state read from the checkpoint it
    resumes (else the first step), the ranks' agreement on the facts every rank must share
    (`agree`: rank 0's exchange, on `Run.rank_facts`) before the first write and the first step,
    then the first writes (`accept_launch`; `last`: where the recorder notes each summary it writes).
    Returns the loop state, the recorder and the first summary."""
    check_launch(run_dir, start, run)
    loop = resume_state(run, sampler, start.checkpoint, checkpoint_path(run_dir)) if start.resuming else LoopState()
    agree(run.rank_facts(loop.step))
    recorder, summary = accept_launch(run_dir, start, run, sampler, loop, hydra_record, last)
    return loop, recorder, summary


def accept_launch(run_dir: Path, start: Start, run, sampler, loop: LoopState,
                  hydra_record: str | Path | None = None, last: LastSummary | None = None) -> tuple[Recorder, dict]:
    """The launch is checked and its ranks agree: its first writes into `run_dir`, in one step. The
    earlier attempt's files move to attempts/<n>/ (its checkpoint is deleted instead), this
    attempt's private record of its computation is kept (0600), Hydra's record of the launch moves
    into .hydra/, train.log opens (the lines said since the launch began, and on), and the
    recorder starts, given the run and its sampler once (and `last`, where it notes each summary it
    writes), with the first summary (running) written. Returns the recorder and that summary."""
    if start.pending_archive:
        start.moved_to, start.pending_archive = archive_files(Path(run_dir)), False
    record = canonical_json(run.private_computation).encode()
    gate.write_private(Path(run_dir) / gate.WORKSPACE / PRIVATE_RECORD, record)
    (Path(run_dir) / PRIVATE_RECORD).unlink(missing_ok=True)   # (the old layout's)
    accept_hydra_record(run_dir, hydra_record, archive_to=start.moved_to)
    open_run_logs()
    previous = start.summary or {}
    recorder = Recorder(run_dir, run.cfg.raw, run.cfg.logger,
                        resume_bytes=loop.metrics_bytes if start.resuming else carry_released_rows(run_dir, start),
                        wandb_id=previous.get("wandb_run_id") if start.resuming else None,
                        released_before=start.released.step, run=run, sampler=sampler, last=last)
    summary = launch_summary(run_dir, run, start, loop, recorder)
    try:
        recorder.write_summary(summary)
    except WriteFault:
        recorder.close(failed=True)
        raise
    return recorder, summary


def carry_released_rows(run_dir: Path, start: Start) -> int | None:
    """A replay draws the earlier attempt's noise again from step 1: the rows that attempt released
    (archived to attempts/<n>/) are copied back to the directory's metrics.jsonl, so that its last
    row keeps covering them, and the replay does not write them twice (`Recorder.released_through`).
    Returns the byte offset the recorder continues from (None: not a replay, or no rows)."""
    earlier = Path(start.moved_to or "") / "metrics.jsonl"
    if not start.replaying or not start.moved_to or not earlier.exists():
        return None
    gate.write_released(Path(run_dir) / "metrics.jsonl", earlier.read_bytes())
    return 0


def read_private_record(run_dir: Path) -> dict | None:
    """The private computation recorded by the directory's last accepted attempt, in its private
    workspace or (the old layout) beside its summary; None: none, or an attempt from before the
    record existed, whose summary's computation is then all there is."""
    new, old = Path(run_dir) / gate.WORKSPACE / PRIVATE_RECORD, Path(run_dir) / PRIVATE_RECORD
    try:
        record = json.loads((old if old.exists() and not new.exists() else new).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def earlier_config(run_dir: Path) -> dict | None:
    """The resolved config the directory's last attempt wrote (config.yaml), its values cast to
    their schema's types (`typed_config`, once, as it is read), or None."""
    try:
        then = OmegaConf.to_container(OmegaConf.load(Path(run_dir) / "config.yaml"), resolve=False)
    except Exception:  # no readable config.yaml (an older or hand-made run): nothing to compare with
        return None
    return typed_config(then) if isinstance(then, dict) else None


def config_changes(run_dir: Path, now: dict) -> list[str]:
    """How the typed values `now` (`RunConfig.values`, typed at the door) differ from the config of
    the run the directory holds (`differences`, or "keys added or removed" where only the
    fingerprints tell them apart); [] where it holds none."""
    earlier = earlier_config(run_dir)
    if earlier is None:
        return []
    changed = differences(earlier, now)
    if not changed and config_fingerprint(earlier) != config_fingerprint(now):
        changed = ["keys added or removed"]
    return changed


def differences(then: dict | None, now: dict) -> list[str]:
    """`key: old -> new` for each compared key (`NOT_COMPARED` aside) that the earlier config
    `then` and `now` (both typed values: `earlier_config`, `RunConfig.values`) hold with different
    values (a key only one holds, added since, is not a difference); a secret key's values are not
    shown."""
    if then is None:
        return []

    def flat(node, prefix=""):
        out = {}
        for key, value in (node or {}).items():
            dotted = f"{prefix}{key}"
            if any(dotted == k or dotted.startswith(k + ".") for k in NOT_COMPARED):
                continue
            out.update(flat(value, dotted + ".") if isinstance(value, dict) else {dotted: value})
        return out

    a, b = flat(then), flat(now)
    return [f"{k}: changed (not shown)" if k in SECRET_KEYS else f"{k}: {a[k]!r} -> {b[k]!r}"
            for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]


def shown(changed: list[str]) -> str:
    return "; ".join(changed[:4]) + (f"; and {len(changed) - 4} more" if len(changed) > 4 else "")


def _refuse(run_dir: Path, released: Release, whose: str, why: str) -> None:
    raise ConfigError(f"run directory {run_dir} holds an attempt {whose + ' ' if whose else ''}that released rows "
                      f"({released.said()}): {why}; {NEW_DIRECTORY}")
