"""The privacy facts of one run, fixed before training starts, and epsilon spent while it runs."""
from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field


from pazo.privacy.account_memo import upper_epsilon
from pazo.privacy.accountants import (ACCOUNTANTS, Account, BudgetError, LaplaceAccountant, accountant_for,
                                      check_accountant, check_delta, check_target_epsilon, default_eps_error,
                                      effective_noise_multiplier, gaussian_one_step_delta)
from pazo.privacy.calibration import calibrated
from pazo.privacy.mechanisms import NoiseSpec, Release

#: what each `privacy.accountant` is, as a Gaussian run's summary names it (privacy.accountant)
GAUSSIAN_ACCOUNTANTS = {"prv": "prv-accountant upper bound, Poisson-subsampled Gaussian, add/remove",
                        "rdp": "dp-accounting RDP upper bound, Poisson-subsampled Gaussian, add/remove",
                        "pld": "dp-accounting PLD upper bound (pessimistic), Poisson-subsampled Gaussian, add/remove"}


@dataclass
class PrivacyPlan:
    private: bool
    sample_rate: float
    steps: int
    expected_batch_size: int = 1
    queries: int = 1
    mechanisms: int = 1
    noise: str = "gaussian"
    guarantee: str = "none"  # (epsilon, delta)-DP | pure epsilon-DP | none
    target_epsilon: float | None = None
    delta: float | None = None
    sigma: float | None = None
    sigma_source: str = "none"  # calibrated | given | none
    eps_error: float | None = None
    adjacency: str = "add_remove"
    sampling: str = "poisson"
    sampling_matches_accountant: bool = True
    noise_seed: str = "derived from the run seed and the computation fingerprint"
    accountant: str = "none"
    #: privacy.accountant: prv, rdp or pld, for Gaussian noise (None: Laplace noise or non-private)
    accountant_name: str | None = None
    #: the epsilon of the run's (q, sigma, T, delta) by every accountant (`cross_check`), Gaussian noise only
    cross_check: dict | None = None
    notes: list[str] = field(default_factory=list)
    #: what the printed guarantee assumes beyond the accountant's model, by name (printed with it)
    assumptions: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def noise_spec(self, clip: float) -> NoiseSpec:
        """What a method's privatiser needs for values clipped to `clip` (sigma None: no noise)."""
        return NoiseSpec(sigma=self.sigma if self.private else None, clip=clip,
                         expected_batch_size=self.expected_batch_size, adjacency=self.adjacency,
                         mechanism=self.noise)

    @classmethod
    def with_sigma(cls, sigma: float | None, batch_size: int, release: Release | None = None,
                   steps: int = 1, adjacency: str = "add_remove") -> PrivacyPlan:
        """A plan with a given noise multiplier and no target, for unit tests and speed benchmarks:
        nothing is calibrated or accounted (sigma None: non-private)."""
        release = release or Release(queries=1)
        return cls(private=sigma is not None, sample_rate=float("nan"), steps=steps,
                   expected_batch_size=batch_size, queries=release.queries, mechanisms=release.mechanisms,
                   noise=release.noise, sigma=sigma, sigma_source="given" if sigma is not None else "none",
                   adjacency=adjacency, notes=["fixed sigma, not accounted (tests/benchmarks)"])


def make_accountant(plan: PrivacyPlan):
    """The accountant that matches the run's noise and its `privacy.accountant` (same interface:
    `.epsilon(t).upper`)."""
    return accountant_for(plan.noise, plan.sigma, plan.sample_rate, plan.steps, plan.delta,
                          plan.eps_error, plan.mechanisms, plan.accountant_name)


