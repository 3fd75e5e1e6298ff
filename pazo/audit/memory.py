"""What an audit's canaries hold, estimated before the run: every design keeps a few numbers per
canary (its inclusion draw, its score, its id in a step's Poisson batch), and each design adds
its own record, which grows with the canaries and, for some, with the steps. An `audit.canaries`
that cannot fit in the memory this machine has available is one line before the run, instead of
a process that grows until the kernel kills it (200 million canaries held over 20 GB within a
minute)."""
from __future__ import annotations

import math

from pazo.errors import ConfigError
from pazo.zo.memory import HOST_BYTES_PER_LOSS, SHARE_OF_AVAILABLE

#: bytes per canary every design holds: the inclusion draw (float64) and flag, the included ids,
#: each step's Poisson draws over them, the scores (float64), the bound's stable argsort and the
#: membership metrics' sorted copies (200 million canaries held about 20 GB: ~100 a canary)
COMMON_BYTES = 96
#: bytes per canary present in a step of the coded design: its id as a Python int in the step's
#: set and the array it came from
CODED_BYTES_PER_PRESENT = 128


def bytes_per_canary(threat: str, worst_case: bool, zeroth_order: bool, steps: int, queries: int,
                     sample_rate: float, example_bytes: int) -> float:
    """Peak host bytes of one canary of an audit of `steps` steps (the estimate is linear in the
    number of canaries). Black box: each canary is an example, held twice (the canaries and the
    data set they join, and a scoring batch). White box, coded (a zeroth-order worst case): a public order, and the
    canaries a step samples held as Python numbers. White box among the real examples: the signs
    of every call ([queries] int8 per canary and step, then one float64 matrix for the scores)
    and, for a zeroth-order release, the sampled canaries' values in the privatiser's rows."""
    per = COMMON_BYTES
    if threat == "black_box":   # (the canaries, the data set they join, and the scoring pass's batches)
        return per + 3 * example_bytes
    if zeroth_order and worst_case:
        return per + 8 + sample_rate * CODED_BYTES_PER_PRESENT
    calls = steps * (queries if zeroth_order else 1)
    per += 9 * calls
    if zeroth_order:
        per += sample_rate * queries * HOST_BYTES_PER_LOSS
    return per


def check_canary_memory(canaries: int, per_canary: float, available: int | None, steps: int) -> None:
    """Refuse, in one line, canaries whose estimate exceeds SHARE_OF_AVAILABLE of the memory
    `available` (None: it cannot be read here, nothing is refused), naming the most that fit."""
    need = canaries * per_canary
    if available is None or need <= SHARE_OF_AVAILABLE * available:
        return
    most = math.floor(SHARE_OF_AVAILABLE * available / per_canary)
    remedy = (f"use audit.canaries <= {most}" if most >= 2 else
              f"not even the fewest, audit.canaries=2, fit: audit fewer steps than {steps} or on a machine "
              "with more memory")
    raise ConfigError(f"audit.canaries={canaries} needs about {need / 2**30:.1f} GiB for {steps} step(s) "
                      f"(about {per_canary:.0f} bytes a canary), more than {SHARE_OF_AVAILABLE:.0%} of the "
                      f"{available / 2**30:.1f} GiB available on this machine: {remedy}")
