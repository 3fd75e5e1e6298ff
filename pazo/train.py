"""Entry point: `python -m pazo.train [overrides]` (Hydra). The whole flow of a run is here:

validate -> data -> model -> privacy plan (sigma) -> method -> loop (Poisson batch, step, log,
evaluate) -> final epsilon check -> summary.json (+ W&B).
"""
from __future__ import annotations

import json
import logging
import math
import os
import secrets
import signal
import socket
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from pazo import CONFIG_DIR
from pazo.checkpoint import (CHECKPOINT, Heartbeat, LoopState, StopRequests, config_fingerprint, prepare_run_dir,
                             restore_checkpoint, save_checkpoint)
from pazo.data import build_dataset
from pazo.methods import build_method, method_config, method_info
from pazo.methods.base import public_grads_batched
from pazo.models import FunctionalModel, build_model, check_no_batchnorm, dispatched, place
from pazo.models.functional import cross_entropy_per_example
from pazo.privacy.accountants import BudgetError
from pazo.privacy.mechanisms import active_debug_break
from pazo.privacy.plan import EpsilonTracker, make_plan
from pazo.privacy.sampling import SAMPLERS
from pazo.registry import UnknownNameError
from pazo.rng import RandomStreams
from pazo.run_files import RunLogger
from pazo.validate import ConfigError, validate_against_data, validate_config
from pazo.warm_start import warm_start
from pazo.zo.engines import build_engine, choose_engine

log = logging.getLogger("pazo.train")  # not __name__: that is "__main__" under `python -m pazo.train`
#: exit codes: 0 finished, 1 failed, 2 bad input, 3 preempted (resumable), 130 interrupted (resumable)
EXIT_CODES = {"finished": 0, "failed": 1, "preempted": 3, "interrupted": 130}
# a short random token per process, so that two runs started in the same second get two directories
OmegaConf.register_new_resolver("pazo_unique", lambda: secrets.token_hex(3), use_cache=True, replace=True)
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


def _note_half_precision_queries(summary: dict, method) -> None:
    """How the in-place engine ran half-precision queries (on the fly, or the exact shift and
    why), once it has run any."""
    how = getattr(method.ctx.engine, "half_precision_queries", None)
    if how:
        summary["engine"] = {**summary["engine"], "half_precision_queries": how}


def _engine_choice(cfg, model, method_cfg, info, data, start) -> dict:
    """The zeroth-order engine (`engine.name`, or what `auto` picks) and why, for the summary. A
    resumed run keeps its first attempt's choice, so that its steps stay those of one engine."""
    earlier = (start.summary or {}).get("engine") if start.kind == "resume" else None
    if cfg.engine.name == "auto" and earlier and earlier.get("requested") == "auto":
        return {**earlier, "reason": f"kept from the first attempt ({earlier['reason']})"}
    sample = None
    if model.device.type == "cuda" and len(data.test):  # non-private examples to time the engines on
        sample = data.test.batch(np.arange(min(cfg.train.batch_size, len(data.test))), model.input_device)
    name, reason = choose_engine(cfg.engine, model, zeroth_order=info.family == "zeroth_order",
                                 queries=method_cfg.release().queries, sample=sample)
    return {"requested": cfg.engine.name, "name": name, "reason": reason}


