"""The white box's noise check (`pazo.audit.noise_check`): the probe passes no contribution and reads
each privatiser's noise in units of the std the guarantee claims; the chi-square bound and the
epsilon at it by hand; and the audit command catching a noise a tenth of the claimed one on digits
while a correct run and a run without clipping (whose noise is right) pass it."""
from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2

from pazo.audit.canaries import nominal_noise_scale
from pazo.audit.noise_check import ScalarNoiseProbe, VectorNoiseProbe, noise_check
from pazo.audit.run import run_audit
from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer, VectorPrivatizer, debug_break
from pazo.privacy.plan import PrivacyPlan, epsilon_spent, make_accountant
from test_audit import audit_cfg

SPEC = NoiseSpec(sigma=2.0, clip=0.5, expected_batch_size=8)


def ratio(probe) -> float:
    return math.sqrt(probe.sum_squares / probe.values)


@pytest.mark.parametrize("brk,expected", [(None, 1.0), ("noise_div10", 0.1)])
def test_the_scalar_probe_releases_noise_alone_in_units_of_the_claimed_std(brk, expected):
    """Four queries: each sum's noise has std sqrt(4) * C * sigma; the rows' values never reach it."""
    probe = ScalarNoiseProbe(ScalarPrivatizer(SPEC, 4, torch.Generator().manual_seed(0)))
    assert nominal_noise_scale(probe.inner) == pytest.approx(2 * 0.5 * 2.0)
    with debug_break(brk):
        for _ in range(1000):
            out = probe.release([[100.0, -3.0]] * 4)
    assert len(out) == 4 and probe.values == 4000
    assert ratio(probe) == pytest.approx(expected, rel=0.05)


@pytest.mark.parametrize("brk,expected", [(None, 1.0), ("noise_div10", 0.1)])
def test_the_vector_probe_releases_noise_alone_in_units_of_the_claimed_std(brk, expected):
    probe = VectorNoiseProbe(VectorPrivatizer(SPEC, torch.Generator().manual_seed(0)))
    with debug_break(brk):
        out = probe(torch.full((5000,), 7.0), 0.5)
    assert probe.values == 5000 and nominal_noise_scale(probe.inner, 0.5) == pytest.approx(0.5 * 2.0)
    assert ratio(probe) == pytest.approx(expected, rel=0.05)
    assert float(out.mean()) == pytest.approx(0.0, abs=0.01)  # the 7s were not added
    with debug_break(brk):  # a method that draws the noise itself (GEP's two sums) is read too
        draw = probe.noise(5000, 0.5, torch.zeros(1))
    assert probe.values == 10000 and draw.shape == (5000,)
    assert ratio(probe) == pytest.approx(expected, rel=0.05)


def test_the_probe_forwards_the_privatisers_data_but_no_method():
    probe = ScalarNoiseProbe(ScalarPrivatizer(SPEC, 2, torch.Generator()))
    assert probe.spec is SPEC and probe.queries == 2
    with pytest.raises(AttributeError, match="does not forward"):
        getattr(probe, "clipped")


PLAN = PrivacyPlan(private=True, sample_rate=0.05, steps=40, expected_batch_size=50, sigma=1.2, delta=1e-5,
                   eps_error=0.01)


def test_the_bound_and_the_epsilon_at_it_by_hand():
    comparable = epsilon_spent(PLAN, 40)
    right = noise_check(1000.0, 1000, PLAN, 40, 1e-5, 0.99, comparable)
    upper = math.sqrt(1000 / chi2.ppf(0.01, 1000))
    assert right["noise_ratio"] == 1.0 and right["noise_ratio_upper"] == pytest.approx(upper) and upper > 1
    assert right["sigma_upper"] == pytest.approx(1.2 * upper)
    assert right["epsilon_at_sigma_upper"] == pytest.approx(
        make_accountant(PLAN.__class__(**{**PLAN.__dict__, "sigma": 1.2 * upper})).epsilon(40).lower)
    assert right["epsilon_at_sigma_upper"] < comparable and not right["exceeds_printed"]
    small = noise_check(10.0, 1000, PLAN, 40, 1e-5, 0.99, comparable)  # a tenth of the claimed std
    assert small["noise_ratio"] == pytest.approx(0.1) and small["noise_ratio_upper"] < 0.11
    assert small["epsilon_at_sigma_upper"] > 10 * comparable and small["exceeds_printed"]


