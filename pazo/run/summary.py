"""What a run reports: the summary an attempt starts with (`launch_summary`) and its outcome (status,
accuracies, time per step, the privacy spent), the chance-level warning, the lines printed at start and end."""
from __future__ import annotations

import logging
import math
import os
import socket
import statistics
from functools import partial
from pathlib import Path

from pazo.run.checkpoint import LoopState
from pazo.privacy.plan import cross_check, epsilon_spent

log = logging.getLogger("pazo.train")


def chance_level_warning(accuracy: float | None, test_histogram: list[int], z: float = 2.0) -> str | None:
    """A `chance_level: ...` warning when `accuracy` on the test set is not distinguishably better
    than the best constant guess, else None.

    The best constant guess is right on the majority-class rate p0 = max(histogram) / n_test of the
    test set. The rule is a simple margin: the accuracy is at chance level when it is at most
    p0 + z * sqrt(p0 (1 - p0) / n_test), i.e. within z = 2 standard errors of what a classifier that
    is right with probability p0 would score on n_test examples (about a one-sided 97.7% test under
    the normal approximation). On the digits test set (359 images, p0 = 37/359 = 0.103) the margin
    is 0.032: a final accuracy up to 0.135 is flagged.
    """
    n = sum(test_histogram)
    if accuracy is None or n == 0:
        return None
    p0 = max(test_histogram) / n
    margin = z * math.sqrt(p0 * (1 - p0) / n)
    if accuracy > p0 + margin:
        return None
    return (f"chance_level: final test accuracy {accuracy:.3f} is not more than {z:g} standard errors "
            f"({margin:.3f}) above the majority-class rate {p0:.3f} (n_test {n})")


def outcome(plan, tracker, loop: LoopState, total_steps: int, failure: str | None,
             test_histogram: list[int], released_through: int = 0, cache_dir=None) -> dict:
    """Status, accuracies, s/iter and the privacy spent by the steps done (whatever the status), or
    by the steps earlier attempts released (`released_through`, as any outlet shows: `released_beyond`),
    if further: a resumed attempt stopped before it computed them again has still released them;
    `warnings` holds a chance-level warning (`chance_level_warning`) when the final accuracy is one.
    What the method adds of its own comes from `Method.outcome`. A run stopped early cross-checks
    the steps it counted, through the account memo in `cache_dir` (`cross_check`)."""
    steps_done = loop.step
    priv = {**plan.as_dict(), "steps_done": steps_done, **released_beyond(plan, released_through, steps_done)}
    if plan.private:
        spent = tracker.final(max(steps_done, priv.get("steps_released", 0)))
        within = spent <= plan.target_epsilon + 1e-12
        priv.update(epsilon_spent=spent, within_budget=within, over_budget=not within,
                    guarantee_holds=within and plan.sampling_matches_accountant)
        if plan.noise == "laplace":
            priv["pure_epsilon_spent"] = tracker.pure_epsilon(steps_done)
        counted = max(steps_done, priv.get("steps_released", 0))
        if plan.cross_check and counted != plan.cross_check["steps"]:   # (the run stopped early)
            priv["cross_check"] = cross_check(plan, counted, cache_dir)
        if not within:  # the guarantee the run promised does not hold: never a finished run
            over = f"over_budget: epsilon spent {spent:.6g} > target {plan.target_epsilon}"
            failure = f"{failure}; {over}" if failure else over
    # the first steps include one-off set-up (allocations, vmap tracing): report the median too
    times = loop.step_times[1:] or loop.step_times
    last_eval, last_val = loop.last_eval, loop.last_val
    out = {"status": "failed" if failure else "finished", "failure": failure,
           "steps_done": steps_done, "steps_planned": total_steps,
           "final_test_accuracy": last_eval["accuracy"] if last_eval and not failure else None,
           "final_test_loss": last_eval["loss"] if last_eval and not failure else None,
           "final_test_metrics": dict(last_eval) if last_eval and not failure else None,
           "best_test_accuracy": loop.best_acc if loop.best_acc >= 0 else None,
           "final_val_accuracy": last_val["accuracy"] if last_val and not failure else None,
           "best_val_accuracy": loop.best_val_acc if loop.best_val_acc >= 0 else None,
           "mean_s_per_iter": statistics.fmean(times) if times else None,
           "median_s_per_iter": statistics.median(times) if times else None,
           "privacy": priv}
    chance = chance_level_warning(out["final_test_accuracy"], test_histogram)
    out["warnings"] = [chance] if chance else []
    return out