def run(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Train one configuration into `run_dir`, or continue it from its checkpoint; returns the
    summary written to `run_dir/summary.json`."""
    refuse_debug_breaks(cfg)
    validate_config(cfg)
    method_cfg = method_config(cfg.method)
    device = resolve_device(cfg.device)
    run_dir = Path(run_dir)
    fingerprint = config_fingerprint(cfg)
    start = prepare_run_dir(run_dir, fingerprint)
    if start.kind == "finished":
        log.info(f"pazo: {run_dir} holds a finished run; nothing to do "
                 f"(final test accuracy {start.summary.get('final_test_accuracy')})")
        return start.summary
    streams = RandomStreams(cfg.seed, secure=cfg.privacy.secure_mode)
    data = build_dataset(cfg.dataset, streams)
    validate_against_data(cfg, len(data.private), len(data.public))

    torch.manual_seed(streams.seeds["init"])
    module = place(build_model(cfg.model, data.input_shape, data.num_classes), device)
    private = cfg.privacy.epsilon is not None
    if private:
        check_no_batchnorm(module, cfg.model.name)
    model = FunctionalModel(module, loss_fn=getattr(module, "loss_fn", cross_entropy_per_example))
    if dispatched(module):  # model.device_map: batches go to the first module's device, as accelerate expects
        if any(d.type == "meta" for d in model.devices):
            raise ConfigError("model.device_map offloads parameters to the CPU or disk (accelerate keeps them on "
                              "the meta device between uses): the zeroth-order step perturbs the parameters in "
                              "place and cannot reach offloaded ones; give a device map within the GPUs' memory")
        device = model.input_device
    warm = warm_start(model, data.public, cfg, streams, device)

    n, b = len(data.private), cfg.train.batch_size
    steps_per_epoch = n / b
    total_steps = cfg.train.steps or max(1, round(cfg.train.epochs * steps_per_epoch))
    info = method_info(method_cfg.name)
    sampler_cls = SAMPLERS[cfg.privacy.sampling]
    plan = make_plan(cfg.privacy, n, b, total_steps, method_cfg.release(), sampler_cls, info.privacy_note)
    engine = _engine_choice(cfg, model, method_cfg, info, data, start)
    # batches go to `device` (the input's); directions, noise and updates are made where the trainable
    # parameters start (model.device: with LoRA on a model spread over GPUs, possibly another GPU)
    method = build_method(method_cfg, model=model, plan=plan, streams=streams, public=data.public, device=model.device,
                          engine=build_engine(cfg.engine, engine["name"]),
                          query_train_mode=bool(cfg.engine.query_dropout))
    sampler = sampler_cls(n, b, streams.numpy["data"])

    loop = LoopState()
    if start.kind == "resume":
        loop = restore_checkpoint(start.checkpoint, module=module, streams=streams, sampler=sampler)
    previous = start.summary or {}
    logger = RunLogger(run_dir, cfg, cfg.logger, resume_bytes=loop.metrics_bytes if start.kind == "resume" else None,
                       wandb_id=previous.get("wandb_run_id") if start.kind == "resume" else None)
    summary = {"status": "running", "method": cfg.method.name, "dataset": cfg.dataset.name,
               "model": cfg.model.name, "device": str(device), "dim": model.dim,
               "parameter_devices": [str(d) for d in model.devices],
               "run_dir": str(run_dir), "privacy": plan.as_dict(), "data": data.describe(),
               "warm_start": warm, "engine": engine, "method_departures": method_cfg.departures(),
               "attempt": previous.get("attempt", 0) + 1 if start.kind == "resume" else 1,
               "resumed_from_step": loop.step if start.kind == "resume" else None,
               "earlier_attempt_moved_to": start.moved_to, "wandb_run_id": logger.wandb_id,
               "host": socket.gethostname(), "pid": os.getpid()}
    if hasattr(method_cfg, "public_grads_together"):  # PAZO-P/S: how this attempt takes its k public gradients
        together = model.takes_together(method_cfg.k, public_grads_batched(method_cfg, model))
        summary["public_grads"] = {"requested": method_cfg.public_grads_together, "together": together}
    logger.write_summary(summary)
    _print_header(summary, plan)
    if start.kind == "resume":
        log.info(f"resumed: {run_dir} from its checkpoint at step {loop.step} of {total_steps}")

    eval_every = (max(1, round(steps_per_epoch / cfg.train.evals_per_epoch))
                  if cfg.train.evals_per_epoch else total_steps)
    row_steps = [t for t in range(loop.step + 1, total_steps + 1)
                 if t % cfg.train.log_every == 0 or t % eval_every == 0 or t == total_steps]
    tracker = EpsilonTracker(plan, row_steps, after=loop.step)
    window, stat_sums = defaultdict(list, loop.window), defaultdict(float, loop.stat_sums)
    val = data.val if data.val is not None and len(data.val) else None
    test_histogram = data.test.class_histogram(data.num_classes)
    failure, stopped, last_saved = None, None, time.monotonic()
    module.train()
    bar = tqdm(range(loop.step + 1, total_steps + 1), desc=f"{cfg.method.name}", dynamic_ncols=True, disable=None,
               initial=loop.step, total=total_steps)

    def sync_loop() -> LoopState:
        loop.window, loop.stat_sums = dict(window), dict(stat_sums)
        return loop

    def checkpoint() -> None:
        sync_loop().metrics_bytes = logger.metrics_bytes()
        save_checkpoint(run_dir, fingerprint=fingerprint, module=module, streams=streams, sampler=sampler,
                        loop=loop, extra={"total_steps": total_steps})

    with StopRequests() as stop, Heartbeat(logger.beat):
        try:
            for step in bar:
                _sync(device)
                t0 = time.perf_counter()
                x, y = data.private.batch(sampler.sample(), device)
                stats = method.step(x, y, step)
                _sync(device)
                loop.step_times.append(time.perf_counter() - t0)
                loop.step = step
                for key, value in stats.items():
                    if value is not None and not (isinstance(value, float) and math.isnan(value)):
                        window[key].append(value)
                        stat_sums[key] += value
                # divergence is read from the parameters, never from raw private statistics
                if (step % cfg.train.log_every == 0 or step == total_steps) and not model.all_finite():
                    failure = f"diverged at step {step}: non-finite parameters"
                row = epsilon = None
                if step % cfg.train.log_every == 0 or step % eval_every == 0 or step == total_steps or failure:
                    epsilon = tracker.at(step)
                    row = {"step": step, "epoch": step / steps_per_epoch,
                           "s_per_iter": statistics.fmean(loop.step_times[loop.last_row:]), "sigma": plan.sigma,
                           "epsilon": epsilon}
                    row.update({("train_loss" if k == "loss" else k): statistics.fmean(v)
                                for k, v in window.items() if v})
                    window.clear()
                    loop.last_row = len(loop.step_times)
                if not failure and (step % eval_every == 0 or step == total_steps):
                    loop.last_eval = model.evaluate(data.test, cfg.train.eval_batch_size)
                    loop.best_acc = max(loop.best_acc, loop.last_eval["accuracy"])
                    row.update(test_accuracy=loop.last_eval["accuracy"], test_loss=loop.last_eval["loss"])
                    row.update({f"test_{k}": v for k, v in loop.last_eval.items() if k not in ("accuracy", "loss")})
                    if val is not None:
                        loop.last_val = model.evaluate(val, cfg.train.eval_batch_size)
                        loop.best_val_acc = max(loop.best_val_acc, loop.last_val["accuracy"])
                        row.update(val_accuracy=loop.last_val["accuracy"], val_loss=loop.last_val["loss"])
                    bar.set_postfix(acc=f"{loop.last_eval['accuracy']:.3f}",
                                    eps="-" if epsilon is None else f"{epsilon:.3f}")
                if row is not None:
                    logger.log(row)
                if failure:
                    break
                if stop.reason:
                    stopped = stop.reason
                    checkpoint()
                    break
                if step < total_steps and _checkpoint_due(cfg.train, step, last_saved):
                    checkpoint()
                    last_saved = time.monotonic()
        except BaseException as err:  # a crash, or a second Ctrl-C: keep what was written, mark the run
            interrupted = isinstance(err, KeyboardInterrupt)
            failure = f"{'interrupted' if interrupted else 'crashed'} at step {loop.step + 1}: " \
                      f"{type(err).__name__}: {err}"
            summary.update(_outcome(plan, tracker, sync_loop(), total_steps, failure, test_histogram))
            summary.update(status="interrupted" if interrupted else "failed")
            _note_half_precision_queries(summary, method)
            logger.write_summary(summary)
            logger.close(failed=True)
            raise
        finally:
            bar.close()
            tracker.close()

    summary.update(_outcome(plan, tracker, sync_loop(), total_steps, failure, test_histogram))
    _note_half_precision_queries(summary, method)
    if stopped:
        summary.update(status=stopped, failure=None, stopped_at_step=loop.step)
    logger.write_summary(summary)
    logger.close(failed=summary["status"] == "failed")
    if summary["status"] == "finished":
        if cfg.train.save_model:
            torch.save(module.state_dict(), run_dir / "model.pt")
        if not cfg.train.keep_checkpoint:
            (run_dir / CHECKPOINT).unlink(missing_ok=True)
    _print_summary(summary)
    return summary


DEBUG_ONLY = ("pazo: audit.debug_break is a debug-only switch that breaks the privacy guarantee on purpose; "
              "only the privacy audit (python -m pazo.audit) accepts it")


def refuse_debug_breaks(cfg) -> None:
    """A training run never runs with a debug break of the mechanisms (`pazo.audit` only)."""
    audit = cfg.get("audit")
    if active_debug_break() is not None or (audit is not None and audit.get("debug_break") is not None):
        raise ConfigError(DEBUG_ONLY.removeprefix("pazo: "))


def _checkpoint_due(train_cfg, step: int, last_saved: float) -> bool:
    """Every `checkpoint_every` steps if set, else every `checkpoint_minutes` of wall time."""
    if train_cfg.checkpoint_every:
        return step % train_cfg.checkpoint_every == 0
    return time.monotonic() - last_saved >= 60 * train_cfg.checkpoint_minutes


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


def _outcome(plan, tracker, loop: LoopState, total_steps: int, failure: str | None,
             test_histogram: list[int]) -> dict:
    """Status, accuracies, s/iter and the privacy spent by the steps done (whatever the status);
    `warnings` holds a chance-level warning (`chance_level_warning`) when the final accuracy is one."""
    steps_done = loop.step
    priv = plan.as_dict()
    priv["steps_done"] = steps_done
    if plan.private:
        spent = tracker.final(steps_done)
        within = spent <= plan.target_epsilon + 1e-12
        priv.update(epsilon_spent=spent, within_budget=within, over_budget=not within,
                    guarantee_holds=within and plan.sampling_matches_accountant)
        if plan.noise == "laplace":
            priv["pure_epsilon_spent"] = tracker.pure_epsilon(steps_done)
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
    if "noisy_candidate_won" in loop.stat_sums and steps_done:
        out["noisy_candidate_win_rate"] = loop.stat_sums["noisy_candidate_won"] / steps_done
    chance = chance_level_warning(out["final_test_accuracy"], test_histogram)
    out["warnings"] = [chance] if chance else []
    return out


def _print_header(summary: dict, plan) -> None:
    d = summary["data"]
    log.info(f"pazo: {summary['method']} on {summary['dataset']} ({summary['model']}, d={summary['dim']}, "
             f"device {summary['device']}); private {d['n_private']}, public {d['n_public']}, "
             f"test {d['n_test']}")
    if plan.private:
        log.info(f"privacy: {plan.guarantee}, target epsilon={plan.target_epsilon} delta={plan.delta:.3g} -> "
                 f"{plan.noise} sigma={plan.sigma:.4f} ({plan.sigma_source}), q={plan.sample_rate:.4f}, "
                 f"T={plan.steps}, {plan.sampling} sampling")
    for note in plan.notes + summary["method_departures"]:
        log.info(f"note: {note}")


def _print_summary(s: dict) -> None:
    p = s["privacy"]
    fmt = lambda v, f=".4f": "-" if v is None else format(v, f)  # noqa: E731
    log.info("")
    log.info(f"{s['status'].upper()}" + (f" ({s['failure']})" if s["failure"] else ""))
    log.info(f"  test accuracy: final {fmt(s['final_test_accuracy'])}, best {fmt(s['best_test_accuracy'])}")
    if p["private"]:
        log.info(f"  epsilon spent {fmt(p['epsilon_spent'])} / target {p['target_epsilon']} "
                 f"(delta {p['delta']:.3g}, sigma {p['sigma']:.4f}, {p['steps_done']} steps) "
                 f"{'within budget' if p['within_budget'] else 'OVER BUDGET'}; {p['guarantee']}")
        if p.get("pure_epsilon_spent") is not None:
            log.info(f"  pure epsilon-DP bound (Laplace, basic composition): {p['pure_epsilon_spent']:.4f}")
    else:
        log.info("  non-private run (no clipping, no noise)")
    log.info(f"  s/iter: mean {fmt(s['mean_s_per_iter'], '.5f')}, median {fmt(s['median_s_per_iter'], '.5f')}")
    if "noisy_candidate_win_rate" in s:
        log.info(f"  noisy candidate won {s['noisy_candidate_win_rate']:.1%} of steps")
    for warning in s.get("warnings", []):
        log.warning(f"  warning: {warning}")
    log.info(f"  results: {s['run_dir']}")


def _interrupted_where(run_dir: Path) -> str:
    """What a Ctrl-C that ended the run left: the loop records it in summary.json (status
    interrupted, the steps done); one during set-up (data, model, calibration) comes before any
    training, and a relaunch simply starts the run."""
    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        status = None
    if status == "interrupted":
        return f"interrupted; {run_dir}/summary.json records the steps done, and the same command resumes"
    if status is None:
        return "interrupted during set-up, before the first step: nothing was trained; the same command starts the run"
    return (f"interrupted during set-up, before this attempt's first step: nothing was trained in it; "
            f"{run_dir}/summary.json is the earlier attempt's (status {status}), and the same command goes on from it")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if threading.current_thread() is threading.main_thread():   # (signals can be set only there)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here a Ctrl-C is the run's to record
    try:
        summary = run(cfg, hc.runtime.output_dir)
    except USER_ERRORS as err:
        log.error(f"pazo: error: {err}")
        if hc.mode == RunMode.MULTIRUN:
            return None  # one bad job does not stop the rest of the sweep
        sys.exit(2)
    except KeyboardInterrupt:  # a second Ctrl-C in the loop (the summary says at which step), or one in set-up
        log.error(f"pazo: {_interrupted_where(Path(hc.runtime.output_dir))}")
        sys.exit(EXIT_CODES["interrupted"])
    code = EXIT_CODES.get(summary["status"], 1)
    if code and hc.mode != RunMode.MULTIRUN:
        sys.exit(code)
    return summary["final_test_accuracy"]


def check_overrides(argv: list[str], config_name: str = "config") -> str | None:
    """Compose the config (`config_name`) with the command line's overrides as Hydra will: the first
    line of the error (an unknown key, a value of the wrong type, a missing config group option), or
    None. Multiruns and Hydra's own flags are left to Hydra."""
    if any(a.startswith("-") for a in argv):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    overrides = [a for a in argv if not a.startswith("hydra.")]
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        lines = [line.strip() for e in (err, err.__cause__) if e is not None for line in str(e).splitlines()]
        lines = [line for line in lines if line and not line.startswith(("full_key", "object_type", "To append"))]
        if len(lines) > 2 and lines[1].startswith("Available options"):  # a config group's choices
            options = [o for o in lines[2:] if o.isidentifier() and not o.endswith("_schema")]
            return f"{lines[0]}; choices: {', '.join(options)}"
        return "; ".join(dict.fromkeys(lines[:2])) or type(err).__name__
    return None


def _interrupted_before_start(signum, frame):
    print("pazo: interrupted while the command line was read, before the run started: nothing was written",
          file=sys.stderr)
    raise SystemExit(EXIT_CODES["interrupted"])


def cli() -> None:
    """`pazo-train` / `python -m pazo.train`: a command line Hydra cannot compose is one line
    (`pazo: error: ...`, exit 2) before anything starts, and so is a Ctrl-C before `main`;
    everything else is `main`."""
    signal.signal(signal.SIGINT, _interrupted_before_start)
    keys = [a.split("=", 1)[0].lstrip("+~") for a in sys.argv[1:]]
    if any(k == "audit" or k.startswith("audit.") for k in keys):
        problem = DEBUG_ONLY.removeprefix("pazo: ") if "audit.debug_break" in keys else \
            "audit.* settings belong to the privacy audit (python -m pazo.audit), not to a training run"
    else:
        problem = check_overrides(sys.argv[1:])
    if problem:
        print(f"pazo: error: {problem}", file=sys.stderr)
        sys.exit(2)
    main()


if __name__ == "__main__":
    cli()
