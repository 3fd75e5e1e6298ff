"""Run by `test_distributed.py`: `pazo-train` with the overrides after RANK, as one rank of a run
(RANK, WORLD_SIZE as torchrun sets them); rank RANK meets a fault of the machine before the ranks
join: rank 0 a full disk as it checks where the run writes (its probe file refused), another rank an
I/O error as it composes its config (it writes nothing).

    python fault_before_joining.py RANK OVERRIDE ...
"""
import errno
import os
import sys

import pazo.files.rundir as rundir
import pazo.train as train


def full_disk(original):
    """`rundir.open_file` as a full disk meets it: a probe of where a run writes is refused."""
    def open_file(path, *args, **kwargs):
        if os.path.basename(path).startswith(".pazo-probe-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(path, *args, **kwargs)
    return open_file


def unreadable_config(argv):
    raise OSError(errno.EIO, os.strerror(errno.EIO), "configs/config.yaml")


if __name__ == "__main__":
    rank = sys.argv[1]
    sys.argv = [sys.argv[0], *sys.argv[2:]]
    if os.environ.get("RANK", "0") == rank:
        if rank == "0":
            rundir.open_file = full_disk(rundir.open_file)
        else:
            train.follower_config = unreadable_config
    train.cli()
