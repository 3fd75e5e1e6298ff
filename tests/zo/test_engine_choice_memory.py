"""`engine.name=auto` on CUDA measures both engines; one that runs out of GPU memory is not picked,
and when both do, the choice ends in one line naming what to lower (issue #60: the error escaped as
torch's traceback). CPU-testable: the measurement is patched to run out of memory as asked."""
from __future__ import annotations


import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pazo.config_schema import EngineSchema
from pazo.errors import ConfigError
from pazo.models import FunctionalModel
from pazo.models.small_cnn import SmallCNN
from pazo.zo import engines

SPEEDS = {"vectorised": 0.002, "inplace": 0.003}


def timed_short_of_memory(out_of_memory: set[str]):
    """`_median_time` whose engines in `out_of_memory` shift the parameters, then run out of memory."""
    def median_time(engine, model, *args):
        if engine.name in out_of_memory:
            with torch.no_grad():
                model.params[0].add_(1.0)   # (stopped mid-step: the parameters left shifted)
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return SPEEDS[engine.name]
    return median_time


@settings(max_examples=20, deadline=None)
@given(st.sets(st.sampled_from(sorted(SPEEDS))), st.integers(1, 4), st.integers(1, 6))
@example({"vectorised", "inplace"}, 2, 4)
@example({"inplace"}, 2, 4)
@example({"vectorised"}, 2, 4)
def test_the_choice_is_the_fastest_engine_that_fits_or_one_line(out_of_memory, queries, batch):
    """The rule, over which engines run out of memory: the fastest that fits is picked; none fits, a
    ConfigError naming method.q and train.batch_size; either way the parameters as they were."""
    model = FunctionalModel(SmallCNN(1, 10, 8, width=4))
    before = [p.detach().clone() for p in model.params]
    sample = (torch.zeros(batch, 1, 8, 8), torch.zeros(batch, dtype=torch.long))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "_ruled_choice", lambda *a: None)   # (as on a GPU with room for both)
        patch.setattr(engines, "_median_time", timed_short_of_memory(out_of_memory))
        fitting = {name: t for name, t in SPEEDS.items() if name not in out_of_memory}
        choose = lambda: engines.choose_engine(EngineSchema(name="auto"), model,  # noqa: E731
                                               zeroth_order=True, queries=queries, sample=sample)
        if fitting:
            assert choose()[0] == min(fitting, key=fitting.get)
        else:
            with pytest.raises(ConfigError, match=r"lower method\.q or train\.batch_size") as refused:
                choose()
            assert "\n" not in str(refused.value) and f"a batch of {batch}" in str(refused.value)
    assert all(torch.equal(p, b) for p, b in zip(model.params, before))
