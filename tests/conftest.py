"""Shared fixtures: a quadratic 'model' whose gradients are known in closed form, contexts for
methods, and a Hydra config composer for end-to-end runs on tiny settings; `ROOT`, the repository
root, for the test files (`from conftest import ROOT`).

The tests mirror the package, one folder per package (tests/privacy, tests/zo, ...; tests/run for
the run-level modules at the package root, tests/llm for the LLM settings, tests/paper for the
paper's and reference papers' numbers). The folders have no `__init__.py`: under pytest's default
(prepend) import mode each test file is imported by its basename, so basenames stay unique across
folders, and this directory is on the import path, so the helper modules here (fixtures, llm_fixtures,
model_checks, killed_launch, ...) import by name.

Markers (registered in pyproject.toml), set explicitly in the test files, not by a hook here:
`slow` on the long tests; `gpu` on the tests that need CUDA (each also skips itself without it);
`llm` by `pytestmark = pytest.mark.llm` in each file of tests/llm and by `@pytest.mark.llm` (or a
`pytest.param` mark) on the other tests that build a transformers causal or masked LM."""
from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import os
import signal
import sys
from pathlib import Path

import absl.logging  # noqa: F401  (here, so that its one handler is made now and spared below)
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from hypothesis import HealthCheck, settings
from torch import nn

from pazo.commands.console import spare_absl_stream
from pazo.data.base import TensorSplit
from pazo.methods import build_method, method_config
from pazo.models.functional import FunctionalModel
from pazo.privacy import accountants
from pazo.privacy.plan import PrivacyPlan
from pazo.rng import RandomStreams
from pazo.zo.engines import InPlaceEngine, VectorisedEngine

#: the suite's one Hypothesis profile: a test's outcome must not depend on how loaded the machine is,
#: so no per-example deadline and no health check that times data generation (`too_slow`); a test's
#: own `@settings` inherits both, and `pytest_collection_modifyitems` takes both out of one that
#: brings either back (a test's `suppress_health_check` replaces the profile's list)
LOAD_DEPENDENT_CHECKS = (HealthCheck.too_slow,)
settings.register_profile("pazo", deadline=None, suppress_health_check=LOAD_DEPENDENT_CHECKS)
settings.load_profile("pazo")


def load_dependent_settings(test_settings: settings) -> list[str]:
    """What in a Hypothesis test's settings depends on the machine's load: a deadline, or a
    health check that times generation left on."""
    problems = [f"deadline={test_settings.deadline}"] if test_settings.deadline is not None else []
    problems += [f"health check {check.name} on" for check in LOAD_DEPENDENT_CHECKS
                 if check not in test_settings.suppress_health_check]
    return problems


def load_independent(test_settings: settings) -> settings:
    """`test_settings` without a deadline and with the generation-timing health checks off."""
    checks = [*test_settings.suppress_health_check,
              *(c for c in LOAD_DEPENDENT_CHECKS if c not in test_settings.suppress_health_check)]
    return settings(test_settings, deadline=None, suppress_health_check=checks)


def pytest_collection_modifyitems(config, items):
    """Every Hypothesis test runs under load-independent settings, whatever its own `@settings` say
    (Hypothesis reads them from the test function when the test runs)."""
    for item in items:
        test = getattr(item, "obj", None)
        test_settings = getattr(test, "_hypothesis_internal_use_settings", None)
        if test_settings is not None and load_dependent_settings(test_settings):
            test._hypothesis_internal_use_settings = load_independent(test_settings)


# absl's handler holds the sys.stderr of its import, pytest's capture file here, and an in-process
# run's logging set-up (Hydra's, which closes every handler) would close it for every test after it
spare_absl_stream()

#: the repository root: test files import it (`from conftest import ROOT`) instead of counting their own depth
ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = str(ROOT / "configs")
if str(ROOT) not in sys.path:   # the checkout's tools/ (the docs' tooling, not installed with pazo), last:
    sys.path.append(str(ROOT))   # (an installed pazo, where one is tested, stays the one imported)


