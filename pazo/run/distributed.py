"""Data-parallel runs on torch.distributed, launched by torchrun (docs/design/distributed.md).

Every rank draws the same Poisson batch from the secret stream and takes its own shard of it
(`Group.shard`: disjoint, together the batch); each computes its examples' clipped contributions
and adds them as the exact int64 limbs of `pazo.privacy.device_sum`, all-reduced (`ShardSums`), so
the sums, and so the run, do not depend on how many ranks there are or in what order they add. The
noise, the directions and the update are drawn and made on every rank alike from the shared
streams. With WORLD_SIZE unset or 1 nothing here runs: `current()` is the one-process group.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import re
import signal
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist

from pazo.errors import ConfigError
from pazo.privacy.device_sum import correctly_rounded, exact_limbs
from pazo.privacy.mechanisms import LocalSums


class RankLost(RuntimeError):
    """Another rank of the run died, or hung past `train.distributed_timeout_s`: the run ends. Its
    text is pazo's one line (`lost_line`); `raw`, torch's message as it came (gloo's C++ text, its
    source paths and stack frames), for train.log."""

    def __init__(self, line: str, raw: str = ""):
        super().__init__(line)
        self.raw = raw


class RanksNotJoined(RankLost):
    """The run's processes did not all join its group within `train.distributed_timeout_s` (a rank
    crashed before joining or was never started; MASTER_ADDR:MASTER_PORT cannot be reached): nothing
    ran. A rank that refused its command line, or met a fault of the machine, before joining joins to
    say so (`Group.compare_asked`)."""


class LeaderRefused(ConfigError):
    """Rank 0 refused the run before its first step and told the others in an exchange they waited
    in (`pazo.run.launch.LeaderExchanges`): they end as it does, and rank 0 alone prints the line."""


class RankRefused(ConfigError):
    """A rank other than 0 refused the run as it built it (a mistake only it met: its data, its
    config) and told the others in the ranks' agreement (`Group.tell`): they end at once, exit 2."""


class RankFailed(RuntimeError):
    """A rank failed while building the run (an error, not a user's mistake) and told the others in
    the ranks' agreement (`Group.tell`): they end at once, as a failed run ends (exit 1)."""


class RankFaulted(RuntimeError):
    """A rank met a fault of the machine before the first step (a full disk, an I/O error) and told
    the others (`Group.tell`, `Group.compare_asked`): they end at once, as a fault ends (exit 75:
    resumable once the machine is fixed), not as an error."""


#: how a rank that could not start the run tells it (`failure_facts`), and so how every other rank
#: ends (`told_failure`): a user's mistake (exit 2), a fault of the machine (exit 75), an error (exit 1)
REFUSED, FAULT, FAILED = "refused", "fault", "failed"
FAILURE_KINDS = (REFUSED, FAULT, FAILED)


