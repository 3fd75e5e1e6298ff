"""A zeroth-order step kept on the device (`releases_on_device`: on CUDA, float32 or float64
parameters on one device) is the host path's step, and reads nothing back to the host while
it runs. Both are checked on CPU, with the device path switched on (`method.on_device`), for every
zeroth-order method; a test marked gpu checks on CUDA that the step makes no synchronising call."""
from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from pazo.data.base import TensorSplit
from pazo.methods import method_names
from pazo.methods.base import host_stats, releases_on_device
from pazo.models.functional import FunctionalModel
from pazo.models.small_cnn import SmallCNN

#: calls that copy a tensor's values to the host (on CUDA each waits for the device)
READS = {"item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__complex__", "nonzero", "argwhere",
         "cpu", "numpy", "__repr__", "__str__", "__format__", "masked_select", "unique", "unique_consecutive"}


def _reads_values(func, args) -> bool:
    """`func(*args)` copies values to the host: a read above, or indexing with a boolean mask or a
    0-dim integer tensor (which torch turns into a Python index)."""
    name = getattr(func, "__name__", "")
    if name in READS:
        return True
    if name in ("__getitem__", "__setitem__") and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(map(_read_as_python_index, index))
    return False


def _read_as_python_index(index) -> bool:
    """A boolean mask, or a 0-dim integer tensor (torch reads it as a Python int)."""
    if not isinstance(index, torch.Tensor):
        return False
    return index.dtype == torch.bool or (index.dim() == 0 and not index.is_floating_point())


class NoHostReads(TorchFunctionMode):
    """Fails any call that reads a tensor's values back to the host, except inside `allowed`."""

    def __init__(self):
        super().__init__()
        self.paused = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if not self.paused and _reads_values(func, args):
            raise AssertionError(f"the device step read values back to the host: {getattr(func, '__name__', func)}")
        return func(*args, **(kwargs or {}))

    def allowed(self, fn):
        def call(*args, **kwargs):
            self.paused += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused -= 1
        return call


def test_the_read_detector_catches_each_kind_of_read():
    t = torch.arange(4.0)
    for read in (lambda: t.sum().item(), lambda: t.tolist(), lambda: bool(t[0] > 1), lambda: float(t[1]),
                 lambda: t[t > 1], lambda: t[torch.tensor(1)], lambda: t.nonzero(), lambda: f"{t[0]}"):
        with NoHostReads(), pytest.raises(AssertionError, match="read values back"):
            read()
    with NoHostReads() as mode:
        assert mode.allowed(lambda: t.sum().item())() == 6.0
        t.index_select(0, torch.argmin(t).reshape(1))   # what the device path does instead


BASE = {"lr": 0.05, "clip": 0.5}
#: test settings of the zeroth-order methods that need other than their defaults (a key's
#: `:suffix` names a second configuration of the same method)
TUNED = {
    "mezo": {"q": 2, "direction": "gaussian", "smoothing": 2e-2},
    "dpzero": {"q": 3, "direction": "sphere", "radius": "sqrt_d"},
    "dp_zo": {"q": 2, "noise": "laplace", "clip": 0.01},
    "dp_zogd": {"q": 2, "projection_radius": 1.0},
    "dp_aggzo": {"q": 3},
    "pazo_m": {"q": 2, "alpha": 0.5, "public_batch_size": 4},
    "pazo_m:public_only": {"q": 2, "alpha": 1.0, "public_batch_size": 4},
    "pazo_p": {"q": 2, "k": 2, "public_batch_size": 4},
    "pazo_p_prime": {"q": 2, "k": 3, "public_batch_size": 4},
    "pazo_s": {"k": 3, "public_batch_size": 4, "perturbation": 0.05},
}


def device_step_cases(tuned: dict, zeroth_order: list[str]) -> dict:
    """Every registered zeroth-order method (its tuned settings, else its defaults) and the second
    configurations of `tuned`: a method registered later is checked too."""
    return {**{name: tuned.get(name, {}) for name in zeroth_order}, **tuned}


#: every zeroth-order method of the registry, derived
METHODS = device_step_cases(TUNED, method_names("zeroth_order"))


def _model():
    torch.manual_seed(0)
    return FunctionalModel(SmallCNN(1, 10, 8, width=4))


