"""Timing of a benchmark's steps (each synchronised on CUDA, alone or paired with another) and
their peak memory, and the result record with the machine they ran on."""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from pazo.bench.common import command_line, git_commit


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak(device):
    """Start a new peak-memory window: the CUDA allocator's peak, or the process's VmHWM on CPU."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        try:
            Path("/proc/self/clear_refs").write_text("5")
        except OSError:
            pass


def peak_mb(device):
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def time_steps(step, device, warmup, iters):
    for _ in range(warmup):
        step()
    reset_peak(device)
    times = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t0)
    q25, q75 = np.percentile(times, [25, 75])
    return {"median_s": statistics.median(times), "p25_s": float(q25), "p75_s": float(q75), "iters": iters,
            "peak_mem_mb": peak_mb(device)}


def paired_times(first, second, device, iters) -> list[tuple[float, float]]:
    """`iters` pairs of (seconds of `first`, seconds of `second` run just after it), each synchronised."""
    pairs = []
    for _ in range(iters):
        pair = []
        for fn in (first, second):
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            pair.append(time.perf_counter() - t0)
        pairs.append(tuple(pair))
    return pairs


def result_record(device: torch.device, rows: list) -> dict:
    """A benchmark's result file: its rows beside the command, commit, date (UTC), device, torch
    threads, load average, torch version and platform they were measured with."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu x{os.cpu_count()}"
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"command": command_line(), "commit": git_commit(), "date": date, "device": name,
            "threads": torch.get_num_threads(), "load_average": os.getloadavg(), "torch": torch.__version__,
            "platform": platform.platform(), "results": rows}
