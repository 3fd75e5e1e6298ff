"""Public passes sharded over the ranks (`ShardSums.computed_rows`, `Group.gather_rows`): public batch j's
gradient is computed on rank j mod N alone, and the ranks gather every gradient, so that each rank holds the
one-process [k, d] rows, in batch order, the same bits. Here the ranks are simulated in one process: the
all_gather each rank makes hands it every rank's padded share, as gloo would."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from pazo.privacy.mechanisms import LOCAL_SUMS
from pazo.run import distributed
from pazo.run.distributed import Group, ShardSums


def rows_of(seed: int, count: int, dim: int) -> torch.Tensor:
    """`count` distinct rows of random floats (the k public gradients one process computes)."""
    return torch.randn(count, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)


def simulated_ranks(monkeypatch, rows: torch.Tensor, world: int) -> list[int]:
    """Make each rank's all_gather hand it what it sent in its own slot and the other ranks' shares of
    `rows` (by `Group.shard`), padded to ceil(k / world) rows, as they send them. Returns the holder of
    the rank now gathering (the test sets it)."""
    count = len(rows)
    per_rank = -(-count // world)
    shares = [Group(rank, world).shard(np.arange(count)).tolist() for rank in range(world)]
    gathering = [0]

    def all_gather(parts, tensor, group=None):
        assert tensor.shape == (per_rank, *rows.shape[1:])   # every rank sends as many rows
        for rank, (part, share) in enumerate(zip(parts, shares, strict=True)):
            part.zero_()
            if rank == gathering[0]:
                part.copy_(tensor)   # (its own rows as it sent them: where a wrong offset or a zero would show)
            else:
                part[:len(share)] = rows[share]

    monkeypatch.setattr(distributed.dist, "all_gather", all_gather)
    return gathering


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 12), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**31))
def test_each_rank_computes_its_share_and_holds_every_row_in_batch_order(count, world, dim, seed):
    """Over random k and N: the ranks' shares are disjoint and together every batch (a rank past k computes
    none), each rank computes its share alone, and after the gather every rank holds the k rows one process
    computes, in batch order, the same bits; it put ceil(k / N) rows into the exchange."""
    rows = rows_of(seed, count, dim)
    with pytest.MonkeyPatch.context() as monkeypatch:
        gathering = simulated_ranks(monkeypatch, rows, world)
        shares = []
        for rank in range(world):
            gathering[0] = rank
            group = Group(rank, world)
            asked = []

            def compute(share, asked=asked):
                asked.append(share)
                return rows[share] if share else rows.new_zeros((0, dim))

            gathered = ShardSums(group).computed_rows(count, compute)
            assert len(asked) == 1 and asked[0] == sorted(asked[0])   # once, its batches in order
            shares.append(asked[0])
            assert torch.equal(gathered, rows) and gathered.dtype == rows.dtype
            assert group.bytes_exchanged == (-(-count // world) * dim * rows.element_size() if world > 1 else 0)
    assert sorted(j for share in shares for j in share) == list(range(count))
    assert all(share == list(range(rank, count, world)) for rank, share in enumerate(shares))


def test_one_process_computes_every_row_itself():
    rows = rows_of(0, 5, 3)
    asked = []
    got = LOCAL_SUMS.computed_rows(5, lambda share: asked.append(share) or rows[share])
    assert asked == [[0, 1, 2, 3, 4]] and torch.equal(got, rows)


def test_a_lost_rank_in_the_gather_ends_the_run(monkeypatch):
    def all_gather(parts, tensor, group=None):
        raise RuntimeError("Connection closed by peer")

    monkeypatch.setattr(distributed.dist, "all_gather", all_gather)
    with pytest.raises(distributed.RankLost, match="stopped answering"):
        Group(0, 2).gather_rows(torch.zeros(1, 3), 2)