@pytest.mark.parametrize("brk,caught", [("noise_div10", True), (None, False), ("no_clip", False)])
def test_the_audit_command_catches_a_tenth_of_the_noise_on_digits(tmp_path, monkeypatch, brk, caught):
    """DPZero on digits, 30 steps: the noise check repeats them until 512 values are released."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))
    overrides = ["method=dpzero", "train.steps=30", "audit.canaries=50"]
    summary = run_audit(audit_cfg(*overrides, *([f"audit.debug_break={brk}"] if brk else [])), tmp_path / "run")
    check = summary["audit"]["noise_check"]
    assert check["released_values"] >= 512 and check["released_values"] % 30 == 0
    assert check["exceeds_printed"] is caught
    assert check["noise_ratio"] == pytest.approx(0.1 if brk == "noise_div10" else 1.0, rel=0.2)
    assert check["confidence"] == pytest.approx(1 - summary["audit"]["per_test_beta"])


def test_only_gaussian_scalar_and_vector_releases_are_probed():
    """A Laplace release (DP-ZO's pure-DP variant) or a release of another kind (DP-AggZO's joint
    clip, GEP's) gets no noise check rather than a chi-square test that does not apply."""
    from types import SimpleNamespace

    from pazo.audit.noise_check import attach_noise_probe
    from pazo.privacy.mechanisms import JointClipPrivatizer
    laplace = NoiseSpec(sigma=2.0, clip=0.5, expected_batch_size=8, mechanism="laplace")
    for privatizer in (ScalarPrivatizer(laplace, 1, torch.Generator()), JointClipPrivatizer(SPEC, torch.Generator()),
                       None):
        method = SimpleNamespace(privatizer=privatizer)
        assert attach_noise_probe(method) is None and method.privatizer is privatizer
    method = SimpleNamespace(privatizer=ScalarPrivatizer(SPEC, 1, torch.Generator()))
    assert isinstance(attach_noise_probe(method), ScalarNoiseProbe) and isinstance(method.privatizer, ScalarNoiseProbe)


def test_the_black_box_has_no_noise_check(tmp_path, monkeypatch):
    """The black-box attacker sees only the final model: no release to probe."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))
    cfg = audit_cfg("method=dpzero", "train.steps=10", "audit.canaries=20", "audit.threat=black_box")
    assert run_audit(cfg, tmp_path / "run")["audit"]["noise_check"] is None


def test_where_the_prv_grid_cannot_be_built_one_step_bounds_epsilon_from_below(monkeypatch):
    """A sigma far below the claimed one (noise / 10 at q = 0.18) breaks prv-accountant's grid; the
    exact epsilon of one subsampled Gaussian step is then the bound: just where its delta(epsilon)
    crosses delta, and never above the T-step account where both can be computed."""
    import pazo.audit.noise_check as nc
    from pazo.privacy.accountants import gaussian_one_step_delta
    plan = PrivacyPlan(private=True, sample_rate=0.178, steps=30, expected_batch_size=256, sigma=0.6,
                       delta=1e-5, eps_error=0.01)
    eps, how = nc.epsilon_at_least(plan, 0.06, 30, 1e-5)
    assert how == "one_step_exact" and eps > 100
    assert gaussian_one_step_delta(0.06, 0.178, eps) > 1e-5 >= gaussian_one_step_delta(0.06, 0.178, eps * 1.001)
    prv, how = nc.epsilon_at_least(plan, 0.6, 30, 1e-5)
    assert how == "prv_lower"
    monkeypatch.setattr(nc, "make_accountant", lambda plan: (_ for _ in ()).throw(RuntimeError("grid")))
    one, how = nc.epsilon_at_least(plan, 0.6, 30, 1e-5)
    assert how == "one_step_exact" and 0 < one < prv
