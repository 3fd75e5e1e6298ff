"""Methods are registered with their facts and typed configs; every noise draw lives in
pazo/privacy/."""
import dataclasses
import re

import pytest
import yaml

from conftest import ROOT
from pazo.errors import ConfigError
from pazo.methods import METHODS, method_config, method_info, method_names
from pazo.methods.pazo_m import PazoMConfig
from pazo.privacy.mechanisms import JointClipPrivatizer, Release, ScalarPrivatizer, VectorPrivatizer
from pazo.train import run


def test_every_method_composes_by_name_into_its_registered_schema(hydra_cfg):
    """`method=<name>` is its yaml where it has one, else the node its registration stored in Hydra's
    ConfigStore; either way the method's typed config. Every yaml is a registered method's."""
    yamls = sorted(p.stem for p in (ROOT / "configs" / "method").glob("*.yaml"))
    assert set(yamls) <= set(METHODS.names())
    for name in METHODS.names():
        composed = hydra_cfg(f"method={name}").method
        assert composed.name == name
        if name in yamls:   # (a yaml-less method's lr and clip may be the user's to give)
            config = method_config(composed)
            assert type(config) is method_info(name).config and config.name == name


def test_unknown_method_key_is_refused_at_compose_time(hydra_cfg):
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException, match="Could not override 'method.lrr'"):
        hydra_cfg("method=pazo_m", "method.lrr=0.1")
    with pytest.raises(ConfigCompositionException):
        hydra_cfg("method=pazo_m", "method.q=abc")  # typed: q is an integer
    with pytest.raises(ConfigError, match=r"unknown key method.public_batch_size \(method dpsgd has: clip, "):
        method_config({"name": "dpsgd", "lr": 0.1, "clip": 1.0, "public_batch_size": 4})


@pytest.mark.parametrize("fields,match", [
    ({"q": 0}, "method.q must be an integer >= 1"),
    ({"alpha": 1.5}, r"method.alpha must be in \[0, 1\]"),
    ({"lr": -1.0}, "method.lr must be a positive number"),
    ({"direction": "cube"}, "unknown method.direction 'cube'"),
    ({"direction": "sphere", "radius": "big"}, "method.radius must be sqrt_d, fourth_root_d or a positive"),
])
def test_typed_config_validates_itself(fields, match):
    with pytest.raises(ConfigError, match=match):
        method_config({"name": "pazo_m", "lr": 0.1, "clip": 1.0, **fields})


def test_each_config_says_what_a_step_releases():
    base = {"lr": 0.1, "clip": 1.0}
    assert method_config({"name": "dpzero", **base, "q": 5}).release() == Release(queries=5)
    assert method_config({"name": "pazo_s", **base, "k": 4}).release() == Release(queries=5)
    assert method_config({"name": "pazo_s", **base, "k": 4, "noisy_candidate": False}).release() == Release(4)
    assert method_config({"name": "gep", **base}).release() == Release(queries=1, mechanisms=2)
    assert method_config({"name": "dp_zo", **base, "noise": "laplace"}).release().noise == "laplace"
    assert method_config({"name": "dpsgd", **base}).release() == Release(queries=1)


def test_pazo_m_sphere_of_radius_fourth_root_d_is_the_code_default():
    """Algorithm 1's directions do not depend on the YAML: they are PazoMConfig's defaults."""
    assert (PazoMConfig.direction, PazoMConfig.radius) == ("sphere", "fourth_root_d")
    yaml = (ROOT / "configs" / "method" / "pazo_m.yaml").read_text()
    assert not re.search(r"^(direction|radius):", yaml, re.M)
    plain = method_config({"name": "pazo_m", "lr": 0.1, "clip": 1.0})
    assert plain.departures() == []
    changed = method_config({"name": "pazo_m", "lr": 0.1, "clip": 1.0, "direction": "gaussian"})
    assert changed.departures() == ["method.direction='gaussian' overrides pazo_m's defining default "
                                    "'sphere': the run is not the published algorithm"]


def test_a_run_that_leaves_the_algorithm_says_so_in_its_summary(hydra_cfg, tmp_path):
    s = run(hydra_cfg("method=pazo_m", "method.direction=gaussian"), tmp_path / "a")
    assert len(s["method_departures"]) == 1 and "method.direction='gaussian'" in s["method_departures"][0]
    assert run(hydra_cfg("method=pazo_m"), tmp_path / "b")["method_departures"] == []


