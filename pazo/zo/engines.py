"""Two ways to evaluate per-example losses at perturbed parameters x + s * u_j.

* vectorised: all P perturbed parameter sets are built as one [P, d] block (x + s_p u_{j_p}) and
  evaluated in one (or a few, with `chunk_size`) `torch.func.vmap` calls - fast for small and
  medium models, memory P x d.
* inplace: MeZO's perturb / evaluate / restore on the live parameters - memory about that of
  inference, the reason zeroth-order methods exist for big models.

How the in-place engine works (the interface other code builds on):

* perturb: for a query point (j, s) the live parameters move by s * u_j. A direction is served as
  groups of consecutive parameters; each group is added to the packed parameters' slice with one
  operation (see below), or, to parameters that are not packed, with one fused multi-tensor
  `torch._foreach_add_` over `Directions.iter_groups(j)` (on CUDA a handful of kernels for the
  whole model, not one per parameter, but a view and host time per parameter). Seeded directions
  are regenerated from their seed (pieces of 2^20 entries drawn one after another, per group on
  CUDA); a direction of up to 2^22 elements is drawn once and kept while it is in use. A
  half-precision model is not moved for its queries: each module runs on round(x + s u) of its own
  weights, built as it is called (`half_precision.py`, with the exact shift as its fallback); its
  update takes the direction a piece at a time.
* move: consecutive points of the same direction move by the difference of their scales
  (+lam, then -2 lam: MeZO's order); a new direction first undoes the previous one.
* restore: after the last point the parameters move back by -s * u_j (also when a forward pass
  raises). Restoring adds the negated scale, so parameters come back up to float rounding.
* update: `apply_directional_update` adds -lr * c_j * u_j for each j (the kept direction is
  reused), `apply_flat_update` adds -lr * g for a flat g; both fused in the same way.
* a model's parameters are views of one flat buffer (`FunctionalModel.packed`, float32/float64 on
  one device): a direction held whole as one vector (`Directions.flat`) is then added with a single
  operation, one drawn a group at a time (`Directions.flat_groups`) with one per group.

Both engines return the same [P, B] loss matrix for the same directions (up to float rounding of
the in-place restore), which a test checks: `losses` as one tensor, `loss_rows` as its P rows (the
in-place engine's forwards give rows; a two-point step reads them as Python lists, row by row on
CPU, joined first on an accelerator, and never pays for stacking them on CPU).

`engine.name=auto` (the default) picks one for the model, method and device at start-up
(`choose_engine`) and the run's summary records the choice and why.

A model spread over several devices (`model.device_map`) runs on the in-place engine only: each
direction tensor or update piece is moved to its parameter's device before it is added
(`pazo/zo/placement.py`); `engine.name=vectorised` is refused there with one message.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from pazo.config_schema import ENGINES, EngineSchema
from pazo.errors import ConfigError
from pazo.models.functional import FunctionalModel
from pazo.privacy.device_sum import to_device
from pazo.zo.half_precision import ExactShift, PerturbedForward, Workspace, has_low_precision, parameter_pieces
from pazo.zo.placement import to_param_devices

Point = tuple[int, float]  # (direction index j, scale s): the parameters x + s * u_j


class query_mode:
    """Queries run in eval mode (dropout off) by default. In train mode every forward of the step
    replays the same RNG state (see `_forward`), so the +/- evaluations see the same dropout masks.
    A model whose outputs do not depend on the mode (`FunctionalModel.train_mode_matters`) is left
    as it is. (A plain class: a generator-based context manager costs 20 us a step between forwards.)"""

    def __init__(self, model: FunctionalModel, train: bool):
        self.model = model if model.train_mode_matters else None
        self.train = train

    def __enter__(self):
        if self.model is not None:
            self.was = self.model.module.training
            self.model.set_training(self.train)

    def __exit__(self, *exc):
        if self.model is not None:
            self.model.set_training(self.was)


def never_alone(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of one example as two copies of it (the engines keep the first's losses). torch gives
    a one-row product to a matrix-vector kernel, whose sums run in another order than the matrix
    product of two rows or more: an example's losses would then depend on whether it is alone in
    its batch, and a data-parallel rank's shard of one example would not be one process's run to the
    bit (the tiny OPT's label-word head, at 1 row against 2 or more: 3 of 24 examples' losses an ulp
    apart; its losses agree from 2 rows to 24). Other batches are left as they are."""
    if len(x) != 1:
        return x, y
    return torch.cat([x, x]), torch.cat([y, y])


