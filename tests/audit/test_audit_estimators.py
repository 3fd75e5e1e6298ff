"""The audit's estimators on synthetic canary scores with known answers: the f-DP one-run bound
(against dp-accounting's Gaussian calibration and, where installed, JAX-Privacy's auditor), its
validity and power on scores drawn from a mechanism of known epsilon, AUROC / TPR at low FPR
against scikit-learn and their intervals against scipy; the worst-case white box's digit codes and
its hook on a quadratic model through the real methods and privatisers."""
from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
import torch
from scipy.stats import binomtest, norm
from sklearn.metrics import roc_auc_score, roc_curve

from pazo.audit.bound import audit_guesses, epsilon_lower_bound
from pazo.audit.canaries import QUIET_BITS, FixedRatePoissonSampler, decode_loud, decode_quiet, public_seeds
from pazo.audit.fdp import epsilon_lower_bound_fdp, gaussian_delta, mu_for, rejects
from pazo.audit.metrics import MIN_FALSE_POSITIVES, auroc, clopper_pearson, membership_metrics, tpr_at_fpr
from pazo.audit.run import attach_white_box, train_with_canaries
from pazo.data.base import TensorSplit
from pazo.privacy.accountants import accountant_for
from pazo.privacy.mechanisms import debug_break
from conftest import quadratic_model

# --- the f-DP bound ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (8.0, 1e-3)])
def test_mu_is_the_gaussian_mechanism_of_dp_accounting(eps, delta):
    dp_accounting = pytest.importorskip("dp_accounting")
    assert 1 / mu_for(eps, delta) == pytest.approx(dp_accounting.get_sigma_gaussian(eps, delta), rel=1e-6)
    assert gaussian_delta(eps, mu_for(eps, delta)) == pytest.approx(delta, rel=1e-6)


def _jax_privacy_auditing():
    """JAX-Privacy's auditing module, read from its installed files without importing the package
    (whose __init__ needs jax): `pip install --no-deps jax-privacy` is enough."""
    spec = importlib.util.find_spec("jax_privacy")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("jax-privacy not installed (pip install --no-deps jax-privacy to cross-check)")
    path = next(iter(spec.submodule_search_locations)) + "/auditing.py"
    module_spec = importlib.util.spec_from_file_location("_jax_privacy_auditing", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules["_jax_privacy_auditing"] = module
    module_spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("m,k,v,delta", [(1000, 100, 100, 1e-5), (1000, 100, 90, 1e-5), (1000, 500, 400, 1e-5),
                                         (1000, 40, 40, 1e-5), (1000, 20, 18, 1e-6), (10000, 1000, 900, 1e-5)])
def test_fdp_bound_matches_jax_privacy(m, k, v, delta):
    jp = _jax_privacy_auditing()
    assert epsilon_lower_bound_fdp(m, k, v, delta, 0.05) == pytest.approx(
        jp._epsilon_one_run_fdp(0, m, k, v, 0.05, delta), abs=1e-4)


def test_fdp_bound_edges_by_hand():
    # half right or worse is what epsilon = 0 predicts; no right guess rejects nothing
    assert epsilon_lower_bound_fdp(1000, 100, 50, 1e-5) == 0.0
    assert not rejects(1000, 10, 0, 0.0, 0.05)
    # more right guesses of the same number never lower the bound; it is tighter than Steinke et al.'s
    bounds = [epsilon_lower_bound_fdp(1000, 100, v, 1e-5) for v in (70, 80, 90, 100)]
    assert bounds == sorted(bounds) and bounds[0] > 0
    assert epsilon_lower_bound_fdp(1000, 100, 100, 1e-5) > epsilon_lower_bound(1000, 100, 100, 1e-5)
    # the edge of rejection
    eps = epsilon_lower_bound_fdp(1000, 100, 90, 1e-5)
    assert rejects(1000, 100, 90, mu_for(eps - 1e-4, 1e-5), 0.05)
    assert not rejects(1000, 100, 90, mu_for(eps + 1e-3, 1e-5), 0.05)


def gdp_scores(mu: float, m: int, seed: int):
    """Canary scores of a mechanism that is exactly mu-GDP per canary: N(mu, 1) in, N(0, 1) out."""
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    return rng.normal(size=m) + mu * included, included


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
def test_both_bounds_stay_below_the_true_epsilon(mu):
    """Validity: scores from a mechanism of known epsilon(delta); neither bound exceeds it."""
    delta = 1e-5
    true_eps = 0.0 if mu == 0 else _gdp_epsilon(mu, delta)
    for seed in range(5):
        scores, included = gdp_scores(mu, 1000, seed)
        out = audit_guesses(scores.tolist(), included.tolist(), beta=0.05, delta=delta)
        assert out["epsilon_lower_bound"] <= true_eps and out["epsilon_lower_bound_fdp"] <= true_eps, (seed, out)


def _gdp_epsilon(mu: float, delta: float) -> float:
    from scipy.optimize import brentq
    return brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, 100.0)