def released_beyond(plan, steps_released: int, steps_done: int, spent=None) -> dict:
    """`privacy.steps_released`, where earlier attempts released further than the `steps_done` of
    this one: at most the plan's steps (an outlet edited to show more cannot have been released by
    this computation, whose attempts each run at most that many); with `spent` (the accountant's
    epsilon after t steps), also the epsilon they spent."""
    steps = min(steps_released, plan.steps)
    if steps <= steps_done:
        return {}
    return {"steps_released": steps, **({"epsilon_spent": spent(steps)} if spent and plan.private else {})}



def launch_summary(run_dir: Path, r, start, loop: LoopState, recorder) -> dict:
    """The summary an attempt writes as it starts (status running). From then on it covers what
    earlier attempts released (`privacy.steps_released` and its epsilon), as a kill may come before
    this attempt's first row."""
    previous = start.summary or {}
    summary = {"status": "running", **r.describe(), "run_dir": str(run_dir),
               "attempt": previous.get("attempt", 0) + 1 if start.resuming else 1,
               "resumed_from_step": loop.step if start.resuming else None,
               "earlier_attempt_moved_to": start.moved_to, "wandb_run_id": recorder.wandb_id,
               "host": socket.gethostname(), "pid": os.getpid()}
    summary["privacy"].update(released_beyond(r.plan, recorder.steps_released, loop.step,
                                              partial(epsilon_spent, r.plan)))
    if start.replaying and r.device.type == "cuda" and r.plan.private:
        summary["outside_guarantee"].append(
            f"the steps after step {loop.step} were run again with an earlier attempt's noise on CUDA, whose "
            "kernels need not be deterministic: rows that attempt released for them (W&B cannot retract "
            "them) may differ from this attempt's by more than the noise covers")
    return summary

#: each assumption of the guarantee in a few words, for the one line a run prints (the whole text is
#: in summary.json's privacy.assumptions and docs/concepts/guarantee.md)
ASSUMPTION_WORDS = {"n_private_public": "n is public", "no_selection": "no best-of-several selection",
                    "seed_secret": "the seed stays secret"}


#: where a run's guarantee's assumptions are written in full
RUN_ASSUMPTIONS = "summary.json's privacy.assumptions"


def assumptions_line(assumptions: dict[str, str], in_full: str = RUN_ASSUMPTIONS) -> str:
    """One line for what the guarantee assumes, printed once per run (a sweep's log has one per run);
    `in_full` says where each is written out (a library user's: `describe()`)."""
    words = ", ".join(ASSUMPTION_WORDS.get(name, name) for name in assumptions)
    return f"assumes: {words} (each in full: {in_full})"


SECURE_SEED_NOTE = ("note: privacy.secure_mode=true: the noise and the Poisson batches are drawn from the operating "
                    "system's entropy and the seed is ignored for them (it still sets the splits, initialisation, "
                    "directions and public batches): this run cannot be replayed from its seed")


def privacy_lines(plan, notes: list[str] = (), secure_note: str = SECURE_SEED_NOTE,
                  assumptions_in: str = RUN_ASSUMPTIONS) -> list[str]:
    """The guarantee as it is printed once, before the first step: target, sigma and sampling; that
    the seed does not replay the noise (secure mode); what the guarantee assumes (in full in
    `assumptions_in`); the plan's notes and `notes`. A run's header (`print_header`) and a library
    user's engine (`pazo.private`) print it."""
    lines = []
    if plan.private:
        lines.append(f"privacy: {plan.guarantee}, target epsilon={plan.target_epsilon} delta={plan.delta:.3g} -> "
                     f"{plan.noise} sigma={plan.sigma:.4f} ({plan.sigma_source}), q={plan.sample_rate:.4f}, "
                     f"T={plan.steps}, {plan.sampling} sampling")
    if plan.private and plan.cross_check:
        lines.append(f"accountant: {plan.accountant_name} (privacy.accountant); {cross_check_line(plan.cross_check)}")
    if plan.noise_seed.startswith("os entropy"):   # said where the user looks: the seed does not replay the run
        lines.append(secure_note)
    if plan.assumptions:
        lines.append(assumptions_line(plan.assumptions, assumptions_in))
    return lines + [f"note: {note}" for note in [*plan.notes, *notes]]


