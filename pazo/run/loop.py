"""The training loop of a run, apart from its launch (attempts, replay, exits: `pazo.train`): each
step a Poisson batch and the method's step, a row of metrics when due, an evaluation, a checkpoint,
a progress line where nobody watches (`Progress`); the outcome into the run's summary, then the
run's last files and its summary lines (`train_to_the_end`). Everything it writes goes through the
run's `Recorder`."""
from __future__ import annotations

import logging
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tqdm import tqdm

from pazo.config_schema import TrainSchema
from pazo.run.checkpoint import Heartbeat, LoopState, StopRequests
from pazo.run.distributed import RankLost
from pazo.run.build import Run
from pazo.methods.base import check_statistics, host_stats
from pazo.privacy.plan import EpsilonTracker
from pazo.run.recorder import Recorder
from pazo.files.rundir import WriteFault
from pazo.run.summary import outcome, print_summary

log = logging.getLogger("pazo.train")  # the run's lines, under the entry point's logger


@dataclass
class Schedule:
    """When the loop writes a row (every `log_every` steps) and evaluates (`evals_per_epoch` times
    an epoch, else at the end); the last step does both."""

    total_steps: int
    log_every: int
    eval_every: int

    @classmethod
    def of(cls, train: TrainSchema, steps_per_epoch: float, total_steps: int) -> Schedule:
        """The schedule of the run's typed `train` section."""
        eval_every = (max(1, round(steps_per_epoch / train.evals_per_epoch))
                      if train.evals_per_epoch else total_steps)
        return cls(total_steps, train.log_every, eval_every)

    def evaluates(self, step: int) -> bool:
        return step % self.eval_every == 0 or step == self.total_steps

    def writes_row(self, step: int) -> bool:
        return step % self.log_every == 0 or self.evaluates(step)

    def row_steps(self, after: int) -> list[int]:
        return [t for t in range(after + 1, self.total_steps + 1) if self.writes_row(t)]


def train_loop(r: Run, sampler, loop: LoopState, recorder: Recorder, summary: dict,
               stop: StopRequests) -> tuple[str | None, str | None]:
    """Steps `loop.step + 1 .. T`: a Poisson batch, the method's step, a row, an evaluation, a
    checkpoint when due (or when `stop` asks for one). Fills `summary` with the outcome; returns
    (failure, stop reason). A crash, a second Ctrl-C or a write the machine refuses is recorded
    (status failed, interrupted or fault) and raised again."""
    training = _Training(r, sampler, loop, recorder, stop)
    try:
        failure, stopped = training.run()
    except BaseException as err:  # a crash, a second Ctrl-C, a refused write: keep what was written, mark the run
        stop.shield()
        status, what = _how_it_ended(err, loop.step)
        training.record_outcome(summary, what)
        summary.update(status=status)
        recorder.fail(summary)
        raise
    finally:
        stop.shield()
        training.close()
    training.record_outcome(summary, failure)
    return failure, stopped


def train_to_the_end(r: Run, sampler, loop: LoopState, recorder: Recorder, summary: dict) -> None:
    """A launched run's loop (`train_loop`, stoppable by a signal, its heartbeat beating), then the run's
    last files and its summary lines; `summary` is updated with how it ended."""
    with StopRequests() as stop:
        with Heartbeat(recorder.beat):
            _, stopped = train_loop(r, sampler, loop, recorder, summary, stop)
        stop.shield()  # from here on the run writes its last files: a Ctrl-C waits for them
        if stopped:
            summary.update(status=stopped, failure=None, stopped_at_step=loop.step)
        try:
            recorder.finish(summary)
        except WriteFault as fault:  # the model or the last summary: the checkpoint stays for the relaunch
            summary.update(status="fault", failure=f"fault after step {loop.step}: {fault}",
                           final_test_accuracy=None)
            recorder.fail(summary)
            raise
        print_summary(summary)   # (still shielded: a Ctrl-C now does not turn the finished run into an error)


def _how_it_ended(err: BaseException, step: int) -> tuple[str, str]:
    """The status and failure line of a loop that `err` ended after `step`: a fault is the
    machine's (a write, another rank), not the run's, so it is resumable."""
    if isinstance(err, (WriteFault, RankLost)):
        return "fault", f"fault after step {step}: {err}"
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", f"interrupted at step {step + 1}: KeyboardInterrupt: {err}"
    return "failed", f"crashed at step {step + 1}: {type(err).__name__}: {err}"


