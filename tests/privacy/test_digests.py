"""The digests that key the library's noise (`pazo.run.digests`): the same for the same object in any
process, different when any value they cover differs, and what they cannot cover named."""
from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import json
import os
import subprocess
import sys
import types

import numpy as np
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from torch import nn

from pazo.run import digests
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
    return [callable_digest(fn).hex for fn in namespace["SAMPLED"]] + [module_digest(namespace["SAMPLED"][-1]).hex]


def test_every_digest_is_the_same_in_another_process():
    """(Another process hashes strings and orders sets otherwise: PYTHONHASHSEED differs.)"""
    script = f"import json\nfrom pazo.run.digests import callable_digest, module_digest\n{SAMPLES}\n" \
             "print(json.dumps([callable_digest(f).hex for f in SAMPLED] + [module_digest(SAMPLED[-1]).hex]))"
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
@example(a=torch.tensor([0.0]), b=torch.tensor([-0.0]))   # (equal as numbers, not bit for bit: 1 / x differs)
def test_a_loss_digest_differs_exactly_when_a_value_it_holds_differs(a, b):
    same = canonical(a) == canonical(b)
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


# ------------------------------------------------------------- the module-level globals they read

#: a user's module (exec'd below with its own globals, as a script's or a notebook's): a loss that reads
#: GLOBAL, one that reads it through a helper function, and a model whose forward reads it through a method
USER_MODULE = '''
import torch
from torch import nn

def loss_fn(outputs, targets):
    used = GLOBAL
    return outputs.sum(1) * 0.0

def helper():
    return [GLOBAL for _ in range(1)]

def loss_through_helper(outputs, targets):
    return outputs.sum(1) * 0.0 + len(helper())

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(3, 2)

    def forward(self, x):
        return self.layer(x) * self.factor()

    def factor(self):
        used = GLOBAL
        return 1.0

class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Net()

    def forward(self, x):
        return self.inner(x)
'''


def user_module(value) -> dict:
    """USER_MODULE's namespace with GLOBAL bound to `value`."""
    namespace = {"__name__": "user_module", "GLOBAL": value}
    exec(USER_MODULE, namespace)
    return namespace


plain = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4), st.binary(max_size=4))
tensors = st.tuples(st.lists(st.floats(-4, 4, width=32), min_size=0, max_size=4),
                    st.sampled_from([torch.float32, torch.float64, torch.int64])).map(
    lambda pair: torch.tensor(pair[0], dtype=torch.float64).to(pair[1]))
arrays = tensors.map(lambda tensor: tensor.numpy().copy())
global_values = st.recursive(st.one_of(plain, tensors, arrays), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
    st.dictionaries(st.text(max_size=3), inner, max_size=3)), max_leaves=6)


def canonical(value):
    """What decides a value, bit for bit: its type and repr, a tensor's or array's dtype, shape and bytes."""
    if isinstance(value, torch.Tensor):
        return "tensor", str(value.dtype), tuple(value.shape), value.numpy().tobytes()
    if isinstance(value, np.ndarray):
        return "ndarray", str(value.dtype), value.shape, value.tobytes()
    if isinstance(value, (list, tuple)):
        return type(value).__name__, tuple(canonical(item) for item in value)
    if isinstance(value, dict):
        return "dict", tuple(sorted((key, canonical(item)) for key, item in value.items()))
    return type(value).__name__, repr(value)


def digests_of(namespace: dict) -> list:
    """The digests of each callable and model of a user module that reads GLOBAL."""
    return [callable_digest(namespace["loss_fn"], "loss_fn"), callable_digest(namespace["loss_through_helper"]),
            module_digest(namespace["Net"]()), module_digest(namespace["Outer"]())]