class Quadratic(nn.Module):
    """Per-example loss 0.5 * sum_i a_i (w_i - x_i)^2: gradient of the mean is a * (w - mean x)."""

    def __init__(self, d: int, seed: int = 0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.w = nn.Parameter(torch.randn(d, generator=g, dtype=torch.float64))
        self.register_buffer("a", torch.linspace(0.5, 2.0, d, dtype=torch.float64))

    def forward(self, x):
        diff = self.w - x
        return 0.5 * ((diff * diff) @ self.a)   # (two temporaries, one matrix-vector product: the audit's hot path)


def identity_loss(outputs, targets):
    return outputs


def quadratic_model(d: int = 6, seed: int = 0) -> FunctionalModel:
    return FunctionalModel(Quadratic(d, seed), loss_fn=identity_loss)


def true_grad(model: FunctionalModel, x: torch.Tensor) -> torch.Tensor:
    module = model.module
    return (module.a * (module.w.detach() - x.mean(dim=0)))


def finite_difference_estimates(model, x, directions, lam=1e-3):
    """[q, d] two-point estimates ((f(x+lam u) - f(x-lam u)) / 2 lam) u of the mean loss."""
    points = [(j, s) for j in range(directions.count) for s in (lam, -lam)]
    losses = VectorisedEngine().losses(model, x, torch.zeros(len(x)), directions, points).mean(dim=1)
    diffs = (losses[0::2] - losses[1::2]) / (2 * lam)
    dirs = torch.stack([torch.cat([t.reshape(-1) for t in directions.tensors(j)])
                        for j in range(directions.count)])
    return diffs[:, None] * dirs


@pytest.fixture
def make_method():
    """A method built as the training loop builds it (`build_method`), from a dict of its config
    fields, with a fixed noise multiplier (`sigma=None`: non-private) and expected batch size b."""
    def build(name, model, cfg, sigma=None, b=8, public=None, engine="vectorised", seed=0,
              adjacency="add_remove", total_steps=1, device=None):
        if public is None:
            public = TensorSplit(torch.zeros(4, model.dim, dtype=torch.float64), torch.zeros(4))
        config = method_config({"name": name, **cfg})
        plan = PrivacyPlan.with_sigma(sigma, b, config.release(), steps=total_steps, adjacency=adjacency)
        return build_method(config, model=model, plan=plan, streams=RandomStreams(seed), public=public,
                            device=torch.device("cpu") if device is None else device,
                            engine=VectorisedEngine() if engine == "vectorised" else InPlaceEngine())
    return build


#: torch's intra-op threads in each xdist worker: `make test` runs one worker a core, so a second
#: thread a worker only contends with the other worker's (a loaded machine makes OpenMP's waiting
#: threads cost more than they give); pytest without xdist keeps torch's own count
WORKER_THREADS = 1 if os.environ.get("PYTEST_XDIST_WORKER") else torch.get_num_threads()


@pytest.fixture(autouse=True)
def worker_threads():
    """Each test starts at `WORKER_THREADS`, whatever a run before it chose (`train.threads`)."""
    if torch.get_num_threads() != WORKER_THREADS:
        torch.set_num_threads(WORKER_THREADS)


@pytest.fixture(autouse=True)
def no_sweep_stop_left_behind():
    """Each test leaves this process able to launch runs: a sweep's stop (a Ctrl-C or SIGTERM passed
    on to its runs) ends with its launch. One that outlived it made the next `run_one` on the same
    worker start nothing, and a test far away fail."""
    yield
    child_runs = sys.modules.get("pazo.sweep.child_runs")
    if child_runs is not None:
        assert not child_runs.CHILDREN.stopping, "a sweep's stop outlived its launch"


@pytest.fixture(autouse=True)
def sigterm_handler_kept():
    """Each test leaves SIGTERM's handler as it found it: a command run in-process installs pazo's
    (`pazo.commands.interrupts.until_work_starts`), which would end a later test's process on a SIGTERM
    with a `pazo: terminated` line instead of what that test expects."""
    found = signal.getsignal(signal.SIGTERM)
    yield
    if found is not None and signal.getsignal(signal.SIGTERM) is not found:
        signal.signal(signal.SIGTERM, found)


#: the session's (the xdist worker's) sigma cache, set by `shared_sigma_cache`
SHARED_SIGMA: Path | None = None


#: the session's memo of cross-check accounts, set by `shared_sigma_cache`
SHARED_ACCOUNTS: Path | None = None


@pytest.fixture(scope="session", autouse=True)
def shared_sigma_cache(tmp_path_factory):
    """One sigma cache for the session's (the xdist worker's) runs: calibration is 1-2 s a run, and
    most runs ask for the same few sigmas. Sharing it cannot change a result: an entry is keyed by
    every input of the calibration and used only if the run's own accountant reproduces its epsilon
    (pazo.privacy.sigma_cache), so a run reads exactly the sigma it would compute. Likewise one memo
    of the cross-check's accounts (PLD's is a second or more a run): an entry is keyed by every input
    of its account and the code that computes it, and holds the value that code computed
    (pazo.privacy.account_memo)."""
    global SHARED_SIGMA, SHARED_ACCOUNTS
    SHARED_SIGMA = tmp_path_factory.mktemp("sigma_cache")
    SHARED_ACCOUNTS = tmp_path_factory.mktemp("account_memo")
    return SHARED_SIGMA


def run_cache(folder: Path) -> Path:
    """`folder` as a run's PAZO_CACHE_DIR (warm starts, decoded images: its own) whose sigma/ and
    accounts/ are the session's shared sigma cache and account memo; for runs in-process and in
    subprocesses alike."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, shared in (("sigma", SHARED_SIGMA), ("accounts", SHARED_ACCOUNTS)):
        if shared is not None and not (folder / name).exists():
            (folder / name).symlink_to(shared, target_is_directory=True)
    return folder


@functools.cache
def digits_section():
    """The shipped configs' digits section, typed as a run types it."""
    from pazo.run.typed import run_config

    return run_config(tiny_cfg("dataset=digits")).dataset


@functools.cache
def digits_private_size(seed: int) -> int:
    """How many private examples digits' splits leave a run of `seed` (1163-1167: the public and
    validation draws round per class): a calibrated sigma's cache key holds the sample rate b / n,
    so runs of one method share a calibration only where they share n."""
    from pazo.data import build_dataset

    return len(build_dataset(digits_section(), RandomStreams(seed)).private)


def next_seed_sharing_digits_size(seed: int) -> int:
    """The first seed from `seed` up whose digits private set has seed 0's size (most tests' runs'):
    for a test that draws a seed only to vary its runs, which then share the session's calibrations
    instead of calibrating again for each n (a second or more a run)."""
    return next(s for s in itertools.count(seed) if digits_private_size(s) == digits_private_size(0))


def one_noise_pass(patch: pytest.MonkeyPatch) -> None:
    """An audit's noise check on one pass of its run's steps, not the passes `NOISE_CHECK_VALUES`
    asks for (up to 171 of a short run's steps): for a test whose rule holds at any count (what the
    audit builds, writes or releases); the count's own tests are tests/audit/test_noise_check.py's."""
    import pazo.audit.run as audit_run

    patch.setattr(audit_run, "noise_pass", functools.partial(audit_run.noise_pass, min_values=1))


def tiny_cfg(*overrides):
    """The real configs composed with `overrides`, for a tiny run with W&B disabled (`hydra_cfg`'s;
    a module-scoped fixture's run sets PAZO_CACHE_DIR itself): each call its own copy of `composed`'s."""
    return composed_copy("logger.mode=disabled", "train.steps=4", "train.log_every=2", "device=cpu", *overrides)


def composed_copy(*overrides: str, config_name: str = "config"):
    """The real configs composed with `overrides`: the caller's own copy of `composed`'s."""
    return copy.deepcopy(composed(overrides, config_name))


#: the configs `composed` made in this process: (overrides, the ConfigStore's nodes) -> (config, the nodes)
_COMPOSED: dict = {}


def composed(overrides: tuple[str, ...], config_name: str = "config"):
    """The real configs composed with `overrides` (Hydra's compose: tenths of a second, and most runs'
    tests ask for a few of the same), once per test process for the same overrides and the same
    schemas in Hydra's ConfigStore (a test that registers a method or plugin gets a composition of
    its own). Shared: a caller that changes it copies it first (`tiny_cfg`)."""
    def key():   # (the nodes are kept with the config: no id is reused)
        return config_name, overrides, tuple(map(id, stored_config_nodes()))

    if key() not in _COMPOSED:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=list(overrides))
        # keyed after composing: Hydra stores nodes of its own at a process's first composition
        _COMPOSED[key()] = (cfg, stored_config_nodes())
    return _COMPOSED[key()][0]