def test_no_information_no_bound_and_strong_signal_a_high_one():
    for seed in range(3):
        scores, included = gdp_scores(0.0, 1000, seed)
        out = audit_guesses(scores.tolist(), included.tolist(), beta=0.05, delta=1e-5)
        assert out["epsilon_lower_bound"] == 0.0 and out["epsilon_lower_bound_fdp"] == 0.0
    scores, included = gdp_scores(8.0, 1000, 0)  # epsilon(1e-5) about 39
    out = audit_guesses(scores.tolist(), included.tolist(), beta=0.05, delta=1e-5)
    assert out["epsilon_lower_bound_fdp"] > out["epsilon_lower_bound"] > 2.5


# --- AUROC, TPR at low FPR and their intervals ---------------------------------------------------


def test_auroc_matches_sklearn_with_ties():
    rng = np.random.default_rng(0)
    members = rng.random(500) < 0.5
    scores = np.round(rng.normal(size=500) + 0.7 * members, 1)  # many ties
    assert auroc(scores, members) == pytest.approx(roc_auc_score(members, scores), abs=1e-12)
    assert auroc(np.r_[1.0, 2.0], np.r_[False, True]) == 1.0 and auroc(np.r_[1.0, 1.0], np.r_[False, True]) == 0.5


@pytest.mark.parametrize("fpr", [0.01, 0.05, 0.2])
def test_tpr_at_fpr_matches_sklearn_roc_curve(fpr):
    rng = np.random.default_rng(1)
    members = rng.random(2000) < 0.5
    scores = rng.normal(size=2000) + 1.5 * members
    tpr, tp, fp, n_in = tpr_at_fpr(scores, members, fpr)
    fprs, tprs, _ = roc_curve(members, scores)
    assert tpr == pytest.approx(tprs[fprs <= fpr].max(), abs=1e-12)
    assert fp <= fpr * (~members).sum() and tp == round(tpr * n_in)


def test_tpr_undefined_where_the_non_members_cannot_resolve_the_fpr():
    members = np.r_[np.ones(500, bool), np.zeros(MIN_FALSE_POSITIVES * 1000 - 1, bool)]
    scores = np.arange(members.size, dtype=float)
    assert tpr_at_fpr(scores, members, 0.001) is None and tpr_at_fpr(scores, members, 0.01) is not None
    out = membership_metrics(scores, members, 0.95, seed=0)
    assert out["tpr_at_fpr_0.001"] is None and out["tpr_at_fpr_0.001_interval"] is None


def test_clopper_pearson_matches_scipy_and_perfect_separation():
    for k, n in ((0, 20), (7, 20), (20, 20), (480, 500)):
        ci = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert clopper_pearson(k, n, 0.95) == pytest.approx((ci.low, ci.high), abs=1e-9)
    members = np.r_[np.ones(400, bool), np.zeros(600, bool)]
    out = membership_metrics(members.astype(float), members, 0.95, seed=0)
    assert out["auroc"] == 1.0 and out["auroc_interval"] == [1.0, 1.0] and out["tpr_at_fpr_0.01"] == 1.0
    assert out["tpr_at_fpr_0.01_interval"][0] == pytest.approx(0.025 ** (1 / 400))