class _Training:
    """One call of `train_loop`: what its steps share (the schedule, the epsilon tracker, the
    statistics since the last row and since the start, the progress display), so that each part of
    a step is a method of its own."""

    def __init__(self, r: Run, sampler, loop: LoopState, recorder: Recorder, stop: StopRequests):
        self.r, self.sampler, self.loop, self.recorder, self.stop = r, sampler, loop, recorder, stop
        self.schedule = Schedule.of(r.cfg.train, r.steps_per_epoch, r.total_steps)
        self.tracker = EpsilonTracker(r.plan, self.schedule.row_steps(after=loop.step), after=loop.step)
        self.window, self.stat_sums = defaultdict(list, loop.window), defaultdict(float, loop.stat_sums)
        self.last_saved, self.first_step = time.monotonic(), loop.step
        r.module.train()
        self.bar = tqdm(range(loop.step + 1, r.total_steps + 1), desc=f"{r.cfg.method.name}", dynamic_ncols=True,
                        disable=None, initial=loop.step, total=r.total_steps)
        self.progress = Progress(log.info, r.total_steps, r.steps_per_epoch, loop.step,
                                 r.cfg.train.progress_seconds, quiet=not self.bar.disable)

    def run(self) -> tuple[str | None, str | None]:
        """The steps until the last, a divergence (its failure line) or a stop request (its reason)."""
        for step in self.bar:
            failure = self.take_step(step)
            if failure:
                return failure, None
            if self.r.group.stopping(self.stop.reason):  # (several processes: rank 0's, at the same step on all)
                stopped = self.stop.reason
                self.stop.shield()  # a second Ctrl-C now would only break the checkpoint's write
                self.recorder.checkpoint(self.sync_loop())
                return None, stopped
            if step < self.r.total_steps and _checkpoint_due(self.r.cfg.train, step, self.last_saved):
                self.recorder.checkpoint(self.sync_loop())
                self.last_saved = time.monotonic()
        return None, None

    def take_step(self, step: int) -> str | None:
        """One step, its statistics kept and its row written when due; the failure line if it diverged."""
        self.keep_statistics(timed_step(self.r, self.sampler, self.loop, step))
        failure = f"diverged at step {step}: non-finite parameters" if diverged(self.r, self.schedule, step) else None
        if self.schedule.writes_row(step) or failure:
            self.write_row(step, evaluates=not failure and self.schedule.evaluates(step))
        else:
            self.progress.update(step)
        return failure

    def keep_statistics(self, stats: dict) -> None:
        """A step's statistics into the row's window and the run's sums (those it did not measure left out)."""
        for key, value in stats.items():
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                self.window[key].append(value)
                self.stat_sums[key] += value

    def write_row(self, step: int, evaluates: bool) -> None:
        """The row of `step` (with an evaluation if `evaluates`) into metrics.jsonl and the progress."""
        row = metrics_row(self.r, self.loop, self.window, step, self.tracker.at(step))
        if evaluates:
            evaluate(self.r, self.loop, row)
            self.bar.set_postfix(acc=f"{self.loop.last_eval['accuracy']:.3f}",
                                 eps="-" if row["epsilon"] is None else f"{row['epsilon']:.3f}")
        self.recorder.log(row)
        self.progress.update(step, row["epsilon"])

    def sync_loop(self) -> LoopState:
        """The loop's state with the statistics kept so far, as a checkpoint or the outcome reads it."""
        self.loop.window, self.loop.stat_sums = dict(self.window), dict(self.stat_sums)
        return self.loop

    def record_outcome(self, summary: dict, failure: str | None) -> None:
        """The run's outcome (epsilon spent, accuracies, the method's own facts) into `summary`."""
        r, loop = self.r, self.sync_loop()
        test_histogram = r.data.test.class_histogram(r.data.num_classes)
        summary.update(outcome(r.plan, self.tracker, loop, r.total_steps, failure, test_histogram,
                               self.recorder.steps_released, r.cfg.privacy.cache_dir))
        merge_into(summary, r.method.outcome(self.stat_sums, loop.step))
        if r.group.several:
            summary["distributed"] = r.group.describe(loop.step - self.first_step)

    def close(self) -> None:
        """The progress bar and the epsilon tracker closed, however the loop ended."""
        self.bar.close()
        self.tracker.close()


def follow_loop(r: Run, sampler, loop: LoopState) -> None:
    """A rank other than 0 of a data-parallel run: the steps rank 0 takes, each on this rank's shard
    of the same batch, reporting nothing (rank 0 writes the run); it stops where rank 0 stops: for
    non-finite parameters (the same on every rank), or when rank 0 is asked to (`Group.stopping`)."""
    schedule = Schedule.of(r.cfg.train, r.steps_per_epoch, r.total_steps)
    r.module.train()
    for step in range(loop.step + 1, r.total_steps + 1):
        timed_step(r, sampler, loop, step)
        if diverged(r, schedule, step) or r.group.stopping(None):
            return


def diverged(r: Run, schedule: Schedule, step: int) -> bool:
    """Non-finite parameters, looked at when a row is due: read from the parameters, never from raw
    private statistics."""
    return (step % schedule.log_every == 0 or step == r.total_steps) and not r.model.all_finite()


