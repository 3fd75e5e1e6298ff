"""Run by `test_distributed.py`: `pazo-train` with the overrides after STEP, as one process or as one
rank of a run (RANK, WORLD_SIZE as torchrun sets them); rank 0 is sent SIGTERM during its step STEP,
honoured after that step with a checkpoint, as a scheduler preempts a run.

    python stop_after.py STEP OVERRIDE ...
"""
import os
import signal
import sys

from pazo.methods.base import Method
from pazo.train import cli


def stop_after(step_number: int) -> None:
    """SIGTERM to this process during the step `step_number`, once the method has taken it."""
    original = Method.take_step

    def take_step(self, x, y, step):
        stats = original(self, x, y, step)
        if step == step_number:
            os.kill(os.getpid(), signal.SIGTERM)
        return stats
    Method.take_step = take_step


if __name__ == "__main__":
    step = int(sys.argv[1])
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    if os.environ.get("RANK", "0") == "0":
        stop_after(step)
    cli()
