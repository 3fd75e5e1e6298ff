"""Seconds per iteration of every method, and of Opacus' DP-SGD, on the same model and batch.

    pazo-bench methods [--device auto] [--settings digits,cifar_shape] [--threads N]
                       [--iters 30] [--warmup 5] [--out scripts/results/methods_<device>.json]
                       [--batch-size B]

(or `python -m pazo.bench.methods`, or `python scripts/benchmark_methods.py`, with the same arguments)

`--batch-size` replaces every setting's b: a smoke run of the GPU settings' code on CPU (a few
examples per batch; the timings are then not the settings' and say nothing about the goal).

Synthetic inputs of each setting's shapes (no data set needed). Every job (a method with an engine,
Opacus, or the bare passes) runs in its own subprocess: `warmup` untimed steps, then `iters` steps,
each timed alone with CUDA synchronisation before and after; we report the median and the
25th/75th percentiles, and the peak memory of the timed steps: on CUDA the allocator's peak, on CPU
the peak resident set of the subprocess (VmHWM, reset after set-up; it includes the interpreter,
torch (with torch._dynamo, which some methods import on first use) and the data, about the same
in every job). Our methods run from the real configs
(configs/method/*.yaml) with sigma = 1 and a Poisson-size batch fixed at b; zeroth-order methods
run under both engines (`engine`); DP-SGD, DPMD and DOPE-SGD under both clip engines (`clip_engine`:
per-example gradients, or book-keeping, `pazo.methods.ghost_clip`), each with
`paired_over_sgd`: the median, over `iters` pairs, of its step's time over an SGD step's run just
before it (SGD built in the same subprocess once the method's peak memory is read). A clip engine
the setting's model refuses (book-keeping where layers it does not cover need a second forward and
the training forward has dropout: the IMDB LSTM, RoBERTa) is a row with `not_applicable`, the
refusal's reason, instead of times. Opacus
(optional: `pip install -r requirements-bench.txt`) runs
DP-SGD with per-sample-gradient hooks and with ghost clipping, on a copy of the same model, batch
and clip.

A zeroth-order method's floor is the bare passes it needs, each timed alone in the same subprocess
just before the method: its private forwards (2q, so 2K for DP-AggZO's K directions, or k + 1 for
PAZO-S) at the median time of one no-grad forward of the private batch, plus its public passes (the
gradient of one batch of b' examples for PAZO-M, of k batches for PAZO-P/S, in one pass or one by
one as the method takes them: `public_s`).
`floor_ratio` is the method's median over that floor; `paired_floor_ratio` the median, over `iters`
pairs, of one step's time over the time of its bare passes run back to back just before it (robust
to a machine whose speed drifts, as a shared one does); `mem_ratio` its peak memory over the peak of
one no-grad forward of the private batch (the `floor` job); `paired_speedup_over_dpsgd` the median,
over `iters` pairs, of a DP-SGD step's time over the method's step run just after it (DP-SGD built
in the same subprocess once the method's peak memory is read). `paper_setting` names the column of the
paper's Table 5 a setting matches (`pazo-report tables --benchmark` reads this file).

The rows go to the result file (`--out`); the terminal gets one line per job done (stderr) and, at
the end, one Markdown table of the same values: every number of a row has its column (`TABLE`) but
the run's size and the floor's parts (`IN_FILE_ONLY`), which the file holds.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import signal
import statistics
import subprocess
import sys
from functools import partial
from pathlib import Path

import torch
from torch import nn

from pazo.files.file_kinds import output_file
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.bench.common import RESULTS_DIR, at_least, run_main, write_result
from pazo.bench.settings import (ENGINE_NAMES, PAPER_SETTING, SETTINGS, add_dataset_setting, bare_model,
                                 bare_passes, build_benchmark_method, check_overrides_for, compose_cfg,
                                 public_passes, set_batch_size, step_passes, synthetic_inputs)
from pazo.bench.timing import paired_times, result_record, time_steps
from pazo.errors import ConfigError, DataMissingError, unknown_choice
from pazo.run.build import resolve_device
from pazo.run.typed import run_config
from pazo.methods import method_info, method_names
from pazo.methods.base import public_grads_batched
from pazo.models import build_model

DEFAULT_SETTINGS = "digits,cifar_shape"
CLIP_ENGINES = ("per_example", "ghost")


def clip_engine_timed(name: str) -> bool:
    """Whether a method is timed under each way of computing the clipped sum (`method.clip_engine`):
    a private method whose one release is a noisy sum of clipped vectors (DP-SGD, DPMD, DOPE-SGD)."""
    info = method_info(name)
    return info.release == "vector" and "clip_engine" in {f.name for f in dataclasses.fields(info.config)}


def forward_floor(setting, device, warmup, iters, model=None):
    """One bare forward pass (no gradient, eval mode) of the setting's model on a private batch."""
    model = model or bare_model(setting, device)
    x, y = synthetic_inputs(setting, SETTINGS[setting][3], device)
    was = model.module.training
    model.module.eval()

    def forward():
        with torch.no_grad():
            model.current_losses(x, y)
    try:
        return time_steps(forward, device, warmup, iters)
    finally:
        model.module.train(was)


