"""The membership-inference figures researchers quote, from the canary scores: AUROC and the TPR at
a low FPR, each with an interval.

* AUROC: the chance that a random member canary scores above a random non-member (ties count 1/2),
  i.e. the Mann-Whitney U statistic over n_in n_out; interval: a seeded percentile bootstrap that
  resamples members and non-members separately.
* TPR at FPR alpha: the highest threshold-rule TPR whose FPR is at most alpha (no interpolation);
  interval: Clopper-Pearson on the members above that threshold (given the threshold). It is
  reported only when the non-members are enough to resolve alpha, at least `MIN_FALSE_POSITIVES`
  of them allowed above the threshold (alpha n_out >= 3); otherwise it is undefined (None).

Scores are "higher = more likely a member". These figures describe the attack; only the bounds of
`bound.py` and `fdp.py` are statements about epsilon."""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import rankdata

#: an FPR alpha is resolvable when at least this many non-members may score above the threshold
MIN_FALSE_POSITIVES = 3
#: the FPRs reported (each only where resolvable)
FPRS = (0.01, 0.001)


def auroc(scores, members) -> float:
    """P[score of a member > score of a non-member] + P[tie] / 2."""
    scores, members = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    n_in, n_out = int(members.sum()), int((~members).sum())
    if n_in == 0 or n_out == 0:
        raise ValueError("AUROC needs at least one member and one non-member")
    ranks = rankdata(scores)  # average ranks: ties count half
    return float((ranks[members].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out))


def auroc_interval(scores, members, confidence: float, seed: int, resamples: int = 1000) -> tuple[float, float]:
    """Percentile bootstrap interval of the AUROC, members and non-members resampled apart."""
    scores, members = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    s_in, s_out = scores[members], scores[~members]
    rng = np.random.default_rng(seed)
    values = np.empty(resamples)
    for j in range(resamples):
        a, b = rng.choice(s_in, s_in.size), rng.choice(s_out, s_out.size)
        values[j] = auroc(np.concatenate([a, b]), np.r_[np.ones(a.size, bool), np.zeros(b.size, bool)])
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(values, [tail, 1 - tail])
    return float(lo), float(hi)


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact two-sided binomial interval for successes / trials."""
    tail = (1 - confidence) / 2
    lo = 0.0 if successes == 0 else float(beta_dist.ppf(tail, successes, trials - successes + 1))
    hi = 1.0 if successes == trials else float(beta_dist.ppf(1 - tail, successes + 1, trials - successes))
    return lo, hi


def tpr_at_fpr(scores, members, fpr: float) -> tuple[float, int, int, int] | None:
    """(TPR, true positives, false positives, members) at the lowest threshold whose FPR is <= fpr,
    or None when the non-members cannot resolve fpr."""
    scores, members = np.asarray(scores, dtype=float), np.asarray(members, dtype=bool)
    n_in, n_out = int(members.sum()), int((~members).sum())
    if n_in == 0 or fpr * n_out < MIN_FALSE_POSITIVES:
        return None
    allowed = math.floor(fpr * n_out + 1e-9)  # false positives allowed
    best = (0.0, 0, 0)
    # thresholds at each distinct score, high to low: "member" = score >= threshold
    for t in np.unique(scores)[::-1]:
        above = scores >= t
        fp = int((above & ~members).sum())
        if fp > allowed:
            break
        tp = int((above & members).sum())
        best = (tp / n_in, tp, fp)
    return best[0], best[1], best[2], n_in


def membership_metrics(scores, members, confidence: float, seed: int) -> dict:
    """AUROC and TPR at each FPR of `FPRS`, with intervals at `confidence` (None where undefined)."""
    members = np.asarray(members, dtype=bool)
    out: dict = {"members": int(members.sum()), "non_members": int((~members).sum())}
    if out["members"] == 0 or out["non_members"] == 0:
        return {**out, "auroc": None, "auroc_interval": None,
                **{f"tpr_at_fpr_{f:g}": None for f in FPRS}, **{f"tpr_at_fpr_{f:g}_interval": None for f in FPRS}}
    out["auroc"] = auroc(scores, members)
    out["auroc_interval"] = list(auroc_interval(scores, members, confidence, seed))
    out["auroc_interval_method"] = "percentile bootstrap, 1000 resamples"
    for f in FPRS:
        got = tpr_at_fpr(scores, members, f)
        out[f"tpr_at_fpr_{f:g}"] = None if got is None else got[0]
        out[f"tpr_at_fpr_{f:g}_interval"] = None if got is None else list(clopper_pearson(got[1], got[3], confidence))
    out["tpr_interval_method"] = "Clopper-Pearson, given the threshold"
    out["fpr_defined_when"] = f"fpr * non_members >= {MIN_FALSE_POSITIVES}"
    return out
