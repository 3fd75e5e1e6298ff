"""The one-run privacy audit (`pazo.audit`): the bound against values derived by hand, the debug
breaks refused outside an audit, each break caught by the white-box audit and correct runs not
flagged (on a quadratic model, through the real methods and privatisers), and the command end to end
on digits."""
from __future__ import annotations

import functools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from pazo.audit.command import NOT_AS_PRIVATE
from pazo.audit.bound import audit_guesses, epsilon_lower_bound, guess_accuracy, guess_grid, p_value
from pazo.audit.canaries import FixedRatePoissonSampler, public_seeds
from pazo.audit.run import attach_white_box, run_audit, train_with_canaries
from pazo.data.base import TensorSplit
from pazo.errors import ConfigError
from pazo.privacy.accountants import accountant_for
from pazo.privacy.mechanisms import active_debug_break, debug_break
from pazo.train import run as train_run
from conftest import CONFIG_DIR, quadratic_model

# --- the bound -------------------------------------------------------------------------------


def test_p_value_without_delta_is_the_binomial_tail():
    # r = 3, v = 2: P[W >= 2] = 3 p^2 (1 - p) + p^3 = 3p^2 - 2p^3; at epsilon = 0, p = 1/2: 1/2
    assert p_value(10, 3, 2, 0.0, 0.0) == pytest.approx(0.5)
    p = guess_accuracy(1.0)  # e / (1 + e) = 0.7310586
    assert p == pytest.approx(0.7310586, abs=1e-7)
    assert p_value(10, 3, 2, 1.0, 0.0) == pytest.approx(3 * p**2 - 2 * p**3)
    assert p_value(10, 4, 0, 1.0, 0.0) == 1.0


def test_p_value_delta_term_by_hand():
    # m = 4, r = 2, v = 2, delta = 0.01, epsilon = 0 (p = 1/2): tail P[W >= 2] = 1/4;
    # i = 1: P[W = 1] / 1 = 1/2; i = 2: P[0 <= W <= 1] / 2 = 3/8; max 1/2 -> 1/4 + 2*4*0.01*1/2 = 0.29
    assert p_value(4, 2, 2, 0.0, 0.01) == pytest.approx(0.29)
    # v = 1: only i = 1, P[W = 0] = 1/4; tail P[W >= 1] = 3/4 -> 3/4 + 2*4*0.01/4 = 0.77
    assert p_value(4, 2, 1, 0.0, 0.01) == pytest.approx(0.77)


def test_lower_bound_all_correct_by_hand():
    # v = r, delta = 0: p^r <= beta  <=>  p <= beta^(1/r)  ->  epsilon = log(p / (1 - p))
    for r, want in ((5, 0.197763), (10, 1.051873)):
        p = 0.05 ** (1 / r)
        assert math.log(p / (1 - p)) == pytest.approx(want, abs=1e-6)
        assert epsilon_lower_bound(r, r, r, 0.0, 0.05) == pytest.approx(want, abs=1e-5)
    # one guess can never reject at 95%: p >= 1/2 > 0.05
    assert epsilon_lower_bound(1, 1, 1, 0.0, 0.05) == 0.0
    # half right is what epsilon = 0 predicts: no evidence
    assert epsilon_lower_bound(100, 100, 50, 0.0, 0.05) == 0.0


def test_lower_bound_is_the_edge_of_rejection_and_delta_only_lowers_it():
    m, r, v, beta = 1000, 200, 180, 0.05
    eps = epsilon_lower_bound(m, r, v, 1e-5, beta)
    assert eps > 1
    assert p_value(m, r, v, eps, 1e-5) <= beta < p_value(m, r, v, eps + 1e-3, 1e-5)
    assert epsilon_lower_bound(m, r, v, 1e-3, beta) < eps < epsilon_lower_bound(m, r, v, 0.0, beta)


def test_guesses_counted_on_the_right_canaries():
    # scores rank canaries 0..9; canaries 5..9 included: the top guesses are all right
    included = [False] * 5 + [True] * 5
    out = audit_guesses(list(range(10)), included, beta=0.05, delta=0.0, grid=[(3, 3), (5, 0)])
    assert (out["guesses"], out["correct"]) == (6, 6)
    assert out["epsilon_lower_bound"] == pytest.approx(epsilon_lower_bound(10, 6, 6, 0.0, 0.025), abs=1e-5)
    flipped = audit_guesses(list(range(10))[::-1], included, beta=0.05, delta=0.0, grid=[(3, 3)])
    assert flipped["correct"] == 0 and flipped["epsilon_lower_bound"] == 0.0
    assert guess_grid(1000)[:4] == [(5, 0), (10, 0), (10, 10), (15, 0)] and guess_grid(1000)[-1] == (500, 500)