def public_floor(setting, device, warmup, iters, public_batch_size, batches=1, model=None, together=None):
    """The public passes of one step (`public_passes`), timed alone, train mode."""
    model = model or bare_model(setting, device)
    return time_steps(public_passes(setting, device, public_batch_size, batches, model, together), device, warmup,
                      iters)


def ours(name, setting, device, warmup, iters, extra=(), engine=None, clip_engine=None):
    b = SETTINGS[setting][3]
    extra = [*extra, *([f"method.clip_engine={clip_engine}"] if clip_engine else [])]
    method, config, model = build_benchmark_method(name, setting, device, engine, extra)
    x, y = synthetic_inputs(setting, b, device)
    counter = iter(range(1, 10**9))
    step = lambda: method.step(x, y, next(counter))  # noqa: E731
    if not method_info(name).zeroth_order:
        row = time_steps(step, device, warmup, iters)
        if clip_engine:
            row["clip_engine_used"] = method.clip_engine_block()["engine"]["clip_engine"]
            row["paired_over_sgd"] = paired_over_sgd(step, setting, device, warmup, iters)
        return row, model.dim
    # the bare passes: each timed alone, just before the method, and again interleaved with its steps
    n_fwd, n_pub = step_passes(name, config)
    fwd = forward_floor(setting, device, warmup, iters, model)["median_s"]
    pub = (public_floor(setting, device, warmup, iters, config.public_batch_size, n_pub, model,
                        public_grads_batched(config, model))["median_s"]
           if n_pub else 0.0)
    bare = bare_passes(setting, device, name, config, model, x, y)
    row = time_steps(step, device, warmup, iters)
    # pairs (bare passes, step): the ratio holds when the machine's speed drifts
    ratios = [after / before for before, after in paired_times(bare, step, device, iters)]
    row.update(forwards=n_fwd, forward_s=fwd, public_passes=n_pub, public_s=pub, floor_s=n_fwd * fwd + pub,
               floor_ratio=row["median_s"] / (n_fwd * fwd + pub), paired_floor_ratio=statistics.median(ratios))
    row["paired_speedup_over_dpsgd"] = paired_speedup_over_dpsgd(step, setting, device, warmup, iters)
    return row, model.dim


def paired_speedup_over_dpsgd(step, setting, device, warmup, iters) -> float:
    """The median, over `iters` pairs, of a DP-SGD step's time over the method's step run just after
    it, in this process (DP-SGD from its own config on its own copy of the model and batch, built
    after the method's memory was measured): a speedup that holds when the machine's speed drifts
    between subprocesses, which a ratio of two jobs' medians does not."""
    pairs = _paired_with(build_benchmark_method("dpsgd", setting, device)[0], step, setting, device, warmup, iters)
    return statistics.median(before / after for before, after in pairs)


