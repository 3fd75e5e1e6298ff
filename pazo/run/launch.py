"""One training run into its directory, top to bottom (the command around it is `pazo.train`):

validate -> check and lock the run directory -> prepare it (fresh, resume or finished) ->
`pazo.run.build.build_run` (data, model, privacy plan, engine, method) -> start the attempt
(`pazo.run.attempts.start_attempt`: checked, resumed, agreed by the ranks, then accepted: from
here the directory is written: its record, train.log, the summary) -> `pazo.run.loop` (Poisson batch,
step, row, evaluation, checkpoint) -> final epsilon check -> summary.json, all written through one
`pazo.run.recorder.Recorder`. Everything before the launch is accepted only reads: a launch refused
there (a user's mistake, a directory in use, a relaunch with another config) leaves the directory's
files as they were.
"""
from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from pazo.run import distributed
from pazo.run.attempts import plan_launch, start_attempt
from pazo.run.checkpoint import LoopState, checkpoint_path, read_checkpoint, resume_state
from pazo.run.cli import DEBUG_ONLY, USER_ERRORS
from pazo.run.build import build_run, resolve_device
from pazo.run.loop import follow_loop, train_to_the_end
from pazo.privacy.mechanisms import active_debug_break
from pazo.run.recorder import LastSummary
from pazo.files.rundir import RunDirLock, WriteFault, check_output_dir, drop_hydra_record, remove_broken_writes
from pazo.run.summary import finished_line, print_header, resumed_line
from pazo.run.validate import ConfigError, validated_run_config

log = logging.getLogger("pazo.train")  # (the run's lines, as `pazo.train` logs them)

def run(cfg: DictConfig, run_dir: str | Path, hydra_record: str | Path | None = None,
        show_header=print_header, last: LastSummary | None = None) -> dict:
    """Train one configuration into `run_dir`, or continue it from its checkpoint; returns the
    summary written to `run_dir/summary.json`. `hydra_record`: where Hydra wrote this launch's
    record (`pazo.files.rundir.staging_subdir`), moved into `.hydra/` once the launch is accepted and
    dropped otherwise. `show_header(summary, plan)`: the lines printed before the first step (a
    multirun prints what its jobs share once). `last`: where each summary this launch writes is noted
    (`pazo.run.recorder.LastSummary`: the entry point's, for an interrupt after the loop)."""
    try:
        return _run(cfg, Path(run_dir), hydra_record, show_header, last)
    finally:
        drop_hydra_record(hydra_record)  # refused, or nothing to do: .hydra/ stays the record of what ran


class LeaderExchanges:
    """Rank 0's exchanges with the other ranks before the first step: where the run starts (`share`),
    then the ranks' agreement (`agree`). A refusal, a fault or a failure on rank 0 before them is
    told there (`tell`): the ranks waiting in it end as rank 0 does (a refusal: exit 2 with the line
    rank 0 prints; a fault of the machine: exit 75, an error: exit 1, each naming rank 0), instead of
    as ranks that lost theirs (exit 75, after the timeout)."""

    def __init__(self, group: distributed.Group):
        self.group, self.next = group, "share"

    def share(self, value):
        self.next = None   # (spent, whatever it gives)
        shared = self.group.share(value)
        self.next = "agree"
        return shared

    def agree(self, facts: dict[str, str]) -> None:
        self.group.agree(facts)   # (spent from here: `Group.agreed` records it, once)

    def tell(self, err: Exception, kind: str) -> None:
        """The other ranks hear of rank 0's failure `err`, of `kind` (`distributed.failure_facts`), in
        the exchange they wait in (none: nothing)."""
        if not self.group.several or self.next is None:
            return
        if self.next == "agree":
            self.group.tell(err, kind)   # (nothing once the agreement is entered: `Group.tell`)
            return
        try:
            self.group.share(distributed.failure_facts(err, kind))
        except distributed.RankLost:   # (the ranks are gone already)
            pass


def _run(cfg: DictConfig, run_dir: Path, hydra_record, show_header, last: LastSummary | None) -> dict:
    exchanges = LeaderExchanges(distributed.current())
    with distributed.telling(exchanges, USER_ERRORS, faults=(WriteFault,)):   # (the ranks end as rank 0 does)
        return _launch(cfg, run_dir, hydra_record, show_header, exchanges, last)