def _forward(model, x, y, train: bool, seed: int | None, fn):
    if not train or seed is None:
        return fn()
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return fn()


class VectorisedEngine:
    name = "vectorised"

    def __init__(self, chunk_size: int | None = None):
        self.chunk_size = chunk_size

    @torch.no_grad()
    def losses(self, model: FunctionalModel, x, y, directions, points: Sequence[Point],
               train: bool = False, seed: int | None = None) -> torch.Tensor:
        if len(x) == 0:
            return model.zeros((len(points), 0), x.device)
        if len(x) == 1:   # (never a one-row product: `never_alone`)
            return self.losses(model, *never_alone(x, y), directions, points, train, seed)[:, :1]
        if len(model.devices) > 1:
            raise ConfigError("the vectorised engine needs the parameters on one device; they are on "
                              f"{len(model.devices)} (model.device_map): use engine.name=inplace")
        base = model.packed()                  # read only: the blocks below are new tensors
        if base is None:
            base = model.flat_params()
        chunk = self.chunk_size or len(points)
        out = []
        with query_mode(model, train):
            for start in range(0, len(points), chunk):
                part = points[start:start + chunk]
                # the chunk's directions only (each regenerated from its seed): memory bounded by the chunk
                vectors = {j: directions.vector(j) for j in sorted({j for j, _ in part})}
                scales = to_device(torch.tensor([s for _, s in part], dtype=base.dtype), base.device)[:, None]
                block = base + scales * torch.stack([vectors[j] for j, _ in part])  # [P, d]
                stacked = model.split_flat(block)  # per parameter [P, *shape] views
                out.append(_forward(model, x, y, train, seed, lambda: model.stacked_losses(
                    stacked, x, y, randomness="same" if train else "error")))
        return torch.cat(out)

    def loss_rows(self, *args, **kwargs) -> list[torch.Tensor]:
        """The rows of `losses` ([B] each, one per point)."""
        return list(self.losses(*args, **kwargs).unbind())


def shift(model: FunctionalModel, directions, j: int, alpha: float | torch.Tensor, bump_versions: bool = True) -> None:
    """x <- x + alpha * u_j on the live parameters, one fused add per group of parameters (each
    tensor first put on its parameter's device: a no-op on one device). A half-precision model is
    moved a piece of the direction at a time (`parameter_pieces`), as its queries are, so that
    its update never holds a group of the direction either. `bump_versions`: see
    `FunctionalModel.add_to_packed`. alpha may be a 0-dim tensor on the parameters' one device
    (an update computed there, `apply_directional_update`), not on a half-precision model."""
    flat = directions.flat(j)                  # held whole anyway, or None
    if flat is not None and model.add_to_packed(flat, alpha, bump_versions):   # one add for the whole model
        return
    groups = directions.flat_groups(j)         # drawn a group at a time: one add per group
    if groups is not None and model.add_groups_to_packed(groups, alpha, bump_versions):
        return
    params, spread = model.params, len(model.devices) > 1
    if has_low_precision(params):
        for _, _, piece, u in parameter_pieces(directions, j, params):
            piece.add_(u, alpha=alpha)
        return
    for lo, hi, tensors in directions.iter_groups(j):
        group = params[lo:hi]
        tensors = to_param_devices(tensors, group) if spread else tensors
        if isinstance(alpha, torch.Tensor):
            torch._foreach_add_(group, torch._foreach_mul(tensors, alpha))
        else:
            torch._foreach_add_(group, tensors, alpha=alpha)


