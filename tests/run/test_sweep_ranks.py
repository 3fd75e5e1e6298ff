"""A sweep's job as a multi-process run (`pazo.sweep.launchers`, submitit's nodes and tasks_per_node):
the launcher's keys checked, a run whose method cannot be shared refused before any job is
submitted, each task given its rank of the run, and a job of 2 local tasks ending with the one-process
run's parameters and epsilon."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings, strategies as st

import pazo.sweep.command as sweep
import pazo.sweep.launchers as launchers
from conftest import run_cache
from pazo.errors import ConfigError
from pazo.methods import METHODS, method_info
from pazo.run.distributed import world_from_environment
from pazo.sweep.launchers import check_launcher, check_ranks_can_share, rank_environment

SLURM = {"launcher": "submitit", "cluster": "slurm"}
NOT_AN_INTEGER_AT_LEAST_1 = st.one_of(st.integers(max_value=0), st.floats(allow_nan=False), st.booleans(),
                                      st.text(max_size=3), st.none())


@settings(deadline=None)
@given(st.sampled_from(["nodes", "tasks_per_node"]), st.integers(1, 64))
def test_any_integer_from_1_is_a_jobs_nodes_and_tasks_per_node(key, value):
    check_launcher({**SLURM, key: value, "gpus_per_node": 0})


@settings(deadline=None)
@given(st.sampled_from(["nodes", "tasks_per_node"]), NOT_AN_INTEGER_AT_LEAST_1)
@example("tasks_per_node", 0)
def test_nodes_and_tasks_per_node_other_than_integers_from_1_are_one_error_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"^launcher submitit: {key}\\b.*(integer|int)"):
        check_launcher({**SLURM, key: value})


@pytest.mark.parametrize("cluster, key, says", [
    ("local", "nodes", "cluster local runs a job on this machine: nodes must be 1, got 2"),
    ("debug", "tasks_per_node", "cluster debug runs a job inside the sweep's process, as one task"),
])
def test_a_cluster_on_this_machine_refuses_what_it_cannot_run(cluster, key, says):
    with pytest.raises(ConfigError, match=says):
        check_launcher({**SLURM, "cluster": cluster, key: 2})


@settings(deadline=None)
@given(st.integers(1, 8), st.integers(0, 8))
@example(2, 1)   # slurm.yaml's one GPU a node, two tasks: rank 1 would ask for a GPU its node has not
def test_each_task_of_a_node_takes_its_own_gpu_or_none(tasks_per_node, gpus_per_node):
    """A rank with CUDA takes the GPU of its LOCAL_RANK (`pazo.run.distributed.join`): a node's tasks
    need as many GPUs as there are tasks, or none (a CPU run)."""
    launcher = {**SLURM, "tasks_per_node": tasks_per_node, "gpus_per_node": gpus_per_node}
    if tasks_per_node > 1 and 0 < gpus_per_node < tasks_per_node:
        with pytest.raises(ConfigError, match=f"gpus_per_node must be 0 .* at least tasks_per_node={tasks_per_node}"):
            check_launcher(launcher)
    else:
        check_launcher(launcher)


def _todo(method: str, *extra: str) -> list:
    from pazo.sweep.spec import PlannedRun

    run = PlannedRun(sweep="s", setting="digits", method=method, epsilon=1.0, params=(), seed=0, replicate=0,
                     experiment=None)
    return [(run, Path("/nowhere"), launchers.command(run, Path("/nowhere"), list(extra)))]


@settings(deadline=None)
@given(st.sampled_from(sorted(METHODS.names())), st.integers(1, 8), st.booleans(), st.booleans())
@example("dpzero", 2, False, True)   # dropout in the queries: each rank's masks drawn for its shard
def test_a_job_of_several_tasks_takes_only_runs_whose_method_shards_without_secure_mode(method, world, secure,
                                                                                       query_dropout):
    """The rule `pazo-train` under torchrun applies (`require_shards`), applied before submission."""
    todo = _todo(method, *(["privacy.secure_mode=true"] if secure else []),
                 *(["engine.query_dropout=false", "engine.query_dropout=true"] if query_dropout else []))
    if world == 1 or (method_info(method).cls.shards_batches and not secure and not query_dropout):
        check_ranks_can_share(todo, world)
    else:
        with pytest.raises(ConfigError, match=r"^run digits/.*(does not run on several processes yet|"
                                              r"privacy.secure_mode=true|engine.query_dropout=true)"
                                              r".*no job was submitted$"):
            check_ranks_can_share(todo, world)


def test_an_audit_run_is_not_a_job_of_several_tasks():
    (run, run_dir, cmd), = _todo("dpzero")
    cmd = [c.replace("pazo.train", "pazo.audit") for c in cmd]
    with pytest.raises(ConfigError, match="pazo.audit runs as one process: set nodes=1 and tasks_per_node=1"):
        check_ranks_can_share([(run, run_dir, cmd)], 2)


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]])
def test_a_sweep_of_a_method_that_does_not_shard_is_refused_before_submission(dry_run, tmp_path, monkeypatch, capsys):
    submitted = []
    monkeypatch.setattr(launchers, "launch_submitit", lambda *args, **kw: submitted.append(args))
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [sgd]\nepsilons: [1]\nnonprivate: [sgd]\ngrid: false\n")
    code = sweep.main([str(spec), "--out", str(tmp_path / "out"), "--launcher", "slurm", "--set", "cluster=local",
                       "--set", "tasks_per_node=2", "--set", "gpus_per_node=0", *dry_run])
    err = capsys.readouterr().err
    assert code == 2 and submitted == []
    assert err.count("\n") == 1 and err.startswith("pazo: error: run digits/sgd/") and \
        "method 'sgd' does not run on several processes yet" in err, err


def _local_job(monkeypatch, job_id: str, tasks: int, rank: int) -> None:
    """The environment submitit's local executor gives task `rank` of a job of `tasks` tasks."""
    for key in ("MASTER_PORT", "MASTER_ADDR", "RANK", "WORLD_SIZE", "SUBMITIT_DEBUG_JOB_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    for key, value in {"JOB_ID": job_id, "NTASKS": tasks, "JOB_NUM_NODES": 1, "NODEID": 0, "GLOBALID": rank,
                       "LOCALID": rank}.items():
        monkeypatch.setenv(f"SUBMITIT_LOCAL_{key}", str(value))


