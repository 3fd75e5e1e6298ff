"""Entry point: `python -m pazo.train [overrides]` (Hydra). A run, top to bottom:

validate -> check and lock the run directory -> prepare it (fresh, resume or finished) ->
`pazo.experiment.build_run` (data, model, privacy plan, engine, method) -> `pazo.loop` (Poisson batch,
step, row, evaluation, checkpoint) -> final epsilon check -> summary.json, all written through one
`pazo.recorder.Recorder`. A user's mistake is one `pazo: error:` line (exit 2) before compute; a
write the machine refuses (full disk, no permission) is one line, its status (`fault`, resumable)
recorded in summary.json where the disk still takes it (exit 75).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import hydra
from omegaconf import DictConfig

from pazo.plugins import load_plugins
from pazo import CONFIG_DIR
from pazo.attempts import accept_launch, check_launch, plan_launch
from pazo.checkpoint import (CHECKPOINT, Heartbeat, LoopState, StopRequests, config_fingerprint, read_summary,
                             restore_checkpoint)
from pazo.cli import USER_ERRORS, check_output_location, check_overrides, multirun_jobs
from pazo.experiment import build_run, resolve_device
from pazo.loop import train_loop
from pazo.privacy.mechanisms import active_debug_break
from pazo.recorder import Recorder
from pazo.rundir import (RunDirLock, WriteFault, accept_hydra_record, check_output_dir, drop_hydra_record, is_staging,
                         remove_broken_writes, staging_subdir, write_atomic)
from pazo.privacy.plan import epsilon_spent
from pazo.summary import print_header, print_summary, released_beyond, resumed_line
from pazo.validate import ConfigError, typed_config, validate_config

log = logging.getLogger("pazo.train")  # not __name__: that is "__main__" under `python -m pazo.train`
#: exit codes: 0 finished, 1 failed, 2 bad input, 3 preempted (resumable), 75 a fault of the machine
#: (a refused write, e.g. a full disk: resumable once fixed; EX_TEMPFAIL), 130 interrupted (resumable)
EXIT_CODES = {"finished": 0, "failed": 1, "preempted": 3, "fault": 75, "interrupted": 130}


def run(cfg: DictConfig, run_dir: str | Path, hydra_record: str | Path | None = None) -> dict:
    """Train one configuration into `run_dir`, or continue it from its checkpoint; returns the
    summary written to `run_dir/summary.json`. `hydra_record`: where Hydra wrote this launch's
    record (`pazo.rundir.staging_subdir`), moved into `.hydra/` once the launch is accepted and
    dropped otherwise."""
    try:
        return _run(cfg, Path(run_dir), hydra_record)
    finally:
        drop_hydra_record(hydra_record)  # refused, or nothing to do: .hydra/ stays the record of what ran


def _run(cfg: DictConfig, run_dir: Path, hydra_record) -> dict:
    refuse_debug_breaks(cfg)
    validate_config(cfg)
    fingerprint = config_fingerprint(typed_config(cfg))
    resolve_device(cfg.device)  # (again: a multirun's jobs are checked here)
    check_output_dir(run_dir)
    with RunDirLock(run_dir):  # a second launch into run_dir is refused until this one ends
        remove_broken_writes(run_dir)
        start = plan_launch(run_dir, cfg)  # fresh, resume, replay, finished, or refused (pazo.attempts)
        if start.kind == "finished":
            log.info(f"pazo: {run_dir} holds a finished run; nothing to do "
                     f"(final test accuracy {start.summary.get('final_test_accuracy')})")
            return start.summary
        resuming, previous = start.resuming, start.summary or {}
        r = build_run(cfg, earlier_engine=previous.get("engine") if resuming else None)
        sampler = r.sampler()
        check_launch(run_dir, start, r)
        loop = (restore_checkpoint(start.checkpoint, module=r.module, streams=r.streams, sampler=sampler,
                                   path=run_dir / CHECKPOINT) if resuming else LoopState())
        accept_launch(run_dir, start, r)
        accept_hydra_record(run_dir, hydra_record, archive_to=start.moved_to)
        replayed_rows = carry_released_rows(run_dir, start)
        recorder = Recorder(run_dir, cfg, cfg.logger,
                            resume_bytes=loop.metrics_bytes if resuming else replayed_rows,
                            wandb_id=previous.get("wandb_run_id") if resuming else None, fingerprint=fingerprint,
                            released_before=start.released.step)
        summary = launch_summary(run_dir, r, start, loop, recorder)
        try:
            recorder.write_summary(summary)
        except WriteFault:
            recorder.close(failed=True)
            raise
        print_header(summary, r.plan)
        if resuming:
            log.info(resumed_line(run_dir, loop.step, r.total_steps))
        with StopRequests() as stop:
            with Heartbeat(recorder.beat):
                _, stopped = train_loop(r, sampler, loop, recorder, summary, stop)
            stop.shield()  # from here on the run writes its last files: a Ctrl-C waits for them
            if stopped:
                summary.update(status=stopped, failure=None, stopped_at_step=loop.step)
            try:
                recorder.finish(summary, r.module, cfg.train)
            except WriteFault as fault:  # model.pt or the last summary: the checkpoint stays for the relaunch
                summary.update(status="fault", failure=f"fault after step {loop.step}: {fault}",
                               final_test_accuracy=None)
                recorder.fail(summary)
                raise
    print_summary(summary)
    return summary


def launch_summary(run_dir: Path, r, start, loop: LoopState, recorder: Recorder) -> dict:
    """The summary an attempt writes as it starts (status running). From then on it covers what
    earlier attempts released (`privacy.steps_released` and its epsilon), as a kill may come before
    this attempt's first row."""
    previous = start.summary or {}
    summary = {"status": "running", **r.describe(), "run_dir": str(run_dir),
               "attempt": previous.get("attempt", 0) + 1 if start.resuming else 1,
               "resumed_from_step": loop.step if start.resuming else None,
               "earlier_attempt_moved_to": start.moved_to, "wandb_run_id": recorder.wandb_id,
               "host": socket.gethostname(), "pid": os.getpid()}
    summary["privacy"].update(released_beyond(r.plan, recorder.steps_released, loop.step,
                                              partial(epsilon_spent, r.plan)))
    if start.replaying and r.device.type == "cuda" and r.plan.private:
        summary["outside_guarantee"].append(
            f"the steps after step {loop.step} were run again with an earlier attempt's noise on CUDA, whose "
            "kernels need not be deterministic: rows that attempt released for them (W&B cannot retract "
            "them) may differ from this attempt's by more than the noise covers")
    return summary