class InPlaceEngine:
    name = "inplace"

    def __init__(self):
        self.workspace = Workspace()   # the half-precision shift's piece buffers, kept between steps
        self.kept_peak = self.kept_peak_bytes = 0   # the exact restore's most kept entries at once (memory reports)
        self.on_the_fly: tuple[FunctionalModel, PerturbedForward | None] | None = None  # per model, once
        self.half_precision_queries: str | None = None   # how half-precision queries run, and why (summary)

    def losses(self, model: FunctionalModel, x, y, directions, points: Sequence[Point],
               train: bool = False, seed: int | None = None) -> torch.Tensor:
        """The [P, B] loss matrix: `loss_rows` stacked."""
        rows = self.loss_rows(model, x, y, directions, points, train, seed)
        return torch.stack(rows) if rows else model.zeros((0, len(x)), x.device)

    @torch.no_grad()
    def loss_rows(self, model: FunctionalModel, x, y, directions, points: Sequence[Point],
                  train: bool = False, seed: int | None = None) -> list[torch.Tensor]:
        """The per-example losses [B] at each point, in order (the rows of `losses`). The float32 or
        float64 parameters are moved to each point and back whatever the batch, an empty one too: the
        move back leaves them within rounding of where they were, and a data-parallel rank whose shard
        is empty must leave them where the others do (was: untouched there, a few ulps off theirs)."""
        if len(x) == 1:   # (never a one-row product: `never_alone`)
            return [row[:1] for row in self.loss_rows(model, *never_alone(x, y), directions, points, train, seed)]
        if has_low_precision(model.params):   # float16 / bfloat16: bit-exact restore (half_precision.py)
            return (self._exact_losses(model, x, y, directions, points, train, seed) if len(x)
                    else [model.zeros((0,), x.device) for _ in points])
        out, cur_j, cur_s = [], None, 0.0
        with query_mode(model, train):
            try:
                for j, s in points:     # no-grad forwards in between: the restore bumps the versions
                    if j == cur_j:  # MeZO: +s, evaluate, move by (s' - s), evaluate, ...
                        shift(model, directions, j, s - cur_s, bump_versions=False)
                    else:
                        if cur_j is not None:
                            shift(model, directions, cur_j, -cur_s, bump_versions=False)
                        shift(model, directions, j, s, bump_versions=False)
                    cur_j, cur_s = j, s
                    out.append(_forward(model, x, y, train, seed, lambda: model.current_losses(x, y)) if len(x)
                               else model.zeros((0,), x.device))
            finally:
                if cur_j is not None:
                    shift(model, directions, cur_j, -cur_s)
        return out

    def _perturbed_forward(self, model: FunctionalModel) -> PerturbedForward | None:
        """The model's `PerturbedForward` (hooks installed once), or None where it cannot serve."""
        if self.on_the_fly is None or self.on_the_fly[0] is not model:
            forward = PerturbedForward(model.module, model.params, self.workspace)
            if forward.unsupported:
                self.half_precision_queries = f"exact shift: {forward.unsupported} cannot be perturbed on the fly"
                forward = None
            else:
                self.half_precision_queries = "on the fly (perturbed weights built as each module runs)"
            self.on_the_fly = (model, forward)
        return self.on_the_fly[1]

    def _give_up_on_the_fly(self, model: FunctionalModel, forward: PerturbedForward) -> None:
        names = {id(p): n for n, p in model.module.named_parameters()}
        reads = list(dict.fromkeys(forward.direct_reads))
        shown = ", ".join(f"{names.get(id(model.params[i]), f'#{i}')} by {fn}" for i, fn in reads[:3])
        self.half_precision_queries = (f"exact shift: parameters read outside their module's forward ({shown}), "
                                       "which on-the-fly perturbation would leave unperturbed")
        self.on_the_fly = (model, None)

    def _exact_losses(self, model, x, y, directions, points, train, seed) -> list[torch.Tensor]:
        """The same loss rows, the parameters left bit-identical: on the fly (`PerturbedForward`)
        where every parameter's owner runs in the forward (checked on the first query), else with
        `ExactShift` (each point reached from the unperturbed parameters and left back to them)."""
        forward = self._perturbed_forward(model)
        if forward is not None:
            out = []
            with query_mode(model, train):
                for j, s in points:
                    check = not forward.checked
                    with forward.at(directions, j, s, watch=check):
                        out.append(_forward(model, x, y, train, seed, lambda: model.current_losses(x, y)))
                    if check and forward.direct_reads:   # a parameter read outside its module: perturb in place
                        self._give_up_on_the_fly(model, forward)
                        return self._exact_losses(model, x, y, directions, points, train, seed)
                    forward.checked = True
            return out
        shifter, out = ExactShift(model.params, self.workspace), []
        with query_mode(model, train):
            try:
                for j, s in points:
                    shifter.shift(directions, j, s)
                    out.append(_forward(model, x, y, train, seed, lambda: model.current_losses(x, y)))
            finally:
                shifter.restore()
                if shifter.kept_peak > self.kept_peak:
                    self.kept_peak, self.kept_peak_bytes = shifter.kept_peak, shifter.kept_peak_bytes
        return out


