"""ONE 2-process launch for the default suite's distributed tests (`one_launch`, once a session even
across xdist's workers), beside the one-process references computed in this process: every method
on digits and on the tiny OPT, the library loop, a run resumed from 1 process on 2 and back on 1, a
rank killed mid-run and the run resumed, and the ranks' refusals (among them a rank that cannot build
its run or its library loop, by a mistake, an error or a fault of the machine: the others end at once,
naming it, as it ends). Starting a rank (torch, pazo) costs
more than most of its runs, so each rank runs them all in sequence (`distributed_launch.py`); the
tests then read the files this leaves. The ranks are started as torchrun starts them (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT); torchrun itself is the slow tests'.

Nothing is computed twice and nothing waits that need not: the ranks start first (their imports are
the launch's longest wait) while this process composes every run's config once for them and for
itself, each written as soon as it is (the tiny OPT's once its files are), then the run they resume
(`RESUMED_READY` says when); the digits runs and the library loops use a given noise multiplier
(calibrating is no matter of the ranks: the run jobs calibrate theirs, once, into the shared sigma
cache); one uninterrupted run is the reference of both the resumed and the killed run."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from conftest import run_cache
from llm_fixtures import write_opt_and_sst2

HERE = Path(__file__).parent

#: the digits runs' noise multiplier, given: above what the default budget (epsilon 1 over STEPS steps, batch
#: 96 of digits' 1165) needs for each method's releases (at most 1.33 calibrated), so nothing is calibrated
SIGMA = "privacy.sigma=2.0"
ALL_ZEROTH_ORDER = ["mezo:privacy=none", f"dpzero:{SIGMA}", f"dp_zo:{SIGMA}",
                    f"dp_zo:method.noise=laplace,privacy.delta=0,{SIGMA}",
                    *(f"{m}:{SIGMA}" for m in ("dp_zogd", "dp_aggzo", "pazo_m", "pazo_p", "pazo_p_prime", "pazo_s"))]
#: the first-order methods that run on several processes (DP-SGD without privacy: the plain mean)
FIRST_ORDER = [*(f"{m}:{SIGMA}" for m in ("dpsgd", "dpmd", "dope_sgd", "gep")), "dpsgd:privacy=none"]
#: the library loop's methods: the scalar privatiser (its loop joins the ranks' group itself) and
#: PAZO-S's losses (the group found initialised)
LIBRARY = ["dpzero", "pazo_s"]
#: the library loops' noise multiplier, given: above what epsilon 1 over STEPS steps at q = 0.32 needs
#: (2.70 calibrated for one release, 3.82 for two)
LIBRARY_SIGMA = 5.0

#: the tiny OPT on SST-2 as the LLM tests run it (test_llm.py's `run_cfg`): a given sigma, nothing calibrated
OPT = ("model=hf_causal_lm", "model.attention=eager", "dataset=sst2", "dataset.n_train=24", "dataset.n_val=6",
       "train.batch_size=8", "engine.name=inplace")
PUBLIC = ("dataset.public_source=split", "dataset.public_size=8", "method.public_batch_size=4")
#: every zeroth-order method, with what it needs on the tiny OPT (public data; PAZO-P/S: k=2 directions); PAZO-P
#: with OPT's checkpoint dropout (its rates on the layers, no dropout module: every rank computes all k); and
#: DP-AggZO's 16 directions on Poisson batches of 2 expected, which leave a rank one example most steps (was: a
#: rank's one example gave other losses than in one process's batch, a few ulps, `pazo.zo.engines.never_alone`)
OPT_METHODS = {"mezo": ("privacy=none",), "dpzero": (), "dp_zo": (), "dp_zo_laplace": ("method.noise=laplace",
               "privacy.delta=0"), "dp_zogd": (), "dp_aggzo": (), "pazo_m": PUBLIC, "pazo_p": (*PUBLIC, "method.k=2"),
               "pazo_p_prime": (*PUBLIC, "method.k=2"), "pazo_s": (*PUBLIC, "method.k=2"),
               "dp_aggzo_shards_of_one": ("train.batch_size=2",),
               "pazo_p_dropout": (*PUBLIC, "method.k=2", "model.dropout=0.1")}
#: the method of an OPT_METHODS entry named otherwise
OPT_METHOD_OF = {"dp_zo_laplace": "dp_zo", "dp_aggzo_shards_of_one": "dp_aggzo", "pazo_p_dropout": "pazo_p"}

STEPS = 3
#: the run resumed across process counts (1 process to step 1, 2 to step 3, 1 to the end) and the one whose
#: rank 1 is killed as its step KILL_AT starts (rank 0 checkpointed at step 2): one config, so that one
#: uninterrupted run on one process (`whole`) is the reference of both, and one sigma is calibrated
RESUMED = ["dataset=digits", "method=dpzero", "train.steps=4", "train.log_every=1", "train.checkpoint_every=2",
           "logger.report_to=[]", "logger.mode=disabled", "device=cpu"]
KILLED = RESUMED
KILL_AT = 3
#: the runs the launch leaves to be resumed on one process
RUNS = {"resumed": RESUMED, "killed": KILLED}
#: written into the launch's folder once the run the ranks resume (and its calibrated sigma) is there
RESUMED_READY = "resumed.ready"


def opt_specs(root: Path, names: list[str]) -> list[str]:
    """distributed_steps.py's specs: each method on the tiny OPT under `root` (`name:override,...`)."""
    def spec(name: str) -> str:
        own = OPT_METHODS[name]
        sigma = () if "privacy=none" in own else ("privacy.sigma=5.0",)
        shared = [o for o in OPT if o.partition("=")[0] not in {m.partition("=")[0] for m in own}]
        return f"{OPT_METHOD_OF.get(name, name)}:" + ",".join([*shared, f"model.path={root / 'opt'}",
                                                               f"dataset.root={root}", *sigma, *own])
    return [spec(name) for name in names]


