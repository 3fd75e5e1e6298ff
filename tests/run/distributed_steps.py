"""Run by the slow tests of `test_distributed.py` (and `test_distributed_opt.py`), as one process or under
torchrun (the default suite calls `run_method` in its one launch, `distributed_launch.py`, and for the
one-process references, `distributed_session.py`):
each method's run on digits (or the data set and model a spec's overrides name) for a few steps
(the run's own assembly and steps, nothing written), and, on rank 0, a JSON line per method with
its parameters' bytes (hex), their dtype, its epsilon, whether every rank holds them, and the bytes
a rank put into the exchanges a step.

    python distributed_steps.py STEPS METHOD[:OVERRIDE,...] ...
"""
import hashlib
import json
import sys

import torch
import torch.distributed
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

import pazo.privacy.plan
from pazo import CONFIG_DIR
from pazo.run import distributed
from pazo.run.checkpoint import LoopState
from pazo.run.build import build_run
from pazo.run.loop import timed_step
from pazo.privacy.plan import epsilon_spent
from pazo.run.validate import validated_run_config


def spec_config(spec: str, steps: int) -> DictConfig:
    """`spec`'s run config (`METHOD[:OVERRIDE,...]`: on digits unless its overrides name another data
    set, batch size, ...), composed."""
    method, _, extra = spec.partition(":")
    given = [o for o in extra.split(",") if o]
    replaced = {o.partition("=")[0] for o in given}   # (a spec's dataset=... or batch size in place of digits')
    overrides = [o for o in [f"method={method}", "dataset=digits", f"train.steps={steps}", "train.batch_size=96",
                             "logger.report_to=[]", "device=cpu"] if o.partition("=")[0] not in replaced] + given
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def run_method(spec: str, steps: int, cfg: DictConfig | None = None) -> dict:
    """`spec`'s run (its config `cfg` if given, else composed here) for `steps` steps: its parameters'
    bytes and its epsilon."""
    r = build_run(validated_run_config(cfg if cfg is not None else spec_config(spec, steps)))
    sampler, loop = r.sampler(), LoopState()
    r.module.train()
    before = r.group.bytes_exchanged   # (the group is the launch's: its earlier runs' bytes are in it)
    for step in range(1, steps + 1):
        timed_step(r, sampler, loop, step)
    flat = torch.cat([p.detach().reshape(-1) for p in r.model.params])
    epsilon = epsilon_spent(r.plan, steps) if r.plan.private else None
    return {"spec": spec, "params": flat.numpy().tobytes().hex(), "dtype": str(flat.numpy().dtype), "epsilon": epsilon,
            "ranks_agree": ranks_agree(r.group, flat.numpy().tobytes()), "dim": r.model.dim,
            "rank_bytes_per_step": (r.group.bytes_exchanged - before) / steps}


def ranks_agree(group, params: bytes) -> bool:
    """Whether every rank holds these parameters, to the bit (each sends a digest of its own)."""
    if not group.several:
        return True
    digests: list = [None] * group.world_size
    torch.distributed.all_gather_object(digests, hashlib.sha256(params).hexdigest())
    return len(set(digests)) == 1


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    # the plan's cross-check by the other accountants (seconds a plan) is a line of the header: not needed here
    pazo.privacy.plan.cross_check = lambda plan, steps, cache_dir=None: {}
    steps, specs = int(argv[0]), argv[1:]
    group = distributed.join(60)
    for spec in specs:
        result = run_method(spec, steps)
        if group.leader:
            print(json.dumps(result), flush=True)
    distributed.leave()


if __name__ == "__main__":
    main(sys.argv[1:])