def choose_engine(cfg: EngineSchema, model: FunctionalModel, *, zeroth_order: bool, queries: int,
                  sample: tuple[torch.Tensor, torch.Tensor] | None = None, repeats: int = 3) -> tuple[str, str]:
    """The engine for `engine.name` (`cfg`: the run's typed `engine` section; `auto`: picked for the
    model, method and device) and why.

    A zeroth-order method on a model whose parameters are on several devices (`model.device_map`):
    `vectorised` is refused (ConfigError), `auto` picks inplace.

    auto, in order: a first-order method never queries (inplace); a model whose fast kernel runs
    only outside vmap (the LSTM) -> inplace; off the GPU -> inplace (a rule, from paired CPU
    timings of the two engines in one process: the in-place step was faster on both CPU settings,
    see scripts/results/engines_cpu.json; no start-up measurement there, CPU timings on a shared
    machine are too noisy to decide on); the 2 * queries stacked parameter copies of the vectorised
    engine would take over a quarter of the free GPU memory -> inplace; CUDA -> the faster of the
    two in a short measurement (`repeats` timed calls after one warm-up, on `sample`, a batch of
    non-private data; directions from fixed seeds, parameters restored exactly, the run's random
    streams untouched).
    """
    _refuse_vectorised_when_spread(cfg, model, zeroth_order)
    if cfg.name != "auto":
        return cfg.name, f"engine.name={cfg.name}"
    ruled = _ruled_choice(model, zeroth_order, 2 * queries)
    if ruled is not None:
        return ruled
    if sample is None:
        return "inplace", "no sample batch to measure on"
    points = [(j, s) for j in range(queries) for s in (1e-3, -1e-3)]   # only measured here, where they fit
    times = _measure_engines(cfg, model, sample, queries, points, repeats)
    best = min(times, key=times.get)
    return best, "measured " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in times.items()) + \
        f" for {len(points)} queries of a batch of {len(sample[1])}"


def _refuse_vectorised_when_spread(cfg: EngineSchema, model: FunctionalModel, zeroth_order: bool) -> None:
    """One clear message before any compute: the vectorised engine stacks parameters on one device."""
    devices = model.devices
    if len(devices) > 1 and zeroth_order and cfg.name == "vectorised":
        raise ConfigError(f"engine.name=vectorised stacks all parameters into one block, but the model's "
                          f"parameters are on {len(devices)} devices ({', '.join(map(str, devices))}, "
                          "model.device_map): use engine.name=inplace or auto")


def _ruled_choice(model: FunctionalModel, zeroth_order: bool, n_points: int) -> tuple[str, str] | None:
    """`auto`'s choice where a rule decides without measuring (inplace and why), else None; in
    constant memory whatever the number of query points (a huge method.q is refused after the
    choice, by its step's memory estimate)."""
    devices = model.devices
    if not zeroth_order:
        return "inplace", "first-order method: the engine is not used"
    if len(devices) > 1:
        return "inplace", f"parameters on {len(devices)} devices ({', '.join(map(str, devices))}); the " \
                          "vectorised engine needs them on one"
    if getattr(model.module, "fused_outside_vmap", False):
        return "inplace", "the model's fused kernel runs only outside vmap"
    device = model.device
    if device.type != "cuda":
        return "inplace", f"{device.type}: the in-place engine (rule: faster in paired CPU timings; no start-up " \
                          "measurement off the GPU)"
    stacked_mb = n_points * model.dim * model.params[0].element_size() / 2**20
    free_mb = torch.cuda.mem_get_info(device)[0] / 2**20
    if stacked_mb > free_mb / 4:
        return "inplace", f"{n_points} stacked parameter copies ({stacked_mb:.0f} MiB) exceed a quarter of " \
                          f"the free GPU memory ({free_mb:.0f} MiB)"
    return None


