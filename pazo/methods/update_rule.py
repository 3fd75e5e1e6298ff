"""How a step's privatised update becomes a change of the parameters, for every method: the step
size lr * schedule(t), from the step number t alone (public), and the optimiser, a function of the
released updates alone (post-processing: it changes no privacy guarantee).

A method computes its noisy update as it always has and hands it over (`Method.apply_update`,
`Method.descend`). With `optimizer=sgd` each part is applied at once, exactly as before: a
zeroth-order update along directions regenerates them and never holds the whole update. Momentum
and Adam need the update as one vector: the parts are summed into a flat buffer of the model's
size (one more vector of d numbers, plus one (momentum) or two (Adam) of state), transformed and
applied once the step is done (`UpdateRule.apply_pending`).

A step is taken inside `UpdateRule.held`: under SGD its parts are kept, in order, and applied when
the step returns and its statistics are checked (`Method.take_step`), so that a step that fails
(a plugin's statistic that is not one number) leaves the parameters as they were. The parts are
applied to the same values in the same order as at once, so the trained model is bit for bit the
same; a part a method adds to the parameters itself (`pending_parts` None) first applies the
kept ones."""
from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pazo.config_schema import OPTIMIZERS, SCHEDULES  # noqa: F401 (the choices, named where they are checked)
from pazo.config_schema import OptimizerSchema, ScheduleSchema
from pazo.models.functional import FunctionalModel
from pazo.zo.engines import apply_directional_update, apply_flat_update