def test_auroc_bootstrap_interval_covers_the_truth():
    """Scores N(1, 1) in vs N(0, 1) out: AUROC Phi(1 / sqrt 2) = 0.7602."""
    scores, included = gdp_scores(1.0, 2000, 3)
    lo, hi = membership_metrics(scores, included, 0.95, seed=0)["auroc_interval"]
    assert lo < norm.cdf(1 / math.sqrt(2)) < hi and hi - lo < 0.06


# --- the worst-case white box: digit codes, and its hook through the real methods ----------------


def test_digit_codes_round_trip_and_noise_is_refused():
    rng = np.random.default_rng(0)
    for _ in range(50):
        quiet = sorted(rng.choice(QUIET_BITS, size=rng.integers(0, 6), replace=False).tolist())
        loud = sorted(rng.choice(44, size=rng.integers(0, 6), replace=False).tolist())
        count = len(loud)  # a correct clip turns each loud canary into one C
        assert decode_quiet(count + math.fsum(2.0 ** -(g + 1) for g in quiet)) == quiet
        assert decode_loud(sum(2 ** g for g in loud) + rng.normal() * 0.05, 44) == loud
    noisy = [decode_quiet(0.3 + rng.normal()) for _ in range(200)]
    assert all(n is None for n in noisy)
    assert decode_loud(3.5) is None and decode_loud(-2.0) is None and decode_quiet(1e6 + 0.5) is None


# near digits' regime (q about 0.05, sigma 1.2 there), where the codes' guards are sized: a loud unit of
# 16 C far above the noise, few canaries of a group sampled at once
N, B, STEPS, SIGMA, DELTA = 1000, 50, 100, 2.0, 1e-5


def worst_case_audit(make_method, method: str, cfg: dict, brk: str | None, seed: int, m: int = 1000):
    """The worst-case white box (real contributions neutralised, coded canaries) on a quadratic
    model: (f-DP bound, (eps, delta) bound, the run's epsilon at DELTA, score details)."""
    with debug_break(brk):
        model = quadratic_model(d=50, seed=seed)
        public = TensorSplit(torch.zeros(N, 50, dtype=torch.float64), torch.zeros(N))
        meth = make_method(method, model, {"lr": 1e-3, "clip": 1.0, **cfg}, sigma=SIGMA, b=B, seed=seed,
                           public=public)
        included = np.random.default_rng([seed, 0]).random(m) < 0.5
        hook = attach_white_box(meth, m, 16.0, np.random.default_rng([seed, 1]), worst_case=True, sample_rate=B / N)
        assert hook.neutralises
        ids = np.flatnonzero(included)
        sampler = FixedRatePoissonSampler(N + len(ids), B / N, np.random.default_rng([seed, 2]))
        private = TensorSplit(torch.zeros(N, 50, dtype=torch.float64), torch.zeros(N))
        train_with_canaries(meth, private, N, ids, sampler, STEPS, torch.device("cpu"), hook)
    scores, info = hook.scores(public_seeds(meth.ctx.streams), torch.device("cpu"))
    out = audit_guesses(scores.tolist(), included.tolist(), beta=0.05, delta=DELTA)
    eps = accountant_for("gaussian", SIGMA, B / N, STEPS, DELTA, 0.01).epsilon(STEPS).upper
    return out["epsilon_lower_bound_fdp"], out["epsilon_lower_bound"], eps, {**out, **info}


ZO_CASES = [("dpzero", {"q": 1}), ("pazo_s", {"k": 3, "public_batch_size": 4})]


@pytest.mark.parametrize("brk", ["no_clip", "noise_from_direction_seed"])
@pytest.mark.parametrize("method,cfg", ZO_CASES, ids=[c[0] for c in ZO_CASES])
def test_worst_case_white_box_reads_the_breaks(make_method, method, cfg, brk):
    fdp, bound, eps, info = worst_case_audit(make_method, method, cfg, brk, seed=0)
    # the f-DP bound is the one this design relies on (few canaries read for certain)
    assert fdp > eps and bound > 1, f"{method} {brk}: {fdp:.3f} (f-DP), {bound:.3f} vs {eps:.3f} ({info})"
    read = info["decoded_loud" if brk == "no_clip" else "decoded_quiet"]["replayed_noise_removed"]
    assert read > 0 and info["noise_replayed"] == (brk == "noise_from_direction_seed")


