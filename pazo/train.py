"""Entry point: `python -m pazo.train [overrides]` (Hydra). The whole flow of a run is here:

validate -> data -> model -> privacy plan (sigma) -> method -> loop (Poisson batch, step, log,
evaluate) -> final epsilon check -> summary.json (+ W&B).
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig
from tqdm import tqdm

from pazo.data import build_dataset
from pazo.logging import RunLogger
from pazo.methods import build_method, method_config, method_info
from pazo.methods.engines import build_engine
from pazo.models import FunctionalModel, build_model, check_no_batchnorm
from pazo.privacy.accountant import BudgetError
from pazo.privacy.plan import EpsilonTracker, make_plan
from pazo.privacy.sampling import SAMPLERS
from pazo.registry import UnknownNameError
from pazo.rng import RandomStreams
from pazo.validate import ConfigError, validate_against_data, validate_config
from pazo.warm_start import warm_start

USER_ERRORS = (ConfigError, BudgetError, UnknownNameError, FileNotFoundError)  # DataMissingError too


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for but CUDA is not available; use device=auto or cpu")
    return device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Train one configuration; returns the summary written to `run_dir/summary.json`."""
    validate_config(cfg)
    method_cfg = method_config(cfg.method)
    device = resolve_device(cfg.device)
    streams = RandomStreams(cfg.seed, secure_noise=cfg.privacy.secure_noise)
    data = build_dataset(cfg.dataset, streams)
    validate_against_data(cfg, len(data.private), len(data.public))

    torch.manual_seed(streams.seeds["init"])
    module = build_model(cfg.model, data.input_shape, data.num_classes).to(device)
    private = cfg.privacy.epsilon is not None
    if private:
        check_no_batchnorm(module, cfg.model.name)
    model = FunctionalModel(module)
    warm = warm_start(model, data.public, cfg, streams, device)

    n, b = len(data.private), cfg.train.batch_size
    steps_per_epoch = n / b
    total_steps = cfg.train.steps or max(1, round(cfg.train.epochs * steps_per_epoch))
    info = method_info(method_cfg.name)
    sampler_cls = SAMPLERS[cfg.privacy.sampling]
    plan = make_plan(cfg.privacy, n, b, total_steps, method_cfg.release(), sampler_cls, info.privacy_note)
    method = build_method(method_cfg, model=model, plan=plan, streams=streams, public=data.public, device=device,
                          engine=build_engine(cfg.engine), query_train_mode=bool(cfg.engine.query_dropout))
    sampler = sampler_cls(n, b, streams.numpy["data"])
    tracker = EpsilonTracker(plan, cfg.privacy.account_points)

    logger = RunLogger(run_dir, cfg, cfg.logger)
    summary = {"status": "running", "method": cfg.method.name, "dataset": cfg.dataset.name,
               "model": cfg.model.name, "device": str(device), "dim": model.dim,
               "run_dir": str(run_dir), "privacy": plan.as_dict(), "data": data.describe(),
               "warm_start": warm, "method_departures": method_cfg.departures()}
    logger.write_summary(summary)
    _print_header(summary, plan)

    eval_every = (max(1, round(steps_per_epoch / cfg.train.evals_per_epoch))
                  if cfg.train.evals_per_epoch else total_steps)
    step_times, window, stat_sums = [], defaultdict(list), defaultdict(float)
    best_acc, last_eval, failure, last_row = -1.0, None, None, 0
    module.train()
    bar = tqdm(range(1, total_steps + 1), desc=f"{cfg.method.name}", dynamic_ncols=True, disable=None)
    steps_done = 0
    try:
        for step in bar:
            _sync(device)
            t0 = time.perf_counter()
            x, y = data.private.batch(sampler.sample(), device)
            stats = method.step(x, y, step)
            _sync(device)
            step_times.append(time.perf_counter() - t0)
            steps_done = step
            for key, value in stats.items():
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    window[key].append(value)
                    stat_sums[key] += value
            loss = stats.get("loss", float("nan"))
            if math.isinf(loss) or (math.isnan(loss) and len(x) > 0) or (
                    step % cfg.train.log_every == 0 and not model.all_finite()):
                failure = f"diverged at step {step}: loss={loss}"
            epsilon = tracker.update(step)
            row = None
            if step % cfg.train.log_every == 0 or step % eval_every == 0 or step == total_steps or failure:
                row = {"step": step, "epoch": step / steps_per_epoch,
                       "s_per_iter": statistics.fmean(step_times[last_row:]), "sigma": plan.sigma,
                       "epsilon": epsilon}
                row.update({("train_loss" if k == "loss" else k): statistics.fmean(v)
                            for k, v in window.items() if v})
                window.clear()
                last_row = len(step_times)
            if not failure and (step % eval_every == 0 or step == total_steps):
                last_eval = model.evaluate(data.test, cfg.train.eval_batch_size)
                best_acc = max(best_acc, last_eval["accuracy"])
                row.update(test_accuracy=last_eval["accuracy"], test_loss=last_eval["loss"])
                bar.set_postfix(loss=f"{row.get('train_loss', float('nan')):.3f}",
                                acc=f"{last_eval['accuracy']:.3f}",
                                eps="-" if epsilon is None else f"{epsilon:.3f}")
            if row is not None:
                logger.log(row)
            if failure:
                break
    except BaseException as err:  # a crash or Ctrl-C: keep what was written, mark the run, re-raise
        failure = f"{'interrupted' if isinstance(err, KeyboardInterrupt) else 'crashed'} at step " \
                  f"{steps_done + 1}: {type(err).__name__}: {err}"
        summary.update(status="failed", failure=failure, steps_done=steps_done)
        logger.write_summary(summary)
        logger.close(failed=True)
        raise
    finally:
        bar.close()

    summary.update(_outcome(plan, tracker, steps_done, total_steps, step_times, last_eval, best_acc,
                            stat_sums, failure, data.test.class_histogram(data.num_classes)))
    logger.write_summary(summary)
    logger.close(failed=summary["status"] == "failed")
    _print_summary(summary)
    return summary


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


