"""How a sweep's runs are launched: each a `python -m pazo.train` (or `pazo.audit`) subprocess, one
after another (sequential), several at once (joblib), or as a SLURM array (submitit); the
launcher's settings typed, and what the machine must have checked before the first run starts."""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import submitit
import yaml

from pazo.commands.interrupts import stop_signal
from pazo.config_schema import integer_at_least, optional, typed
from pazo.errors import ConfigError, unknown_choice
from pazo.files.file_kinds import read_regular_text
from pazo.run import gate
from pazo.sweep.checks import status
from pazo.sweep.child_runs import CHILDREN, Interrupted, passing_on_interrupts
from pazo.sweep.spec import ROOT, PlannedRun

log = logging.getLogger("pazo.sweep")
LAUNCHERS = ("sequential", "joblib", "submitit")


@dataclass
class SequentialLauncher:
    launcher: str = "sequential"


@dataclass
class JoblibLauncher:
    launcher: str = "joblib"
    jobs: int = 2
    threads_per_job: int | None = None

    def __post_init__(self):
        integer_at_least(self.jobs, 1, "jobs")
        optional(integer_at_least, self.threads_per_job, 1, "threads_per_job")


@dataclass
class SubmititLauncher:
    launcher: str = "submitit"
    cluster: str = "slurm"
    partition: str | None = None
    gpus_per_node: int = 1
    cpus_per_task: int = 8
    mem_gb: int = 64
    timeout_min: int = 720
    array_parallelism: int = 16
    setup: list[str] = field(default_factory=list)
    wait: bool = False
    nodes: int = 1            # a job's nodes; with tasks_per_node, its tasks: one rank each of one run
    tasks_per_node: int = 1

    def __post_init__(self):
        if self.cluster not in ("slurm", "local", "debug"):
            raise ConfigError(unknown_choice("cluster", self.cluster, ("slurm", "local", "debug")))
        integer_at_least(self.gpus_per_node, 0, "gpus_per_node")
        for key in ("cpus_per_task", "mem_gb", "timeout_min", "array_parallelism", "nodes", "tasks_per_node"):
            integer_at_least(getattr(self, key), 1, key)
        if self.cluster != "slurm" and self.nodes > 1:
            raise ConfigError(f"cluster {self.cluster} runs a job on this machine: nodes must be 1, got {self.nodes}")
        if self.cluster == "debug" and self.tasks_per_node > 1:
            raise ConfigError("cluster debug runs a job inside the sweep's process, as one task: tasks_per_node "
                              f"must be 1, got {self.tasks_per_node} (cluster local runs several on this machine)")
        if self.tasks_per_node > 1 and 0 < self.gpus_per_node < self.tasks_per_node:
            raise ConfigError(f"each of a node's {self.tasks_per_node} tasks takes the GPU of its LOCAL_RANK: "
                              f"gpus_per_node must be 0 (a CPU run) or at least tasks_per_node={self.tasks_per_node}, "
                              f"got {self.gpus_per_node}")


LAUNCHER_SCHEMAS = {"sequential": SequentialLauncher, "joblib": JoblibLauncher, "submitit": SubmititLauncher}


def check_launcher(launcher: dict) -> None:
    """Every launcher setting's type and range (also on a dry run: a sweep that passes one launches)."""
    kind = launcher.get("launcher", "sequential")
    if kind not in LAUNCHERS:
        raise ConfigError(unknown_choice("launcher", kind, LAUNCHERS))
    try:
        typed(LAUNCHER_SCHEMAS[kind], launcher, "", scope="this launcher")
    except ConfigError as err:
        raise ConfigError(f"launcher {kind}: {err}") from None


def command(run: PlannedRun, run_dir: Path, extra: list[str], entry: str = "train") -> list[str]:
    return [sys.executable, "-m", f"pazo.{entry}", *run.overrides(),
            f"logger.group={run.sweep}/{run.setting}", f"logger.name='{run.run_id}'",
            f"hydra.run.dir='{run_dir}'", *extra]


def without_seed(cmd: list[str]) -> list[str]:
    """The command as the run's stdout.log and --dry-run show it: the seed's value left out (it
    goes only to the run's config.yaml)."""
    return ["seed=..." if arg.startswith("seed=") else arg for arg in cmd]


def run_one(cmd: list[str], run_dir: str, threads: int | None = None, rank: dict[str, str] | None = None) -> int | None:
    """One training run as a subprocess (`pazo.sweep.child_runs`); its output goes to `<run_dir>/stdout.log`
    (in a sweep's private workspace, that and all the run writes are owner-only from creation: `gate.umask_for`).
    `threads` caps its CPU threads: runs side by side that each spin up one OpenMP thread per core
    slow each other down many times over (36x for DP-SGD on digits, two runs on two cores). `rank`:
    rank 0's place in a multi-task job (`rank_environment`). None: not started, a Ctrl-C stopped the
    sweep."""
    if CHILDREN.stopping:
        return None
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **(rank or {})}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with gate.open_released(Path(run_dir) / "stdout.log", append=True) as out:  # a relaunch appends: earlier lines stay
        out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(without_seed(cmd))}\n".encode())
        return CHILDREN.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env,
                            umask=gate.umask_for(run_dir))   # (a selection's run: all it writes owner-only)