@settings(deadline=None, max_examples=30)
@given(st.integers(2, 8).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))), st.integers(1, 10**6))
def test_each_task_of_a_job_is_its_rank_of_one_run(tasks_rank, job_id):
    """Every task of a job gets its own RANK, the job's WORLD_SIZE, and the one master all share."""
    tasks, rank = tasks_rank
    with pytest.MonkeyPatch.context() as patch:
        _local_job(patch, str(job_id), tasks, rank)
        mine = rank_environment(__import__("submitit").JobEnvironment())
        _local_job(patch, str(job_id), tasks, 0)
        leaders = rank_environment(__import__("submitit").JobEnvironment())
    assert world_from_environment(mine) == (rank, tasks) and mine["LOCAL_RANK"] == str(rank)
    assert (mine["MASTER_ADDR"], mine["MASTER_PORT"]) == (leaders["MASTER_ADDR"], leaders["MASTER_PORT"])


def test_a_job_of_one_task_is_a_one_process_run(monkeypatch):
    import submitit

    _local_job(monkeypatch, "7", 1, 0)
    assert rank_environment(submitit.JobEnvironment()) is None


def test_a_rank_other_than_0_leaves_the_schedulers_warning_to_rank_0():
    """SLURM signals every task of a job (SIGUSR1/2 before its time limit): rank 0 checkpoints and
    requeues the job; a follower that died of the signal instead would end the run as a fault."""
    code = ("import os, signal; from pazo.run.distributed import ignore_stop_signals; ignore_stop_signals(); "
            "[os.kill(os.getpid(), s) for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)]; print('alive')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "alive", (out.returncode, out.stderr[-2000:])
    assert -signal.SIGUSR1 != out.returncode


def _sweep(tmp_path, out: str, *launcher: str) -> dict:
    """The one-run sweep (dpzero on digits, 3 steps) into `out`, with `launcher`; its run's summary."""
    spec = tmp_path / "mini.yaml"
    spec.write_text("name: mini\nsettings: [digits]\nmethods: [dpzero]\nepsilons: [1]\ngrid: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PAZO_CACHE_DIR=str(run_cache(tmp_path / "cache")), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pazo.sweep", str(spec), "train.steps=3", "logger.report_to=[]",
                           "--out", str(tmp_path / out), *launcher], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir, = {p.parent for p in (tmp_path / out / "mini").glob("digits/**/summary.json")}
    return {"dir": run_dir, **json.loads((run_dir / "summary.json").read_text())}


@pytest.mark.slow   # (about 40 s on 2 loaded cores: a one-process sweep, then a job of two tasks, each starting pazo)
def test_a_sweeps_job_of_two_local_tasks_is_the_one_process_run(tmp_path):
    one = _sweep(tmp_path, "one")
    two = _sweep(tmp_path, "two", "--launcher", "slurm", "--set", "cluster=local", "--set", "tasks_per_node=2",
                 "--set", "gpus_per_node=0", "--set", "wait=true", "--set", "timeout_min=10")
    assert two["status"] == "finished" and two["distributed"]["world_size"] == 2
    assert (one["dir"] / "model.safetensors").read_bytes() == (two["dir"] / "model.safetensors").read_bytes()
    assert one["privacy"]["epsilon_spent"] == two["privacy"]["epsilon_spent"]
    log = (two["dir"] / "stdout.log").read_text()
    assert log.count("\n=== ") + log.startswith("=== ") == 1 and "rank 1 of 2" not in log   # rank 0's alone
