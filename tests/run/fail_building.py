"""Run by `test_distributed.py`: `pazo-train` with the overrides after RANK HOW, as one rank of a run
(RANK, WORLD_SIZE as torchrun sets them); rank RANK cannot build the run: `refused` (a mistake only it
sees: its data root), `failed` (an error in its build), `fault` (a write the machine refuses: a full
disk) or `died` (killed as it builds, SIGKILL: lost to the others in their agreement, before the
launch is accepted); `failing_build` is the one launch's injection too (`distributed_launch.py`).

    python fail_building.py RANK HOW OVERRIDE ...
"""
import errno
import os
import signal
import sys

from pazo.errors import ConfigError
from pazo.files.rundir import WriteFault


class BuildCrash(RuntimeError):
    """The injected error of `failed` (not a user's mistake)."""


def failing_build(how: str):
    """`pazo.run.launch.build_run` as a rank that cannot build the run meets it (`how`)."""
    def build_run(*args, **kwargs):
        rank = os.environ.get("RANK", "0")
        if how == "refused":
            raise ConfigError(f"rank {rank}'s dataset.root holds no data (injected)")
        if how == "fault":
            raise WriteFault(f"rank-{rank}-injected.lock", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        if how == "died":
            os.kill(os.getpid(), signal.SIGKILL)
        raise BuildCrash(f"rank {rank} crashed while building (injected)")
    return build_run


if __name__ == "__main__":
    import pazo.run.launch as launch
    from pazo.train import cli

    rank, how = sys.argv[1:3]
    sys.argv = [sys.argv[0], *sys.argv[3:]]
    if os.environ.get("RANK", "0") == rank:
        launch.build_run = failing_build(how)
    cli()