def step_specs(root: Path) -> list[str]:
    """Every method's spec the launch runs for STEPS steps: on digits, then on the tiny OPT."""
    return ALL_ZEROTH_ORDER + FIRST_ORDER + opt_specs(root, list(OPT_METHODS))


def config_file(root: Path, index: int) -> Path:
    """Where the launch's `index`-th method run's config is, once composed (`compose_for_ranks`)."""
    return root / "configs" / f"{index}.json"


def launch_plan(root: Path) -> list[dict]:
    """The launch's jobs, in order (`distributed_launch.py`), each method's run with the file its
    config is composed into, which it waits for; the runs wait for RESUMED_READY; the killed run last
    (it ends the ranks)."""
    resumed_ready = {"wait_for": str(root / RESUMED_READY)}

    def run(name: str, overrides: list[str], **more) -> dict:
        return {"kind": "run", "name": name, "overrides": overrides, "run_dir": str(root / name), **resumed_ready,
                **more}
    return [*({"kind": "library", "name": f"library:{m}", "method": m, "steps": STEPS, "sigma": LIBRARY_SIGMA}
              for m in LIBRARY),
            {"kind": "library", "name": "library:nan_on_rank_1", "method": "dpzero", "steps": STEPS,
             "sigma": LIBRARY_SIGMA, "nan_on_rank": 1},
            *({"kind": "steps", "name": spec, "spec": spec, "steps": STEPS, "config": str(config_file(root, i)),
               "wait_for": str(config_file(root, i))} for i, spec in enumerate(step_specs(root))),
            run("differs", RESUMED, rank_overrides={"1": ["method.lr=0.5"]}),
            run("locked", RESUMED),
            run("refused_building", RESUMED, fails_building={"1": "refused"}),
            run("failed_building", RESUMED, fails_building={"0": "failed"}),
            run("faulted_building", RESUMED, fails_building={"0": "fault"}),
            run("resumed", RESUMED, stop_at=3),
            {"kind": "cli", "name": "killed", "argv": [*KILLED, f"hydra.run.dir={root / 'killed'}"], "kill_rank": 1,
             "kill_at": KILL_AT, **resumed_ready}]