def _steps(name, make_method, on_device: bool, engine: str, steps: int = 3, b: int = 6):
    """The parameters and statistics after `steps` steps of `name` on one path."""
    model = _model()
    gen = torch.Generator().manual_seed(7)
    public = TensorSplit(torch.rand(20, 1, 8, 8, generator=gen), torch.randint(0, 10, (20,), generator=gen))
    private = None if name == "mezo" else 1.3
    method = make_method(name.split(":")[0], model, {**BASE, **METHODS[name]}, sigma=private, b=b, public=public,
                         engine=engine, seed=4)
    method.on_device = on_device
    mode = NoHostReads()
    if on_device:   # public values read at the start of a step by design: the public basis, orthogonal directions
        if hasattr(method, "public_basis"):
            method.public_basis = mode.allowed(method.public_basis)
        if getattr(method.cfg, "direction", None) == "orthogonal":
            method.random_directions = mode.allowed(method.random_directions)
    stats = []
    for t in range(steps):
        x = torch.rand(b, 1, 8, 8, generator=gen)
        x[t % b, 0, 0, 0] = float("inf") if t == 1 and private else x[t % b, 0, 0, 0]   # a non-finite example
        y = torch.randint(0, 10, (b,), generator=gen)
        if on_device:
            with mode:
                out = method.step(x, y, t + 1)
        else:
            out = method.step(x, y, t + 1)
        stats.append(host_stats(out))
    return model.flat_params(), stats


@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_the_device_step_is_the_host_step_and_reads_nothing_back(make_method, name, engine):
    """Same parameters (to float32 rounding: the update's scale is applied by a multiply-add there)
    and the same statistics, step after step, including a step with a non-finite example."""
    host_params, host_stats_ = _steps(name, make_method, on_device=False, engine=engine)
    device_params, device_stats = _steps(name, make_method, on_device=True, engine=engine)
    assert torch.allclose(device_params, host_params, rtol=1e-5, atol=1e-6)
    assert not torch.equal(host_params, _model().flat_params())   # the steps moved the parameters
    for host, device in zip(host_stats_, device_stats):
        assert host.keys() == device.keys()
        for key, value in host.items():
            expected = value if value is None else pytest.approx(value, rel=1e-5, abs=1e-7, nan_ok=True)
            assert device[key] == expected, key


def test_the_device_path_is_chosen_on_cuda_for_full_precision_parameters():
    model = _model()
    assert not releases_on_device(model, torch.device("cpu"))
    assert not releases_on_device(model, torch.device("mps"))         # no float64 there
    assert releases_on_device(model, torch.device("cuda"))
    model.module.double()
    assert releases_on_device(FunctionalModel(model.module), torch.device("cuda"))
    model.module.half()
    assert not releases_on_device(FunctionalModel(model.module), torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["vectorised", "inplace"])
@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_cuda_step_makes_no_synchronising_call(make_method, name, engine):
    """On CUDA the whole step of each method, after a warm-up step, makes no call that waits for
    the device (torch's sync debug mode), but for the public reads of PAZO-P's basis and DP-ZOGD's
    orthogonal directions and the copies of public batches at the start of the step."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = FunctionalModel(SmallCNN(1, 10, 8, width=4).to(device))
    gen = torch.Generator().manual_seed(7)
    public = TensorSplit(torch.rand(20, 1, 8, 8, generator=gen).to(device), torch.randint(0, 10, (20,)).to(device))
    method = make_method(name.split(":")[0], model, {**BASE, **METHODS[name]}, sigma=None if name == "mezo" else 1.3,
                         b=6, public=public, engine=engine, seed=4, device=device)
    assert method.on_device
    x, y = torch.rand(6, 1, 8, 8, device=device), torch.randint(0, 10, (6,), device=device)
    method.step(x, y, 1)
    torch.cuda.synchronize()
    if hasattr(method, "public_basis"):
        basis = method.public_basis
        method.public_basis = lambda: _synchronising_allowed(basis)
    if getattr(method.cfg, "direction", None) == "orthogonal":
        directions = method.random_directions
        method.random_directions = lambda: _synchronising_allowed(directions)
    if hasattr(method, "public"):
        sample = method.public.sample
        method.public.sample = lambda: _synchronising_allowed(sample)
    torch.cuda.set_sync_debug_mode("error")
    try:
        method.step(x, y, 2)
    finally:
        torch.cuda.set_sync_debug_mode(0)


def _synchronising_allowed(fn):
    """fn() with synchronising calls allowed, then the mode it found (calls of it may nest)."""
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode(0)
    try:
        return fn()
    finally:
        torch.cuda.set_sync_debug_mode(mode)
