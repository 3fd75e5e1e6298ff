"""The digests that key the library's noise (`pazo.run.digests`): the same for the same object in any
process, different when any value they cover differs, and what they cannot cover named."""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pazo.run.digests import callable_digest, module_digest, tensors_digest
from conftest import ROOT

#: callables of each kind the digest follows, built the same in any process (`SAMPLES` below runs there too)
SAMPLES = '''
import functools, torch
from torch import nn
from pazo.models.functional import cross_entropy_per_example

def scaled(factor, names=("a", "b")):
    weight = torch.arange(3.0)
    def loss_fn(outputs, targets, kinds=frozenset({"x", "y", "z", "w"})):
        if {"p", "q", "r"} and targets.dtype in kinds:
            return None
        return cross_entropy_per_example(outputs * factor, targets) + weight.sum()
    return loss_fn

class Callable:
    def __init__(self):
        self.margin, self.tags = 0.5, {"b": 1, "a": [1.5, "s"]}
    def __call__(self, outputs, targets):
        return outputs.sum(1) * self.margin

torch.manual_seed(0)
SAMPLED = [scaled(2.0), cross_entropy_per_example, nn.CrossEntropyLoss(reduction="none", label_smoothing=0.1),
           functools.partial(torch.nn.functional.cross_entropy, reduction="none"), lambda o, t: o.sum(1), torch.sub,
           Callable(), Callable().__call__, nn.Sequential(nn.Linear(3, 2), nn.Tanh())]
'''


def sample_digests() -> list[str]:
    namespace = {"__name__": "__main__"}   # (as in the other process: a function's module is part of it)
    exec(SAMPLES, namespace)
    return [callable_digest(fn).hex for fn in namespace["SAMPLED"]] + [module_digest(namespace["SAMPLED"][-1])]


def test_every_digest_is_the_same_in_another_process():
    """(Another process hashes strings and orders sets otherwise: PYTHONHASHSEED differs.)"""
    script = f"import json\nfrom pazo.run.digests import callable_digest, module_digest\n{SAMPLES}\n" \
             "print(json.dumps([callable_digest(f).hex for f in SAMPLED] + [module_digest(SAMPLED[-1])]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    here = sample_digests()
    assert json.loads(out) == here and len(set(here)) == len(here)


def closure_with(value):
    def loss_fn(outputs, targets):
        return outputs * value
    return loss_fn


values = st.one_of(st.floats(allow_nan=False), st.integers(), st.text(max_size=4),
                   st.lists(st.floats(-4, 4), min_size=1, max_size=4).map(torch.tensor))


@settings(max_examples=60, deadline=None)
@given(a=values, b=values)
def test_a_loss_digest_differs_exactly_when_a_value_it_holds_differs(a, b):
    same = type(a) is type(b) and (torch.equal(a, b) if isinstance(a, torch.Tensor) else repr(a) == repr(b))
    one, two = callable_digest(closure_with(a)), callable_digest(closure_with(b))
    assert (one.hex == two.hex) == same and one.unhashed == two.unhashed == []
    partial_a = functools.partial(torch.nn.functional.cross_entropy, label_smoothing=a)
    assert (callable_digest(partial_a).hex == callable_digest(functools.partial(
        torch.nn.functional.cross_entropy, label_smoothing=b)).hex) == same


def test_what_cannot_be_hashed_is_named():
    handle = open(os.devnull)
    try:
        digest = callable_digest(closure_with(handle), "loss_fn")
    finally:
        handle.close()
    assert digest.unhashed == ["loss_fn's closure cell 'value' (TextIOWrapper: an object pazo cannot hash "
                               "deterministically)"]


@settings(max_examples=30, deadline=None)
@given(which=st.sampled_from(["0.weight", "0.bias", "1.scale"]), index=st.integers(0, 5),
       delta=st.sampled_from([1e-30, 1e-15, -1e-8, 2.0]))
def test_a_module_digest_differs_exactly_when_a_parameter_or_buffer_value_differs(which, index, delta):
    def built():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(3, 2, dtype=torch.float64), nn.Module())
        model[1].register_buffer("scale", torch.ones(4, dtype=torch.float64))
        return model
    base, changed = built(), built()
    with torch.no_grad():
        tensor = changed.state_dict(keep_vars=True)[which].view(-1)
        tensor[index % len(tensor)] += delta   # (1e-30 next to 1.0 changes nothing in float64)
    differs = any(not torch.equal(a, b) for a, b in zip(base.state_dict().values(), changed.state_dict().values()))
    assert module_digest(base) == module_digest(built())
    assert (module_digest(base) != module_digest(changed)) == differs


def test_a_module_digest_covers_the_structure_and_the_data_digest_the_bytes():
    torch.manual_seed(0)
    relu = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    torch.manual_seed(0)
    tanh = nn.Sequential(nn.Linear(3, 2), nn.Tanh())
    assert module_digest(relu) != module_digest(tanh)
    x = torch.zeros(4)
    assert tensors_digest(x) != tensors_digest(x.double()) != tensors_digest(x.reshape(2, 2))