# --- refusals -----------------------------------------------------------------------------------


def test_train_refuses_debug_breaks(hydra_cfg, tmp_path):
    cmd = [sys.executable, "-m", "pazo.train", "audit.debug_break=no_clip"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "pazo: error: audit.debug_break is a debug-only switch that breaks the privacy guarantee on purpose; "
        "only the privacy audit (python -m pazo.audit) accepts it"]
    with debug_break("noise_div10"), pytest.raises(ConfigError, match="debug-only"):
        train_run(hydra_cfg(), tmp_path / "run")  # nor programmatically, with a break switched on
    assert active_debug_break() is None


def audit_cfg(*overrides):
    import pazo.methods  # noqa: F401  (registers the method schemas)
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        return compose(config_name="audit", overrides=["logger.mode=disabled", "device=cpu", *overrides])


def test_audit_refuses_bad_settings_before_compute(tmp_path, monkeypatch):
    import pazo.audit.run as audit_run

    monkeypatch.setattr(audit_run, "build_run", lambda *a, **k: pytest.fail("compute started"))
    for override, message in (("audit.debug_break=oops", "unknown audit.debug_break 'oops'"),
                              ("privacy=none", "an audit needs a private run"),
                              ("audit.canaries=1", "audit.canaries must be an integer >= 2"),
                              ("audit.threat=grey_box", "unknown audit.threat 'grey_box'"),
                              ("method=gep", "does not cover gep"),
                              ("audit.worst_case=1", "audit.worst_case must be true, false or null")):
        with pytest.raises(ConfigError, match=message):
            run_audit(audit_cfg(override), tmp_path / "run")
    for overrides, message in ((("audit.threat=black_box", "audit.worst_case=true"), "is a white-box design"),
                               (("method=dp_aggzo", "audit.canaries=20"), "use audit.canaries >= 32")):
        with pytest.raises(ConfigError, match=message):
            run_audit(audit_cfg(*overrides), tmp_path / "run")


# --- the white box catches each break (quadratic model, real methods and privatisers) ----------

N, B, STEPS, SIGMA, DELTA = 200, 100, 100, 12.0, 1e-5


def white_box_audit(make_method, method: str, cfg: dict, brk: str | None, seed: int, m: int = 100,
                    on_device: bool = False):
    """A white-box audit of `method` on a quadratic model whose private examples sit near the
    optimum (small real gradients): (lower bound, the run's epsilon at DELTA, audit details).
    `on_device`: a zeroth-order step takes the path it takes on CUDA (`releases_on_device`)."""
    with debug_break(brk):
        model = quadratic_model(d=500, seed=seed)
        w = model.module.w.detach()
        gen = torch.Generator().manual_seed(seed)
        x = w + 0.01 * torch.randn(N, 500, generator=gen, dtype=torch.float64)
        private = TensorSplit(x, torch.zeros(N))
        # public examples from the same distribution (PAZO's premise), so the public gradient does not
        # pull the model away from the private examples
        public = TensorSplit(w + 0.01 * torch.randn(N, 500, generator=gen, dtype=torch.float64), torch.zeros(N))
        meth = make_method(method, model, {"lr": 1e-3, "clip": 1.0, **cfg}, sigma=SIGMA, b=B, seed=seed,
                           public=public)
        if on_device:
            meth.on_device = True
        design = np.random.default_rng([seed, 1])
        included = np.random.default_rng([seed, 0]).random(m) < 0.5
        hook = attach_white_box(meth, m, 10.0, design)
        ids = np.flatnonzero(included)
        sampler = FixedRatePoissonSampler(N + len(ids), B / N, np.random.default_rng([seed, 2]))
        train_with_canaries(meth, private, N, ids, sampler, STEPS, torch.device("cpu"), hook)
    scores, info = hook.scores(public_seeds(meth.ctx.streams), torch.device("cpu"))
    out = audit_guesses(scores.tolist(), included.tolist(), beta=0.05, delta=DELTA)
    return out["epsilon_lower_bound"], run_epsilon(), {**out, **info}


