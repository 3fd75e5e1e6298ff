"""Run by `test_library_distributed.py` as each rank of a 2-process group the user initialises (gloo,
with a long timeout, TIMEOUT_S), started as torchrun starts its ranks: the library loop
(`library_steps.run_method`), rank 1 given a NaN in its private data, which private_zo refuses before
any step. Each rank writes what it met to OUT/rank<R>.json; rank 1 then stays, as a user's process that
caught the error and went on would (a notebook), until rank 0 has written its own, for at most
LINGER_S: rank 0 must learn of rank 1's refusal from rank 1, not from its process ending.

    python library_fails.py OUT TIMEOUT_S
"""
import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import library_steps
from pazo.errors import ConfigError

#: how long rank 1 stays once it met its refusal, waiting for rank 0's outcome
LINGER_S = 900


def main(out: Path, timeout_s: float) -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        met = {"result": library_steps.run_method("dpzero", 3, 5.0, nan_input=rank == 1)["method"]}
    except (ConfigError, RuntimeError) as err:   # (a refusal, or another rank's: RankRefused, RankFailed)
        met = {"error": type(err).__name__, "message": str(err)}
    (out / f"rank{rank}.staged").write_text(json.dumps(met))
    (out / f"rank{rank}.staged").rename(out / f"rank{rank}.json")
    waited = time.monotonic() + LINGER_S
    while rank and not (out / "rank0.json").exists() and time.monotonic() < waited:
        time.sleep(0.05)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