def _paired_with(baseline_method, step, setting, device, warmup, iters) -> list:
    """(baseline step time, `step` time) pairs, the baseline method stepping on its own batch just before."""
    x, y = synthetic_inputs(setting, SETTINGS[setting][3], device)
    counter = iter(range(1, 10**9))
    baseline = lambda: baseline_method.step(x, y, next(counter))  # noqa: E731
    for _ in range(warmup):
        baseline()
    return list(paired_times(baseline, step, device, iters))


def paired_over_sgd(step, setting, device, warmup, iters) -> float:
    """The median, over `iters` pairs, of the method's step time over an SGD step's run just before
    it, in this process (SGD from its own config on its own copy of the model and batch): the
    slowdown of private training that holds when the machine's speed drifts."""
    pairs = _paired_with(build_benchmark_method("sgd", setting, device)[0], step, setting, device, warmup, iters)
    return statistics.median(after / before for before, after in pairs)


def opacus_dpsgd(mode, setting, device, warmup, iters):
    from opacus import PrivacyEngine

    shape, classes, model_overrides, b = SETTINGS[setting]
    cfg = compose_cfg(["method=dpsgd", *model_overrides])
    torch.manual_seed(0)
    module = build_model(run_config(cfg).model, shape, classes).to(device)
    optimizer = torch.optim.SGD(module.parameters(), lr=float(cfg.method.lr))
    data = torch.utils.data.TensorDataset(*synthetic_inputs(setting, 4 * b))
    loader = torch.utils.data.DataLoader(data, batch_size=b)
    made = PrivacyEngine(accountant="prv").make_private(
        module=module, optimizer=optimizer, data_loader=loader, noise_multiplier=1.0,
        max_grad_norm=float(cfg.method.clip), poisson_sampling=False, grad_sample_mode=mode,
        criterion=nn.CrossEntropyLoss())
    model, optimizer, criterion = made[0], made[1], (made[2] if mode == "ghost" else nn.CrossEntropyLoss())
    x, y = synthetic_inputs(setting, b, device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    return time_steps(step, device, warmup, iters)


def run_job(job, device, warmup, iters, overrides):
    """One job in this process: a row of results (without the setting's common fields), with the
    private batch size the job itself used."""
    if job["impl"] == "floor":
        row = {**forward_floor(job["setting"], device, warmup, iters), "what": "one no-grad forward of the batch"}
    elif job["impl"].startswith("opacus-"):
        row = opacus_dpsgd(job["impl"].removeprefix("opacus-"), job["setting"], device, warmup, iters)
    else:
        try:
            row, dim = ours(job["method"], job["setting"], device, warmup, iters, overrides, job.get("engine"),
                            job.get("clip_engine"))
        except ConfigError as err:   # a clip engine the setting's model refuses (ghost under dropout): said, not failed
            if not job.get("clip_engine"):
                raise
            return {"not_applicable": str(err), "batch_size": SETTINGS[job["setting"]][3]}
        row = {"dim": dim, **row}
    return {**row, "batch_size": SETTINGS[job["setting"]][3]}


def run_isolated(job, args, device):
    """`run_job` in a subprocess of its own (its own peak memory); the row, or the error."""
    cmd = [sys.executable, "-m", "pazo.bench.methods", "--job", json.dumps(job), "--device", str(device),
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--threads", str(args.threads),
           *(["--batch-size", str(args.batch_size)] if args.batch_size else []),
           *[a for o in args.override for a in ("--override", o)]]
    done = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": job_failure(done.returncode, done.stderr)}
    return json.loads(lines[-1])


def job_failure(returncode: int, stderr: str) -> str:
    """Why a job subprocess gave no row: the last line it wrote to stderr, or how it ended (a job
    killed by a signal writes nothing: on Linux a SIGKILL out of the blue is most often the kernel's
    out-of-memory killer)."""
    last = (stderr.strip().splitlines() or [""])[-1][:300]
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else f"signal {-returncode}"
        how = f"killed by {name}" + (" (out of memory?)" if -returncode == signal.SIGKILL else "")
        return f"{how}: {last}" if last else how
    return last or f"exit {returncode} and no output"


def jobs_for(setting, methods, opacus_modes):
    jobs = [{"setting": setting, "method": "forward", "impl": "floor"}]
    for name in methods:
        if clip_engine_timed(name):
            jobs += [{"setting": setting, "method": name, "impl": "pazo", "clip_engine": e} for e in CLIP_ENGINES]
            continue
        engines = ENGINE_NAMES if method_info(name).zeroth_order else (None,)
        jobs += [{"setting": setting, "method": name, "impl": "pazo", **({"engine": e} if e else {})} for e in engines]
    jobs += [{"setting": setting, "method": "dpsgd", "impl": f"opacus-{mode}"} for mode in opacus_modes]
    return jobs


def check_arguments(args) -> None:
    """Settings, methods, device and overrides, before any job: one ConfigError for the first problem."""
    from pazo.data import DATASETS

    for what, given, known, is_known, also in (
            ("setting", args.settings, list(SETTINGS), SETTINGS.known, "; or a registered data set"),
            ("method", args.methods, method_names(), lambda n: n in method_names(), "")):
        names = [n for n in given.split(",") if n]
        unknown = [n for n in names if not is_known(n)]
        if unknown:
            raise ConfigError(unknown_choice(what, unknown[0], known) + also)
        if not names:
            raise ConfigError(f"no {what} given (choices: {', '.join(sorted(known))})")
    for setting in args.settings.split(","):
        if setting in DATASETS:   # read now: a data set whose files are missing is its loader's one line
            add_dataset_setting(setting, args.override)
    resolve_device(args.device, option="--device ")
    check_overrides_for(args.methods.split(","), args.settings.split(","), args.override)


def main():
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS,
                        help=f"from {', '.join(SETTINGS)}, or any registered data set (its own examples; "
                             "--override model=... picks the model)")
    parser.add_argument("--methods", default=",".join(method_names()), help="default: every registered method")
    parser.add_argument("--iters", type=at_least(1), default=30)
    parser.add_argument("--warmup", type=at_least(0), default=5)
    parser.add_argument("--threads", type=at_least(0), default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=output_file, default=None)
    parser.add_argument("--note", default=None, help="a note for the result file (e.g. the machine's load)")
    parser.add_argument("--batch-size", type=at_least(1), default=None,
                        help="every setting's batch size (smoke runs; default: each setting's own)")
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)  # internal: run one job and print its row
    parser.add_argument("--override", action="append", default=[],
                        help="extra config override for our methods, e.g. method.grad_memory_mb=8192")
    args = parser.parse_args()
    if not args.job:   # (a job's arguments were checked by the parent)
        try:
            check_arguments(args)
        except (ConfigError, DataMissingError) as err:
            print(f"pazo: error: {err}", file=sys.stderr)
            sys.exit(2)
    device = resolve_device(args.device, option="--device ")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.batch_size:
        set_batch_size(args.batch_size)
    if args.job:
        add_dataset_setting(json.loads(args.job)["setting"], args.override)   # (a paper setting: nothing)
        # torch.func.grad (per-example and batched public gradients) imports torch._dynamo on first use,
        # 150-160 MB of peak resident set on CPU (508 -> 658 MB after `import torch`); loaded in every job
        # up front, so the peak resident sets compare the steps' memory, not which jobs happened to
        # import it (the forward's does not)
        importlib.import_module("torch._dynamo")
        print(json.dumps(run_job(json.loads(args.job), device, args.warmup, args.iters, args.override)))
        return
    try:
        import opacus  # noqa: F401
        opacus_modes = ["hooks", "ghost"]
    except ImportError:
        opacus_modes = []
        print("pazo-bench methods: opacus is not installed (pip install -r requirements-bench.txt): skipping it",
              file=sys.stderr)
    rows = run_jobs(args, device, opacus_modes)
    out = Path(args.out or RESULTS_DIR / f"methods_{device.type}.json")
    note = {"note": args.note} if args.note else {}
    print("\n".join(table_lines(rows)))
    write_result(out, {**result_record(device, rows), **note})   # threads: args.threads where given (set above)