@functools.cache
def run_epsilon() -> float:
    """The audited runs' epsilon at DELTA (sigma SIGMA, rate B / N, STEPS steps)."""
    return accountant_for("gaussian", SIGMA, B / N, STEPS, DELTA, 0.01).epsilon(STEPS).upper


CASES = [("dpsgd", {}), ("dpzero", {"q": 32}), ("pazo_m", {"q": 32, "public_batch_size": 4}),
         ("pazo_s", {"k": 31, "public_batch_size": 4}),  # PAZO-S: its k + 1 released candidate losses
         ("dp_aggzo", {"q": 32})]                          # DP-AggZO: each canary's 32 values clipped together


@pytest.mark.parametrize("brk", ["noise_div10", "no_clip", "noise_from_direction_seed"])
@pytest.mark.parametrize("method,cfg", CASES, ids=[c[0] for c in CASES])
def test_white_box_catches_each_break(make_method, method, cfg, brk):
    bound, eps, info = white_box_audit(make_method, method, cfg, brk, seed=0)
    assert bound > eps, f"{method} {brk}: audited {bound:.3f} <= the run's epsilon {eps:.3f} ({info})"
    assert info["noise_replayed"] == (brk == "noise_from_direction_seed")


@pytest.mark.parametrize("brk", [None, "noise_div10", "no_clip", "noise_from_direction_seed"])
@pytest.mark.parametrize("method,cfg", CASES[1:], ids=[c[0] for c in CASES[1:]])
def test_white_box_audits_the_release_a_cuda_step_makes(make_method, method, cfg, brk):
    """The zeroth-order steps kept on the device (on CUDA) release through the privatiser's
    `release_tensor`, which the hooks wrap too: each break is caught there, a correct run is not
    flagged."""
    bound, eps, info = white_box_audit(make_method, method, cfg, brk, seed=0, on_device=True)
    assert (bound > eps) == (brk is not None), f"{method} {brk}: audited {bound:.3f}, the run's epsilon {eps:.3f}"
    assert info["noise_replayed"] == (brk == "noise_from_direction_seed")


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("method,cfg", CASES, ids=[c[0] for c in CASES])
def test_white_box_no_false_alarm_over_seeds(make_method, method, cfg, seed):
    """Seed 0 in the fast suite; seeds 1 and 2 with the slow tests (make test-all)."""
    bound, eps, info = white_box_audit(make_method, method, cfg, None, seed=seed)
    assert bound <= eps, f"{method} seed {seed}: correct run flagged ({bound:.3f} > {eps:.3f})"
    assert not info["noise_replayed"]


@pytest.mark.parametrize("method,cfg", [CASES[0], CASES[1]], ids=["dpsgd", "dpzero"])
def test_white_box_hooks_read_data_through_but_no_method(make_method, method, cfg):
    """A privatiser method the hook does not wrap is refused, not forwarded (a forwarded one would
    release without the canaries); its data still read through."""
    model = quadratic_model(d=10, seed=0)
    meth = make_method(method, model, {"lr": 1e-3, "clip": 1.0, **cfg}, sigma=SIGMA, b=B, seed=0)
    inner = meth.privatizer
    hook = attach_white_box(meth, 4, 10.0, np.random.default_rng(0))
    assert meth.privatizer is hook and hook.spec is inner.spec
    with pytest.raises(AttributeError, match="a release must pass the canaries"):
        getattr(hook, "noise" if method == "dpsgd" else "clipped")