def make_plan(pcfg, n_private: int, batch_size: int, steps: int, release, sampler_cls,
              method_note: str | None = None) -> PrivacyPlan:
    """Calibrate (or check) sigma for the run; raise BudgetError before any training if the target
    cannot be met."""
    q = batch_size / n_private
    plan = PrivacyPlan(private=pcfg.epsilon is not None, sample_rate=q, steps=steps,
                       expected_batch_size=batch_size, queries=release.queries, mechanisms=release.mechanisms,
                       noise=release.noise,
                       adjacency=pcfg.adjacency, sampling=pcfg.sampling,
                       sampling_matches_accountant=sampler_cls.matches_accountant,
                       noise_seed="os entropy: noise and Poisson sampling (secure_mode)" if pcfg.secure_mode
                       else "derived from the run seed and the computation fingerprint")
    if not plan.private:
        plan.notes.append("non-private run: no clipping, no noise, no accounting")
        return plan
    plan.assumptions = guarantee_assumptions(pcfg.secure_mode)
    plan.target_epsilon = check_target_epsilon(pcfg.epsilon, "privacy.epsilon")
    plan.delta = check_delta(pcfg.delta if pcfg.delta is not None else 1.0 / n_private, plan.noise,
                             "privacy.delta")
    chosen = getattr(pcfg, "accountant", "prv")   # (a config written before the key existed: prv)
    check_accountant(chosen, plan.noise, pcfg.eps_error)
    if plan.noise == "gaussian":
        plan.accountant_name = chosen
    plan.eps_error = float(pcfg.eps_error or default_eps_error(plan.target_epsilon)) if chosen == "prv" else None
    plan.guarantee, plan.accountant = _guarantee(plan.noise, plan.delta, chosen)
    if pcfg.sigma is None:
        account = Account.aiming(plan.target_epsilon, plan.delta, q, steps, plan.eps_error, release.mechanisms,
                                 plan.noise, chosen)
        plan.sigma = calibrated(account, pcfg.cache_dir)
        plan.sigma_source = "calibrated"
    else:
        plan.sigma, plan.sigma_source = float(pcfg.sigma), "given"
        try:
            planned = epsilon_spent(plan, steps)
        except BudgetError:  # no account fits in memory: a far-too-small sigma is refused as such
            if _one_step_exceeds_target(plan):
                raise BudgetError(
                    f"privacy.sigma={plan.sigma} gives epsilon above the target {plan.target_epsilon} "
                    f"after {steps} steps: a single step already spends more (exact one-step account, "
                    f"delta {plan.delta:.3g}); leave privacy.sigma=null to calibrate it") from None
            raise
        if planned > plan.target_epsilon:
            raise BudgetError(
                f"privacy.sigma={plan.sigma} gives epsilon={planned:.4f} after {steps} steps, above "
                f"the target {plan.target_epsilon}; leave privacy.sigma=null to calibrate it")
    if not plan.sampling_matches_accountant:
        plan.notes.append(f"sampling={plan.sampling}: the accountant assumes Poisson sampling, so the "
                          "printed epsilon does NOT hold for this run")
    if plan.adjacency == "replace_one":
        plan.notes.append("replace_one: noise is calibrated for sensitivity 2C (the original DPZero "
                          "convention); epsilon is the add/remove account of multiplier sigma, not a "
                          "separate replace-one account")
    if method_note:
        plan.notes.append(method_note)
    if plan.noise == "gaussian":
        plan.cross_check = cross_check(plan, steps, pcfg.cache_dir)
    return plan


def _guarantee(noise: str, delta: float, accountant: str) -> tuple[str, str]:
    """The guarantee a private run gives and the accountant that gives it, as its summary says them."""
    if noise == "laplace" and delta == 0:
        return "pure epsilon-DP", "closed form T log(1 + q (e^(1/sigma) - 1)) (Laplace, basic composition)"
    if noise == "laplace":
        return "(epsilon, delta)-DP", ("exact optimal composition (Kairouz et al. 2015) of Poisson-amplified "
                                       "pure-DP steps (Laplace), add/remove")
    return "(epsilon, delta)-DP", GAUSSIAN_ACCOUNTANTS[accountant]


def cross_check(plan: PrivacyPlan, steps: int, cache_dir=None) -> dict:
    """The epsilon of the run's (q, sigma, `steps`, delta) by each accountant (`upper_epsilon_of`: its
    upper bound, the guarantee it would print), as a cross-check of the one the run uses: they bound
    one true epsilon, so they differ only by how tight each is (RDP the loosest). PRV at the run's
    eps_error (with another accountant, the default). An account that cannot be computed (a grid
    too large for memory) is None, with the reason under `refused`. Each account is read from the
    memo in `cache_dir` where a run of the same public numbers computed it (`account_memo`)."""
    sigma = effective_noise_multiplier(plan.sigma, plan.mechanisms)
    error = plan.eps_error or default_eps_error(plan.target_epsilon)
    epsilon, refused = {}, {}
    for name in ACCOUNTANTS:
        account = Account("gaussian", plan.sample_rate, steps, plan.delta, error, accountant=name)
        try:
            epsilon[name] = upper_epsilon(account, sigma, cache_dir) if steps else 0.0
        except BudgetError as err:
            epsilon[name], refused[name] = None, str(err)
    return {"steps": steps, "epsilon": epsilon, "used": plan.accountant_name, "refused": refused,
            "what": "cross-check: each accountant's epsilon (an upper bound) for this run's q, sigma, steps and "
                    "delta; the guarantee is the used accountant's"}


