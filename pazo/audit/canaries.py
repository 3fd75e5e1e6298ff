"""Canaries and their scores for the one-run audit (`pazo.audit`).

m canaries; canary i joins the private training data with probability 1/2 (`included[i]`, drawn
from the audit's own seed, never shown to the scoring code), and is then Poisson-sampled like every
other private example, at the run's rate q.

Black box (`ExampleCanaries`): a canary is a training example, the entries (pixels, tokens) of a
private example in a seeded random order with a random label: an out-of-distribution input with the
data's value range and type. Score: minus the trained model's loss on it.

White box (`ScalarCanaries`, `VectorCanaries`): the auditor sees every step's release and chooses
each canary's contribution to it; the contribution passes through the method's own clipping and
privatiser (`pazo.privacy.mechanisms`), exactly as a private example's does.
  * zeroth-order methods release, per query, a noisy sum of per-example scalars clipped to [-C, C].
    In every query a sampled canary i enters, its raw scalar is canary_scale * C * s_i (s_i = +-1, a
    public pseudo-random sign per canary, query and call), which a correct clip turns into +-C. Score:
    sum over all released scalars of s_i * release.
  * first-order methods release a noisy sum of per-example gradients clipped to norm C. Canary i is
    a Dirac canary: raw gradient canary_scale * C * s_i * e_(c_i) on its own coordinate c_i
    (distinct per canary; s_i = +-1 a public pseudo-random sign per canary and step), clipped by the
    same code as the real gradients to +-C e_(c_i). Score: sum over steps of s_i times the release's
    coordinate c_i. (The signs keep the real examples' steady gradient on c_i from adding up.)
  The auditor knows the seeds of the run's public streams (directions, public batches, splits,
  initialisation), never those of the secret ones (Poisson sampling, noise). If replaying the noise
  draws from the direction stream's seed explains most of the releases (the debug break
  `noise_from_direction_seed`; `REPLAY_CHI2`), the auditor subtracts the replayed noise (scaled by
  least squares) before scoring. This rule
  looks only at the releases and public seeds, so the guesses stay functions of the output.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import binom

from pazo.data.base import TensorSplit
from pazo.errors import ConfigError
from pazo.privacy.mechanisms import JointClipPrivatizer, ScalarPrivatizer, ScalarRelease, VectorPrivatizer, clip_factors
from pazo.rng import RandomStreams

#: the replayed noise counts as the run's noise when the share of the releases' sum of squares it
#: explains, times the number of released values, exceeds this (a chi-square(1) statistic: an
#: unrelated replay exceeds 25 with probability about 6e-7)
REPLAY_CHI2 = 25.0


def public_seeds(streams: RandomStreams) -> dict[str, int]:
    """What the auditor may know of the run's randomness: the seeds of the streams that are not secret."""
    return {name: seed for name, seed in streams.seeds.items() if name not in RandomStreams.SECRET}


class FixedRatePoissonSampler:
    """Poisson sampling at a given rate q over however many examples the audited data set has: q,
    sigma and T (and so the printed epsilon) are those of the run without canaries, whatever the
    number of canaries included (which would leak through q otherwise)."""

    def __init__(self, num_examples: int, sample_rate: float, rng: np.random.Generator):
        self.n, self.sample_rate, self.rng = num_examples, sample_rate, rng

    def sample(self) -> np.ndarray:
        return np.flatnonzero(self.rng.random(self.n) < self.sample_rate)


def example_canaries(private: TensorSplit, m: int, num_classes: int, rng: np.random.Generator) -> TensorSplit:
    """m out-of-distribution examples: each the entries of a random private example in a random
    order (same dtype and value range, so any data set's transform applies), with a random label."""
    source = rng.integers(0, len(private), size=m)
    flat = private.inputs[torch.as_tensor(source)].reshape(m, -1)
    order = torch.as_tensor(np.stack([rng.permutation(flat.shape[1]) for _ in range(m)]))
    inputs = torch.gather(flat, 1, order).reshape(m, *private.inputs.shape[1:])
    labels = torch.as_tensor(rng.integers(0, num_classes, size=m))
    return TensorSplit(inputs, labels, private.transform)


def with_examples(private: TensorSplit, canaries: TensorSplit, included: np.ndarray) -> TensorSplit:
    """The private split followed by the included canaries (indices >= len(private))."""
    idx = torch.as_tensor(np.flatnonzero(included))
    return TensorSplit(torch.cat([private.inputs, canaries.inputs[idx]]),
                       torch.cat([private.labels, canaries.labels[idx]]), private.transform)