def _launch(cfg: DictConfig, run_dir: Path, hydra_record, show_header, exchanges: LeaderExchanges,
            last: LastSummary | None) -> dict:
    refuse_debug_breaks(cfg)
    typed = validated_run_config(cfg)   # the run's config typed once: what is below reads it (and its fingerprints)
    device = resolve_device(typed.device)  # (again: a multirun's jobs are checked here), once for the run
    check_output_dir(run_dir)
    with RunDirLock(run_dir):  # a second launch into run_dir is refused until this one ends
        remove_broken_writes(run_dir)
        start = plan_launch(run_dir, typed)  # fresh, resume, replay, finished or refused (attempts)
        exchanges.share(start_for_followers(run_dir, start))   # (several ranks: where they start)
        if start.kind == "finished":
            log.info(finished_line(run_dir, start.summary))
            return start.summary
        r = build_run(typed, earlier_engine=(start.summary or {}).get("engine") if start.resuming else None,
                      device=device)
        sampler = r.sampler()
        loop, recorder, summary = start_attempt(run_dir, start, r, sampler, exchanges.agree, hydra_record, last)
        show_header(summary, r.plan)
        if start.resuming:
            log.info(resumed_line(run_dir, loop.step, r.total_steps))
        train_to_the_end(r, sampler, loop, recorder, summary)
    return summary


def start_for_followers(run_dir: Path, start) -> dict:
    """What the other ranks of a data-parallel run need of rank 0's launch to start where it does:
    whether there is anything to do, and a resumed run's checkpoint (every rank reads the one rank 0
    resumes from, in the private workspace rank 0 owns) and its first attempt's engine."""
    return {"finished": start.kind == "finished",
            "checkpoint": str(checkpoint_path(run_dir).absolute()) if start.resuming else None,
            "earlier_engine": (start.summary or {}).get("engine") if start.resuming else None}


def follow(cfg: DictConfig) -> None:
    """A rank other than 0 of a data-parallel run (torchrun): the run's steps on this rank's shards,
    from the step rank 0 starts at (its checkpoint, read here too), once every rank agrees it runs
    the same config, data and code from the same step; nothing written. A refusal, a fault of the
    machine (an OSError other than a missing file: reading rank 0's checkpoint, the data) or an error
    while this rank builds the run is told to the others in that agreement (`distributed.telling`)."""
    group = distributed.current()
    start = start_from_leader(group)
    if start["finished"]:   # rank 0 says so, and there is nothing to do
        return
    with distributed.telling(group, USER_ERRORS, faults=(OSError,)):
        typed = validated_run_config(cfg)
        r = build_run(typed, earlier_engine=start["earlier_engine"])
        sampler = r.sampler()
        loop, where = follower_start(r, sampler, start["checkpoint"])
    r.group.agree({**r.rank_facts(loop.step), "start": where})
    follow_loop(r, sampler, loop)


def start_from_leader(group: distributed.Group) -> dict:
    """A follower's first exchange: where rank 0 starts the run (`start_for_followers`), or rank 0's
    refusal or failure, raised (`told_failure`: a refusal is rank 0's line, `LeaderRefused`)."""
    start = group.share(None)
    told = distributed.told_failure([start], group.rank)
    if told is not None:
        raise told
    return start


def follower_start(r, sampler, path: str | None) -> tuple[LoopState, str]:
    """A follower's loop state (from rank 0's checkpoint at `path`, or the first step) and where it
    starts, in words; a checkpoint it cannot read starts it nowhere, which the ranks' agreement
    refuses on every rank in one line."""
    if path is None:
        return LoopState(), "step 0"
    if not Path(path).is_file():
        return LoopState(), (f"no step: rank 0's checkpoint {path} is not there (every rank reads rank 0's run "
                             "directory: one machine, or a shared file system)")
    try:
        loop = resume_state(r, sampler, read_checkpoint(Path(path)), Path(path))
    except ConfigError as err:
        return LoopState(), f"no step: {str(err).split(';')[0]}"
    return loop, f"step {loop.step}"


def refuse_debug_breaks(cfg) -> None:
    """A training run never runs with a debug break of the mechanisms (`pazo.audit` only)."""
    audit = cfg.get("audit")
    if active_debug_break() is not None or (audit is not None and audit.get("debug_break") is not None):
        raise ConfigError(DEBUG_ONLY)
