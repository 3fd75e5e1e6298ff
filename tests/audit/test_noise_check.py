"""The white box's noise check (`pazo.audit.noise_check`): the probe zeroes every contribution inside
the release (the batch still there) and reads each privatiser's noise in units of the std (Laplace:
scale) the guarantee claims; the chi-square and Gamma bounds and the epsilon at them by hand; and
the audit command catching a noise a tenth of the claimed one, or divided by the realised batch
size, on digits, for DPZero, DP-AggZO's joint clip and Laplace DP-ZO, while correct runs and a run
without clipping (whose noise is right) pass it, in the top-level verdict too."""
from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chi2, gamma

from pazo.audit.canaries import nominal_noise_scale
from pazo.audit.noise_check import ScalarNoiseProbe, VectorNoiseProbe, noise_check
from pazo.audit.run import run_audit
from pazo.privacy.accountants import LaplaceAccountant
from pazo.privacy.mechanisms import JointClipPrivatizer, NoiseSpec, ScalarPrivatizer, VectorPrivatizer, debug_break
from pazo.privacy.plan import PrivacyPlan, epsilon_spent, make_accountant
from conftest import run_cache
from test_audit import audit_cfg

#: the runs here read no PLD bound: their cross-check on the cheaper grid (conftest `cheap_pld`)
pytestmark = pytest.mark.usefixtures("cheap_pld")

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


@pytest.mark.parametrize("brk,batch", [(None, 1), ("noise_div_batch", 7), ("noise_div_batch", 1)])
@pytest.mark.parametrize("kind", ["gaussian", "laplace", "joint"])
def test_the_scalar_probe_hands_the_privatiser_the_batch_with_every_value_zero(kind, brk, batch):
    """The privatiser sees the step's rows, as many values as the batch has examples, all 0 (a noise
    divided by the realised batch size shows); the noise is read in units of its claimed std, or of
    the Laplace scale by the mean absolute value (1 for Laplace(0, 1))."""
    mechanism = "laplace" if kind == "laplace" else "gaussian"
    spec = NoiseSpec(sigma=2.0, clip=0.5, expected_batch_size=8, mechanism=mechanism)
    gen = torch.Generator().manual_seed(0)
    inner = JointClipPrivatizer(spec, gen) if kind == "joint" else ScalarPrivatizer(spec, 3, gen)
    seen = []
    release = inner.release
    inner.release = lambda rows: seen.append(rows) or release(rows)
    probe = ScalarNoiseProbe(inner)
    with debug_break(brk):
        for _ in range(2000):
            probe.release([[5.0, math.nan, -1e9, 0.25, 1.0, 2.0, 3.0][:batch]] * 3)
    assert seen[-1] == [[0.0] * batch] * 3 and probe.values == 6000
    statistic = probe.sum_abs if kind == "laplace" else probe.sum_squares
    estimate = statistic / probe.values if kind == "laplace" else math.sqrt(statistic / probe.values)
    assert estimate == pytest.approx(1 / batch, rel=0.05)


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


def test_the_laplace_bound_and_the_epsilon_at_it_by_hand():
    """sum |z| ~ Gamma(N, r): r at most sum / Gamma(N, 1).ppf(1 - confidence); the epsilon there is
    the run's own Laplace account at sigma times that bound."""
    plan = PrivacyPlan(private=True, sample_rate=0.05, steps=40, expected_batch_size=50, sigma=3.0, delta=0.0,
                       noise="laplace")
    comparable = LaplaceAccountant(3.0, 0.05, 40, 0.0).epsilon(40).upper
    right = noise_check(1000.0, 1000, plan, 40, 0.0, 0.99, comparable)
    upper = 1000 / gamma.ppf(0.01, 1000)
    assert right["statistic"] == "gamma_mean_abs" and right["noise_ratio"] == 1.0
    assert right["noise_ratio_upper"] == pytest.approx(upper) and upper > 1
    at_upper = LaplaceAccountant(3.0 * upper, 0.05, 40, 0.0).epsilon(40).upper
    assert right["epsilon_at_sigma_upper"] == pytest.approx(at_upper)
    assert right["epsilon_from"] == "laplace_account" and not right["exceeds_printed"]
    small = noise_check(100.0, 1000, plan, 40, 0.0, 0.99, comparable)
    assert small["noise_ratio_upper"] < 0.11 and small["exceeds_printed"]


#: DP-AggZO and DP-ZO with 8 queries a step: the noise check's 512 values take 64 repeated steps
DIGITS = {"dpzero": ["method=dpzero"], "dp_aggzo": ["method=dp_aggzo", "method.q=8"],
          "dp_zo_laplace": ["method=dp_zo", "method.noise=laplace", "method.q=8", "privacy.delta=0"]}


SLOW = pytest.mark.slow  # DP-AggZO's and Laplace DP-ZO's privatisers are probed in the fast suite above


