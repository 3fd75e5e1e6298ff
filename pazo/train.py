"""Entry point: `pazo-train [overrides]` / `python -m pazo.train [overrides]` (Hydra), the command
around one training run (`pazo.run.launch.run`, which says what a run does) or a Hydra multirun of them.

A user's mistake is one `pazo: error:` line (exit 2) before compute; a write the machine refuses
(full disk, no permission) is one line, its status (`fault`, resumable) recorded in summary.json
where the disk still takes it (exit 75); a Ctrl-C before the run's first step is one line (exit
130, `pazo.commands.interrupts`), and so is a SIGTERM there (exit 143; in the loop it is `preempted`,
exit 3). This module imports only the standard library at its top, so that a Ctrl-C while torch, a
plugin or Hydra loads meets pazo's handler, and `--help` or a refused command line loads only what
they read.
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pazo import CONFIG_DIR
from pazo.commands.start import quiet_when_the_reader_leaves
from pazo.commands.interrupts import INTERRUPTED, stop_status, stop_word, until_work_starts, work_starts

log = logging.getLogger("pazo.train")  # not __name__: that is "__main__" under `python -m pazo.train`
#: exit codes: 0 finished, 1 failed, 2 bad input, 3 preempted (resumable), 75 a fault of the machine
#: (a refused write, e.g. a full disk: resumable once fixed; EX_TEMPFAIL), 130 interrupted (resumable)
EXIT_CODES = {"finished": 0, "failed": 1, "preempted": 3, "fault": 75, "interrupted": INTERRUPTED}


def run(cfg, run_dir: str | Path, hydra_record: str | Path | None = None, show_header=None, last=None) -> dict:
    """Train one configuration into `run_dir` (`pazo.run.launch.run`, imported when a run starts)."""
    from pazo.run import launch as training
    return training.run(cfg, run_dir, hydra_record, show_header or training.print_header, last)


def _interrupted_where(run_dir: Path, how: str = "interrupted", mine: dict | None = None) -> str:
    """What a Ctrl-C that ended the launch left, as `mine` says (the summary this launch last wrote:
    `pazo.run.recorder.LastSummary`; None: none, so any summary.json is an earlier attempt's). The
    loop records its own in summary.json (status interrupted, the steps done); one during set-up
    (data, model, calibration) comes before any training, and a relaunch simply starts the run; one
    after the run ended finds its summary written (`_after_the_end`). `how`: `terminated` for a
    SIGTERM in set-up (the loop records its own as `preempted`)."""
    if mine is not None:
        return _after_the_end(run_dir, how, mine) if mine.get("status") in _ENDED else _in_the_run(run_dir, how, mine)
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        status = None
    if status is None:
        return f"{how} during set-up, before the first step: nothing was trained; the same command starts the run"
    return (f"{how} during set-up, before this attempt's first step: nothing was trained in it; "
            f"{run_dir}/summary.json is the earlier attempt's (status {status}), and the same command goes on from it")


#: the statuses of a run's last summary, once its loop and its last files are done
_ENDED = ("finished", "failed", "preempted", "fault")


def _in_the_run(run_dir: Path, how: str, mine: dict) -> str:
    """A Ctrl-C this launch's run recorded (status interrupted: the loop's), or one that came before
    the run recorded how it stopped (its summary still says running)."""
    if mine.get("status") == "interrupted":
        return f"interrupted; {run_dir}/summary.json records the steps done, and the same command resumes"
    return (f"{how} before this attempt recorded how it stopped: {run_dir}/summary.json still says "
            f"{mine.get('status')}, and the same command goes on from it")


def _after_the_end(run_dir: Path, how: str, mine: dict) -> str:
    """A Ctrl-C or SIGTERM after the run wrote its last summary (`mine`): it changed nothing; the
    line says how the run ended, as its summary records it."""
    status = mine["status"]
    failure = f" ({mine['failure']})" if status in ("failed", "fault") and mine.get("failure") else ""
    go_on = "; the same command resumes it" if status in ("preempted", "fault") else ""
    return (f"{how} after the run ended: {run_dir}/summary.json records status {status} after step "
            f"{mine.get('steps_done')} of {mine.get('steps_planned')}{failure}{go_on}")


def _lost_rank_where(run_dir: Path, lost: Exception) -> str:
    """What a run whose other rank was lost (`lost`: or never joined) left, as its files say, and how
    it goes on: the same overrides resume it, on any number of processes. Its summary records status
    fault only where the loop wrote `lost` there; a rank lost before the launch was accepted (in the
    ranks' join, their share or their agreement) wrote nothing."""
    from pazo.run.checkpoint import checkpoint_path, read_summary

    again = ("resumes it from its checkpoint" if checkpoint_path(run_dir).exists() else "starts it again")
    go_on = f"pazo-train with the same overrides, as one process or under torchrun, {again}"
    summary = read_summary(run_dir / "summary.json")
    if summary is None:
        return f"nothing of this run was written; {go_on}"
    if summary.get("status") == "fault" and str(lost) in str(summary.get("failure")):
        return f"{run_dir}/summary.json records status fault after step {summary.get('steps_done')}; {go_on}"
    return (f"nothing of this launch was written ({run_dir}/summary.json is an earlier attempt's, status "
            f"{summary.get('status')}); {go_on}")


def _log_torch_message(lost: Exception) -> None:
    """torch's own text of a lost rank (gloo's C++ message, its frames), kept for train.log, where
    the run has one: the terminal's line says what happened in pazo's words (`distributed.lost_line`)."""
    from pazo.commands.console import LOG_FILE_ONLY

    raw = getattr(lost, "raw", "")
    if raw:
        log.info(f"torch's message for the lost rank: {raw}", extra=LOG_FILE_ONLY)


def _fault_where(run_dir: Path) -> str:
    """What a write the machine refused left: the status recorded (or not) and how to go on."""
    from pazo.run.checkpoint import checkpoint_path, read_summary

    summary = read_summary(run_dir / "summary.json")
    again = ("the same command resumes from its checkpoint" if checkpoint_path(run_dir).exists()
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


def _leave_no_trace(staged: Path | None) -> None:
    """A launch that ends at once (`_leave`) before it was accepted leaves what Hydra made for it
    behind: its staged record, and the directories it made, now empty (`pazo.run.cli.Launch`). Both
    go; an accepted launch's are its run's and stay."""
    from pazo.files.rundir import drop_hydra_record
    from pazo.run import cli as command_line

    drop_hydra_record(staged)
    if command_line.LAUNCH is not None:
        command_line.LAUNCH.leave_no_trace()


def _leave(code: int) -> None:
    """End the process now with `code` (the run's files are written; what is printed is flushed)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed or broken stream: nothing more to say
            pass
    os._exit(code)


def main(cfg) -> float | None:
    """Hydra's task (`hydra_main`): one run, or one job of a multirun, and its exit status."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from pazo.run import distributed
    from pazo.run.cli import USER_ERRORS, launched_into
    from pazo.run.recorder import LastSummary
    from pazo.files.rundir import WriteFault, is_staging

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    staged = run_dir / hc.output_subdir if is_staging(hc.output_subdir) else None
    sweeping = hc.mode == RunMode.MULTIRUN
    work_starts()   # from here a Ctrl-C is the run's to record
    job = hc.job.num if sweeping else None
    launched_into(run_dir)
    last = LastSummary()   # (the summary this launch writes, for a Ctrl-C after the run ended)
    try:
        _join_ranks(cfg, list(hc.overrides.task), staged)   # (torchrun's rank 0; one process: nothing)
        summary = run(cfg, run_dir, hydra_record=staged, show_header=_header_printer(job), last=last)
        return _ended(summary, job, sweeping)
    except distributed.RankLost as lost:   # the run's status (fault: resumable) is in its summary, if it started
        _log_torch_message(lost)
        log.error(f"pazo: error: {lost}; {_lost_rank_where(run_dir, lost)}")
        _leave_no_trace(staged)
        _leave(EXIT_CODES["fault"])   # at once: gloo's broken group aborts the interpreter's shutdown
    except (distributed.RankFailed, distributed.RankFaulted) as told:   # another rank's, before the first step
        code = _told_status(told)   # (it printed its own line)
        _quiet_from_now(code)
        log.error(f"pazo: error: {told}")
        sys.exit(code)
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
    except KeyboardInterrupt as stop:  # a second Ctrl-C in the loop (the summary says at which step), a
        _interrupted(run_dir, stop, last.summary, job)   # Ctrl-C or SIGTERM in set-up, or one after the end


def _interrupted(run_dir: Path, stop: KeyboardInterrupt, mine: dict | None, job: int | None) -> None:
    """End the launch that `stop` interrupted: one line true to its files (`_interrupted_where`; `mine`:
    the summary it last wrote), and the exit status of the signal, or of the run where it had ended
    already (its summary decides: a finished run exits 0). A multirun stops there."""
    ended = mine is not None and mine.get("status") in _ENDED
    code = EXIT_CODES.get(mine["status"], 1) if ended and _MULTIRUN is None else stop_status(stop)
    _quiet_from_now(code)
    log.error(f"pazo: {_interrupted_where(run_dir, stop_word(stop), mine)}")
    _stop_multirun(job, stop_word(stop), ended_as=mine["status"] if ended else None)
    sys.exit(code)


def _join_ranks(cfg, overrides: list[str], staged: Path | None) -> None:
    """Rank 0 joins the run's other ranks, which compare what they were asked (`overrides`); a
    refusal or a failure told there drops this launch's staged record (`run` drops it after)."""
    from pazo.files.rundir import drop_hydra_record
    from pazo.run import distributed

    try:
        distributed.join(cfg.train.distributed_timeout_s, asked=distributed.asked_facts(overrides, plan=False))
    except BaseException:
        drop_hydra_record(staged)
        raise


def _ended(summary: dict, job: int | None, sweeping: bool) -> float | None:
    """A run that ended with a summary: its exit status, a multirun's record of the job."""
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


def _header_printer(job: int | None):
    """How a run prints its header (`pazo.run.summary.header_lines`): whole, for a single run; in a
    multirun the terminal shows the first job's whole and one line for each later job, naming what
    differs from it, while every job's train.log holds its whole header."""
    from pazo.commands.console import CONSOLE_ONLY, LOG_FILE_ONLY
    from pazo.run.summary import header_lines

    def show(summary: dict, plan) -> None:
        lines = header_lines(summary, plan)
        shown = _MULTIRUN.header(job, lines) if _MULTIRUN is not None and job is not None else lines
        if shown is lines:
            for line in lines:
                log.info(line)
            return
        for line in lines:
            log.info(line, extra=LOG_FILE_ONLY)
        for line in shown:
            log.info(line, extra=CONSOLE_ONLY)
    return show


def hydra_main() -> None:
    """Hydra's command line around `main` (made here, so that importing this module loads no Hydra)."""
    import hydra

    import pazo.run.cli  # noqa: F401  (registers the resolvers the config names)
    import pazo.run.validate  # noqa: F401  (registers the schemas of methods, data sets and models Hydra composes with)

    hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")(main)()


@dataclass
class MultirunProgress:
    """The jobs of the multirun in progress (`cli`) and how each ended, for the lines that say
    what finished and what did not when a signal stops it, or when it ends with a job unfinished."""

    jobs: list
    ended: dict = field(default_factory=dict)   # job num -> status
    first_header: tuple | None = None           # (job, the header lines the terminal showed whole)

    def header(self, job: int, lines: list[str]) -> list[str]:
        """The terminal's lines of job `job`'s header: the first header to come, whole (`lines`
        itself); each later one in one line, with the lines of it that the first lacks and the lines
        of the first that it lacks ("as job 1's header" only where the two are the same lines)."""
        if self.first_header is None:
            self.first_header = (job, lines)
            return lines
        first, shown = self.first_header
        label = next((j.label for j in self.jobs if j.num == job), f"job {job}")
        return [f"job {job + 1} of {len(self.jobs)} ({label}): {header_difference(lines, shown, first + 1)}"]

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


def header_difference(lines: list[str], shown: list[str], first: int) -> str:
    """How header `lines` differs from job `first`'s (`shown`): its own lines, then those of job
    `first`'s it has not (a note one job prints and another does not is a difference too)."""
    if lines == shown:
        return f"as job {first}'s header"
    differ = [line for line in lines if line not in shown]
    differ += [f"without job {first}'s line '{line}'" for line in shown if line not in lines]
    if not differ:
        return f"job {first}'s header lines in another order"
    shared = any(line in shown for line in lines)
    return "; ".join(differ) + (f"; the rest as job {first}'s" if shared else "")


def _job_ended(job: int | None, status: str) -> None:
    if _MULTIRUN is not None and job is not None:
        _MULTIRUN.ended[job] = status
        if threading.current_thread() is threading.main_thread():   # a Ctrl-C between jobs stops the multirun
            signal.signal(signal.SIGINT, _stop_between_jobs)


def _stop_multirun(job: int | None, status: str, ended_as: str | None = None) -> None:
    """A signal (or a fault of the machine) in job `job` stops the multirun: say what finished and
    what did not (the caller exits with the job's status). `ended_as`: the signal came after the job
    wrote its last summary, which says how it ended (this status)."""
    if _MULTIRUN is None or job is None:
        return
    where = f"job {job + 1} of {len(_MULTIRUN.jobs)}"
    _MULTIRUN.ended[job] = ended_as or status
    log.error(_MULTIRUN.report(stopped=f"stopped ({status} after {where} ended)" if ended_as
                               else f"stopped ({status} in {where})"))


def _stop_between_jobs(signum, frame):
    """SIGINT or SIGTERM while no job runs (between two, or in Hydra's set-up of the next)."""
    name = "interrupted" if signum == signal.SIGINT else "preempted"
    if _MULTIRUN is not None:   # (no logging in a handler: it takes locks)
        os.write(2, (_MULTIRUN.report(stopped=f"stopped ({name} between jobs)") + "\n").encode())
    raise SystemExit(EXIT_CODES[name])


@quiet_when_the_reader_leaves
def cli() -> None:
    """`pazo-train` / `python -m pazo.train`: a command line Hydra cannot compose, or a run
    directory that cannot be written, is one line (`pazo: error: ...`, exit 2) before anything
    starts, and so is a Ctrl-C before `main`; everything else is `main`. Hydra writes this
    launch's record into `.hydra/launch-<pid>-<token>/`, which `run` moves into `.hydra/` once the
    launch is accepted; a launch refused (or interrupted) before that leaves the directory's record
    as it was, and removes the directories it made (`pazo.run.cli.Launch`)."""
    until_work_starts("before the run started: nothing was run")
    quiet_native_distributed_lines()
    from pazo.plugins import load_plugins

    load_plugins()   # (before any config is composed: a plugin's names are choices too)
    argv = sys.argv[1:]
    if "--help" in argv or "-h" in argv:   # pazo's own (Hydra's: --hydra-help)
        from pazo.help import train_help
        print(train_help())
        return
    if PLAN_FLAG in argv:   # pazo's own: the run's privacy plan, nothing trained or written
        sys.exit(plan_only([a for a in argv if a != PLAN_FLAG]))
    single = not any(a.startswith("-") for a in argv)   # not a multirun, --help, --cfg, ...
    from pazo.run.cli import LaunchFault, launch_single, multirun_jobs

    try:
        problem = _command_line_problem(argv, single) or _torchrun_problem(single)
        if problem:
            sys.exit(refused(argv, problem))
        if os.environ.get("RANK", "0") != "0":   # torchrun's other ranks: rank 0 alone writes the run
            sys.exit(follow(argv))
        if single:
            launch_single(argv, hydra_main)
            return
    except LaunchFault as fault:   # (its line said: the other ranks are told, if any wait)
        sys.exit(faulted(argv, fault.fault))
    jobs = multirun_jobs(argv)
    if jobs is None:
        hydra_main()
        return
    run_multirun(jobs)


def quiet_native_distributed_lines(environ=os.environ) -> None:
    """Under torchrun (WORLD_SIZE > 1) torch's native lines (c10d's socket timeouts and store
    retries, each with its C++ stack, printed while a rank's peers never start) are not printed:
    each rank ends with one line of its own (`distributed.not_joined_line`). torch reads its C++
    log level once, as it loads: set here, before, unless the user set it (TORCH_CPP_LOG_LEVEL=INFO
    shows them)."""
    if environ.get("WORLD_SIZE", "1") not in ("", "1"):
        environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")


def refused(argv: list[str], problem: str) -> int:
    """A command line refused before the ranks join (`problem`): one line, exit 2. Under torchrun
    this rank cannot know whether the others refuse theirs too (a rank's command line, device or
    folders may differ): it joins them and says so in their first exchange (`_told_the_others`),
    so that a rank that accepted its own ends at once, naming this one. Rank 0
    prints its line at once; another rank prints its own, `rank N: ...`, unless rank 0 refused with
    the same line (then rank 0's line is the run's)."""
    if os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        print(f"pazo: error: {problem}", file=sys.stderr)
        return 2
    from pazo.errors import ConfigError
    from pazo.run import distributed

    try:
        rank, _ = distributed.world_from_environment()
    except ConfigError:   # (RANK or WORLD_SIZE unreadable: the problem says so, and no group can be joined)
        print(f"pazo: error: {problem}", file=sys.stderr)
        return 2
    line = f"pazo: error: {f'rank {rank}: ' if rank else ''}{problem}"
    if not rank:
        print(line, file=sys.stderr)
    try:
        said_by_rank_0 = _told_the_others(argv, ConfigError(problem), distributed.REFUSED) == problem
    except distributed.RankLost:   # (not joined, or rank 0 gone: this rank's line is all there is to say)
        if rank:
            print(line, file=sys.stderr)
        _leave(2)   # at once: a broken gloo group aborts the interpreter's shutdown
    if rank and not said_by_rank_0:
        print(line, file=sys.stderr)
    distributed.leave()
    return 2


def faulted(argv: list[str], fault: OSError) -> int:
    """A fault of the machine before the ranks join (`fault`: a write refused, its line said): exit
    75. Under torchrun this rank joins the others and tells them, as a fault (`_told_the_others`), so
    that they end at once naming it, exit 75 too, instead of waiting for it until
    train.distributed_timeout_s."""
    if os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        return EXIT_CODES["fault"]
    from pazo.run import distributed

    try:
        _told_the_others(argv, fault, distributed.FAULT)
    except distributed.RankLost:   # (not joined, or a rank gone: this rank's line is all there is to say)
        _leave(EXIT_CODES["fault"])   # at once: a broken gloo group aborts the interpreter's shutdown
    distributed.leave()
    return EXIT_CODES["fault"]


def _told_the_others(argv: list[str], err: Exception, kind: str) -> str | None:
    """Join the run's other ranks and tell them this rank's `err`, of `kind` (`distributed.failure_facts`:
    a user's mistake or a fault of the machine) in their first exchange, instead of what it was asked
    (`Group.compare_asked`). Rank 0's refusal where it refused too (`LeaderRefused`: it prints its
    line), else None; a `RankLost` where the others never joined."""
    from pazo.run import distributed

    try:
        distributed.join(refusing_rank_timeout(argv), asked=distributed.failure_facts(err, kind))
    except distributed.LeaderRefused as leader:
        return str(leader)
    return None


def refusing_rank_timeout(argv: list[str]) -> float:
    """How long a rank that refused its command line waits for the others: the command line's
    train.distributed_timeout_s where it reads as a positive number (the config that would hold it
    was refused), else the default."""
    from pazo.config_schema import MAX_DISTRIBUTED_TIMEOUT_S, TrainSchema
    from pazo.run.cli import override_value

    try:
        value = float(override_value(argv, "train.distributed_timeout_s") or "nan")
    except ValueError:
        return TrainSchema.distributed_timeout_s
    return value if 0 < value <= MAX_DISTRIBUTED_TIMEOUT_S else TrainSchema.distributed_timeout_s


def _torchrun_problem(single: bool) -> str | None:
    """Under torchrun (WORLD_SIZE > 1) one run of one configuration: a multirun's jobs are not shared."""
    if single or os.environ.get("WORLD_SIZE", "1") in ("", "1"):
        return None
    return "under torchrun pazo-train runs one configuration (no -m or other options): launch a sweep's runs one by one"


def follow(argv: list[str]) -> int:
    """torchrun's rank > 0: the run `argv` describes, its steps on this rank's shards, nothing written
    (`pazo.run.launch.follow`); a mistake or a lost rank is one line, and one met before the ranks
    join is told to them as they join (`refused`, `faulted`). Its exit status."""
    from pazo.run import distributed
    from pazo.run.cli import USER_ERRORS

    rank, world = distributed.world_from_environment()
    print(f"pazo: rank {rank} of {world}: taking its shard of each batch (rank 0 writes the run)", file=sys.stderr)
    work_starts()
    distributed.ignore_stop_signals()
    try:
        cfg = follower_config(argv)
    except USER_ERRORS as err:
        return refused(argv, str(err))
    except OSError as err:   # (a fault of the machine, not the user's input)
        print(f"pazo: error: rank {rank}: {err}", file=sys.stderr)
        return faulted(argv, err)
    return _on_rank(lambda: _follow(cfg, argv), f"rank {rank}: ")[0]


def _follow(cfg, argv: list[str]) -> None:
    """Join the ranks, which compare what they were asked (`argv`), and take this rank's steps."""
    from pazo.run import distributed
    from pazo.run import launch as training

    distributed.join(cfg.train.distributed_timeout_s, asked=distributed.asked_facts(argv, plan=False))
    training.follow(cfg)


def follower_config(argv: list[str]):
    """The config of the run a rank > 0 follows, composed from its command line (checked already)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(argv))


def _told_status(told: Exception) -> int:
    """The exit status of a rank that another rank told of its failure before the first step: the
    fault status for a fault of the machine (`RankFaulted`), else the failed status (`RankFailed`)."""
    from pazo.run import distributed

    return EXIT_CODES["fault" if isinstance(told, distributed.RankFaulted) else "failed"]


def _on_rank(work, on_rank: str) -> tuple[int, object]:
    """(0, what `work()` gives) on this torchrun rank, or its failure as one line and an exit status
    (`on_rank` names the rank in the line): 2 for rank 0's refusal (it printed why) or a mistake, the
    failed status where another rank failed, the fault status where it or another rank met a fault of
    the machine (here: an OSError other than a missing file, which is the user's); a lost rank leaves
    at once. The process group is left in any case."""
    from pazo.commands.start import os_error_line
    from pazo.run import distributed
    from pazo.run.cli import USER_ERRORS

    try:
        return 0, work()
    except distributed.LeaderRefused:   # rank 0 refused and printed why
        return 2, None
    except USER_ERRORS as err:
        print(f"pazo: error: {on_rank}{err}", file=sys.stderr)
        return 2, None
    except (distributed.RankFailed, distributed.RankFaulted) as told:
        print(f"pazo: error: {on_rank}{told}", file=sys.stderr)
        return _told_status(told), None
    except OSError as fault:   # (after USER_ERRORS: a missing file is the user's)
        print(f"pazo: error: {on_rank}{os_error_line(fault)} (a fault of the machine)", file=sys.stderr)
        return EXIT_CODES["fault"], None
    except distributed.RankLost as lost:
        print(f"pazo: error: {on_rank}{lost}", file=sys.stderr)
        _leave(EXIT_CODES["fault"])   # at once: gloo's broken group aborts the interpreter's shutdown
    finally:
        distributed.leave()


#: `pazo-train ... --plan`: print the run's privacy plan and stop (`plan_only`)
PLAN_FLAG = "--plan"


def plan_only(argv: list[str]) -> int:
    """`pazo-train <overrides> --plan`: the overrides checked as a run checks them (the same one
    line for a mistake; under torchrun what the ranks cannot share too, said by rank 0), then the
    run's privacy plan printed (`plan_on_ranks`) and exit 0, with no run directory made and nothing
    trained; the exit status."""
    from pazo.run import cli as command_line
    flags = [a for a in argv if a.startswith("-")]
    problem = (f"--plan plans one run: give it overrides only, not {' '.join(flags)}" if flags
               else command_line.check_overrides(argv, check=_check_launch))
    if problem:
        return refused(argv, problem)
    return plan_on_ranks(argv)


def plan_on_ranks(argv: list[str]) -> int:
    """The plan of `argv` (`plan_lines`), printed by rank 0: under torchrun every rank plans, and the
    ranks compare their config, data and code as a run's ranks do before its first step. A mistake,
    or ranks that differ, is one line from each rank that finds it, as a run's ranks say it (exit
    2); a lost rank one line (exit 75). The exit status."""
    from pazo.run import distributed

    rank, _ = distributed.world_from_environment()
    status, lines = _on_rank(lambda: plan_lines(argv), f"rank {rank}: " if rank else "")
    if not status and not rank:
        print("\n".join(lines))
    return status


def plan_lines(argv: list[str]) -> list[str]:
    """The privacy plan of the run `argv` describes, as a run's header prints it (`privacy_lines`:
    sigma calibrated or given, q, T, the accountant and the cross-check), after what n is and how
    it is known: the data set's splits are built (their sizes only; no model reads an example), or
    where the data are missing, n is estimated from a published size (`pazo.sweep.selection.private_size`).
    Under torchrun the ranks agree on the config, data and code first (`_agreed_private_size`)."""
    from hydra import compose, initialize_config_dir

    from pazo.run.build import run_privacy_plan
    from pazo.run.summary import privacy_lines
    from pazo.run.validate import check_schedule_fits, planned_steps
    from pazo.run.typed import run_config

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = run_config(compose(config_name="config", overrides=list(argv)))   # (checked: `plan_only`)
    n, how, world = _agreed_private_size(cfg, argv)
    steps = planned_steps(cfg.train, n)
    check_schedule_fits(cfg.train, cfg.schedule, steps)   # (where n is estimated, the data's own check has not run)
    plan = run_privacy_plan(cfg, n, steps)
    agreed = [f"ranks: the {world} processes run the same config, data and code (compared as a run's ranks "
              "compare them before its first step)"] if world > 1 else []
    return [f"plan: {cfg.method.name} on {cfg.dataset.name}: n = {n} private examples ({how}), batch "
            f"{cfg.train.batch_size} -> q = {cfg.train.batch_size / n:.4f}, T = {steps} steps",
            *privacy_lines(plan), *agreed,
            "plan only: nothing was trained and no run directory was written"]


def _agreed_private_size(cfg, argv: list[str]) -> tuple[int, str, int]:
    """n and how it is known (`_private_data`), and the number of processes: under torchrun every
    rank's, once the ranks were asked the same (`argv`, a plan's: `Group.compare_asked`) and agree
    on the run's config, data and code (`Group.agree`, before the plan's calibration); a refusal or
    an error is told in that one exchange (`distributed.telling`)."""
    from pazo.run import distributed
    from pazo.run.cli import USER_ERRORS

    group = distributed.join(cfg.train.distributed_timeout_s, asked=distributed.asked_facts(argv, plan=True))
    with distributed.telling(group, USER_ERRORS):
        n, how, digests = _private_data(cfg, group.several)
    group.agree(distributed.run_facts(cfg.fingerprint, digests))
    return n, how, group.world_size


def _private_data(cfg, digests: bool) -> tuple[int, str, dict[str, str]]:
    """n, the private set's size, as the run's loader gives it from the run's typed config
    (`RunConfig`), how it was found and (`digests`: for the ranks to compare) the data's digests; a
    batch larger than the data is refused as a run refuses it."""
    from pazo.data import build_dataset
    from pazo.errors import DataMissingError
    from pazo.rng import RandomStreams
    from pazo.run.digests import data_digest
    from pazo.sweep.selection import private_size
    from pazo.run.validate import validate_against_data

    try:
        data = build_dataset(cfg.dataset, RandomStreams(cfg.seed))
    except DataMissingError:   # a published size, or the line that says the data are missing
        size = private_size(cfg)
        return size.n, size.estimated, {"published_size": str(size.n)}
    validate_against_data(cfg.train, cfg.method, cfg.schedule, len(data.private), len(data.public))
    found = ({"private_data_sha256": data_digest(data.private), "public_data_sha256": data_digest(data.public)}
             if digests else {})
    return len(data.private), "the data set's split sizes; no model read any example", found


def _command_line_problem(argv: list[str], single: bool) -> str | None:
    """What is wrong with the command line, checked before Hydra makes anything (None: nothing):
    the audit's keys, the overrides composed and checked, the device, where the run would be written
    (rank 0's alone under torchrun: the check makes the folder, and a refused run leaves none)."""
    from pazo.run import cli as command_line
    keys = [a.split("=", 1)[0].lstrip("+~") for a in argv]
    if any(k == "audit" or k.startswith("audit.") for k in keys):
        return command_line.DEBUG_ONLY if "audit.debug_break" in keys else \
            "audit.* settings belong to the privacy audit (python -m pazo.audit), not to a training run"
    problem = command_line.check_overrides(argv, check=_check_launch, own_flags=(PLAN_FLAG,))   # (the device too)
    if problem or not single or os.environ.get("RANK", "0") != "0":   # (torchrun's other ranks write nowhere)
        return problem
    return command_line.check_single_launch(argv)


def _check_device(cfg) -> None:
    from pazo.run.build import resolve_device

    resolve_device(cfg.device)


def _check_launch(cfg) -> None:
    """The device, and under torchrun whether the ranks can share the run: found by every rank
    before any joins, and said once (`refused`: rank 0's line where it refused too)."""
    _check_device(cfg)
    _check_ranks_can_share(cfg)


def _check_ranks_can_share(cfg) -> None:
    """Under torchrun (WORLD_SIZE > 1), the run's method, secure mode and query dropout
    (`pazo.run.build.require_shards`, which the run applies again as it builds)."""
    from pazo.methods import method_info
    from pazo.run import distributed
    from pazo.run.build import require_shards

    rank, world = distributed.world_from_environment()
    require_shards(method_info(cfg.method.name), distributed.Group(rank, world), cfg.privacy.secure_mode,
                   cfg.engine.query_dropout)


def run_multirun(jobs) -> None:
    """`pazo-train -m ...` (every job checked by `check_overrides` already): Hydra runs the jobs one
    after another; a signal in one (or between two) stops the multirun, a job that does not finish
    makes its exit non-zero, and either way one line says what finished and what did not."""
    global _MULTIRUN
    _MULTIRUN = MultirunProgress(jobs)
    previous = signal.signal(signal.SIGTERM, _stop_between_jobs)
    try:
        hydra_main()
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress, _MULTIRUN = _MULTIRUN, None
    if not progress.all_finished:   # (Hydra's job logging is gone by now: straight to the terminal)
        print(progress.report(), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    cli()