def stored_config_nodes() -> list:
    """Every node registered in Hydra's ConfigStore (the method, data set and model schemas, plugins')."""
    from hydra.core.config_store import ConfigStore

    found, folders = [], [ConfigStore.instance().repo]
    while folders:
        for value in folders.pop().values():
            (folders if isinstance(value, dict) else found).append(value)
    return found


@pytest.fixture
def hydra_cfg(tmp_path, monkeypatch):
    """Compose the real configs with overrides; runs are tiny and W&B is disabled. The run's cache
    directory is its own, but for the session's shared sigma cache (`run_cache`)."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    return tiny_cfg


def typed_section(schema: type, values: dict):
    """`values` (a section's keys, the others at the schema's defaults) as an instance of `schema`:
    a section as a run's config is typed at the door and handed to a loader or a builder."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), values))


def dataset_node(hydra_cfg, *fixed):
    """A builder of the composed `dataset` node: the `fixed` overrides (the data set, its root),
    then the test's own."""
    return lambda *overrides: hydra_cfg(*fixed, *overrides).dataset


def seeded_bundle(loader, cfg, seed: int = 0):
    """An image loader's bundle from `cfg`, its public split drawn with `seed` (its generator fixed)."""
    return loader(cfg, np.random.default_rng(seed), torch.Generator().manual_seed(0))


#: a PLD grid step ten times the package's (`accountants.PLD_INTERVAL`): each PLD account is several
#: times cheaper, its bounds about ten times looser (1e-2 instead of 1e-3)
CHEAP_PLD_INTERVAL = 1e-3


@contextlib.contextmanager
def cheap_pld_grid():
    """dp-accounting's PLD on `CHEAP_PLD_INTERVAL`'s grid, for a test of a rule that holds on any grid
    (a calibrated sigma meets its target by the accountant that calibrated it): every PLD account
    inside reads the one constant, so calibration and check stay on the same grid. Never for a test
    that compares PLD's bounds with another accountant's (a looser grid would hide a gap)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(accountants, "PLD_INTERVAL", CHEAP_PLD_INTERVAL)
        yield


@pytest.fixture
def cheap_pld():
    """`cheap_pld_grid` for a whole test of runs (`pytestmark = pytest.mark.usefixtures("cheap_pld")`):
    a private run's PLD account is its cross-check's, several seconds of each in-process run, and a
    rule that reads no PLD bound (what a run releases, refuses or draws) holds on any grid."""
    with cheap_pld_grid():
        yield


def rng(seed=0):
    return np.random.default_rng(seed)
