"""What one zeroth-order step holds at once, estimated before the first step: its memory grows with
the number of queries (`method.q`: 2 perturbed evaluations each), the batch size and, with the
vectorised engine, the perturbed copies of the parameters evaluated per call (`engine.chunk_size`,
all of them when unset). A setting that cannot fit in the memory this machine has available is
one line before any compute, instead of a process that grows until the kernel kills it."""
from __future__ import annotations

import math

import torch

from pazo.errors import ConfigError

#: host bytes per (query point, example): the loss as a Python float in a list, its share of the
#: finite difference, the scaled copy the privatiser clips, and the rows' tensor (measured: ~90)
HOST_BYTES_PER_LOSS = 96
#: a setting is refused when its estimate exceeds this share of the memory available (the rest:
#: the model, its activations, the data, Python)
SHARE_OF_AVAILABLE = 0.8


def step_bytes(queries: int, batch_size: int, dim: int, element_size: int, engine: str,
               chunk_size: int | None) -> tuple[int, int]:
    """(bytes on the parameters' device, bytes on the host) one step of `queries` two-point
    queries holds at its peak. The vectorised engine stacks `chunk` perturbed copies of the
    parameters ([chunk, d]; with its scaled and summed temporaries, three such blocks) and the
    directions of the chunk; the in-place engine perturbs the live parameters, one at a time."""
    points = 2 * queries
    batch = batch_size + 4 * math.isqrt(batch_size)   # a Poisson batch's size rarely exceeds it
    host = points * batch * HOST_BYTES_PER_LOSS
    device = 0
    if engine == "vectorised":
        chunk = min(chunk_size or points, points)
        device = (3 * chunk + min(queries, chunk)) * dim * element_size
    return device, host


def available_bytes(device: torch.device) -> tuple[int | None, int | None]:
    """(free memory of `device` if it is a GPU, else None; the host's available memory, or None
    where it cannot be read)."""
    gpu = None
    if device.type == "cuda":
        gpu = torch.cuda.mem_get_info(device)[0]
    try:
        import psutil
        host = psutil.virtual_memory().available
    except ImportError:
        host = _meminfo_available()
    return gpu, host


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_step_memory(queries: int, batch_size: int, dim: int, element_size: int, engine: str,
                      chunk_size: int | None, device: torch.device, what: str = "method.q") -> None:
    """Refuse, in one line, a step whose estimate (`step_bytes`) exceeds SHARE_OF_AVAILABLE of the
    memory available where it would be held."""
    on_device, on_host = step_bytes(queries, batch_size, dim, element_size, engine, chunk_size)
    gpu, host = available_bytes(device)
    if gpu is None:   # one memory for both
        on_host, on_device = on_host + on_device, 0
    for need, have, where in ((on_device, gpu, f"free on {device}"), (on_host, host, "available on this machine")):
        if have is None or need <= SHARE_OF_AVAILABLE * have:
            continue
        vectorised = engine == "vectorised"
        fix = (f"lower {what}" + (", set engine.chunk_size (perturbed copies per call) or engine.name=inplace"
                                  if vectorised and need == on_device + (0 if gpu is not None else on_host)
                                  and on_device else "")
               + ", or lower train.batch_size")
        raise ConfigError(
            f"{what}={queries} with train.batch_size={batch_size} needs about {_gib(need)} per step "
            f"({2 * queries} query points x the batch" + (f", {engine} engine's perturbed copies of the {dim} "
                                                         "parameters" if vectorised else "")
            + f"), more than fits in the {_gib(have)} {where}: {fix}")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