@torch.no_grad()
def black_box_scores(model, canaries: TensorSplit, device, batch_size: int = 1024) -> np.ndarray:
    """Minus the final model's loss on each canary (eval mode): higher = more likely trained on."""
    was_training = model.module.training
    model.module.eval()
    out = []
    for start in range(0, len(canaries), batch_size):
        x, y = canaries.batch(np.arange(start, min(start + batch_size, len(canaries))), device)
        out.append(model.current_losses(x, y).double().cpu())
    model.module.train(was_training)
    return -torch.cat(out).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).numpy()


class PrivatizerHook:
    """What stands between a method and its privatiser in the audit loop (`train_with_canaries`):
    the canary ids the current step sampled, the step, and whether the real examples'
    contributions are dropped; the privatiser's data read through, its methods not."""

    passes = "the canaries"  # what a release must pass, for the refusal below
    #: where the contributions are neutralised, whether the step still runs on the real Poisson
    #: batch (the noise check: noise that depends on the batch is exercised) or on none (the
    #: canaries' worst case: the forward passes would change nothing released)
    runs_batch = False

    def __init__(self, inner, neutralises: bool = False):
        self.inner = inner
        self.present = np.empty(0, dtype=np.int64)   # canary ids in this step's Poisson batch
        self.step = 0                                # the current step (set by the audit loop)
        self.neutralises = neutralises               # the real examples' contributions dropped

    def __getattr__(self, name):
        """The privatiser's data (spec, noise scale) read through; its methods are not: each one
        that releases must be wrapped here, and forwarding it would release around the hook."""
        if name == "inner":  # not set yet (copying): no recursion
            raise AttributeError(name)
        value = getattr(self.inner, name)
        if callable(value):
            raise AttributeError(f"{type(self).__name__} does not forward the privatiser's method {name!r}: "
                                 f"a release must pass {self.passes} (wrap it here)")
        return value


def nominal_noise_scale(privatizer, clip: float | None = None) -> float:
    """The noise scale the run's guarantee gives each released sum (public: sigma, C, adjacency,
    queries), whatever a debug break does to the draws: S sigma per coordinate of a vector sum and
    per sum of DP-AggZO's joint clip (its Q sums one mechanism of sensitivity S); per sum of a
    scalar release of Q queries, sqrt(Q) S sigma (Gaussian: the Q as one mechanism) or Q S sigma
    (Laplace)."""
    spec = privatizer.spec
    if isinstance(privatizer, VectorPrivatizer):
        return spec.sensitivity_for(spec.clip if clip is None else clip) * spec.sigma
    if isinstance(privatizer, JointClipPrivatizer):
        return spec.sensitivity * spec.sigma
    per = privatizer.queries if spec.mechanism == "laplace" else math.sqrt(privatizer.queries)
    return per * spec.sensitivity * spec.sigma


class _WhiteBox(PrivatizerHook):
    """Shared by the white-box hooks: the canaries and the records the auditor reads."""

    def __init__(self, inner, m: int, scale: float, design: np.random.Generator):
        super().__init__(inner)
        self.m, self.scale, self.design = m, scale, design
        self.releases: list[torch.Tensor] = []       # per call, what the auditor sees (noisy sums)
        self.steps: list[int] = []                   # per call, its step

    def replay_noise(self, seeds: dict[str, int], device) -> list[torch.Tensor]:
        raise NotImplementedError

    def _score(self, releases: torch.Tensor) -> torch.Tensor:
        """[m] scores from all released values (flat, in call order)."""
        raise NotImplementedError

    def scores(self, seeds: dict[str, int], device) -> tuple[np.ndarray, dict]:
        """Each canary's score from the releases (and the public seeds), and how it was computed."""
        releases = torch.cat([r.reshape(-1) for r in self.releases]).double()
        releases = releases.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        info = {"released_values": int(releases.numel()), "noise_replayed": False}
        replay = torch.cat([z.reshape(-1) for z in self.replay_noise(seeds, device)]).double().cpu()
        denom = float(replay @ replay)
        if denom > 0:
            coef = float(replay @ releases) / denom
            explained = coef * coef * denom / max(float(releases @ releases), 1e-300)
            info["replayed_noise_explains"] = explained
            if explained * releases.numel() > REPLAY_CHI2:
                releases = releases - coef * replay
                info.update(noise_replayed=True, replayed_noise_scale=coef)
        return self._score(releases).numpy(), info