def _measure_engines(cfg: EngineSchema, model: FunctionalModel, sample, queries: int, points: list[Point],
                     repeats: int) -> dict[str, float]:
    """Each engine's median time for the points on the sample batch (inf for one that runs out of
    GPU memory; both out of memory: a ConfigError naming what to lower); after each engine the
    parameters are restored exactly (an engine stopped mid-step leaves them shifted) and the GPU
    cache emptied."""
    saved = [p.detach().clone() for p in model.params]
    times = {}
    for engine in (VectorisedEngine(chunk_size=cfg.chunk_size), InPlaceEngine()):
        try:
            times[engine.name] = _median_time(engine, model, sample, queries, points, repeats, saved[0].dtype)
        except torch.cuda.OutOfMemoryError:
            times[engine.name] = float("inf")
        finally:
            with torch.no_grad():
                for p, s in zip(model.params, saved):
                    p.copy_(s)
            torch.cuda.empty_cache()
    if min(times.values()) == float("inf"):
        raise ConfigError(f"neither zeroth-order engine fits one step in GPU memory: both ran out of it on "
                          f"{len(points)} query points ({queries} queries) of a batch of {len(sample[1])}; "
                          "lower method.q or train.batch_size (or give the model a GPU with more free memory)")
    return times


def _median_time(engine, model: FunctionalModel, sample, queries: int, points: list[Point], repeats: int,
                 dtype: torch.dtype) -> float:
    """The median of `repeats` synchronised timings of one engine's losses, after one warm-up call."""
    from pazo.zo.directions import SeededDirections
    x, y = sample
    device = model.device
    runs = []
    for _ in range(repeats + 1):
        directions = SeededDirections(model.shapes, range(queries), device=device, dtype=dtype)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        engine.losses(model, x, y, directions, points)
        torch.cuda.synchronize(device)
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs[1:])


def build_engine(cfg: EngineSchema, choice: str | None = None):
    """The engine named by `cfg.name`; for `auto`, `choice` is the engine `choose_engine` picked."""
    name = choice if cfg.name == "auto" else cfg.name
    if name == "vectorised":
        return VectorisedEngine(chunk_size=cfg.chunk_size)
    if name == "inplace":
        return InPlaceEngine()
    if name == "auto":
        raise ValueError("engine.name=auto needs the choice of choose_engine")
    raise ValueError(f"unknown engine {cfg.name!r}; choices: {', '.join(ENGINES)}")


@torch.no_grad()
def apply_directional_update(model: FunctionalModel, directions, coefs: Sequence[float] | torch.Tensor,
                             lr: float) -> None:
    """x <- x - lr * sum_j coefs[j] * u_j, regenerating each u_j (or reusing the kept one). coefs
    as a tensor on the parameters' device: each scale -lr * c_j is formed there in float64, as the
    Python one is, and never read back (every u_j is added, a zero coefficient too)."""
    if isinstance(coefs, torch.Tensor):
        for j, alpha in enumerate((coefs.double() * -lr).unbind()):
            shift(model, directions, j, alpha)
        return
    for j, c in enumerate(coefs):
        if c != 0.0:
            shift(model, directions, j, -lr * c)


@torch.no_grad()
def apply_flat_update(model: FunctionalModel, flat: torch.Tensor, lr: float) -> None:
    """x <- x - lr * g for a flat [d] vector g (made on one device; each piece is put on its
    parameter's device)."""
    if model.add_to_packed(flat, -lr):
        return
    torch._foreach_add_(model.params, to_param_devices(model.split_flat(flat), model.params), alpha=-lr)