def test_facts_come_from_the_registry():
    from pazo.run.results import FIRST_ORDER, LABELS, METHOD_ORDER, USES_PUBLIC

    assert LABELS["pazo_p_prime"] == "PAZO-P'" and LABELS["dope_sgd"] == "DOPE-SGD"
    assert LABELS == {n: method_info(n).label for n in METHODS.names()}
    assert FIRST_ORDER == {n for n in METHODS.names() if method_info(n).family == "first_order"}
    assert USES_PUBLIC == {n for n in METHODS.names() if method_info(n).uses_public}
    private = [method_info(n).private for n in METHOD_ORDER]   # the non-private references first
    assert private == sorted(private) and set(METHOD_ORDER) == set(METHODS.names())
    assert all(method_info(n).reference for n in method_names())
    assert all(method_info(n).release == "none" for n in METHODS.names() if not method_info(n).private)
    assert all((method_info(n).forwards is None) != method_info(n).zeroth_order for n in METHODS.names())


_KIND = {"scalar": ScalarPrivatizer, "joint_scalar": JointClipPrivatizer, "vector": VectorPrivatizer}


@pytest.mark.parametrize("name", METHODS.names())
def test_registered_passes_and_privatiser_are_what_a_step_does(name):
    """The facts the benchmark and the audit read: a zeroth-order step makes exactly its registered
    private forwards and public passes (the benchmark's floor), and a private method whose release
    passes through one privatiser holds it as `privatizer`, of its registered kind (what the
    audit's white box replaces)."""
    from pazo.bench.settings import build_benchmark_method, step_passes, synthetic_inputs

    info = method_info(name)
    one_by_one = ["method.public_grads_together=false"] if "public_grads_together" in {
        f.name for f in dataclasses.fields(info.config)} else []
    method, config, model = build_benchmark_method(name, "digits", "cpu", extra=one_by_one)
    if info.white_box:
        assert type(method.privatizer) is _KIND[info.release]
    if not info.zeroth_order:
        return
    calls = []
    model.module.register_forward_hook(lambda *args: calls.append(1))
    x, y = synthetic_inputs("digits", 64)
    method.step(x, y, 1)
    calls.clear()
    method.step(x, y, 2)
    assert len(calls) == sum(step_passes(name, config))


def test_every_noise_draw_lives_in_the_privacy_folder():
    """The noise stream is opened only in pazo/privacy/ (an auditor reads one folder)."""
    pattern = re.compile(r"""["']noise["']""")
    outside = [str(p.relative_to(ROOT)) for p in (ROOT / "pazo").rglob("*.py")
               if "privacy" not in p.parts and p.name != "rng.py" and pattern.search(p.read_text())
               and re.search(r"torch_generator\(|numpy\[", p.read_text())]
    assert outside == []
    users = [p.name for p in (ROOT / "pazo" / "methods").glob("*.py") if "noise_generator(" in p.read_text()]
    assert sorted(users) == ["first_order.py", "pazo_s.py", "two_point.py", "zeroth_order.py"]


def test_public_only_trains_on_the_public_split_alone(make_method):
    """Its step is an SGD step on a public batch: the private batch does not move it."""
    import torch

    from conftest import quadratic_model, true_grad
    from pazo.data.base import TensorSplit

    public_x = torch.full((4, 5), 2.0, dtype=torch.float64)
    results = []
    for private_x in (torch.zeros(8, 5, dtype=torch.float64), torch.full((3, 5), 9.0, dtype=torch.float64)):
        model = quadratic_model(d=5)
        w0 = model.flat_params().clone()
        make_method("public_only", model, {"lr": 0.1, "clip": 1.0, "public_batch_size": 4},
                    public=TensorSplit(public_x, torch.zeros(4))).step(private_x, torch.zeros(len(private_x)), 1)
        results.append(model.flat_params())
        assert torch.allclose(results[-1], w0 - 0.1 * true_grad(model, public_x).new_tensor(
            (model.module.a * (w0 - 2.0)).tolist()))
    assert torch.equal(results[0], results[1])


GRIDS = ROOT / "configs" / "sweeps" / "grids"


@pytest.mark.parametrize("grid_name,overrides", [("cifar10", ()),  # the offline default: Table 9's CIFAR-10 column
                                                 ("cifar10", ("experiment=cifar10",)),
                                                 ("tiny_imagenet", ("experiment=tiny_imagenet",)),
                                                 ("imdb", ("experiment=imdb",)),
                                                 ("mnli", ("experiment=mnli",))])
def test_every_default_lies_inside_the_papers_grid(grid_name, overrides, hydra_cfg):
    """Defaults that travel: each method's default values (the method's yaml and dataclass, or the
    setting's tuning file) are values of the paper's grid for that method (Tables 9-10)."""
    grid = yaml.safe_load((GRIDS / f"{grid_name}.yaml").read_text())["methods"]
    outside = []
    for method, axes in grid.items():
        cfg = hydra_cfg(f"method={method}", *overrides)
        for key, values in axes.items():
            section, name = key.split(".")
            value = cfg[section][name]
            if not any(value == v for v in values):
                outside.append(f"{method} {key}={value} not in {values}")
    assert not outside, "; ".join(outside)