def guarantee_assumptions(secure_mode: bool) -> dict[str, str]:
    """What the (epsilon, delta) of a private run assumes, beyond the accountant's model: each entry
    names a condition under which the printed epsilon is the whole cost of what the run released."""
    out = {"n_private_public": "the private set's size n (used for q, delta and the printout) is public",
           "no_selection": "the run is not one of several on the same private data among which the best is "
                           "picked: a selection (a sweep's table) costs privacy beyond this epsilon"}
    if not secure_mode:
        out["seed_secret"] = ("the seed (written to config.yaml and .hydra/ only) stays secret: the noise and the "
                              "Poisson batches follow from it and the config's public fingerprint; "
                              "privacy.secure_mode=true draws them from OS entropy instead")
    return out


def _one_step_exceeds_target(plan: PrivacyPlan) -> bool:
    """Whether a single exact Poisson-subsampled Gaussian step already spends more than the target
    (then T steps do too): decides a given sigma whose full account would not fit in memory."""
    if plan.noise != "gaussian" or plan.sample_rate >= 1 or not 0 < plan.sigma < math.inf:
        return False
    one_step = gaussian_one_step_delta(effective_noise_multiplier(plan.sigma, plan.mechanisms),
                                       plan.sample_rate, plan.target_epsilon)
    return one_step > plan.delta * (1 + 1e-9)


def epsilon_spent(plan: PrivacyPlan, steps_done: int) -> float:
    """Upper bound on epsilon after `steps_done` steps (the guarantee)."""
    return make_accountant(plan).epsilon(steps_done).upper


class EpsilonTracker:
    """Epsilon spent at every logged row, exactly: the same accountant and accuracy as the final
    guarantee, built once.

    The steps of the rows are known before training starts, so a background thread computes them in
    order, ahead of the loop (one inverse FFT each; numpy releases the GIL), and a row only waits if
    the thread is behind. A row the schedule did not foresee (a failure) is computed on the spot.
    """

    def __init__(self, plan: PrivacyPlan, row_steps: Iterable[int] = (), after: int = 0):
        self.plan = plan
        self._acc = make_accountant(plan) if plan.private else None
        self._schedule = (sorted({int(t) for t in row_steps if after < t <= plan.steps})
                          if plan.private else [])
        self._scheduled = set(self._schedule)
        self._values: dict[int, float] = {}
        self._error: BaseException | None = None
        self._account = threading.Lock()  # the loop's unscheduled rows and the thread share the accountant
        self._ready = threading.Condition()
        self._stopped = False
        if self._schedule:
            threading.Thread(target=self._compute_schedule, name="pazo-epsilon", daemon=True).start()

    def _epsilon(self, step: int) -> float:
        with self._account:
            return self._acc.epsilon(step).upper

    def _compute_schedule(self) -> None:
        try:
            for step in self._schedule:
                if self._stopped:
                    return
                value = self._epsilon(step)
                with self._ready:
                    self._values[step] = value
                    self._ready.notify_all()
        except BaseException as exc:  # handed to the loop, which raises it at its next row
            with self._ready:
                self._error = exc
                self._ready.notify_all()

    def at(self, step: int) -> float | None:
        """Epsilon spent after `step` steps (upper bound; None for a non-private run)."""
        if not self.plan.private:
            return None
        if step not in self._scheduled:
            return self._epsilon(step) if step > 0 else 0.0
        with self._ready:
            while step not in self._values and self._error is None:
                self._ready.wait()
            if step not in self._values:
                raise self._error
            return self._values.pop(step)

    def close(self) -> None:
        """Stop the background thread after its current evaluation (the run ended early)."""
        self._stopped = True

    def final(self, steps_done: int) -> float:
        """The guarantee after `steps_done` steps (upper bound)."""
        return self._epsilon(steps_done) if steps_done > 0 else 0.0

    def pure_epsilon(self, steps_done: int) -> float | None:
        """Laplace runs: the pure epsilon-DP bound, which holds beside any (epsilon, delta) one."""
        return self._acc.pure_epsilon(steps_done) if isinstance(self._acc, LaplaceAccountant) else None