class TrainJob(submitit.helpers.Checkpointable):
    """One run as a SLURM job. On preemption or at its time limit submitit calls `checkpoint`,
    which requeues the same command; the run itself saves a checkpoint on the scheduler's signal
    (SIGTERM/SIGUSR1/SIGUSR2) and the requeued job resumes from it. A job of several tasks (nodes x
    tasks_per_node) is one run on that many processes: each task runs the command as one rank
    (`rank_environment`); rank 0 writes the run and its stdout.log, the others' lines go to their
    task's submitit log; rank 0's task requeues the whole job, and the run resumes on every rank."""

    def __call__(self, cmd: list[str], run_dir: str) -> int | None:
        rank = rank_environment(submitit.JobEnvironment())
        if rank is None:
            return run_one(cmd, run_dir)
        if rank["RANK"] == "0":
            return run_one(cmd, run_dir, rank=rank)
        return None if CHILDREN.stopping else CHILDREN.run(cmd, cwd=ROOT, env={**os.environ, **rank})


def rank_environment(job) -> dict[str, str] | None:
    """What torch.distributed reads to join a run (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
    MASTER_PORT: `pazo.run.distributed.join`), from submitit's environment of the job's task `job`:
    the master is the job's first node, its port one drawn from the job's id (or MASTER_PORT if the
    job sets it). None for a job of one task: a one-process run."""
    if job.num_tasks == 1:
        return None
    torch_env = submitit.helpers.TorchDistributedEnvironment()
    return {"RANK": str(torch_env.rank), "WORLD_SIZE": str(torch_env.world_size),
            "LOCAL_RANK": str(torch_env.local_rank), "LOCAL_WORLD_SIZE": str(torch_env.local_world_size),
            "MASTER_ADDR": torch_env.master_addr, "MASTER_PORT": str(torch_env.master_port)}


def tasks_in_all(launcher: dict) -> int:
    """How many processes each of a submitit launcher's runs takes (1: any other launcher)."""
    if launcher.get("launcher") != "submitit":
        return 1
    return int(launcher.get("nodes", 1)) * int(launcher.get("tasks_per_node", 1))


def _report(i: int, n: int, run: PlannedRun, run_dir: Path, seconds: float) -> None:
    state = status(run_dir)
    acc = ""
    if state == "finished":
        summary = json.loads(read_regular_text(run_dir / "summary.json"))
        accuracy = summary.get("final_test_accuracy")
        acc = f" acc {accuracy:.4f}" if isinstance(accuracy, (int, float)) else ""
    log.info(f"[{i}/{n}] {run.run_id}: {state}{acc} ({seconds:.0f} s)")


def check_can_launch(launcher: dict, overrides: list[str], todo=()) -> None:
    """What this machine must have before the first run starts: the device the overrides ask for
    (`device=cuda` without CUDA), SLURM's commands for a SLURM launcher, and for jobs of several
    tasks runs that can be shared among them (`check_ranks_can_share`); one ConfigError each,
    instead of runs that fail one by one or submitit's traceback."""
    from pazo.run.build import resolve_device

    check_ranks_can_share(todo, tasks_in_all(launcher))

    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") == "device":
            try:
                resolve_device(value)
            except ConfigError as err:
                raise ConfigError(f"{override}: {err}; no run was started") from None
    if launcher.get("launcher") == "submitit" and launcher.get("cluster", "slurm") == "slurm" \
            and shutil.which("sbatch") is None:
        raise ConfigError("the SLURM launcher needs SLURM's sbatch, which is not on this machine's PATH; run the "
                          "sweep on the cluster's login node, or use --launcher sequential or joblib; no run was "
                          "started")


def check_ranks_can_share(todo, world_size: int) -> None:
    """With jobs of `world_size` > 1 tasks, every run of `todo` (planned run, directory, command) a
    training run whose method shards its batches, without secure mode or dropout in its queries (each
    command's last `privacy.secure_mode`, `engine.query_dropout`): the refusal `pazo-train` under
    torchrun would give, before submission."""
    from pazo.methods import method_info
    from pazo.run.build import require_shards
    from pazo.run.distributed import Group

    if world_size == 1:
        return
    for run, _, cmd in todo:
        if "pazo.train" not in cmd:
            raise ConfigError(f"a job of {world_size} tasks is one training run on {world_size} processes; "
                              f"{cmd[2]} runs as one process: set nodes=1 and tasks_per_node=1; no job was submitted")
        try:
            require_shards(method_info(run.method), Group(0, world_size), last_flag(cmd, "privacy.secure_mode"),
                           last_flag(cmd, "engine.query_dropout"))
        except ConfigError as err:
            raise ConfigError(f"run {run.run_id}: {err}; no job was submitted") from None