def carry_released_rows(run_dir: Path, start) -> int | None:
    """A replay draws the earlier attempt's noise again from step 1: the rows that attempt released
    (archived to attempts/<n>/) are copied back to the directory's metrics.jsonl, so that its last
    row keeps covering them, and the replay does not write them twice (`Recorder.released_through`).
    Returns the byte offset the recorder continues from (None: not a replay, or no rows)."""
    earlier = Path(start.moved_to or "") / "metrics.jsonl"
    if not start.replaying or not start.moved_to or not earlier.exists():
        return None
    write_atomic(run_dir / "metrics.jsonl", earlier.read_bytes())
    return 0


DEBUG_ONLY = ("pazo: audit.debug_break is a debug-only switch that breaks the privacy guarantee on purpose; "
              "only the privacy audit (python -m pazo.audit) accepts it")


def refuse_debug_breaks(cfg) -> None:
    """A training run never runs with a debug break of the mechanisms (`pazo.audit` only)."""
    audit = cfg.get("audit")
    if active_debug_break() is not None or (audit is not None and audit.get("debug_break") is not None):
        raise ConfigError(DEBUG_ONLY.removeprefix("pazo: "))


def _interrupted_where(run_dir: Path) -> str:
    """What a Ctrl-C that ended the run left: the loop records it in summary.json (status
    interrupted, the steps done); one during set-up (data, model, calibration) comes before any
    training, and a relaunch simply starts the run."""
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        status = None
    if status == "interrupted":
        return f"interrupted; {run_dir}/summary.json records the steps done, and the same command resumes"
    if status is None:
        return "interrupted during set-up, before the first step: nothing was trained; the same command starts the run"
    return (f"interrupted during set-up, before this attempt's first step: nothing was trained in it; "
            f"{run_dir}/summary.json is the earlier attempt's (status {status}), and the same command goes on from it")