@pytest.mark.parametrize("method,brk,caught", [
    ("dpzero", "noise_div10", True), ("dpzero", None, False),
    # no_clip, which the noise check cannot see (about 10 s): in the quick suite the white-box audit catches it,
    # tests/audit/test_audit.py::test_white_box_catches_each_break[no_clip]
    pytest.param("dpzero", "no_clip", False, marks=SLOW),
    ("dpzero", "noise_div_batch", True),   # the planted bug: noise over the realised batch size
    pytest.param("dp_aggzo", None, False, marks=SLOW), pytest.param("dp_aggzo", "noise_div10", True, marks=SLOW),
    pytest.param("dp_aggzo", "noise_div_batch", True, marks=SLOW),
    pytest.param("dp_zo_laplace", None, False, marks=SLOW),
    pytest.param("dp_zo_laplace", "noise_div10", True, marks=SLOW),
    pytest.param("dp_zo_laplace", "noise_div_batch", True, marks=SLOW)])
def test_the_audit_command_catches_too_little_noise_on_digits(tmp_path, monkeypatch, method, brk, caught):
    """On digits, 30 steps: the noise check repeats them on the run's Poisson batches until 512
    values are released; a tenth of the noise, or the noise over the realised batch size (about 64
    examples here), is caught, and the top-level verdict and the returned epsilon say so."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    overrides = [*DIGITS[method], "train.steps=30", "audit.canaries=50"]
    summary = run_audit(audit_cfg(*overrides, *([f"audit.debug_break={brk}"] if brk else [])), tmp_path / "run")
    audit = summary["audit"]
    check = audit["noise_check"]
    assert check["released_values"] >= 512 and check["released_values"] % (30 * (1 if method == "dpzero" else 8)) == 0
    assert check["statistic"] == ("gamma_mean_abs" if method == "dp_zo_laplace" else "chi_square")
    assert check["exceeds_printed"] is caught
    expected = {"noise_div10": 0.1, "noise_div_batch": 1 / 64}.get(brk, 1.0)
    assert check["noise_ratio"] == pytest.approx(expected, rel=0.2)
    assert check["confidence"] == pytest.approx(1 - audit["per_test_beta"])
    # the top-level verdict counts the noise check, and so does the epsilon the command returns
    assert audit["exceeds_printed"] is (caught or audit["exceeds_printed_canaries"] or audit["exceeds_printed_fdp"])
    assert audit["exceeds_printed"] is (audit["epsilon_audited"] > audit["epsilon_at_audit_delta"])
    if caught and not audit["exceeds_printed_fdp"] and not audit["exceeds_printed_canaries"]:
        assert audit["epsilon_audited_from"] == "noise_check"
        assert audit["epsilon_audited"] == check["epsilon_at_sigma_upper"]


@pytest.mark.slow   # two audits on digits (about 40 s each); the breaks' white box on the quadratic model runs in
# the quick suite for the Gaussian methods (test_audit.test_white_box_catches_each_break)
@pytest.mark.parametrize("brk", ["no_clip", "noise_from_direction_seed"])
def test_laplace_dp_zos_breaks_the_noise_check_cannot_see_are_caught_by_the_canaries(tmp_path, monkeypatch, brk):
    """Laplace DP-ZO with its clip gone, or its noise drawn from the public direction seed: the noise
    check sees the right scale, the canaries read the release, and the verdict says so."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
    overrides = [*DIGITS["dp_zo_laplace"], "train.steps=30", "audit.canaries=200", f"audit.debug_break={brk}"]
    audit = run_audit(audit_cfg(*overrides), tmp_path / "run")["audit"]
    assert not audit["noise_check"]["exceeds_printed"]
    assert audit["exceeds_printed"] and audit["epsilon_audited"] > audit["epsilon_at_audit_delta"]
    assert audit["exceeds_printed_canaries"] or audit["exceeds_printed_fdp"]


def test_every_privatiser_is_probed():
    """Gaussian and Laplace scalar releases, DP-AggZO's joint clip and the vector release each get
    the probe; a method without a privatiser gets none."""
    from types import SimpleNamespace

    from pazo.audit.noise_check import attach_noise_probe
    laplace = NoiseSpec(sigma=2.0, clip=0.5, expected_batch_size=8, mechanism="laplace")
    for privatizer, probe in ((ScalarPrivatizer(laplace, 1, torch.Generator()), ScalarNoiseProbe),
                              (JointClipPrivatizer(SPEC, torch.Generator()), ScalarNoiseProbe),
                              (ScalarPrivatizer(SPEC, 1, torch.Generator()), ScalarNoiseProbe),
                              (VectorPrivatizer(SPEC, torch.Generator()), VectorNoiseProbe)):
        method = SimpleNamespace(privatizer=privatizer)
        assert isinstance(attach_noise_probe(method), probe) and method.privatizer.inner is privatizer
    method = SimpleNamespace(privatizer=None)
    assert attach_noise_probe(method) is None and method.privatizer is None


def test_the_black_box_has_no_noise_check(tmp_path, monkeypatch):
    """The black-box attacker sees only the final model: no release to probe."""
    monkeypatch.setenv("PAZO_CACHE_DIR", str(run_cache(tmp_path / "cache")))
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