def run_jobs(args, device, opacus_modes) -> list[dict]:
    """Every job of every setting, each in its own subprocess: the result rows (what the result file
    holds), with one line on stderr per job done (a run takes minutes)."""
    rows = []
    for setting in args.settings.split(","):
        forward_peak = None
        jobs = jobs_for(setting, args.methods.split(","), opacus_modes)
        for number, job in enumerate(jobs, 1):
            base = {**job, "batch_size": SETTINGS[setting][3],
                    **({"paper_setting": PAPER_SETTING[setting]} if setting in PAPER_SETTING else {})}
            row = {**base, **run_isolated(job, args, device)}
            if job["impl"] == "floor":
                forward_peak = row.get("peak_mem_mb")
            elif forward_peak and row.get("peak_mem_mb"):
                row["mem_ratio"] = row["peak_mem_mb"] / forward_peak
            rows.append(row)
            what = " ".join(str(w) for w in (setting, job["method"], job.get("engine") or job.get("clip_engine")) if w)
            print(f"pazo-bench methods: job {number}/{len(jobs)} done ({what})", file=sys.stderr)
    return rows


#: the printed table: header -> the result row's values it shows (one, the first of several present
#: for a text, or a p25-p75 range) and their format (None: text); every number a row holds is in a
#: column or in IN_FILE_ONLY (a test holds the two to it)
TABLE = (("setting", ("setting",), None), ("method", ("method",), None), ("impl", ("impl",), None),
         ("engine", ("engine", "clip_engine"), None), ("median s/iter", ("median_s",), ".5f"),
         ("p25-p75", ("p25_s", "p75_s"), ".5f"), ("floor s", ("floor_s",), ".5f"), ("x floor", ("floor_ratio",), ".2f"),
         ("x floor (paired)", ("paired_floor_ratio",), ".2f"), ("x SGD (paired)", ("paired_over_sgd",), ".2f"),
         ("speedup over DP-SGD (paired)", ("paired_speedup_over_dpsgd",), ".2f"), ("peak MB", ("peak_mem_mb",), ".0f"),
         ("x fwd mem", ("mem_ratio",), ".2f"))