def compose_run(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from pazo import CONFIG_DIR
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def run_here(overrides: list[str], run_dir: Path, stop_at: int | None = None) -> dict:
    """`overrides`' run into `run_dir` in this process (one process), SIGTERM during its step
    `stop_at` if given (a preemption: a checkpoint after that step); its summary."""
    from pazo.methods.base import Method
    from pazo.train import run
    from step_faults import signalled_at_step

    with pytest.MonkeyPatch.context() as patch:
        if stop_at is not None:
            patch.setattr(Method, "take_step", signalled_at_step(Method.take_step, stop_at))
        return run(compose_run(overrides), run_dir)


def compose_for_ranks(root: Path) -> dict[str, dict]:
    """Each method run's config (`distributed_steps.spec_config`), composed once for the ranks and this
    process alike: each written (whole) into its `config_file` as soon as it is composed, for the rank
    that waits for it, the tiny OPT's once its files are written; returned as plain containers, by spec."""
    import distributed_steps
    from omegaconf import OmegaConf

    configs, specs = {}, step_specs(root)
    config_file(root, 0).parent.mkdir()
    for index, spec in enumerate(specs):
        if index == len(specs) - len(OPT_METHODS):
            write_opt_and_sst2(root)
        configs[spec] = OmegaConf.to_container(distributed_steps.spec_config(spec, STEPS))
        write_whole(config_file(root, index), json.dumps(configs[spec]))
    return configs


def write_whole(path: Path, text: str) -> None:
    """`text` into `path`, there only once whole (a rank reads it as soon as it is there)."""
    staged = path.with_suffix(".staged")
    staged.write_text(text)
    staged.rename(path)


def references(configs: dict[str, dict]) -> dict:
    """One process's results of the launch's library loops and method runs (`distributed_steps`), from the
    configs the ranks run (`configs`, by spec)."""
    import distributed_steps
    import library_steps
    from omegaconf import OmegaConf

    found = {f"library:{m}": library_steps.run_method(m, STEPS, LIBRARY_SIGMA) for m in LIBRARY}
    return {**found, **{spec: distributed_steps.run_method(spec, STEPS, OmegaConf.create(config))
                        for spec, config in configs.items()}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(root: Path, plan: Path, env: dict) -> list[subprocess.Popen]:
    """The launch's 2 ranks, each in `root/elsewhere` (a follower writes nowhere: it stays empty)."""
    port, cwd = _free_port(), root / "elsewhere"
    cwd.mkdir()
    return [subprocess.Popen([sys.executable, str(HERE / "distributed_launch.py"), str(plan), str(root)], cwd=cwd,
                             env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for rank in range(2)]


def finish_ranks(ranks: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """Each rank's exit status and output (stdout, then stderr); a rank past 10 minutes is killed."""
    ended = []
    for p in ranks:
        try:
            out, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            for q in ranks:
                q.kill()
            out, err = p.communicate()
        ended.append((p.returncode, out + err))
    return ended


def _summary(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def launch_and_compare(root: Path, env: dict) -> dict:
    """The whole session's work: the launch, and beside it what it needs and the references; the runs
    resumed after it."""
    from pazo.files.rundir import RunDirLock

    plan = root / "plan.json"
    (root / "locked").mkdir()
    with RunDirLock(root / "locked"):   # (held while the launch runs: its rank 0 finds it in use)
        ranks = start_ranks(root, plan, env)
        try:
            first, whole, one = prepare_and_refer(root, plan)
        except BaseException:   # (a Ctrl-C, or a reference that failed: the ranks are not waited for)
            for p in ranks:
                p.kill()
            raise
        finally:
            ended = finish_ranks(ranks)
    records = [_records(root / f"rank{r}.jsonl") for r in range(2)]
    _check_every_job_ran(json.loads(plan.read_text()), records, ended)
    two = {name: _summary(root / name) for name in RUNS}   # (as the launch left them)
    last = {name: run_here(overrides, root / name) for name, overrides in RUNS.items()}   # on 1 process
    return {"one": one, "ranks": records,
            "exits": [code for code, _ in ended], "outputs": [text for _, text in ended], "first": first,
            "two": two, "last": last, "whole": whole, "elsewhere": sorted(os.listdir(root / "elsewhere"))}


def prepare_and_refer(root: Path, plan: Path) -> tuple[dict, dict, dict]:
    """While the ranks start: their plan, the runs' configs composed once (a rank starts each run as
    soon as its config is there) and the tiny OPT, then the run they resume from step 1
    (RESUMED_READY); then the uninterrupted run and the one-process references. The first run's
    summary, the uninterrupted one's and the references."""
    write_whole(plan, json.dumps(launch_plan(root)))
    configs = compose_for_ranks(root)
    first = run_here(RESUMED, root / "resumed", stop_at=1)   # 1 process to step 1; 2 go on from there
    (root / RESUMED_READY).touch()
    whole = run_here(RESUMED, root / "whole")
    return first, whole, references(configs)


def _check_every_job_ran(jobs: list[dict], records: list[dict], ended: list[tuple[int, str]]) -> None:
    """Each rank recorded every job but the last (whose rank 1 is killed): else what it said."""
    for rank, (found, (code, output)) in enumerate(zip(records, ended)):
        missing = [job["name"] for job in jobs[:-1] if job["name"] not in found]
        assert not missing, f"rank {rank} (exit {code}) did not run {missing[0]}: {output[-3000:]}"


def _records(path: Path) -> dict:
    lines = path.read_text().splitlines() if path.exists() else []
    return {record.pop("job"): record for record in map(json.loads, lines)}


def session_root(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session shares (their base folders' parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def one_launch(tmp_path_factory) -> dict:
    """The launch's results (`launch_and_compare`), and the folder its runs are in (`root`): made
    once a session by the first worker that asks, under a lock the others wait on, then read from
    results.json (each test module's fixture calls this)."""
    shared = session_root(tmp_path_factory)
    root, results = shared / "distributed_launch", shared / "distributed_launch.json"
    with open(shared / "distributed_launch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not results.exists():
            results.write_text(json.dumps(_launch_once(root)))
    launched = json.loads(results.read_text())
    assert "error" not in launched, f"the session's 2-process launch did not run: {launched['error']}"
    return {**launched, "root": root}


def _launch_once(root: Path) -> dict:
    """`launch_and_compare` in `root`, with the environment the ranks and this process's runs share;
    what stopped it, if anything did (the tests then fail saying so, on every worker)."""
    import pazo.privacy.plan
    import torch

    root.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PAZO_CACHE_DIR=str(run_cache(root / "cache")), OMP_NUM_THREADS="1")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PAZO_CACHE_DIR", env["PAZO_CACHE_DIR"])
        patch.setenv("OMP_NUM_THREADS", "1")
        # the plan's cross-check by the other accountants (seconds a plan) is a line of the header: not needed here
        patch.setattr(pazo.privacy.plan, "cross_check", lambda plan, steps, cache_dir=None: {})
        torch.set_num_threads(1)
        try:
            return launch_and_compare(root, env)
        except Exception:   # (every worker's tests say what stopped the launch)
            return {"error": traceback.format_exc()}
        finally:
            torch.set_num_threads(threads)