def _fault_where(run_dir: Path) -> str:
    """What a write the machine refused left: the status recorded (or not) and how to go on."""
    summary = read_summary(run_dir / "summary.json")
    again = ("the same command resumes from its checkpoint" if (run_dir / CHECKPOINT).exists()
             else "the same command starts the run again")
    fix = "free space (or fix the permissions), then " + again
    if summary is None:
        return f"nothing of this run was recorded; {fix}"
    status = summary.get("status")
    if status == "fault":
        return (f"{run_dir}/summary.json records status fault after step {summary.get('steps_done')}, and the files "
                f"written before are intact; {fix}")
    return (f"{run_dir}/summary.json could not be updated (it still says {status}), and the files written before "
            f"are intact; {fix}")


def _quiet_from_now(code: int) -> None:
    """The run's files are written: a Ctrl-C from here on ends the process with `code` at once and
    quietly, wherever the interpreter is. (A SystemExit raised in its shutdown, while threads are
    joined, was printed as a traceback; and once the interpreter had reset its handlers, at the very
    end, a Ctrl-C killed the process by SIGINT instead of its status: from the exit handlers on, it
    is ignored.)"""
    def leave(signum, frame):
        _leave(code)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, leave)
        if not _CTRL_C_IGNORED_AT_EXIT:
            atexit.register(signal.signal, signal.SIGINT, signal.SIG_IGN)
            _CTRL_C_IGNORED_AT_EXIT.append(True)


#: whether the exit handler that ignores Ctrl-C is registered (once per process)
_CTRL_C_IGNORED_AT_EXIT: list = []