def replay_scalar_noise(spec, releases: list[torch.Tensor], seeds: dict[str, int]) -> list[torch.Tensor]:
    """The standard draws the scalar privatiser would have made, in order, had its noise come from
    the direction stream's (public) seed."""
    gen = torch.Generator(device="cpu")  # the scalar privatiser draws on the CPU
    gen.manual_seed(seeds["directions"])
    draws = []
    for r in releases:
        if spec.mechanism == "laplace":
            u = torch.rand(r.shape, generator=gen, dtype=torch.float64) - 0.5
            draws.append(-torch.sign(u) * torch.log1p(-2 * u.abs()))
        else:
            draws.append(torch.randn(r.shape, generator=gen, dtype=torch.float64))
    return draws


class ScalarHook(ScalarRelease):
    """A hook on a scalar release, on the path the method takes: `release` (Python floats, a step
    on CPU) passes its rows to the privatiser's `release`, `release_tensor` (a step kept on CUDA,
    `releases_on_device`) to the privatiser's `release_tensor`, so that the audit checks the code
    the audited run uses."""

    def hooked(self, rows: list[list[float]], release) -> list[float]:
        """The hook's release of `rows`, its rows for the privatiser passed to `release`."""
        raise NotImplementedError

    def release(self, rows):
        return self.hooked(rows, self.inner.release)

    def release_tensor(self, values: torch.Tensor) -> torch.Tensor:
        device = values.device

        def on_device(rows: list[list[float]]) -> list[float]:
            return self.inner.release_tensor(torch.tensor(rows, dtype=torch.float64, device=device)).tolist()

        return torch.tensor(self.hooked(values.tolist(), on_device), dtype=torch.float64, device=device)


class ScalarCanaries(_WhiteBox, ScalarHook):
    """Wraps a zeroth-order method's `ScalarPrivatizer`: appends the sampled canaries' scalars to
    each release's rows of per-example values, lets the privatiser clip, sum and noise them, and
    records the noisy sums (`means` and the call go through `release`, with the canaries)."""

    def __init__(self, inner: ScalarPrivatizer, m: int, scale: float, design: np.random.Generator):
        super().__init__(inner, m, scale, design)
        self.signs: list[torch.Tensor] = []  # per call, [queries, m] in {-1, +1}

    def hooked(self, rows, release):
        queries = len(rows)
        signs = torch.as_tensor(self.design.integers(0, 2, size=(queries, self.m), dtype=np.int8) * 2 - 1)
        self.signs.append(signs)
        present = torch.as_tensor(self.present, dtype=torch.long)
        raw = (self.scale * self.inner.spec.clip * signs[:, present].double()).tolist()  # [queries, sampled]
        out = release([[*row, *extra] for row, extra in zip(rows, raw)])
        self.releases.append(torch.tensor(out, dtype=torch.float64) * self.inner.spec.expected_batch_size)
        self.steps.append(self.step)
        return out

    def replay_noise(self, seeds, device):
        return replay_scalar_noise(self.inner.spec, self.releases, seeds)

    def _score(self, releases):
        """sum of s_i * release over the released values, each step's values first centred on their
        mean when a step releases several (PAZO-S's candidate losses share most of their value: the
        batch's mean loss, which would drown the canaries)."""
        step_of = torch.cat([torch.full((r.numel(),), t) for r, t in zip(self.releases, self.steps)])
        _, group = torch.unique(step_of, return_inverse=True)
        sums = torch.zeros(int(group.max()) + 1, dtype=releases.dtype).index_add_(0, group, releases)
        counts = torch.bincount(group).to(releases.dtype)
        centred = torch.where(counts[group] > 1, releases - (sums / counts)[group], releases)
        return centred @ torch.cat(self.signs).double()