#: the numbers of a result row the table leaves to the file: the run's size and the floor's parts
IN_FILE_ONLY = ("batch_size", "iters", "dim", "forwards", "forward_s", "public_passes", "public_s")


def table_cell(row: dict, keys: tuple[str, ...], fmt: str | None) -> str:
    """One cell, from the row's own values ("" where it has none)."""
    if fmt is None:
        return str(next((row[k] for k in keys if row.get(k) not in (None, "")), ""))
    values = [row.get(k) for k in keys]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        return ""
    return "-".join(format(v, fmt) for v in values)


def table_lines(rows: list[dict]) -> list[str]:
    """The Markdown table printed at the end: a failed or not applicable job says so after its engine."""
    lines = ["| " + " | ".join(header for header, _, _ in TABLE) + " |", "|" + "---|" * len(TABLE)]
    for r in rows:
        cells = [table_cell(r, keys, fmt) for _, keys, fmt in TABLE]
        if "error" in r or "not_applicable" in r:
            why = f"failed: {r['error'][:80]}" if "error" in r else f"not applicable: {r['not_applicable'][:80]}"
            cells = [*cells[:4], why]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


#: `pazo-bench methods`, `python -m pazo.bench.methods`, `python scripts/benchmark_methods.py`.
cli = command(partial(run_main, "benchmark_methods", main))


if __name__ == "__main__":
    cli()