@settings(max_examples=80, deadline=None)
@given(a=global_values, b=global_values)
@example(a=2.0, b=3.0)
@example(a=torch.ones(3), b=torch.ones(3).double())
@example(a=np.zeros(2), b=np.zeros(3))
@example(a={"w": torch.zeros(2)}, b={"w": torch.tensor([0.0, 1e-30])})
def test_a_digest_differs_exactly_when_a_global_the_loss_or_the_forward_reads_differs(a, b):
    same = canonical(a) == canonical(b)
    one, two = digests_of(user_module(a)), digests_of(user_module(b))
    assert all(d.unhashed == [] for d in one + two)
    assert [d.hex for d in one] == [d.hex for d in digests_of(user_module(a))]   # (the same value: the same digest)
    assert all((x.hex == y.hex) == same for x, y in zip(one, two))


def test_a_global_rebound_between_two_digests_of_the_same_function_changes_it():
    namespace = user_module(2.0)
    loss, model = namespace["loss_fn"], namespace["Net"]()
    before = callable_digest(loss).hex, module_digest(model).hex
    namespace["GLOBAL"] = 3.0
    assert callable_digest(loss).hex != before[0] and module_digest(model).hex != before[1]


def test_modules_and_classes_are_named_and_functions_followed_with_their_own_globals():
    import math
    one, two, other = user_module(math), user_module(math), user_module(np)
    assert digests_of(one) == digests_of(two) and digests_of(one)[0].hex != digests_of(other)[0].hex
    linear, tanh = (callable_digest(user_module(cls)["loss_fn"]).hex for cls in (nn.Linear, nn.Tanh))
    assert linear != tanh
    inner_a, inner_b = user_module(1), user_module(2)
    assert callable_digest(user_module(inner_a["helper"])["loss_fn"]).hex != \
        callable_digest(user_module(inner_b["helper"])["loss_fn"]).hex   # a global function's own global


def test_a_recursive_global_function_is_hashed_once():
    namespace = {"__name__": "user_module"}
    exec("def walk(n):\n    return 0 if n == 0 else walk(n - 1) + DEPTH\nDEPTH = 1", namespace)
    first = callable_digest(namespace["walk"])
    namespace["DEPTH"] = 2
    assert first.unhashed == [] and callable_digest(namespace["walk"]).hex != first.hex


def test_a_global_that_cannot_be_hashed_is_named():
    handle = open(os.devnull)
    try:
        namespace = user_module(handle)
        loss, model = callable_digest(namespace["loss_fn"], "loss_fn"), module_digest(namespace["Net"]())
    finally:
        handle.close()
    why = "(TextIOWrapper: an object pazo cannot hash deterministically)"
    assert loss.unhashed == [f"loss_fn's global 'GLOBAL' {why}"]
    assert model.unhashed == [f"model's Net.factor's global 'GLOBAL' {why}"]


def test_past_the_bound_on_objects_a_global_is_named_not_walked(monkeypatch):
    monkeypatch.setattr(digests, "MAX_OBJECTS", 50)
    assert callable_digest(user_module(list(range(30)))["loss_fn"]).unhashed == []
    digest = callable_digest(user_module(list(range(80)))["loss_fn"], "loss_fn")
    assert len(digest.unhashed) == 1 and "more than 50 objects" in digest.unhashed[0]


class Attributed(nn.Module):
    """A model whose forward reads an instance attribute through a method, and holds one it never reads."""

    def __init__(self, value, unread=None):
        super().__init__()
        torch.manual_seed(0)
        self.layer, self.value, self.unread = nn.Linear(3, 2), value, unread

    def forward(self, x):
        return self.layer(x) * self.factor()

    def factor(self):
        used = self.value   # noqa: F841  (read: it could decide the output)
        return 1.0


@settings(max_examples=40, deadline=None)
@given(a=global_values, b=global_values)
@example(a=1.0, b=2.0)
def test_a_model_digest_differs_exactly_when_an_attribute_its_forward_reads_differs(a, b):
    one, two = module_digest(Attributed(a)), module_digest(Attributed(b))
    assert one == module_digest(Attributed(a)) and one.unhashed == two.unhashed == []
    assert (one.hex == two.hex) == (canonical(a) == canonical(b))


def test_an_attribute_the_forward_does_not_name_is_not_hashed():
    with open(os.devnull) as handle:
        assert module_digest(Attributed(1.0, unread=handle)) == module_digest(Attributed(1.0, unread=None))
        assert module_digest(Attributed(handle)).unhashed == [
            "model's Attributed.value (TextIOWrapper: an object pazo cannot hash deterministically)"]