class VectorCanaries(_WhiteBox):
    """Wraps a first-order method's `VectorPrivatizer`: adds the sampled Dirac canaries, clipped by
    `clip_factors` as the real per-example gradients are, to the clipped sum before the noise, and
    records the noisy sum on the canaries' coordinates."""

    def __init__(self, inner: VectorPrivatizer, m: int, scale: float, design: np.random.Generator, dim: int,
                 neutralise: bool = False):
        super().__init__(inner, m, scale, design)
        self.neutralises = neutralise  # worst case: the real examples' clipped gradients replaced by 0
        if m > dim:
            raise ConfigError(f"audit.canaries={m} exceeds the model's {dim} parameters (one coordinate per "
                              "white-box canary)")
        self.dim, self.dtype = dim, torch.float32
        self.coords = torch.as_tensor(design.permutation(dim)[:m])
        self.signs: list[torch.Tensor] = []  # per call, [m] in {-1, +1}

    def __call__(self, clipped_sum: torch.Tensor, clip: float) -> torch.Tensor:
        self.dtype = clipped_sum.dtype
        signs = torch.as_tensor(self.design.integers(0, 2, size=self.m, dtype=np.int8) * 2 - 1)
        self.signs.append(signs)
        present = torch.as_tensor(self.present, dtype=torch.long)
        raw = (self.scale * clip * signs[present]).to(dtype=clipped_sum.dtype, device=clipped_sum.device)
        coords = self.coords[present].to(clipped_sum.device)
        total = torch.zeros_like(clipped_sum) if self.neutralises else clipped_sum.clone()
        total.index_add_(0, coords, raw * clip_factors(raw.abs(), clip))
        out = self.inner(total, clip)
        self.releases.append(out.detach()[self.coords.to(out.device)].double().cpu()
                             * self.inner.spec.expected_batch_size)
        return out

    def replay_noise(self, seeds, device):
        gen = torch.Generator(device=device)
        gen.manual_seed(seeds["directions"])
        return [torch.randn(self.dim, generator=gen, device=device, dtype=self.dtype)[self.coords.to(device)]
                for _ in self.releases]

    def _score(self, releases):
        signs = torch.stack(self.signs).double()  # [calls, m]
        return (releases.reshape(len(self.releases), self.m) * signs).sum(dim=0)


#: the worst-case scalar design's canaries per released value: quiet ones on the bits 2^-1 .. 2^-QUIET_BITS
#: of C (a correct clip keeps them), loud ones on canary_scale * C * 2^0 .. 2^(LOUD_BITS - 1) (a correct
#: clip makes each C). A quiet decode is trusted only where the value is below QUIET_RANGE C (so that
#: float64 resolves 2^-GUARD_BITS C there) and its bits from 2^-(QUIET_BITS + 1) down to 2^-GUARD_BITS
#: of C are zero (a noisy value passes with probability about 2^(QUIET_BITS + 1 - GUARD_BITS)); the
#: float64 error of a released value below 16 C is about 2^-48 C
QUIET_BITS, LOUD_BITS, GUARD_BITS, QUIET_RANGE = 38, 44, 45, 16.0
#: a loud decode is trusted only within this fraction of canary_scale * C of an integer
LOUD_TOLERANCE = 0.25
#: a decode that names more of a group's canaries than Binomial(group, q) exceeds with this
#: probability is implausible (noise read as digits) and dropped
IMPLAUSIBLE = 1e-9


def decode_quiet(value: float, bits: int = QUIET_BITS) -> list[int] | None:
    """The quiet ranks present in a released value in units of C (its fractional part read as the
    bits 2^-1, 2^-2, ...), or None when float64 cannot resolve them there or the bits below are not
    all zero (noise)."""
    if not (math.isfinite(value) and abs(value) < QUIET_RANGE):
        return None
    frac = value - math.floor(value)
    units = frac * 2.0 ** bits
    k = round(units)
    if abs(units - k) >= 2.0 ** (bits - GUARD_BITS):
        return None
    k %= 2 ** bits  # a fraction just below 1 is a whole unit
    return [rank for rank in range(bits) if k >> (bits - 1 - rank) & 1]


def decode_loud(value: float, bits: int = LOUD_BITS) -> list[int] | None:
    """The loud ranks present in a released value in units of canary_scale * C (an integer read in
    binary), or None when it is not near a non-negative integer below 2^bits."""
    if not math.isfinite(value):
        return None
    k = round(value)
    if abs(value - k) >= LOUD_TOLERANCE or not 0 <= k < 2 ** bits:
        return None
    return [rank for rank in range(bits) if k >> rank & 1]