def cross_check_line(check: dict) -> str:
    """A run's cross-check (`pazo.privacy.plan.cross_check`) in one line."""
    values = ", ".join(f"{name} {'out of reach' if eps is None else format(eps, '.4f')}"
                       for name, eps in check["epsilon"].items())
    return f"cross-check, epsilon after {check['steps']} steps at this q, sigma and delta: {values}"


def header_lines(summary: dict, plan) -> list[str]:
    """What a run prints before its first step: the run in one line, then its guarantee (`privacy_lines`)."""
    d = summary["data"]
    threads = summary.get("threads", {}).get("count")
    return [f"pazo: {summary['method']} on {summary['dataset']} ({summary['model']}, d={summary['dim']}, "
            f"device {summary['device']}, {threads} CPU thread{'s' if threads != 1 else ''}); "
            f"private {d['n_private']}, public {d['n_public']}, test {d['n_test']}",
            *update_rule_lines(summary.get("update_rule")),
            *privacy_lines(plan, summary["method_departures"])]


def update_rule_lines(rule: dict | None) -> list[str]:
    """The run's step-size schedule and optimiser in one line, where they are not the default."""
    if not rule:
        return []
    said = lambda block: " ".join([block["name"], *(f"{k}={v}" for k, v in block.items() if k != "name")])  # noqa: E731
    memory = ("; the optimiser holds the update and its state as vectors of the model's size"
              if "materialised_update" in rule else "")
    return [f"update: schedule {said(rule['schedule'])}, optimizer {said(rule['optimizer'])}{memory}"]


def figure(value: float | None, form: str = ".4f") -> str:
    """A number as the terminal shows it: 4 decimals (or `form`), "-" for none (the files keep every digit)."""
    return "-" if value is None else format(value, form)


def finished_line(run_dir, summary: dict) -> str:
    """The line a relaunch into a finished run (same config) prints: nothing to do, and its accuracy."""
    return (f"pazo: {run_dir} holds a finished run; nothing to do "
            f"(final test accuracy {figure(summary.get('final_test_accuracy'))})")


def print_header(summary: dict, plan) -> None:
    for line in header_lines(summary, plan):
        log.info(line)


def resumed_line(run_dir, step: int, total_steps: int) -> str:
    """The line a resumed attempt prints first (`pazo.run.releases` reads the step back from train.log)."""
    return f"resumed: {run_dir} from its checkpoint at step {step} of {total_steps}"


def print_summary(s: dict) -> None:
    p = s["privacy"]
    log.info("")
    log.info(f"{s['status'].upper()}" + (f" ({s['failure']})" if s["failure"] else ""))
    log.info(f"  test accuracy: final {figure(s['final_test_accuracy'])}, best {figure(s['best_test_accuracy'])}")
    if p["private"]:
        earlier = f", {p['steps_released']} released by earlier attempts" if p.get("steps_released") else ""
        log.info(f"  epsilon spent {figure(p['epsilon_spent'])} / target {p['target_epsilon']} "
                 f"(delta {p['delta']:.3g}, sigma {p['sigma']:.4f}, {p['steps_done']} steps{earlier}) "
                 f"{'within budget' if p['within_budget'] else 'OVER BUDGET'}; {p['guarantee']}")
        if p.get("pure_epsilon_spent") is not None:
            log.info(f"  pure epsilon-DP bound (Laplace, basic composition): {p['pure_epsilon_spent']:.4f}")
        if p.get("cross_check"):
            log.info(f"  accountant {p['accountant_name']}; {cross_check_line(p['cross_check'])}")
    else:
        log.info("  non-private run (no clipping, no noise)")
    log.info(f"  s/iter: mean {figure(s['mean_s_per_iter'], '.5f')}, median {figure(s['median_s_per_iter'], '.5f')}")
    for line in update_rule_lines(s.get("update_rule")):
        log.info(f"  {line}")
    if "noisy_candidate_win_rate" in s:
        log.info(f"  noisy candidate won {s['noisy_candidate_win_rate']:.1%} of steps")
    for warning in s.get("warnings", []):
        log.warning(f"  warning: {warning}")
    log.info(f"  results: {s['run_dir']}")
