"""Run by `test_fault_set_up_signals.py`: `pazo-train` with the overrides after POINT and MARKER,
which writes MARKER as it reaches POINT (`module:function`, a moment of the run's set-up) and then
waits there: sleeps, or with `+through` calls the function (one that waits itself: rank 0's join of
peers that never come), so that the test signals the process at that moment.

    python pause_at.py POINT MARKER OVERRIDE ...
"""
import importlib
import pathlib
import sys
import time

import pazo.train as train


def paused(original, marker: str, through: bool):
    def pause(*args, **kwargs):
        pathlib.Path(marker).write_text("reached")
        if not through:
            time.sleep(120)
        return original(*args, **kwargs)
    return pause


if __name__ == "__main__":
    point, marker = sys.argv[1], sys.argv[2]
    sys.argv = [sys.argv[0], *sys.argv[3:]]
    where, through = point.removesuffix("+through"), point.endswith("+through")
    module_name, name = where.split(":")
    module = importlib.import_module(module_name)
    setattr(module, name, paused(getattr(module, name), marker, through))
    train.cli()