def test_every_scalar_release_of_the_white_box_hook_carries_the_sampled_canaries():
    """`release` (the two-point step's), `means` and the tensor call (PAZO-S's) each add every sampled
    canary's clipped +-C to each query's sum, with the signs the hook records (no noise here, so the
    release is exactly that sum over b); none of them reaches the privatiser without them."""
    from pazo.audit.canaries import ScalarCanaries
    from pazo.privacy.mechanisms import NoiseSpec, ScalarPrivatizer
    inner = ScalarPrivatizer(NoiseSpec(sigma=0.0, clip=0.5, expected_batch_size=4), 2, torch.Generator())
    hook = ScalarCanaries(inner, 6, 10.0, np.random.default_rng(1))
    hook.present = np.array([0, 2, 5])
    zeros = torch.zeros(2, 3)
    device_calls = []
    inner.release_tensor = lambda values, own=inner.release_tensor: device_calls.append(values.shape) or own(values)
    for call in (lambda: hook.release(zeros.tolist()), lambda: hook.means(zeros), lambda: hook(zeros).tolist(),
                 lambda: hook.release_tensor(zeros.double()).tolist()):
        got = call()
        signs = hook.signs[-1][:, [0, 2, 5]].double()
        assert got == (signs.sum(dim=1) * 0.5 / 4).tolist() and any(v != 0 for v in got)
        assert torch.equal(hook.releases[-1], signs.sum(dim=1) * 0.5)
    assert len(hook.releases) == 4
    assert device_calls == [(2, 6)]   # the device step's release reached the privatiser's own, with the canaries


# --- the command, end to end on digits ----------------------------------------------------------


@pytest.mark.slow   # an audit subprocess interrupted (about 16 s); in the quick suite the signal handling it uses,
# in-process:
# tests/faults/test_fault_signals.py::test_stop_requests_turn_signals_into_a_stop_then_an_interrupt_then_silence
def test_an_interrupted_audit_is_one_line_and_exit_130(tmp_path, monkeypatch):
    """Ctrl-C during the training run of an audit: one line that says nothing was written, no traceback."""
    import signal
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "pazo.audit", "method=dpsgd", "audit.canaries=50", "train.steps=100000",
           "logger.mode=disabled", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    for line in proc.stdout:  # the run has started training
        if line.startswith("audit: dpsgd on digits"):
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.startswith("pazo: interrupted;") and "wrote no result" in err and err.count("\n") == 1
    assert not (tmp_path / "run" / "audit.json").exists()


@pytest.mark.slow   # the audit command in a subprocess (about 20 s); in the quick suite the same audit in-process:
# tests/audit/test_noise_check.py's test_the_audit_command_catches_too_little_noise_on_digits[dpzero-noise_div10-True],
# and the installed command: tests/run/test_entry_points.py's test_pazo_audit_from_another_directory_audits_...
def test_audit_command_writes_its_result(tmp_path, monkeypatch):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "pazo.audit", "method=dpsgd", "privacy.epsilon=1", "audit.canaries=50",
           "audit.threat=white_box", "audit.debug_break=noise_div10", "train.steps=30", "train.batch_size=256",
           "logger.mode=disabled", "device=cpu", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == NOT_AS_PRIVATE, done.stderr   # (a tenth of the noise: the verdict a script gates on)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    audit = json.loads((tmp_path / "run" / "audit.json").read_text())
    assert summary["audit"] == audit and summary["kind"] == "audit"
    # its files as the Recorder writes a run's (no rows file: an audit logs none)
    assert {p.name for p in (tmp_path / "run").iterdir() if not p.name.startswith(".")} >= \
        {"config.yaml", "audit.json", "summary.json"}
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and "heartbeat" in summary
    assert "seed" not in summary and "seed: " in (tmp_path / "run" / "config.yaml").read_text()
    assert audit["debug_break"] == "noise_div10" and audit["canaries"] == 50
    assert 0 <= audit["correct"] <= audit["guesses"] <= 50
    assert audit["printed_epsilon"] == pytest.approx(summary["privacy"]["target_epsilon"], abs=0.01)
    assert audit["epsilon_at_audit_delta"] > audit["printed_epsilon"]  # delta 1e-5 < 1/n
    assert audit["exceeds_printed_canaries"] == (audit["epsilon_lower_bound"] > audit["epsilon_at_audit_delta"])
    assert audit["exceeds_printed"]  # the noise check catches a tenth of the noise, whatever the canaries read
    assert "epsilon lower bound" in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("threat", ["black_box", "white_box"])
def test_correct_digits_audits_stay_below(tmp_path, monkeypatch, threat):
    monkeypatch.setenv("PAZO_CACHE_DIR", str(tmp_path / "cache"))
    for seed in range(2):
        cfg = audit_cfg("method=dpsgd", "train.steps=30", "train.batch_size=128", "audit.canaries=200",
                        f"audit.threat={threat}", f"seed={seed}")
        audit = run_audit(cfg, tmp_path / f"{threat}{seed}")["audit"]
        assert not audit["exceeds_printed"], audit
