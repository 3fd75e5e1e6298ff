"""Short digits runs whose metrics are recorded in `digits_runs.json` (by `record.py`) and compared
by `tests/paper/test_golden.py`: a refactor must give the same numbers for the same seed.

The zeroth-order cases pin their engine (they were recorded before `engine.name=auto` became the
default; the engines agree only to float rounding, which finite differences amplify), and the
first-order ones their clip engine (what `method.clip_engine=auto` picks for digits' CNN today), so
that a change of either `auto` rule does not read as a change of the arithmetic.
Learning rate and clip are pinned per case, so that a later change of a method's defaults does not
read as a change of the method's arithmetic."""
from __future__ import annotations

COMMON = ("logger.mode=disabled", "device=cpu", "train.steps=24", "train.log_every=6", "seed=3",
          "dataset.val_fraction=0")

CASES: dict[str, tuple[str, ...]] = {
    "mezo": ("engine.name=vectorised", "method=mezo", "privacy=none", "method.lr=0.005"),
    "sgd": ("method=sgd", "privacy=none", "method.lr=0.5"),
    "dpzero": ("engine.name=vectorised", "method=dpzero", "method.lr=0.02", "method.clip=1.0"),
    "dp_zo": ("engine.name=vectorised", "method=dp_zo", "method.lr=0.02", "method.clip=0.02"),
    "dp_zo_laplace": ("engine.name=vectorised", "method=dp_zo", "method.noise=laplace", "method.lr=0.02",
                      "method.clip=0.02"),
    "dp_zogd": ("engine.name=vectorised", "method=dp_zogd", "method.lr=200.0", "method.clip=0.01"),
    "pazo_m": ("engine.name=vectorised", "method=pazo_m", "method.lr=0.5", "method.clip=1.0"),
    "pazo_m_inplace": ("method=pazo_m", "engine.name=inplace", "method.lr=0.5", "method.clip=1.0"),
    "pazo_p": ("engine.name=vectorised", "method=pazo_p", "method.lr=0.5", "method.clip=1.0"),
    "pazo_p_inplace": ("method=pazo_p", "engine.name=inplace", "method.lr=0.5", "method.clip=1.0"),
    "pazo_p_prime": ("engine.name=vectorised", "method=pazo_p_prime", "method.lr=0.5", "method.clip=1.0"),
    "pazo_s": ("engine.name=vectorised", "method=pazo_s", "method.lr=0.5", "method.clip=4.0"),
    "dpsgd": ("method=dpsgd", "method.clip_engine=ghost", "method.lr=0.5", "method.clip=1.0"),
    "dpmd": ("method=dpmd", "method.clip_engine=ghost", "method.lr=0.5", "method.clip=1.0"),
    "dope_sgd": ("method=dope_sgd", "method.clip_engine=ghost", "method.lr=0.5", "method.clip=1.0"),
    "gep": ("method=gep", "method.clip_engine=per_example", "method.lr=0.5", "method.clip=0.5"),
}

#: metrics that depend on time, not on the arithmetic
IGNORED = {"s_per_iter"}