def _outcome(plan, tracker, steps_done, total_steps, step_times, last_eval, best_acc, stat_sums, failure,
             test_histogram):
    """The end-of-run part of the summary; `test_histogram` (test-set class counts) gives the
    chance level that `warnings` compares the final accuracy with (`chance_level_warning`)."""
    priv = plan.as_dict()
    priv["steps_done"] = steps_done
    if plan.private:
        spent = tracker.final(steps_done)
        priv.update(epsilon_spent=spent, within_budget=spent <= plan.target_epsilon + 1e-12,
                    guarantee_holds=(spent <= plan.target_epsilon + 1e-12)
                    and plan.sampling_matches_accountant)
        if plan.noise == "laplace":
            priv["pure_epsilon_spent"] = tracker.pure_epsilon(steps_done)
    # the first steps include one-off set-up (allocations, vmap tracing): report the median too
    times = step_times[1:] or step_times
    out = {"status": "failed" if failure else "finished", "failure": failure,
           "steps_done": steps_done, "steps_planned": total_steps,
           "final_test_accuracy": last_eval["accuracy"] if last_eval and not failure else None,
           "final_test_loss": last_eval["loss"] if last_eval and not failure else None,
           "best_test_accuracy": best_acc if best_acc >= 0 else None,
           "mean_s_per_iter": statistics.fmean(times) if times else None,
           "median_s_per_iter": statistics.median(times) if times else None,
           "privacy": priv}
    if "noisy_candidate_won" in stat_sums and steps_done:
        out["noisy_candidate_win_rate"] = stat_sums["noisy_candidate_won"] / steps_done
    chance = chance_level_warning(out["final_test_accuracy"], test_histogram)
    out["warnings"] = [chance] if chance else []
    return out


def _print_header(summary: dict, plan) -> None:
    d = summary["data"]
    print(f"pazo: {summary['method']} on {summary['dataset']} ({summary['model']}, d={summary['dim']}, "
          f"device {summary['device']}); private {d['n_private']}, public {d['n_public']}, "
          f"test {d['n_test']}")
    if plan.private:
        print(f"privacy: {plan.guarantee}, target epsilon={plan.target_epsilon} delta={plan.delta:.3g} -> "
              f"{plan.noise} sigma={plan.sigma:.4f} ({plan.sigma_source}), q={plan.sample_rate:.4f}, "
              f"T={plan.steps}, {plan.sampling} sampling")
    for note in plan.notes + summary["method_departures"]:
        print(f"note: {note}")


def _print_summary(s: dict) -> None:
    p = s["privacy"]
    fmt = lambda v, f=".4f": "-" if v is None else format(v, f)  # noqa: E731
    print(f"\n{s['status'].upper()}" + (f" ({s['failure']})" if s["failure"] else ""))
    print(f"  test accuracy: final {fmt(s['final_test_accuracy'])}, best {fmt(s['best_test_accuracy'])}")
    if p["private"]:
        print(f"  epsilon spent {fmt(p['epsilon_spent'])} / target {p['target_epsilon']} "
              f"(delta {p['delta']:.3g}, sigma {p['sigma']:.4f}, {p['steps_done']} steps) "
              f"{'within budget' if p['within_budget'] else 'OVER BUDGET'}; {p['guarantee']}")
        if p.get("pure_epsilon_spent") is not None:
            print(f"  pure epsilon-DP bound (Laplace, basic composition): {p['pure_epsilon_spent']:.4f}")
    else:
        print("  non-private run (no clipping, no noise)")
    print(f"  s/iter: mean {fmt(s['mean_s_per_iter'], '.5f')}, median {fmt(s['median_s_per_iter'], '.5f')}")
    if "noisy_candidate_win_rate" in s:
        print(f"  noisy candidate won {s['noisy_candidate_win_rate']:.1%} of steps")
    for warning in s.get("warnings", []):
        print(f"  warning: {warning}")
    print(f"  results: {s['run_dir']}")


@hydra.main(version_base="1.3", config_path="../configs", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    try:
        summary = run(cfg, hc.runtime.output_dir)
    except USER_ERRORS as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        if hc.mode == RunMode.MULTIRUN:
            return None  # one bad job does not stop the rest of the sweep
        sys.exit(2)
    if summary["status"] == "failed" and hc.mode != RunMode.MULTIRUN:
        sys.exit(1)
    return summary["final_test_accuracy"]


if __name__ == "__main__":
    main()
