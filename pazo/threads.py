"""How many CPU threads a run's tensor operations use: chosen (`train.threads`), not inherited.

torch's default is one OpenMP thread per core. On a shared 2-core machine that made `make run`
take 58 s against 13 s with one thread: a small model's step is a long series of small operations,
where each one's cost is mostly per-operation overhead and the threads only wait on each other (and
on whoever else is using the cores). The rule for `auto` is therefore by model size: one thread
below `SMALL_MODEL_PARAMETERS` trainable parameters, else the usable cores up to `MAX_AUTO_THREADS`.
The measurement behind it: `pazo-bench threads` (scripts/results/threads_cpu.json).

An `OMP_NUM_THREADS` already set in the environment wins over both (a scheduler or a sweep that
runs jobs side by side sets it: `pazo.sweep.run_one`). The count is not part of the computation's
fingerprint: it changes only the order of float additions inside kernels.
"""
from __future__ import annotations

import os

import torch

#: below this many trainable parameters `auto` uses one thread (the digits and CIFAR-shape CNNs,
#: the LSTM: scripts/results/threads_cpu.json)
SMALL_MODEL_PARAMETERS = 2_000_000
#: the most threads `auto` takes for a larger model (more rarely pays on a shared machine)
MAX_AUTO_THREADS = 4


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a scheduler may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def valid_threads(value) -> bool:
    """Whether `value` may be asked for: `auto` or an integer >= 1."""
    return value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def choose_threads(requested, parameters: int, environ: dict | None = None) -> tuple[int, str]:
    """(threads, why): `OMP_NUM_THREADS` from the environment if set, else `requested` if a number,
    else the rule (see the module's docstring; on a GPU the same rule, for the host's share)."""
    environ = os.environ if environ is None else environ
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) >= 1:
        return int(given), "OMP_NUM_THREADS from the environment"
    if requested != "auto":
        return int(requested), "train.threads"
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1, f"auto: under {SMALL_MODEL_PARAMETERS:,} parameters, one thread"
    cores = usable_cores()
    return min(cores, MAX_AUTO_THREADS), f"auto: {parameters:,} parameters, min(cores {cores}, {MAX_AUTO_THREADS})"


def apply_threads(requested, parameters: int) -> dict:
    """Set torch's intra-op thread count as `choose_threads` says; the summary's `threads` block."""
    count, why = choose_threads(requested, parameters)
    torch.set_num_threads(count)
    return {"count": torch.get_num_threads(), "requested": requested, "why": why}
