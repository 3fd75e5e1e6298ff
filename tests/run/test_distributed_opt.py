"""Data-parallel runs on the tiny OPT (a causal LM on prompted SST-2, `tests/llm_fixtures.py`): 2 gloo
processes train the parameters one process trains, bit for bit, with the same epsilon, for every
zeroth-order method (their runs as `test_distributed.py` makes them, through distributed_steps.py: in
the default suite, in the session's one launch, `distributed_session.py`)."""
import pytest

from distributed_session import OPT_METHODS, one_launch, opt_specs
from llm_fixtures import write_opt_and_sst2
from test_distributed import _one_and_two, _public_grads_gathered, _same_bits, _steps


@pytest.fixture(scope="module")
def opt_root(tmp_path_factory):
    return write_opt_and_sst2(tmp_path_factory.mktemp("opt"))


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> dict:
    """The session's one 2-process launch (every method on the tiny OPT among its runs)."""
    return one_launch(tmp_path_factory)


def test_two_processes_train_the_tiny_opt_of_one_bit_for_bit(launched):
    """(PAZO-P, P' and S with k = 2: one public gradient computed on each rank, gathered.)"""
    one, two = _one_and_two(launched, opt_specs(launched["root"], list(OPT_METHODS)))
    _same_bits(one, two)
    _public_grads_gathered(two, k=2)


@pytest.mark.slow   # (every zeroth-order method on the tiny OPT under torchrun: over a minute on 2 loaded cores)
def test_two_processes_train_the_tiny_opt_of_one_bit_for_bit_for_every_zeroth_order_method(opt_root, tmp_path):
    specs = opt_specs(opt_root, list(OPT_METHODS))
    _same_bits(_steps(tmp_path, specs, 1), _steps(tmp_path, specs, 2))
