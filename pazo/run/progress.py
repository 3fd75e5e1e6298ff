"""Progress where nobody watches: on a terminal the loop's tqdm bar shows it; outside one (a SLURM
log, `> run.log`, a sweep job's stdout.log) tqdm is silent, so a line every `train.progress_seconds`
says how far the run is, as Lightning and the Hugging Face trainer do in non-interactive logs:

    progress: step 120/546 (22%), epoch 6.6, epsilon 0.412, 0.021 s/iter, about 9 s left

Everything on it is public or already listed outside the guarantee (the step times)."""
from __future__ import annotations

import time
from collections.abc import Callable


def format_seconds(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """Calls `say(line)` at most once every `every_seconds` (and never when `quiet`: a terminal's
    bar already shows it), from the loop's own thread, with the step, the epoch, the last epsilon
    accounted and the mean time per step of this attempt."""

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