def timed_step(r: Run, sampler, loop: LoopState, step: int) -> dict:
    """One step of the method on a fresh Poisson batch, its time recorded (CUDA synchronised); its
    statistics as Python floats, read after the timing."""
    _sync(r.device)
    t0 = time.perf_counter()
    x, y = r.data.private.batch(r.group.shard(sampler.sample()), r.device)   # (one process: the whole batch)
    stats = r.method.take_step(x, y, step)
    check_statistics(stats, r.cfg.method.name)   # (statistics it cannot read: the step failed, at `step`)
    _sync(r.device)
    loop.step_times.append(time.perf_counter() - t0)
    loop.step = step
    return host_stats(stats, r.cfg.method.name)


def metrics_row(r: Run, loop: LoopState, window: dict, step: int, epsilon: float | None) -> dict:
    """A row of metrics.jsonl: the step, epsilon so far, and the means of the method's statistics
    since the last row (the window is emptied)."""
    row = {"step": step, "epoch": step / r.steps_per_epoch,
           "s_per_iter": statistics.fmean(loop.step_times[loop.last_row:]), "sigma": r.plan.sigma,
           "epsilon": epsilon}
    if not r.method.update_rule.schedule.is_default:   # the step size of the row's step (a constant one is method.lr)
        row["lr"] = r.method.update_rule.lr_at(step)
    row.update({("train_loss" if k == "loss" else k): statistics.fmean(v) for k, v in window.items() if v})
    window.clear()
    loop.last_row = len(loop.step_times)
    return row


def evaluate(r: Run, loop: LoopState, row: dict) -> None:
    """Test (and validation, if the data set has one) accuracy and loss into `row` and `loop`."""
    eval_batch_size = r.cfg.train.eval_batch_size
    loop.last_eval = r.model.evaluate(r.data.test, eval_batch_size)
    loop.best_acc = max(loop.best_acc, loop.last_eval["accuracy"])
    row.update(test_accuracy=loop.last_eval["accuracy"], test_loss=loop.last_eval["loss"])
    row.update({f"test_{k}": v for k, v in loop.last_eval.items() if k not in ("accuracy", "loss")})
    if r.data.val is not None and len(r.data.val):
        loop.last_val = r.model.evaluate(r.data.val, eval_batch_size)
        loop.best_val_acc = max(loop.best_val_acc, loop.last_val["accuracy"])
        row.update(val_accuracy=loop.last_val["accuracy"], val_loss=loop.last_val["loss"])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def merge_into(summary: dict, facts: dict) -> None:
    """`facts` into `summary`, a nested block (such as `engine`) merged rather than replaced."""
    for key, value in facts.items():
        if isinstance(value, dict) and isinstance(summary.get(key), dict):
            summary[key] = {**summary[key], **value}
        else:
            summary[key] = value


def _checkpoint_due(train: TrainSchema, step: int, last_saved: float) -> bool:
    """Every `train.checkpoint_every` steps if set, else every `train.checkpoint_minutes` of wall time."""
    if train.checkpoint_every:
        return step % train.checkpoint_every == 0
    return time.monotonic() - last_saved >= 60 * train.checkpoint_minutes


def format_seconds(seconds: float) -> str:
    """A time left as the progress line says it: seconds, minutes or hours."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Progress where nobody watches: on a terminal the loop's tqdm bar shows it; outside one (a
    SLURM log, `> run.log`, a sweep job's stdout.log) tqdm is silent, so `say(line)` is called at most
    once every `every_seconds` (`train.progress_seconds`; never when `quiet`), from the loop's own
    thread, as Lightning and the Hugging Face trainer do in non-interactive logs:

        progress: step 120/546 (22%), epoch 6.6, epsilon 0.412, 0.021 s/iter, about 9 s left

    the step, the epoch, the last epsilon accounted and the mean time per step of this attempt:
    everything on it is public or already listed outside the guarantee (the step times)."""

    def __init__(self, say: Callable[[str], None], total_steps: int, steps_per_epoch: float, first_step: int,
                 every_seconds: float, quiet: bool, clock: Callable[[], float] = time.monotonic):
        self.say, self.total, self.per_epoch = say, total_steps, steps_per_epoch
        self.every, self.quiet, self.clock = every_seconds, quiet, clock
        self.started = self.last = clock()
        self.first = first_step
        self.epsilon: float | None = None

    def update(self, step: int, epsilon: float | None = None) -> str | None:
        """After `step`: the line said, if one was due."""
        if epsilon is not None:
            self.epsilon = epsilon
        now = self.clock()
        if self.quiet or self.every <= 0 or now - self.last < self.every or step >= self.total:
            return None
        self.last = now
        done = step - self.first
        per_step = (now - self.started) / done if done > 0 else float("nan")
        line = (f"progress: step {step}/{self.total} ({step / self.total:.0%}), epoch {step / self.per_epoch:.1f}, "
                f"epsilon {'-' if self.epsilon is None else format(self.epsilon, '.3f')}, {per_step:.3g} s/iter, "
                f"about {format_seconds(per_step * (self.total - step))} left")
        self.say(line)
        return line