@settings(max_examples=10, deadline=None)
@given(kind=st.sampled_from([list, set, dict.fromkeys]), extra=st.integers(1, 100))
def test_past_the_bound_any_container_of_a_global_is_named_once(kind, extra):
    digests.MAX_OBJECTS, before = 50, digests.MAX_OBJECTS
    try:
        digest = callable_digest(user_module(kind(range(50 + extra)))["loss_fn"], "loss_fn")
    finally:
        digests.MAX_OBJECTS = before
    assert len(digest.unhashed) == 1 and "loss_fn's global 'GLOBAL'" in digest.unhashed[0]
    assert "more than 50 objects" in digest.unhashed[0]


# ------------------------------------------------- config objects, the user's modules, the library's modules

class Kind(enum.Enum):
    SMALL = "small"
    LARGE = 2


@dataclasses.dataclass
class Inner:
    value: object = None


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """A config object as a researcher's loss reads it: a field, a nested dataclass, an enum."""
    inner: Inner
    kind: Kind = Kind.SMALL
    extra: object = 0.0


#: a user's module (a real module object, as `import settings` gives): a helper reading its own global
SETTINGS_MODULE = '''
def helper():
    return OTHER
OTHER = 0
'''

#: a loss that reads a global config object and an attribute of the user's module `settings`
READING_LOSS = '''
def loss_fn(outputs, targets):
    used = (CONFIG, settings.SCALE, settings.helper())
    return outputs.sum(1) * 0.0
'''


def settings_module(scale, other=0) -> types.ModuleType:
    """A user module `settings` (no file: as one made in a notebook) holding SCALE and OTHER."""
    module = types.ModuleType("settings")
    exec(SETTINGS_MODULE, vars(module))
    module.SCALE, module.OTHER = scale, other
    with open(os.devnull) as handle:   # an attribute the code never names: not hashed, so not unhashed
        module.unread = handle
    return module


def reading_loss(config, module):
    namespace = {"__name__": "user_loss", "CONFIG": config, "settings": module}
    exec(READING_LOSS, namespace)
    return namespace["loss_fn"]


text = st.text("abcxyz", max_size=3)   # (no "$": an OmegaConf interpolation is tested on its own)
config_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), text)
config_values = st.recursive(config_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)), max_leaves=6)


def omegaconf_global(value):
    return OmegaConf.create({"value": value, "copy": "${value}"})


def dataclass_global(value):
    return Config(Inner(value), Kind.LARGE if isinstance(value, bool) else Kind.SMALL, extra=[value])


@settings(max_examples=60, deadline=None)
@given(where=st.sampled_from(["dataclass", "omegaconf", "module attribute", "module's function's global"]),
       a=config_values, b=config_values)
@example(where="dataclass", a=1.0, b=2.0)
@example(where="omegaconf", a={"t": 1}, b={"t": 1.0})
@example(where="module attribute", a=2.0, b=3.0)
@example(where="module's function's global", a="a", b="b")
def test_a_digest_differs_exactly_when_a_config_object_or_a_user_module_attribute_the_loss_reads_differs(
        where, a, b):
    def loss(value):
        config = {"dataclass": dataclass_global, "omegaconf": omegaconf_global}.get(where, lambda v: None)(value)
        module = settings_module(scale=value if where == "module attribute" else 1.0,
                                 other=value if where == "module's function's global" else 0)
        return reading_loss(config, module)
    one, again, two = (callable_digest(loss(value), "loss_fn") for value in (a, a, b))
    assert one.unhashed == two.unhashed == []
    assert one.hex == again.hex   # (equal values in other objects: the same digest)
    assert (one.hex == two.hex) == (canonical(a) == canonical(b))