def last_flag(cmd: list[str], key: str) -> bool:
    """Whether the last override of the boolean `key` in the command `cmd`, read as Hydra reads it
    (`override_value`), sets it true (none: false)."""
    from pazo.run.cli import override_value   # (imports numpy: not needed by --help)

    return str(override_value(cmd, key)).lower() == "true"


def launch(todo: list[tuple[PlannedRun, Path, list[str]]], launcher: dict, sweep_dir: Path,
           quiet: bool = False) -> None:
    """Run `todo` with the launcher; `quiet`: no line per run (a private selection's runs: their number
    and scores stay private). A Ctrl-C stops the runs in progress after their step, starts no other
    and raises `Interrupted` once they have ended (`pazo.sweep.child_runs`), saying how many of `todo`
    finished unless `quiet`."""
    kind = launcher.get("launcher", "sequential")
    if kind == "submitit":
        try:
            with gate.umask_in(sweep_dir / ".submitit"):   # (a selection's jobs: their records owner-only)
                return launch_submitit(todo, launcher, sweep_dir, quiet)
        except KeyboardInterrupt as stop:   # (a SIGTERM too, `Terminated`: said as one, exit 143)
            raise Interrupted("the jobs submitted go on under SLURM (squeue lists them; scancel stops them), "
                              "and a relaunch once they have ended runs the rest",
                              stop_signal(stop)) from None
    with passing_on_interrupts() as children:
        if kind == "sequential":
            _launch_sequential(todo, quiet)
        elif kind == "joblib":
            _launch_joblib(todo, launcher, quiet)
        else:
            raise ValueError(f"unknown launcher {kind!r}")  # main() validates it first
        stopped, signum = children.stopping, children.signum
    if stopped:
        finished = "" if quiet else f"{sum(status(d) == 'finished' for _, d, _ in todo)} of {len(todo)} runs finished; "
        raise Interrupted(f"{finished}the runs in progress stopped, each saying where in its stdout.log", signum)


def _launch_sequential(todo, quiet: bool) -> None:
    for i, (run, run_dir, cmd) in enumerate(todo, 1):
        t0 = time.time()
        if run_one(cmd, str(run_dir)) is not None and not quiet:
            _report(i, len(todo), run, run_dir, time.time() - t0)


def _launch_joblib(todo, launcher: dict, quiet: bool) -> None:
    """Several runs at once (threads, each waiting on its run's subprocess)."""
    from joblib import Parallel, delayed

    jobs = int(launcher.get("jobs", 2))
    threads = launcher.get("threads_per_job") or max(1, (os.cpu_count() or 1) // jobs)

    def timed(run, run_dir, cmd):
        t0 = time.time()
        started = run_one(cmd, str(run_dir), threads) is not None
        return run, run_dir, time.time() - t0, started

    done = Parallel(n_jobs=jobs, prefer="threads", return_as="generator_unordered")(
        delayed(timed)(*item) for item in todo)
    for i, (run, run_dir, seconds, started) in enumerate(done, 1):
        if started and not quiet:
            _report(i, len(todo), run, run_dir, seconds)


def launch_submitit(todo, launcher: dict, sweep_dir: Path, quiet: bool = False) -> None:
    executor = submitit.AutoExecutor(folder=str(sweep_dir / ".submitit" / "%j"),
                                     cluster=launcher.get("cluster", "slurm"))
    executor.update_parameters(
        name=todo[0][0].sweep, timeout_min=int(launcher.get("timeout_min", 720)),
        gpus_per_node=int(launcher.get("gpus_per_node", 1)), cpus_per_task=int(launcher.get("cpus_per_task", 8)),
        mem_gb=int(launcher.get("mem_gb", 64)), slurm_partition=launcher.get("partition"),
        slurm_array_parallelism=int(launcher.get("array_parallelism", 16)),
        slurm_setup=list(launcher.get("setup", [])),
        nodes=int(launcher.get("nodes", 1)), tasks_per_node=int(launcher.get("tasks_per_node", 1)))
    jobs = executor.map_array(TrainJob(), [cmd for *_, cmd in todo], [str(d) for _, d, _ in todo])
    if not quiet:
        log.info(f"submitted {len(jobs)} jobs ({jobs[0].job_id if jobs else '-'} ...); "
                 f"logs under {sweep_dir / '.submitit'}")
    if launcher.get("wait"):
        for job in jobs:
            job.results()   # (a job of several tasks: one result each)
        for i, (run, run_dir, _) in enumerate(todo, 1):
            if not quiet:
                _report(i, len(todo), run, run_dir, 0.0)


def parse_sets(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set takes key=value, got {pair!r}")
        out[key] = yaml.safe_load(value) if value else value
    return out