def _leave(code: int) -> None:
    """End the process now with `code` (the run's files are written; what is printed is flushed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: nothing more to say
            pass
    os._exit(code)


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    staged = run_dir / hc.output_subdir if is_staging(hc.output_subdir) else None
    sweeping = hc.mode == RunMode.MULTIRUN
    if threading.current_thread() is threading.main_thread():   # (signals can be set only there)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here a Ctrl-C is the run's to record
    job = hc.job.num if sweeping else None
    try:
        summary = run(cfg, run_dir, hydra_record=staged)
    except WriteFault as fault:  # a fault of the machine: one line, the status recorded where the disk took it
        _quiet_from_now(EXIT_CODES["fault"])
        log.error(f"pazo: error: {fault}; {_fault_where(run_dir)}")
        _stop_multirun(job, "fault")   # (the next jobs would write to the same disk)
        sys.exit(EXIT_CODES["fault"])
    except USER_ERRORS as err:
        _quiet_from_now(2)
        log.error(f"pazo: error: {err}")
        if sweeping:
            _job_ended(job, "refused")
            return None  # one bad job does not stop the rest of the sweep; the multirun's exit says so
        sys.exit(2)
    except KeyboardInterrupt:  # a second Ctrl-C in the loop (the summary says at which step), or one in set-up
        _quiet_from_now(EXIT_CODES["interrupted"])
        log.error(f"pazo: {_interrupted_where(run_dir)}")
        _stop_multirun(job, "interrupted")
        sys.exit(EXIT_CODES["interrupted"])
    code = EXIT_CODES.get(summary["status"], 1)
    _quiet_from_now(code)
    if sweeping:
        _job_ended(job, summary["status"])
        if summary["status"] in ("preempted", "interrupted"):   # a signal stops the whole multirun
            _stop_multirun(job, summary["status"])
            sys.exit(code)
    elif code:
        sys.exit(code)
    return summary["final_test_accuracy"]


@dataclass
class MultirunProgress:
    """The jobs of the multirun in progress (`cli`) and how each ended, for the lines that say
    what finished and what did not when a signal stops it, or when it ends with a job unfinished."""

    jobs: list
    ended: dict = field(default_factory=dict)   # job num -> status

    def report(self, stopped: str | None = None) -> str:
        done = [j.label for j in self.jobs if self.ended.get(j.num) == "finished"]
        other = [f"{j.label} ({self.ended[j.num]})" for j in self.jobs
                 if j.num in self.ended and self.ended[j.num] != "finished"]
        waiting = [j.label for j in self.jobs if j.num not in self.ended]
        head = f"multirun {stopped}" if stopped else "multirun ended"
        parts = [f"{len(done)} of {len(self.jobs)} jobs finished" + (f" ({', '.join(done)})" if done else "")]
        if other:
            parts.append(f"not finished: {', '.join(other)}")
        if waiting:
            parts.append(f"not started: {', '.join(waiting)}")
        return (f"pazo: {head}: {'; '.join(parts)}; the same command continues it (finished jobs have "
                "nothing to do, stopped ones resume from their checkpoints)")

    @property
    def all_finished(self) -> bool:
        return all(self.ended.get(j.num) == "finished" for j in self.jobs)


_MULTIRUN: MultirunProgress | None = None


def _job_ended(job: int | None, status: str) -> None:
    if _MULTIRUN is not None and job is not None:
        _MULTIRUN.ended[job] = status
        if threading.current_thread() is threading.main_thread():   # a Ctrl-C between jobs stops the multirun
            signal.signal(signal.SIGINT, _stop_between_jobs)


def _stop_multirun(job: int | None, status: str) -> None:
    """A signal (or a fault of the machine) in job `job` stops the multirun: say what finished and
    what did not (the caller exits with the job's status)."""
    if _MULTIRUN is None or job is None:
        return
    _MULTIRUN.ended[job] = status
    log.error(_MULTIRUN.report(stopped=f"stopped ({status} in job {job + 1} of {len(_MULTIRUN.jobs)})"))


def _stop_between_jobs(signum, frame):
    """SIGINT or SIGTERM while no job runs (between two, or in Hydra's set-up of the next)."""
    name = "interrupted" if signum == signal.SIGINT else "preempted"
    if _MULTIRUN is not None:   # (no logging in a handler: it takes locks)
        os.write(2, (_MULTIRUN.report(stopped=f"stopped ({name} between jobs)") + "\n").encode())
    raise SystemExit(EXIT_CODES[name])


def _interrupted_before_start(signum, frame):
    print("pazo: interrupted while the command line was read, before the run started: nothing was written",
          file=sys.stderr)
    raise SystemExit(EXIT_CODES["interrupted"])


def cli() -> None:
    """`pazo-train` / `python -m pazo.train`: a command line Hydra cannot compose, or a run
    directory that cannot be written, is one line (`pazo: error: ...`, exit 2) before anything
    starts, and so is a Ctrl-C before `main`; everything else is `main`. Hydra writes this
    launch's record into `.hydra/launch-<pid>-<token>/`, which `run` moves into `.hydra/` once the
    launch is accepted (a refused launch leaves the directory's record as it was)."""
    load_plugins()   # (before any config is composed: a plugin's names are choices too)
    signal.signal(signal.SIGINT, _interrupted_before_start)
    argv = sys.argv[1:]
    if "--help" in argv or "-h" in argv:   # pazo's own (Hydra's: --hydra-help)
        from pazo.help import train_help
        print(train_help())
        return
    keys = [a.split("=", 1)[0].lstrip("+~") for a in argv]
    if any(k == "audit" or k.startswith("audit.") for k in keys):
        problem = DEBUG_ONLY.removeprefix("pazo: ") if "audit.debug_break" in keys else \
            "audit.* settings belong to the privacy audit (python -m pazo.audit), not to a training run"
    else:
        # (the device too, before Hydra makes the run directory)
        problem = check_overrides(argv, check=lambda cfg: resolve_device(cfg.device))
    single = not any(a.startswith("-") for a in argv)   # not a multirun, --help, --cfg, ...
    if not problem and single:
        try:
            check_output_location(argv)
        except ConfigError as err:
            problem = str(err)
        except WriteFault as fault:
            print(f"pazo: error: {fault}; nothing was written: free space and run the same command again",
                  file=sys.stderr)
            sys.exit(EXIT_CODES["fault"])
    if problem:
        print(f"pazo: error: {problem}", file=sys.stderr)
        sys.exit(2)
    if single and "hydra.output_subdir" not in keys:
        sys.argv.append(f"hydra.output_subdir={staging_subdir()}")
    jobs = multirun_jobs(argv)
    if jobs is None:
        main()
        return
    run_multirun(jobs)


def run_multirun(jobs) -> None:
    """`pazo-train -m ...` (every job checked by `check_overrides` already): Hydra runs the jobs one
    after another; a signal in one (or between two) stops the multirun, a job that does not finish
    makes its exit non-zero, and either way one line says what finished and what did not."""
    global _MULTIRUN
    _MULTIRUN = MultirunProgress(jobs)
    previous = signal.signal(signal.SIGTERM, _stop_between_jobs)
    try:
        main()
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress, _MULTIRUN = _MULTIRUN, None
    if not progress.all_finished:   # (Hydra's job logging is gone by now: straight to the terminal)
        print(progress.report(), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    cli()