@dataclass
class Group:
    """This process's place in the run (rank 0 of 1 for a one-process run) and what it has sent."""

    rank: int = 0
    world_size: int = 1
    bytes_exchanged: int = 0   # bytes this rank has put into all-reductions (the tensors' sizes)
    #: the torch.distributed group its exchanges go through (None: the default one, torchrun's)
    process_group: object = field(default=None, repr=False, compare=False)
    #: whether this rank has entered the ranks' agreement (`agree`): a failure after it is not told there
    agreed: bool = field(default=False, repr=False, compare=False)

    @property
    def several(self) -> bool:
        return self.world_size > 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one rank that writes (the run directory, loggers, the terminal's lines)."""
        return self.rank == 0

    def describe(self, steps: int) -> dict:
        """The summary's `distributed` block: how many processes, and the bytes a rank exchanged a step."""
        return {"world_size": self.world_size, "rank_bytes_per_step": self.bytes_exchanged / steps if steps else None}

    def shard(self, indices: np.ndarray) -> np.ndarray:
        """This rank's examples of a batch: every world_size-th from position `rank` (disjoint shards
        that together are the batch, whatever its size)."""
        return indices[self.rank::self.world_size]

    def all_sum(self, values: torch.Tensor) -> torch.Tensor:
        """`values` summed over the ranks (int64 limbs and counts: exact, in any order)."""
        if not self.several:
            return values
        total = values.clone()
        try:
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.process_group)
        except (RuntimeError, dist.DistError) as err:
            raise lost_rank(err) from None
        self.bytes_exchanged += total.numel() * total.element_size()
        return total

    def add_in_rank_order(self, local: torch.Tensor) -> torch.Tensor:
        """Every rank's `local` (a float tensor), gathered and added in rank order, on the host: the
        same floats on every rank, whatever the reduction's algorithm (an all_reduce of floats may
        add in another order on each rank); returned on `local`'s device."""
        if not self.several:
            return local
        parts = self._all_gathered(local.detach().to("cpu").contiguous())
        total = parts[0].clone()
        for part in parts[1:]:
            total += part
        return total.to(local.device)

    def gather_rows(self, local: torch.Tensor, count: int) -> torch.Tensor:
        """`count` rows held in shards by `shard`'s rule (row j on rank j mod world_size; `local`:
        this rank's rows, in order, [m, ...]), gathered on every rank in row order: exact copies of
        each rank's floats (all_gather, on the host, each rank's rows padded to ceil(count / N));
        returned on `local`'s device."""
        if not self.several:
            return local
        host = local.detach().to("cpu")
        padded = host.new_zeros((-(-count // self.world_size), *host.shape[1:]))
        padded[:len(host)] = host
        parts = self._all_gathered(padded)
        # (position i of rank r's rows is row i * world_size + r; what is past `count` is padding)
        return torch.stack(parts, dim=1).flatten(0, 1)[:count].to(local.device)

    def _all_gathered(self, host: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `host` (a CPU tensor of one shape on every rank), in rank order; the bytes this
        rank put in are counted, and a peer lost on the way is `RankLost`."""
        parts = [torch.empty_like(host) for _ in range(self.world_size)]
        try:
            dist.all_gather(parts, host, group=self.process_group)
        except (RuntimeError, dist.DistError) as err:
            raise lost_rank(err) from None
        self.bytes_exchanged += host.numel() * host.element_size()
        return parts

    def stopping(self, reason: str | None) -> bool:
        """Whether the run stops after this step: rank 0's stop request (a signal), sent to every rank
        (8 bytes a step), so that all stop at the same step; rank 0 then checkpoints. The other ranks
        ignore signals (`ignore_stop_signals`): rank 0 alone decides."""
        if not self.several:
            return reason is not None
        asked = torch.tensor([int(self.leader and reason is not None)], dtype=torch.int64)
        return bool(self.all_sum(asked)[0])

    def share(self, value):
        """Rank 0's `value` on every rank (the others pass None): how a launch starts (afresh, or from
        which checkpoint), which rank 0 alone decides from its run directory."""
        if not self.several:
            return value
        box = [value if self.leader else None]
        try:
            dist.broadcast_object_list(box, src=0, group=self.process_group)
        except (RuntimeError, dist.DistError) as err:
            raise lost_rank(err) from None
        return box[0]

    def _gathered_unless_told(self, facts: dict) -> list:
        """Every rank's `facts`, in rank order, once each has sent its own; a `RankLost` where a rank
        is gone, and another rank's failure, sent in its facts' place, raised here (`told_failure`)."""
        gathered: list = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, facts, group=self.process_group)
        except (RuntimeError, dist.DistError) as err:
            raise lost_rank(err) from None
        told = told_failure(gathered, self.rank)
        if told is not None:
            raise told
        return gathered

    def agree(self, facts: dict[str, str]) -> None:
        """Refuse, on every rank and before any compute, a run whose ranks differ in any of `facts`
        (config, data, code): they would not compute one run. A rank that could not build the run
        sends its failure instead (`tell`): every other rank ends here, naming it (`told_failure`)."""
        if not self.several:
            return
        self.agreed = True   # (one agreement a run: whatever happens in it, it is spent)
        gathered = self._gathered_unless_told(facts)
        if failure_of(facts) is not None:   # (this rank's own failure: it raises its own error)
            return
        differ = [key for key in facts if len({str(g.get(key)) for g in gathered}) > 1]
        if differ:
            rank = next(r for r, g in enumerate(gathered) if any(g.get(k) != gathered[0].get(k) for k in differ))
            starts = (f"; rank 0 starts at {gathered[0].get('start')}, rank {rank} at {gathered[rank].get('start')}"
                      if "start" in differ else "")
            raise ConfigError(f"the {self.world_size} processes of this run differ in {', '.join(differ)} (rank "
                              f"{rank} from rank 0{starts}): every rank must run the same config, data and code, "
                              "from the same step of the run")

    def compare_asked(self, asked: dict) -> None:
        """The first exchange of a command line's ranks (`asked_facts`): refuse, on every rank, ranks
        given different command lines (one plans, another runs; other overrides), which would wait
        in different exchanges until `train.distributed_timeout_s`. A rank that refused its command
        line, or met a fault, before joining sends its failure instead (`failure_facts`): every other
        rank ends here naming it (`told_failure`)."""
        if not self.several:
            return
        gathered = self._gathered_unless_told(asked)
        differ = None if failure_of(asked) is not None else asked_difference(gathered)
        if differ is not None:
            raise ConfigError(f"the {self.world_size} processes of this run were given different command lines "
                              f"({differ}): every rank must be given the same overrides and flags (torchrun "
                              "gives each the same)")

    def tell(self, err: BaseException, kind: str) -> None:
        """This rank could not build the run (`err`, of `kind`: `failure_facts`): say so in the
        ranks' agreement, which the others reach once they have built theirs, so that they end at
        once naming this rank, instead of waiting for it until `train.distributed_timeout_s`. Nothing
        where this rank is alone or has entered the agreement already (it is spent)."""
        if not self.several or self.agreed:
            return
        try:
            self.agree(failure_facts(err, kind))
        except LeaderRefused:   # rank 0 refused too: its line is the run's
            raise
        except (ConfigError, RankFailed, RankFaulted, RankLost):   # (told; another rank failed too, or is gone)
            pass


#: keys that say where a node finds its own files: each node may keep its copy elsewhere (the data's
#: and code's digests, which the ranks agree on before the first step, say whether the copies agree)
NODE_LOCAL_KEYS = ("dataset.root", "train.cache_dir")


def asked_facts(overrides: Sequence[str], plan: bool) -> dict:
    """What a rank's command line asks, as its ranks compare it once joined (`Group.compare_asked`):
    whether it plans the run (`--plan`) and a digest of each override, by key, as typed (hydra.*
    apart: the run directory is rank 0's alone; so are `NODE_LOCAL_KEYS`; hashed: a value, the seed
    among them, stays in its process)."""
    given: dict[str, list[str]] = {}
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if not key.startswith("hydra.") and key not in NODE_LOCAL_KEYS:
            given.setdefault(key, []).append(override)
    return {"plan": plan, "overrides": {key: hashlib.sha256("\0".join(typed).encode()).hexdigest()
                                        for key, typed in given.items()}}


def asked_difference(gathered: Sequence[dict]) -> str | None:
    """How the first rank given another command line than rank 0's differs from it, in words
    (`asked_facts` in rank order), or None where every rank was asked the same."""
    first = gathered[0]
    for rank, asked in enumerate(gathered[1:], start=1):
        said = []
        if asked["plan"] != first["plan"]:
            said.append(f"--plan on rank {0 if first['plan'] else rank} only")
        mine, theirs = first["overrides"], asked["overrides"]
        for key in sorted(mine.keys() | theirs.keys()):
            if key not in theirs or key not in mine:
                said.append(f"{key} on rank {rank if key in theirs else 0} only")
            elif mine[key] != theirs[key]:
                said.append(f"{key} with another value")
        if said:
            return f"rank {rank} from rank 0: {'; '.join(said)}"
    return None


def failure_facts(err: BaseException, kind: str) -> dict[str, str]:
    """What a rank that could not build the run sends into the agreement: its one line, under its
    `kind` (one of `FAILURE_KINDS`), which decides how the other ranks end (`told_failure`)."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"a rank's failure is one of {FAILURE_KINDS}, not {kind!r}")
    if kind == REFUSED:
        return {REFUSED: str(err)}
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return {kind: f"{type(err).__name__}: {first}" if first else type(err).__name__}


def failure_of(facts: dict) -> str | None:
    """A rank's failure as it told it (`failure_facts`), or None where it built the run."""
    return next((facts[kind] for kind in FAILURE_KINDS if kind in facts), None)


def told_failure(gathered: Sequence[dict], rank: int) -> Exception | None:
    """What rank `rank` ends with, given the ranks' facts in the agreement (`gathered`, in rank order;
    rank 0's alone where it told the others in its share): rank 0's refusal, which rank 0 prints
    (`LeaderRefused`: the others stay silent); else, unless `rank` failed itself (it raises its own
    error), the first other rank's failure, named, of the kind it told: a refusal (`RankRefused`,
    exit 2), a fault of the machine (`RankFaulted`, exit 75) or an error (`RankFailed`, exit 1); None
    where none failed."""
    if rank != 0 and REFUSED in gathered[0]:
        return LeaderRefused(gathered[0][REFUSED])
    if rank < len(gathered) and failure_of(gathered[rank]) is not None:
        return None
    ended = "every rank ended before the first step, and nothing was written"
    for other, facts in enumerate(gathered):
        if REFUSED in facts:
            return RankRefused(f"rank {other} refused the run: {facts[REFUSED]} ({ended})")
        if FAULT in facts:
            return RankFaulted(f"rank {other} met a fault of the machine before the first step ({facts[FAULT]}); "
                               f"{ended}")
        if FAILED in facts:
            return RankFailed(f"rank {other} failed before the first step ({facts[FAILED]}); {ended}")
    return None


@contextmanager
def telling(group, refusals: tuple[type[BaseException], ...],
            faults: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Building a run on this rank: an error raised inside is told to the other ranks (`group.tell`:
    a Group's, or rank 0's exchanges'), of the kind it ends this rank with (one of `refusals`: a
    user's mistake; of `faults`: a fault of the machine; else an error), then raised here as before."""
    try:
        yield
    except refusals as err:
        group.tell(err, REFUSED)
        raise
    except faults as err:
        group.tell(err, FAULT)
        raise
    except Exception as err:
        group.tell(err, FAILED)
        raise


class ShardSums(LocalSums):
    """A release's sums over a batch held in shards, one per rank: each rank's exact limbs, summed
    over the ranks, rounded once (the float `math.fsum` gives over the whole batch). A NaN or infinite
    value gives what fsum's own fallback gives: NaN, or the infinity if all of one sign."""

    def __init__(self, group: Group):
        self.group = group

    def row_sums(self, rows: Sequence[Sequence[float]]) -> list[float]:
        if not rows:
            return []
        values = torch.tensor([list(row) for row in rows], dtype=torch.float64).reshape(len(rows), -1)
        finite = torch.isfinite(values)
        special = torch.stack([values.isnan().sum(1), (values == math.inf).sum(1), (values == -math.inf).sum(1)], 1)
        total = self.group.all_sum(torch.cat([exact_limbs(values.where(finite, 0.0)), special], dim=1))
        sums = correctly_rounded(total[:, :-3])
        return [nonfinite_sum(nan, pos, neg, s) for s, (nan, pos, neg) in zip(sums, total[:, -3:].tolist())]

    def count(self, local: int) -> int:
        return int(self.group.all_sum(torch.tensor([local], dtype=torch.int64))[0])

    def vector_sum(self, local: torch.Tensor) -> torch.Tensor:
        """The ranks' float sums over their shards, added in rank order (`Group.add_in_rank_order`):
        the same on every rank; within float rounding of one process's sum over the whole batch,
        whose additions come in another order (a first-order step's gradients: d floats a rank)."""
        return self.group.add_in_rank_order(local)

    def computed_rows(self, count: int, compute: Callable[[list[int]], torch.Tensor]) -> torch.Tensor:
        """Rows computed each on its own (public gradients): this rank computes its share by
        `Group.shard`'s rule (row j on rank j mod N; a rank r >= count computes none) and the ranks
        gather them (`Group.gather_rows`), so every rank holds the same [count, ...] rows, in order,
        each computed by one rank as one process computes it (a rank puts in ceil(k / N) x d floats a step)."""
        mine = self.group.shard(np.arange(count)).tolist()
        return self.group.gather_rows(compute(mine), count)


def nonfinite_sum(nans: int, positive: int, negative: int, finite_sum: float) -> float:
    """A row's sum given how many NaN, +inf and -inf values it had, as fsum's fallback adds them."""
    if nans or (positive and negative):
        return math.nan
    return math.inf if positive else -math.inf if negative else finite_sum


def lost_rank(err: BaseException) -> RankLost:
    """The `RankLost` an exchange that torch failed with `err` ends the run with: pazo's line, torch's text kept."""
    return RankLost(lost_line(err), raw=str(err))


#: gloo's (and c10d's) words for an exchange that waited past its timeout
_TIMED_OUT = re.compile(r"timed? ?out|timeout|deadline exceeded", re.IGNORECASE)
#: the peer a gloo message names, `[10.0.0.2]:41865`, `[::ffff:10.0.0.2]:41865`, `[fe80::1%eth0]:41865`
#: (not its source file, `[../gloo/pair.cc:534]`)
_PEER = re.compile(r"\[((?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+(?:%[\w.-]+)?|[A-Za-z][\w.-]*)\]:\d+")


def lost_line(err: BaseException) -> str:
    """What a rank says when an exchange with the others failed with torch's `err`, in one line of
    pazo's words: whether a peer stopped answering in time or its connection ended, and where the
    message names it (gloo's C++ text, source paths and frames stay out: `RankLost.raw`)."""
    text = str(err)
    peer = _PEER.search(text)
    at = f" (at {peer.group(1)})" if peer else ""
    if _TIMED_OUT.search(text):
        what = (f"none answered{at} within train.distributed_timeout_s (a rank hung, or its machine cannot be "
                "reached)")
    else:
        what = f"its connection{at} ended (its process stopped, or its machine went away)"
    return f"another rank of this run stopped answering: {what}; the run ended on every rank"


def ignore_stop_signals() -> None:
    """A rank other than 0: Ctrl-C and SIGTERM (torchrun sends them to every rank), and a scheduler's
    warning SIGUSR1/SIGUSR2 (SLURM sends it to every task of a job), are rank 0's to act on; this
    rank stops when rank 0 says so (`Group.stopping`), or when rank 0 is gone."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)


def world_from_environment(environ=os.environ) -> tuple[int, int]:
    """(rank, world size) as torchrun sets them (RANK, WORLD_SIZE); (0, 1) when WORLD_SIZE is unset."""
    try:
        world = int(environ.get("WORLD_SIZE", "1"))
        rank = int(environ.get("RANK", "0"))
    except ValueError:
        raise ConfigError(f"RANK={environ.get('RANK')!r} and WORLD_SIZE={environ.get('WORLD_SIZE')!r} must be "
                          "integers (torchrun sets them)") from None
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} does not fit WORLD_SIZE={world}: torchrun sets them")
    return rank, world


_CURRENT = Group()


def current() -> Group:
    """The group this process joined (`join`), else the one-process group."""
    return _CURRENT


def join(timeout_s: float, asked: dict | None = None) -> Group:
    """Join the run's process group as torchrun describes it, each exchange waiting at most
    `timeout_s`; nothing when WORLD_SIZE is 1. gloo on every device: what is exchanged is a few
    host integers a step (a rank with a GPU uses its LOCAL_RANK's). A command line's ranks then
    compare what they were `asked` (`Group.compare_asked`) before any other exchange."""
    global _CURRENT
    rank, world = world_from_environment()
    if world > 1 and not dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        try:
            dist.init_process_group("gloo", rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        except (RuntimeError, ValueError) as err:   # (torch's DistStoreError and DistNetworkError are RuntimeErrors)
            raise RanksNotJoined(not_joined_line(world, timeout_s, err)) from None
    _CURRENT = Group(rank, world)
    if asked is not None:
        _CURRENT.compare_asked(asked)
    return _CURRENT


def not_joined_line(world: int, timeout_s: float, err: BaseException, environ=os.environ) -> str:
    """What a rank whose peers never joined says: how many, how long it waited, where, torch's reason."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = f"{environ.get('MASTER_ADDR', '(MASTER_ADDR unset)')}:{environ.get('MASTER_PORT', '(MASTER_PORT unset)')}"
    return (f"the {world} processes of this run did not all join it within {timeout_s:g} s "
            f"(train.distributed_timeout_s), at {where} ({first})")


def library_group(timeout_s: float) -> Group:
    """The group a library loop (`pazo.private.private_zo`) shares its batches with: the user's, where
    they initialised torch.distributed (its exchanges over gloo: with another backend, a gloo group
    of the same processes made beside it), else the one torchrun describes, joined here (`join`);
    else one process."""
    if not (dist.is_available() and dist.is_initialized()):
        return join(timeout_s)
    if dist.get_world_size() == 1:
        return Group()
    host_group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return Group(dist.get_rank(), dist.get_world_size(), process_group=host_group)


def leave() -> None:
    """Leave the process group (if one was joined)."""
    global _CURRENT
    if dist.is_initialized():
        dist.destroy_process_group()
    _CURRENT = Group()


def run_facts(fingerprint: str, digests: dict[str, str]) -> dict[str, str]:
    """What every rank of a run (and of its plan) must share, hashed once more (the private data's digest
    stays among the run's processes): the config (its `fingerprint`), the `digests` of what keys the
    secret streams (the data; a run's initial parameters too) and pazo's code."""
    def hashed(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()
    return {"config": hashed(fingerprint), "data": hashed(json.dumps(digests, sort_keys=True)), "code": code_digest()}


def code_digest() -> str:
    """A digest of the package's Python sources: ranks running other code would compute another run."""
    from pathlib import Path

    root = Path(__file__).parent.parent   # the package, from its run/ wing
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