class CodedScalarCanaries(_WhiteBox, ScalarHook):
    """The worst-case white box of a zeroth-order method: the real examples' scalars are neutralised
    (each query's sum holds only the sampled canaries' values) and every released value carries a
    public group of canaries, each on its own binary digit, so that a release whose noise is gone
    or too small, or whose clip is off, can be read digit by digit.

    Each query of each call takes the next QUIET_BITS + LOUD_BITS canaries of a public cyclic order:
    quiet canary of rank g puts C 2^-(g+1) (inside the clip: kept by a correct one), loud canary of
    rank g puts canary_scale C 2^g (a correct clip makes it C, so the loud ones add a whole number of
    C below the quiet digits). The values pass the privatiser's own clip, sum and noise. Score of a
    canary: the number of released values from which it is decoded as present, read twice: as
    released, and with the noise replayed from the direction stream's seed at the privatiser's
    nominal scale subtracted (both views are functions of the output and public seeds).

    Each sampled canary is one example of the release, a column of its values over the call's
    queries (0 where its group is not). DP-AggZO's joint clip scales that column as a whole, so
    there the groups of one call are disjoint (at most m / Q canaries each): a column then has one
    value, which the joint clip clamps as the scalar clip does."""

    def __init__(self, inner: ScalarRelease, m: int, scale: float, design: np.random.Generator,
                 sample_rate: float, queries: int = 1):
        super().__init__(inner, m, scale, design)
        self.neutralises = True
        per_query = m // queries if isinstance(inner, JointClipPrivatizer) else m
        if per_query < 2:
            raise ConfigError(f"audit.canaries={m} is too few for the coded white box of a joint clip over "
                              f"{queries} queries: use audit.canaries >= {2 * queries}")
        self.quiet = min(QUIET_BITS, per_query // 2)
        self.loud = min(LOUD_BITS, per_query - self.quiet)
        # the most canaries of a group a genuine decode names (all canaries in, Poisson rate q)
        self.max_quiet = int(binom.isf(IMPLAUSIBLE, self.quiet, sample_rate))
        self.max_loud = int(binom.isf(IMPLAUSIBLE, self.loud, sample_rate))
        self.order = design.permutation(m)
        self.cursor = 0
        self.groups: list[np.ndarray] = []  # per released value, [quiet + loud] canary ids (quiet first)

    def _next_group(self) -> np.ndarray:
        size = self.quiet + self.loud
        idx = (self.cursor + np.arange(size)) % self.m
        self.cursor = (self.cursor + size) % self.m
        return self.order[idx]

    def hooked(self, rows, release):
        clip = self.inner.spec.clip
        present = set(self.present.tolist())
        values: list[dict[int, float]] = []   # per query, canary id -> its value there
        for _ in rows:  # the real examples' values are neutralised: not passed on
            group = self._next_group()
            self.groups.append(group)
            row = {i: clip * 2.0 ** -(g + 1) for g, i in enumerate(group[:self.quiet]) if i in present}
            row.update({i: self.scale * clip * 2.0 ** g for g, i in enumerate(group[self.quiet:]) if i in present})
            values.append(row)
        columns = sorted(set().union(*values))   # the call's sampled canaries, one example each
        out = release([[row.get(i, 0.0) for i in columns] for row in values])
        self.releases.append(torch.tensor(out, dtype=torch.float64) * self.inner.spec.expected_batch_size)
        self.steps.append(self.step)
        return out

    def replay_noise(self, seeds, device):
        return replay_scalar_noise(self.inner.spec, self.releases, seeds)

    def scores(self, seeds, device):
        released = torch.cat([r.reshape(-1) for r in self.releases]).double()
        replay = torch.cat([z.reshape(-1) for z in self.replay_noise(seeds, device)]).double()
        clip = self.inner.spec.clip
        views = {"as_released": released, "replayed_noise_removed": released - nominal_noise_scale(self.inner) * replay}
        scores = np.zeros(self.m)
        info = {"design": "coded", "released_values": int(released.numel()), "noise_replayed": False,
                "decoded_quiet": {}, "decoded_loud": {}}
        for name, view in views.items():
            quiet_hits = loud_hits = 0
            for value, group in zip(view.tolist(), self.groups):
                quiet = decode_quiet(value / clip, self.quiet)
                if quiet and len(quiet) <= self.max_quiet:
                    scores[group[quiet]] += 1
                    quiet_hits += len(quiet)
                loud = decode_loud(value / (self.scale * clip), self.loud)
                if loud and len(loud) <= self.max_loud:
                    scores[group[self.quiet + np.asarray(loud)]] += 1
                    loud_hits += len(loud)
            info["decoded_quiet"][name], info["decoded_loud"][name] = quiet_hits, loud_hits
        info["noise_replayed"] = info["decoded_quiet"]["replayed_noise_removed"] > 0
        return scores, info
