"""Run by `distributed_session.py` as each rank of ONE 2-process launch (started as torchrun starts
its ranks: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) that serves the default suite's distributed
tests: the jobs of a plan, in order, in this one process per rank (starting a rank costs more than
most of its jobs). Each rank writes a JSON line per job to OUT/rank<R>.jsonl.

The plan is read once it is there (the session writes it while the ranks start); a job with `wait_for`
starts once that file is there (what the session prepares meanwhile: a run's config, the tiny OPT, a
run to resume). Jobs (`kind`): `library` (`library_steps.run_method`: it joins the group itself, as a
user's loop would; a rank named in `nan_on_rank` is given a NaN in its private data, and the refusal
or error each rank met is recorded), `steps` (`distributed_steps.run_method`, of the config the session composed into
the file `config`), `run` (a run into its directory: `pazo.run.launch`'s `run` on rank 0 and `follow`
on the others, as pazo-train does, its refusal or error recorded; a rank named in `fails_building`
cannot build it), and last `cli` (pazo-train's own command
line, whose rank `kill_rank` kills itself with SIGKILL during its step `kill_at`: the process ends
there, so it is the plan's last job).

    python distributed_launch.py PLAN.json OUT
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path[:0] = [str(HERE), str(HERE.parent)]   # distributed_steps, library_steps; step_faults (tests/)

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

import distributed_steps  # noqa: E402
import library_steps  # noqa: E402
import pazo.privacy.plan  # noqa: E402
import pazo.train  # noqa: E402
from pazo import CONFIG_DIR  # noqa: E402
from pazo.methods.base import Method  # noqa: E402
from pazo.run import distributed, launch  # noqa: E402
from fail_building import BuildCrash, failing_build  # noqa: E402
from pazo.errors import ConfigError  # noqa: E402
from pazo.files.rundir import WriteFault  # noqa: E402
from pazo.run.cli import USER_ERRORS  # noqa: E402
from step_faults import signalled_at_step  # noqa: E402

RANK = int(os.environ["RANK"])
#: how long a rank waits for the plan, or for what a job waits for, before it gives up
WAIT_S = 600


def wait_for(path: Path) -> None:
    """Return once `path` is there (the session writes it); a rank that waited WAIT_S raises."""
    waited = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > waited:
            raise TimeoutError(f"rank {RANK}: {path} was not there after {WAIT_S} s")
        time.sleep(0.05)


def compose_run(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def run_job(job: dict) -> dict:
    """A `run` job on this rank: rank 0 trains into `run_dir` (SIGTERM during its step `stop_at`, if
    given: a preemption, honoured after that step with a checkpoint), the others follow; a rank named
    in `fails_building` cannot build the run (`fail_building.failing_build`); its status, or the refusal or error
    this rank met."""
    cfg = compose_run([*job["overrides"], *job.get("rank_overrides", {}).get(str(RANK), [])])
    distributed.join(60)   # (the group joined: a fresh count of the bytes this run exchanges)
    original, build = Method.take_step, launch.build_run
    if RANK == 0 and job.get("stop_at"):
        Method.take_step = signalled_at_step(original, job["stop_at"])
    if str(RANK) in job.get("fails_building", {}):
        launch.build_run = failing_build(job["fails_building"][str(RANK)])
    try:
        summary = launch.run(cfg, job["run_dir"]) if RANK == 0 else launch.follow(cfg)
    except (*USER_ERRORS, distributed.RankFailed, distributed.RankFaulted, BuildCrash, WriteFault) as err:
        return {"error": type(err).__name__, "message": str(err)}
    finally:
        Method.take_step, launch.build_run = original, build
    return {"status": summary["status"] if summary else "followed"}


def killed_at(step_number: int):
    """`Method.take_step` that kills this process (SIGKILL: nothing more written) as step
    `step_number` starts, the steps before it taken as usual."""
    original = Method.take_step

    def take_step(self, x, y, step):
        if step == step_number:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, x, y, step)
    return take_step


def cli_job(job: dict) -> None:
    """pazo-train's command line for `argv`, as torchrun's rank RANK runs it; its process ends there."""
    if RANK == job["kill_rank"]:
        Method.take_step = killed_at(job["kill_at"])
    sys.argv = ["pazo-train", *job["argv"]]
    pazo.train.cli()


def one_job(job: dict) -> dict:
    kind = job["kind"]
    if "wait_for" in job:
        wait_for(Path(job["wait_for"]))
    if kind == "library":
        try:
            return library_steps.run_method(job["method"], job["steps"], job["sigma"],
                                            nan_input=RANK == job.get("nan_on_rank"))
        except (ConfigError, distributed.RankFailed) as err:
            return {"error": type(err).__name__, "message": str(err)}
    if kind == "cli":
        cli_job(job)
        return {"ended": "the command returned"}
    distributed.join(60)
    if kind == "steps":
        config = OmegaConf.create(json.loads(Path(job["config"]).read_text()))
        return distributed_steps.run_method(job["spec"], job["steps"], config)
    return run_job(job)


def main(plan_path: str, out: str) -> None:
    torch.set_num_threads(1)
    # the plan's cross-check by the other accountants (seconds a plan) is a line of the header: not needed here
    pazo.privacy.plan.cross_check = lambda plan, steps, cache_dir=None: {}
    wait_for(Path(plan_path))
    jobs = json.loads(Path(plan_path).read_text())
    with open(Path(out) / f"rank{RANK}.jsonl", "a") as results:
        for job in jobs:
            started, cpu = time.perf_counter(), time.process_time()
            record = {"job": job["name"], **one_job(job)}
            record["seconds"] = round(time.perf_counter() - started, 2)   # (where a launch spends its time)
            record["cpu"] = round(time.process_time() - cpu, 2)
            results.write(json.dumps(record) + "\n")
            results.flush()


if __name__ == "__main__":
    main(*sys.argv[1:])