@dataclass
class StepSchedule(ScheduleSchema):
    """The factor of the step size at step t (1-based) of `total` steps: lr_t = lr * factor(t), as
    the `schedule` section's keys say (warmup, cosine: linear from 1/warmup_steps to 1 over the
    first steps; step: multiplied by gamma every decay_every steps; cosine: decaying towards final,
    reached after the last step)."""

    total: int = 1

    @classmethod
    def of(cls, section: ScheduleSchema | None, total: int) -> StepSchedule:
        """The schedule of a run's typed `schedule` section (None: constant)."""
        return cls(**vars(section or ScheduleSchema()), total=total)

    @property
    def is_default(self) -> bool:
        return self.name == "constant"

    def factor(self, t: int) -> float:
        if self.name == "constant":
            return 1.0
        if self.name == "inv_sqrt":
            return 1.0 / math.sqrt(t)
        if self.name == "step":
            return self.gamma ** ((t - 1) // self.decay_every)
        if t <= self.warmup_steps:
            return t / self.warmup_steps
        if self.name == "warmup":
            return 1.0
        progress = (t - 1 - self.warmup_steps) / max(1, self.total - self.warmup_steps)
        return self.final + (1 - self.final) * 0.5 * (1 + math.cos(math.pi * progress))

    def describe(self) -> dict:
        keys = {"constant": (), "inv_sqrt": (), "warmup": ("warmup_steps",), "step": ("decay_every", "gamma"),
                "cosine": ("warmup_steps", "final")}[self.name]
        return {"name": self.name, **{k: getattr(self, k) for k in keys}}


class Momentum:
    """Heavy-ball momentum as torch.optim.SGD(momentum=beta) has it: buf = g at the first step,
    then buf = beta buf + g; the parameters move by -lr buf."""

    def __init__(self, beta: float = 0.9):
        self.beta, self.buf = beta, None

    def direction(self, g: torch.Tensor) -> torch.Tensor:
        self.buf = g.clone() if self.buf is None else self.buf.mul_(self.beta).add_(g)
        return self.buf

    def state_dict(self) -> dict:
        return {"buf": self.buf}

    def load_state_dict(self, state: dict) -> None:
        self.buf = state["buf"]


class Adam:
    """Adam as torch.optim.Adam has it (no weight decay): bias-corrected first and second moments,
    the parameters moving by -lr m_hat / (sqrt(v_hat) + eps)."""

    def __init__(self, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8):
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        self.steps, self.m, self.v = 0, None, None

    def direction(self, g: torch.Tensor) -> torch.Tensor:
        if self.m is None:
            self.m, self.v = torch.zeros_like(g), torch.zeros_like(g)
        self.steps += 1
        self.m.mul_(self.beta1).add_(g, alpha=1 - self.beta1)
        self.v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
        denom = (self.v.sqrt() / math.sqrt(1 - self.beta2 ** self.steps)).add_(self.eps)
        return self.m / denom / (1 - self.beta1 ** self.steps)

    def state_dict(self) -> dict:
        return {"steps": self.steps, "m": self.m, "v": self.v}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.m, self.v = int(state["steps"]), state["m"], state["v"]


def make_optimizer(section: OptimizerSchema) -> Momentum | Adam | None:
    """The optimiser of a run's typed `optimizer` section (None: plain SGD, the default)."""
    if section.name == "momentum":
        return Momentum(section.beta)
    if section.name == "adam":
        return Adam(section.beta1, section.beta2, section.eps)
    return None


def describe_optimizer(section: OptimizerSchema) -> dict:
    keys = {"sgd": (), "momentum": ("beta",), "adam": ("beta1", "beta2", "eps")}[section.name]
    return {"name": section.name, **{k: getattr(section, k) for k in keys}}


class UpdateRule:
    """A method's step size and optimiser. `lr_at(t)` is lr * schedule(t); `flat` and `directional`
    take the parts of a step's update (x <- x - lr_t sum of parts); `apply_pending` moves the
    parameters by the optimiser's transform of their sum (nothing to do under SGD, which applied
    each part at once)."""

    def __init__(self, lr: float, schedule: StepSchedule | None = None, optimizer_cfg: OptimizerSchema | None = None):
        self.lr, self.schedule = lr, schedule or StepSchedule()
        self.optimizer_cfg = optimizer_cfg or OptimizerSchema()
        self.optimizer = make_optimizer(self.optimizer_cfg)
        self.pending: torch.Tensor | None = None
        self._held: list | None = None   # inside `held`, under SGD: the step's parts, not yet applied

    @property
    def is_default(self) -> bool:
        return self.schedule.is_default and self.optimizer is None

    def lr_at(self, step: int) -> float:
        return self.lr * self.schedule.factor(step)

    def describe(self) -> dict:
        """The summary's record of a rule that is not the default (constant, sgd): {} for the default."""
        if self.is_default:
            return {}
        out = {"schedule": self.schedule.describe(), "optimizer": describe_optimizer(self.optimizer_cfg)}
        if self.optimizer is not None:
            out["materialised_update"] = ("the optimiser holds the step's whole update and its state as vectors "
                                          "of the model's size (directional updates are not regenerated)")
        return out

    @contextlib.contextmanager
    def held(self):
        """Within, the step's parts under SGD are kept and applied in order on leaving; an error
        inside drops them and the pending update: the parameters stay as they were."""
        self._held = []
        try:
            yield
        except BaseException:
            self._held, self.pending = None, None
            raise
        self.release_held()
        self._held = None

    def release_held(self) -> None:
        """Apply the kept parts, in the order they were handed over (inside `held`; else nothing)."""
        held, self._held = self._held, ([] if self._held is not None else None)
        for part in held or ():
            part()

    def _sgd_part(self, part) -> None:
        """An SGD part of the update: kept inside `held`, else applied at once."""
        if self._held is not None:
            self._held.append(part)
        else:
            part()

    def flat(self, model: FunctionalModel, g: torch.Tensor, lr: float, weight: float = 1.0) -> None:
        """The part x <- x - lr * weight * g of the step's update (`g` is read when it is applied:
        under SGD, when the step returns)."""
        if self.optimizer is None:
            self._sgd_part(functools.partial(apply_flat_update, model, g, lr * weight))   # (lr * 1.0 is lr)
            return
        self.buffer(model).add_(g.to(self.pending.device), alpha=weight)

    def directional(self, model: FunctionalModel, directions, coefs: Sequence[float] | torch.Tensor,
                    lr: float) -> None:
        """The part x <- x - lr * sum_j coefs[j] u_j: regenerated and added in place under SGD, else
        each u_j made whole and summed into the pending update."""
        if self.optimizer is None:
            self._sgd_part(functools.partial(apply_directional_update, model, directions, coefs, lr))
            return
        buffer = self.buffer(model)
        for j in range(directions.count):
            buffer.add_(directions.vector(j).to(buffer.device) * coefs[j])

    def pending_parts(self, model: FunctionalModel) -> list[torch.Tensor] | None:
        """Views of the pending update shaped as the parameters (None under SGD): a part drawn
        parameter by parameter (DP-ZOGD's isotropic noise) is added there; under SGD, into the
        parameters, after the parts handed over so far (applied now)."""
        if self.optimizer is None:
            self.release_held()
            return None
        return [piece.view(shape) for piece, shape in zip(self.buffer(model).split(model.numels), model.shapes)]

    def buffer(self, model: FunctionalModel) -> torch.Tensor:
        if self.pending is None:
            p = model.params[0]
            dtype = torch.promote_types(p.dtype, torch.float32)
            self.pending = torch.zeros(model.dim, dtype=dtype, device=model.device)
        return self.pending

    @torch.no_grad()
    def apply_pending(self, model: FunctionalModel, lr: float) -> None:
        """x <- x - lr * optimiser(sum of the step's parts), once (a step with no part leaves the
        parameters and the optimiser's state as they are); under SGD, the parts kept so far."""
        self.release_held()
        if self.pending is None:
            return
        g, self.pending = self.pending, None
        apply_flat_update(model, self.optimizer.direction(g).to(model.params[0].dtype), lr)

    def state_dict(self) -> dict:
        """The optimiser's state, for the checkpoint (empty under SGD)."""
        return {} if self.optimizer is None else self.optimizer.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        if self.optimizer is not None and state:
            self.optimizer.load_state_dict(state)