def test_an_omegaconf_config_is_hashed_by_its_resolved_values_and_a_broken_one_named():
    def digest(config):
        return callable_digest(reading_loss(config, settings_module(1.0)), "loss_fn")
    base = digest(OmegaConf.create({"a": 1, "b": "${a}"}))
    assert base == digest(OmegaConf.create({"a": 1, "b": 1}))   # what the code reads: the resolved value
    assert base.hex != digest(OmegaConf.create({"a": 2, "b": "${a}"})).hex
    broken = digest(OmegaConf.create({"b": "${nowhere}"}))
    assert broken.unhashed == ["loss_fn's global 'CONFIG' (DictConfig: a config that cannot be resolved "
                               "(InterpolationKeyError))"]


def test_a_library_module_counts_by_its_name_and_version(monkeypatch):
    namespace = {"__name__": "user_loss"}
    exec("import numpy as np\ndef loss_fn(outputs, targets):\n    return outputs * np.pi", namespace)
    before = callable_digest(namespace["loss_fn"])
    assert digests.library_version("numpy") == np.__version__ and digests.library_version("json").startswith("python")
    assert all(digests.is_library_module(module) for module in (np, sys, torch.ops, torch.classes, torch._C._nn))
    assert not digests.is_library_module(types.ModuleType("settings"))   # (made in code: the user's)
    monkeypatch.setattr(digests, "library_version", lambda name: "another version")
    assert before.unhashed == [] and callable_digest(namespace["loss_fn"]).hex != before.hex


def test_a_module_the_loss_imports_when_it_runs_is_covered_as_loaded_or_named_when_not(tmp_path, monkeypatch):
    name = f"user_settings_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text("SCALE = 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace = {"__name__": "user_loss"}
    exec(f"def loss_fn(outputs, targets):\n    import {name}\n    return outputs * {name}.SCALE", namespace)
    not_loaded = callable_digest(namespace["loss_fn"], "loss_fn")
    assert not_loaded.unhashed == [f"loss_fn's import of {name} (a module not loaded yet: its values are read only "
                                   "when the code runs)"]
    module = importlib.import_module(name)
    monkeypatch.delitem(sys.modules, name)   # (gone again after the test)
    monkeypatch.setitem(sys.modules, name, module)
    loaded = callable_digest(namespace["loss_fn"], "loss_fn")
    module.SCALE = 2.0
    assert loaded.unhashed == [] and callable_digest(namespace["loss_fn"]).hex != loaded.hex


#: a user's module (a file of one's own) whose loss reads a dataclass, an enum, an OmegaConf config and an
#: attribute of another module of the user's, imported at the top and inside the loss
CONFIG_MODULE = '''
import dataclasses, enum
from omegaconf import OmegaConf
import {other}

class Kind(enum.Enum):
    SMALL = "small"

@dataclasses.dataclass
class Config:
    temperature: float = 2.0
    kind: Kind = Kind.SMALL
    tags: dict = dataclasses.field(default_factory=lambda: {{"z": 1, "a": [1, "x"], "m": {{"q": 2.0}}}})

CONFIG = Config()
SETTINGS = OmegaConf.create({{"scale": 1.5, "read": "${{scale}}", "nested": {{"b": [1, 2], "a": "s"}}}})

def loss_fn(outputs, targets):
    import {other} as again
    return outputs * CONFIG.temperature * SETTINGS.read * {other}.SCALE * again.helper()
'''


def test_config_objects_and_user_modules_digest_the_same_in_another_process(tmp_path):
    """(Another process hashes strings and orders sets and dicts' iteration otherwise: PYTHONHASHSEED differs.)"""
    name, other = f"user_config_{os.getpid()}", f"user_other_{os.getpid()}"
    (tmp_path / f"{other}.py").write_text("SCALE = 3.0\ndef helper():\n    return OTHER\nOTHER = 4.0\n")
    (tmp_path / f"{name}.py").write_text(CONFIG_MODULE.format(other=other))
    script = f"import {name}\nfrom pazo.run.digests import callable_digest\nprint(callable_digest({name}.loss_fn).hex)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "PYTHONHASHSEED": "4321"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    sys.path.insert(0, str(tmp_path))
    try:
        here = callable_digest(importlib.import_module(name).loss_fn)
    finally:
        sys.path.remove(str(tmp_path))
        for module in (name, other):
            sys.modules.pop(module, None)
    assert here.unhashed == [] and out.strip() == here.hex
