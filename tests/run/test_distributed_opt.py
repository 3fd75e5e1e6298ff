"""Data-parallel runs on the tiny OPT (a causal LM on prompted SST-2, `tests/llm_fixtures.py`): 2 gloo
processes train the parameters one process trains, bit for bit, with the same epsilon, for the
zeroth-order methods (their runs as `test_distributed.py` makes them, through distributed_steps.py)."""
import pytest

from llm_fixtures import write_opt_and_sst2
from test_distributed import _same_bits, _steps

#: the tiny OPT on SST-2 as the LLM tests run it (test_llm.py's `run_cfg`): a given sigma, nothing calibrated
OPT = ("model=hf_causal_lm", "model.attention=eager", "dataset=sst2", "dataset.n_train=24", "dataset.n_val=6",
       "train.batch_size=8", "engine.name=inplace")
PUBLIC = ("dataset.public_source=split", "dataset.public_size=8", "method.public_batch_size=4")
#: every zeroth-order method, with what it needs on the tiny OPT (public data; PAZO-P/S: k=2 directions)
METHODS = {"mezo": ("privacy=none",), "dpzero": (), "dp_zo": (), "dp_zo_laplace": ("method.noise=laplace",
           "privacy.delta=0"), "dp_zogd": (), "dp_aggzo": (), "pazo_m": PUBLIC, "pazo_p": (*PUBLIC, "method.k=2"),
           "pazo_p_prime": (*PUBLIC, "method.k=2"), "pazo_s": (*PUBLIC, "method.k=2")}
#: the default suite's: PAZO-S, whose public pass and candidates' losses are exchanged beside the release
QUICK = ["pazo_s"]


@pytest.fixture(scope="module")
def opt_root(tmp_path_factory):
    return write_opt_and_sst2(tmp_path_factory.mktemp("opt"))


def _specs(root, names: list[str]) -> list[str]:
    """distributed_steps.py's specs: each method on the tiny OPT (`name:override,...`)."""
    def spec(name: str) -> str:
        method = "dp_zo" if name == "dp_zo_laplace" else name
        sigma = () if "privacy=none" in METHODS[name] else ("privacy.sigma=5.0",)
        return f"{method}:" + ",".join([*OPT, f"model.path={root / 'opt'}", f"dataset.root={root}", *sigma,
                                        *METHODS[name]])
    return [spec(name) for name in names]


def test_two_processes_train_the_tiny_opt_of_one_bit_for_bit(opt_root, tmp_path):
    specs = _specs(opt_root, QUICK)
    _same_bits(_steps(tmp_path, specs, 1), _steps(tmp_path, specs, 2))


@pytest.mark.slow   # (every zeroth-order method on the tiny OPT: over a minute on 2 loaded cores)
def test_two_processes_train_the_tiny_opt_of_one_bit_for_bit_for_every_zeroth_order_method(opt_root, tmp_path):
    specs = _specs(opt_root, list(METHODS))
    _same_bits(_steps(tmp_path, specs, 1), _steps(tmp_path, specs, 2))
