"""The library's model and loss are objects of the kinds it takes (issue #60, round three's
catalogue: `private_zo(model="mlp", ...)` ended in `AttributeError: 'str' object has no attribute
'parameters'` from inside pazo): anything else is one ConfigError naming the argument, before any
step."""
from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_library import Tiny, tiny_data
from test_library_faults import QUICK

from pazo.errors import ConfigError
from pazo.models.functional import cross_entropy_per_example
from pazo.private import private_zo

NOT_CALLABLE = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=60),
                         st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(),
                                                                             max_size=2))
NOT_A_MODULE = st.one_of(NOT_CALLABLE, st.just(lambda x: x), st.just(print))


@settings(max_examples=15, deadline=None)
@given(NOT_A_MODULE)
@example("mlp")   # the catalogue's case
def test_a_model_that_is_not_a_module_is_named(model):
    with pytest.raises(ConfigError) as err:
        private_zo(model, cross_entropy_per_example, tiny_data(0), **QUICK)
    assert str(err.value).startswith(f"model must be a torch.nn.Module, got a {type(model).__name__}: ")
    assert "\n" not in str(err.value)


@settings(max_examples=15, deadline=None)
@given(NOT_CALLABLE)
@example(None)
def test_a_loss_that_cannot_be_called_is_named(loss_fn):
    with pytest.raises(ConfigError) as err:
        private_zo(Tiny(0), loss_fn, tiny_data(0), **QUICK)
    assert str(err.value).startswith(f"loss_fn must be callable as loss_fn(outputs, targets), got a "
                                     f"{type(loss_fn).__name__}: ")


def test_a_long_value_is_cut_in_the_message():
    with pytest.raises(ConfigError) as err:
        private_zo("m" * 500, cross_entropy_per_example, tiny_data(0), **QUICK)
    assert len(str(err.value)) < 120


def _empty(form: str):
    """No examples, as each form the library takes them (tensors, a Dataset, a TensorSplit)."""
    import torch
    from torch.utils.data import TensorDataset

    from pazo.data.base import TensorSplit

    inputs, labels = torch.zeros(0, 5, dtype=torch.float64), torch.zeros(0, dtype=torch.long)
    return {"tensors": (inputs, labels), "dataset": TensorDataset(inputs, labels),
            "split": TensorSplit(inputs, labels)}[form]


@settings(max_examples=12, deadline=None)
@given(form=st.sampled_from(["tensors", "dataset", "split"]), argument=st.sampled_from(["train_data", "public"]),
       batch_size=st.integers(1, 64))
@example(form="tensors", argument="train_data", batch_size=32)   # said "batch_size=32 exceeds the 0 private ..."
def test_empty_data_is_said_to_be_empty_in_every_form(form, argument, batch_size):
    data = {"train_data": tiny_data(0), "public": tiny_data(1), argument: _empty(form)}
    with pytest.raises(ConfigError) as err:
        private_zo(Tiny(0), cross_entropy_per_example, data["train_data"], public=data["public"],
                   **{**QUICK, "method": "pazo_m", "batch_size": batch_size})
    assert str(err.value) == f"{argument} is empty"
