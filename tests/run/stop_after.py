"""Run by `test_distributed.py`: `pazo-train` with the overrides after STEP, as one process or as one
rank of a run (RANK, WORLD_SIZE as torchrun sets them); rank 0 is sent SIGTERM during its step STEP,
honoured after that step with a checkpoint, as a scheduler preempts a run.

    python stop_after.py STEP OVERRIDE ...
"""
import os
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))   # tests/, for step_faults (as pytest finds it)

from pazo.methods.base import Method  # noqa: E402
from pazo.train import cli  # noqa: E402
from step_faults import signalled_at_step  # noqa: E402


def stop_after(step_number: int) -> None:
    """SIGTERM to this process during the step `step_number`, once the method has taken it."""
    Method.take_step = signalled_at_step(Method.take_step, step_number)


if __name__ == "__main__":
    step = int(sys.argv[1])
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    if os.environ.get("RANK", "0") == "0":
        stop_after(step)
    cli()