@pytest.mark.parametrize("method,cfg", ZO_CASES, ids=[c[0] for c in ZO_CASES])
def test_worst_case_white_box_reads_nothing_from_a_correct_run(make_method, method, cfg):
    fdp, bound, eps, info = worst_case_audit(make_method, method, cfg, None, seed=0)
    # noise read as digits now and then (a loud unit only a few noise scales wide) is allowed, a
    # bound above the run's epsilon is not
    assert fdp <= eps and bound <= eps, info
    assert info["decoded_quiet"]["replayed_noise_removed"] == 0 and not info["noise_replayed"]


def test_worst_case_hook_passes_only_the_canaries_through_the_privatiser():
    """The real rows are dropped; each sampled canary of a value's group adds its digit (quiet:
    C 2^-(g+1), kept by the clip; loud: clipped to C), exactly, with no noise here."""
    from pazo.audit.canaries import CodedScalarCanaries
    from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer
    inner = ScalarPrivatizer(NoiseSpec(sigma=0.0, clip=0.5, expected_batch_size=4), 1, torch.Generator())
    hook = CodedScalarCanaries(inner, 100, 16.0, np.random.default_rng(0), sample_rate=0.1)
    group = hook.order[:hook.quiet + hook.loud]
    hook.present = np.array([group[0], group[2], group[hook.quiet + 5]])
    got = hook.release([[123.0, -7.0]])  # real values: ignored
    assert got == [(0.5 * (0.5 + 0.125) + 0.5) / 4]
    assert decode_quiet(float(hook.releases[0][0]) / 0.5) == [0, 2]


def _p_value_by_the_loop(m, r, v, epsilon, delta):
    """Theorem 3.1's p-value, its window maximum written as the plain loop over i."""
    from scipy.stats import binom

    from pazo.audit.bound import guess_accuracy
    if v == 0:
        return 1.0
    p = guess_accuracy(epsilon)
    tail = float(binom.sf(v - 1, r, p))
    if delta == 0:
        return min(tail, 1.0)
    window, worst = 0.0, 0.0
    for i, mass in enumerate(binom.pmf(range(v - 1, -1, -1), r, p), start=1):
        window += float(mass)
        worst = max(worst, window / i)
    return min(tail + 2 * m * delta * worst, 1.0)


@given(st.integers(2, 3000).flatmap(lambda m: st.tuples(st.just(m), st.integers(0, m)).flatmap(
    lambda mr: st.tuples(st.just(mr[0]), st.just(mr[1]), st.integers(0, mr[1])))),
    st.floats(0, 10), st.sampled_from([0.0, 1e-6, 1e-5, 1e-3, 0.3]))
def test_the_vectorised_p_value_is_the_loops_to_the_bit(mrv, epsilon, delta):
    from pazo.audit.bound import p_value
    m, r, v = mrv
    assert p_value(m, r, v, epsilon, delta) == _p_value_by_the_loop(m, r, v, epsilon, delta)


@given(st.lists(st.tuples(st.integers(-3, 3).map(float), st.booleans()), min_size=2, max_size=300))
def test_guesses_count_the_same_from_lists_and_arrays_ties_broken_by_index(pairs):
    """Scores with many ties: the guesses are the highest and lowest scores, ties broken by the
    canary's index, whether the audit passes Python lists or numpy arrays."""
    scores, included = [s for s, _ in pairs], [i for _, i in pairs]
    by_lists = audit_guesses(scores, included, beta=0.05, delta=1e-5)
    assert by_lists == audit_guesses(np.array(scores), np.array(included), beta=0.05, delta=1e-5)
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    k_in, k_out = by_lists["guesses_in"], by_lists["guesses_out"]
    right = sum(included[i] for i in order[len(order) - k_in:]) + sum(not included[i] for i in order[:k_out])
    assert by_lists["correct"] == right
