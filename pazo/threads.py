"""How many CPU threads a run's tensor operations use: chosen (`train.threads`), not inherited.

torch's default is one OpenMP thread per core. On a quiet 2-core machine that is right for the
paper-setting shapes (2 threads made their steps 1.1-2.2x faster) but not for a tiny model: the
whole default run (digits, 9,930 parameters) took 1.2x longer at 2 threads, its step being a long
series of small operations whose cost is per-operation overhead. On a busy machine it is badly
wrong for every model: under load, `make run` took 58 s at 2 threads against 13 s at one, because
OpenMP's threads wait on each other at every operation while someone else holds a core. So `auto`
gives a model under `SMALL_MODEL_PARAMETERS` one thread, and a larger one as many threads as
cores are idle when the run starts (over `IDLE_WINDOW_S`, from /proc/stat, among the cores this
process may use), at least one and at most `MAX_AUTO_THREADS`. The measurement behind it:
`pazo-bench threads` (scripts/results/threads_cpu.json).

An `OMP_NUM_THREADS` already set in the environment wins over both (a scheduler or a sweep that
runs jobs side by side sets it: `pazo.sweep.launchers.run_one`). The count is not part of the computation's
fingerprint: it changes only the order of float additions inside kernels.
"""
from __future__ import annotations

import os
import time

#: below this many parameters (the whole model's, frozen ones included) `auto` uses one thread
#: (digits' CNN; the CIFAR shape, at 183,242, was already faster at two: scripts/results/threads_cpu.json)
SMALL_MODEL_PARAMETERS = 100_000
#: the most threads `auto` takes (more rarely pays on a shared machine)
MAX_AUTO_THREADS = 4
#: how long `auto` watches the cores before the run starts
IDLE_WINDOW_S = 0.2


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which a scheduler may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def valid_threads(value) -> bool:
    """Whether `value` may be asked for: `auto` or an integer >= 1."""
    return value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def core_times(stat: str, cores: set[int]) -> dict[int, tuple[int, int]]:
    """Per usable core, (idle ticks, all ticks) from the text of /proc/stat (idle counts iowait)."""
    times = {}
    for line in stat.splitlines():
        name, *fields = line.split() or [""]
        if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cores:
            ticks = [int(f) for f in fields[:8]]
            times[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return times


def idle_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> float:
    """How many cores were idle between two `core_times` snapshots: each core's idle fraction, summed
    (a core without ticks in between, or missing from `after`, counts as idle)."""
    idle = 0.0
    for core, (idle0, total0) in before.items():
        idle1, total1 = after.get(core, (idle0, total0))
        idle += min(max((idle1 - idle0) / (total1 - total0), 0.0), 1.0) if total1 > total0 else 1.0
    return idle


def idle_cores(window: float = IDLE_WINDOW_S) -> float | None:
    """How many of this process's cores are idle over the next `window` seconds, or None where the
    kernel does not say (not Linux)."""
    try:
        cores = os.sched_getaffinity(0)
        with open("/proc/stat") as f:
            before = core_times(f.read(), cores)
        time.sleep(window)
        with open("/proc/stat") as f:
            after = core_times(f.read(), cores)
    except (AttributeError, OSError, ValueError):
        return None
    return idle_between(before, after) if before else None


def auto_threads(cores: int, idle: float | None, parameters: int) -> int:
    """The rule for `auto`: one thread for a model under `SMALL_MODEL_PARAMETERS`, else the idle
    cores, rounded, between 1 and min(cores, MAX_AUTO_THREADS) (all of them up to that bound where
    the idle cores are not known)."""
    if parameters < SMALL_MODEL_PARAMETERS:
        return 1
    top = max(1, min(cores, MAX_AUTO_THREADS))
    if idle is None:
        return top
    return max(1, min(top, int(idle + 0.5)))


def choose_threads(requested, parameters: int, environ: dict | None = None, idle=idle_cores) -> tuple[int, str]:
    """(threads, why): `OMP_NUM_THREADS` from the environment if set, else `requested` if a number,
    else the rule (see the module's docstring; on a GPU the same rule, for the host's share).
    `idle` measures the idle cores (called only for `auto` and a model that is not small)."""
    environ = os.environ if environ is None else environ
    given = environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) >= 1:
        return int(given), "OMP_NUM_THREADS from the environment"
    if requested != "auto":
        return int(requested), "train.threads"
    cores = usable_cores()
    if parameters < SMALL_MODEL_PARAMETERS:   # (the rule needs no look at the cores)
        return auto_threads(cores, None, parameters), f"auto: under {SMALL_MODEL_PARAMETERS:,} parameters, one thread"
    seen = idle()
    count = auto_threads(cores, seen, parameters)
    if seen is None:
        return count, f"auto: min(cores {cores}, {MAX_AUTO_THREADS}) (idle cores not known here)"
    return count, f"auto: {seen:.1f} of {cores} cores idle at the start (at most {MAX_AUTO_THREADS})"


def apply_threads(requested, parameters: int) -> dict:
    """Set torch's intra-op thread count as `choose_threads` says; the summary's `threads` block."""
    import torch   # (here: the config's checks read this module, and need no torch)

    count, why = choose_threads(requested, parameters)
    torch.set_num_threads(count)
    return {"count": torch.get_num_threads(), "requested": requested, "why": why}
