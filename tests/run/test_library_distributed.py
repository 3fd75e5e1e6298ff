"""The library entry (`pazo.private.private_zo`) under torch.distributed: 2 gloo processes (torchrun's
group, joined by the library, or one the user initialised) train the parameters one process trains,
bit for bit, with the same epsilon, every rank holding them; what the ranks could not share (their
own entropy) is one ConfigError naming the library's argument, before any step."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from torch import nn

from conftest import run_cache
from distributed_session import LIBRARY, one_launch
from pazo.errors import ConfigError
from pazo.methods import method_names
from pazo.run import distributed
from pazo.run.distributed import Group

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loops(tmp_path, methods: list[str], processes: int) -> list[dict]:
    """library_steps.py's results for `methods` (3 steps) on `processes` processes (rank 0's lines)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PAZO_CACHE_DIR=str(run_cache(tmp_path / "cache")), OMP_NUM_THREADS="1")
    command = ([str(BIN / "torchrun"), f"--nproc_per_node={processes}", "--master_port", str(_free_port())]
               if processes > 1 else [sys.executable])
    out = subprocess.run([*command, str(HERE / "library_steps.py"), "3", *methods], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def _same_loops(one: list[dict], two: list[dict], methods: list[str]) -> None:
    assert [r["method"] for r in one] == [r["method"] for r in two] == methods
    for a, b in zip(one, two):
        assert (a["world_size"], b["world_size"]) == (1, 2) and b["ranks_agree"], b["method"]
        assert a["bytes_exchanged"] == 0 < b["bytes_exchanged"]   # the shards' sums were added over the ranks
        assert a["params"] == b["params"], f"{a['method']}: parameters differ after 3 steps"
        assert a["epsilon"] == b["epsilon"]


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The session's one 2-process launch, whose first runs are the library loop's (`LIBRARY`)."""
    return one_launch(tmp_path_factory)


def test_two_processes_run_the_library_loop_of_one_bit_for_bit(launched):
    """The scalar privatiser's loop (the launch's first: it joins the ranks' group itself) and PAZO-S's
    losses (the group found initialised)."""
    one, two = ([rows[f"library:{m}"] for m in LIBRARY] for rows in (launched["one"], launched["ranks"][0]))
    _same_loops(one, two, LIBRARY)


@pytest.mark.slow   # (every zeroth-order method under torchrun: about a minute on 2 loaded cores)
def test_two_processes_run_the_library_loop_of_one_bit_for_bit_for_every_zeroth_order_method(tmp_path):
    methods = method_names("zeroth_order")
    _same_loops(_loops(tmp_path, methods, 1), _loops(tmp_path, methods, 2), methods)


def _tensors(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g)


def _loop_on(world: int, **arguments):
    """`private_zo` of a small non-private loop as rank 0 of `world` processes (the group's exchanges
    answered by this process alone: no other rank is there)."""
    from pazo.private import private_zo

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distributed, "library_group", lambda timeout_s: Group(0, world))
        patch.setattr(Group, "agree", lambda self, facts: None)
        return private_zo(nn.Linear(4, 2), nn.CrossEntropyLoss(reduction="none"), _tensors(40, 0),
                          **{"method": "mezo", "epsilon": None, "steps": 2, "batch_size": 8, "verbose": False,
                             **arguments})


@settings(deadline=None, max_examples=12)
@given(st.integers(2, 8), st.booleans(), st.booleans())
@example(2, False, False)   # no seed: secure mode, each rank its own entropy
def test_a_loop_whose_ranks_would_draw_their_own_entropy_is_refused_naming_the_argument(world, secure_mode, seeded):
    """Several processes share a batch and its noise only when every rank draws them from the same
    seed and key: secure mode (or no seed) is refused, in the library's terms, before any step."""
    arguments = {"seed": 5 if seeded else None, "secure_mode": secure_mode}
    if secure_mode or not seeded:
        with pytest.raises(ConfigError, match=rf"^secure_mode=True \(or no seed\) .* the {world} processes of this "
                                              "torch.distributed group would not share them; give every rank"):
            _loop_on(world, **arguments)
    else:
        engine = _loop_on(world, **arguments)
        assert engine.group.world_size == world and isinstance(engine.method.ctx.sums, distributed.ShardSums)


def test_a_loss_fn_that_cannot_be_hashed_is_refused_on_several_processes(monkeypatch):
    """Its key would hold each rank's own entropy (`library_key`): each would draw its own noise."""
    unhashable = type("Digest", (), {"hex": "0" * 64, "unhashed": ["loss_fn holds an object"]})()
    monkeypatch.setattr("pazo.private.callable_digest", lambda fn, what: unhashable)
    with pytest.raises(ConfigError, match=r"^loss_fn could not be hashed deterministically \(loss_fn holds an "
                                          r"object\): each of the 2 processes .* give fingerprint="):
        _loop_on(2, seed=5)


def test_a_loop_with_dropout_in_its_queries_is_refused_on_several_processes_naming_the_argument():
    """Each rank would draw its queries' dropout masks for its own shard (not one process's run)."""
    with pytest.raises(ConfigError, match=r"^query_dropout=True draws the queries' dropout masks for each rank's "
                                          r"shard .* the 2 processes would not compute one run: run it as one "
                                          r"process, or with query_dropout=False$"):
        _loop_on(2, seed=5, query_dropout=True)


def test_a_rank_whose_loop_is_refused_ends_every_rank_at_once_naming_it_in_one_launch(launched):
    """Rank 1's private data hold a NaN (private_zo refuses it before any step): rank 1 says so in the
    ranks' agreement, so rank 0 ends there at once with a ConfigError naming rank 1 and its line (was:
    rank 0 waited in the agreement until the group's timeout)."""
    leader, follower = (launched["ranks"][rank]["library:nan_on_rank_1"] for rank in (0, 1))
    assert follower["error"] == "ConfigError" and "train_data" in follower["message"], follower
    assert leader["error"] == "RankRefused", leader
    assert leader["message"].startswith(f"rank 1 refused the run: {follower['message']} ("), leader


@pytest.mark.slow   # (two ranks start; the default suite's: test_a_rank_whose_loop_is_refused_..._in_one_launch)
def test_a_rank_whose_loop_is_refused_ends_the_other_well_before_the_groups_timeout(tmp_path):
    """The user's gloo group, its timeout 600 s; rank 1's loop refused (a NaN in its private data) and
    its process kept alive, as a notebook's would: rank 0 ends within the test's wait, naming rank 1
    (was: it waited in the agreement for the group's 600 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PAZO_CACHE_DIR=str(run_cache(tmp_path / "cache")), OMP_NUM_THREADS="1", WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    ranks = [subprocess.Popen([sys.executable, str(HERE / "library_fails.py"), str(tmp_path), "600"], cwd=tmp_path,
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for rank in range(2)]
    try:
        outs = [p.communicate(timeout=240) for p in ranks]
    finally:
        for p in ranks:
            p.kill()
    assert [p.returncode for p in ranks] == [0, 0], [err[-2000:] for _, err in outs]
    leader, follower = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    assert follower["error"] == "ConfigError" and "train_data" in follower["message"], follower
    assert leader["error"] == "RankRefused" and leader["message"].startswith("rank 1 refused the run: "), leader
