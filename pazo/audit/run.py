"""One training run with canaries, then the audited lower bound on its epsilon (`pazo.audit.bound`),
next to the epsilon it prints; the command around it, `pazo-audit` / `python -m pazo.audit`, is
`pazo.audit.command`.

The run is the training run of the same overrides (same data, model, method, sigma, q, T, seed),
with m canaries added to the private data (`pazo.audit.canaries`); it writes summary.json (with an
`audit` block), audit.json and config.yaml to its directory (outputs/audits/...), through the
run's `pazo.run.recorder.Recorder` as a training run writes its files.
"""
from __future__ import annotations

import errno
import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from pazo.config_schema import LoggerSchema
from pazo.audit.bound import audit_guesses
from pazo.audit.memory import bytes_per_canary, check_canary_memory
from pazo.audit.metrics import membership_metrics
from pazo.audit.noise_check import attach_noise_probe, noise_check, probe_statistic
from pazo.audit.canaries import (CodedScalarCanaries, FixedRatePoissonSampler, ScalarCanaries, VectorCanaries,
                                 black_box_scores, example_canaries, public_seeds, with_examples)
from pazo.commands.console import open_run_logs
from pazo.errors import ConfigError, unknown_choice
from pazo.run.build import build_run
from pazo.methods import METHODS, method_info
from pazo.privacy.mechanisms import DEBUG_BREAKS, JointClipPrivatizer, ScalarPrivatizer, VectorPrivatizer, debug_break
from pazo.privacy.plan import epsilon_spent
from pazo.run.recorder import LastSummary, Recorder
from pazo.run.results import read_json_object, skipped
from pazo.files.rundir import WriteFault, accept_hydra_record
from pazo.run.validate import validate_config
from pazo.run.typed import run_config
from pazo.zo.memory import available_bytes

log = logging.getLogger("pazo.audit")
THREATS = ("black_box", "white_box")
#: the noise check's released values at least (the run's T steps repeated): its estimate of the
#: noise's scale is then within about 3% (sd 1/sqrt(2 N)), so that a noise half the claimed one is
#: caught too, not only a tenth of it
NOISE_CHECK_VALUES = 512
#: entropy of the audit's own generators (canary inclusion, canary design), apart from the run's streams
AUDIT_ENTROPY = 0xA0D17


@dataclass(frozen=True)
class AuditConfig:
    canaries: int
    threat: str
    confidence: float
    canary_scale: float
    delta: float | None
    debug_break: str | None
    worst_case: bool

    @classmethod
    def from_cfg(cls, node) -> AuditConfig:
        keys = ("canaries", "threat", "confidence", "canary_scale", "delta", "debug_break")
        worst_case = node.get("worst_case")
        if worst_case is not None and not isinstance(worst_case, bool):
            raise ConfigError(f"audit.worst_case must be true, false or null, got {worst_case!r}")
        if worst_case and node.get("threat") == "black_box":
            raise ConfigError("audit.worst_case=true is a white-box design (the real examples' contributions "
                              "neutralised inside the release); use audit.threat=white_box, or leave "
                              "audit.worst_case null")
        a = cls(**{k: node.get(k) for k in keys},
                worst_case=node.get("threat") == "white_box" if worst_case is None else worst_case)
        if not (isinstance(a.canaries, int) and a.canaries >= 2):
            raise ConfigError(f"audit.canaries must be an integer >= 2, got {a.canaries!r}")
        if a.threat not in THREATS:
            raise ConfigError(unknown_choice("audit.threat", a.threat, THREATS))
        if not (isinstance(a.confidence, float) and 0.5 <= a.confidence < 1):
            raise ConfigError(f"audit.confidence must be in [0.5, 1), got {a.confidence!r}")
        if not (isinstance(a.canary_scale, (int, float)) and math.isfinite(a.canary_scale) and a.canary_scale >= 1):
            raise ConfigError(f"audit.canary_scale must be a number >= 1 (a canary's raw value in units of the "
                              f"clip C), got {a.canary_scale!r}")
        if a.delta is not None and not (isinstance(a.delta, float) and 0 < a.delta < 1):
            raise ConfigError(f"audit.delta must be in (0, 1) or null (the run's delta), got {a.delta!r}")
        if a.debug_break is not None and a.debug_break not in DEBUG_BREAKS:
            raise ConfigError(unknown_choice("audit.debug_break", a.debug_break, DEBUG_BREAKS))
        return a


def _check_run(cfg, a: AuditConfig) -> None:
    if not method_info(cfg.method.name).private:
        private = sorted(n for n in METHODS.names() if method_info(n).private)
        raise ConfigError(f"method {cfg.method.name!r} is non-private: the audit attacks a private method's "
                          f"release; choices: {', '.join(private)}")
    if cfg.privacy.epsilon is None:
        raise ConfigError("an audit needs a private run: set privacy.epsilon (privacy=none has nothing to audit)")
    if cfg.privacy.sampling != "poisson":
        raise ConfigError(f"privacy.sampling={cfg.privacy.sampling}: the audit checks the Poisson-sampled "
                          "guarantee; use privacy.sampling=poisson")
    if cfg.privacy.secure_mode:
        raise ConfigError("privacy.secure_mode=true: the audit needs the run reproducible from its seed")
    info = method_info(cfg.method.name)
    if a.threat == "white_box" and not info.white_box:
        raise ConfigError(f"audit.threat=white_box does not cover {info.name} (its releases do not pass through one "
                          "privatiser call; registered with release='other'); use audit.threat=black_box")
    queries = cfg.method.get("q")
    if a.threat == "white_box" and a.worst_case and info.release == "joint_scalar" and a.canaries < 2 * queries:
        raise ConfigError(f"audit.canaries={a.canaries} is too few for the coded white box of dp_aggzo's joint clip "
                          f"over method.q={queries} queries (disjoint groups of at least 2 a query): use "
                          f"audit.canaries >= {2 * queries}")


def start_writing(run_dir: Path, cfg, hydra_record, last: LastSummary | None = None) -> Recorder:
    """The audit is accepted: its Hydra record into `.hydra/`, train.log, config.yaml now (audit.json
    and summary.json at its end, noted in `last`; no rows, and nothing to W&B). Nothing is written
    before this."""
    accept_hydra_record(run_dir, hydra_record)
    open_run_logs()
    return Recorder(run_dir, cfg, LoggerSchema(mode="disabled"), rows=False, last=last)


def check_canaries_fit(cfg, a: AuditConfig, r) -> None:
    """The canaries' memory (`pazo.audit.memory`) against what this machine has available, before
    any canary is drawn."""
    private = r.data.private
    example_bytes = private.inputs[:1].numel() * private.inputs.element_size()
    per_canary = bytes_per_canary(a.threat, a.worst_case, method_info(cfg.method.name).zeroth_order,
                                  r.total_steps, r.cfg.method.release().queries, r.plan.sample_rate, example_bytes)
    check_canary_memory(a.canaries, per_canary, available_bytes(r.device)[1], r.total_steps)


def attach_white_box(method, m: int, scale: float, design: np.random.Generator, worst_case: bool = False,
                     sample_rate: float | None = None):
    """Put the white-box canaries between `method` and its privatiser; returns the hook. Worst case:
    the real examples' contributions to each release are neutralised (the canaries are the whole
    private data set as far as the release goes), zeroth-order canaries coded digit by digit."""
    privatizer = method.privatizer   # (the contract `Method` declares)
    if isinstance(privatizer, (ScalarPrivatizer, JointClipPrivatizer)):   # DP-AggZO's joint clip too
        queries = method.cfg.release().queries
        method.privatizer = (CodedScalarCanaries(privatizer, m, scale, design, sample_rate, queries) if worst_case
                             else ScalarCanaries(privatizer, m, scale, design))
    elif isinstance(privatizer, VectorPrivatizer):
        method.privatizer = VectorCanaries(privatizer, m, scale, design, method.model.dim, neutralise=worst_case)
    else:
        raise ConfigError(f"audit.threat=white_box: method {method.cfg.name} has no privatiser to hook")
    return method.privatizer


def train_with_canaries(method, private, n: int, canary_ids: np.ndarray, sampler, steps: int, device,
                        hook=None) -> None:
    """The training loop with canaries: indices >= n of a Poisson batch are the included canaries
    (`canary_ids` in order); in the white box (`hook`) they are handed to the hook, not to the model."""
    for step in range(1, steps + 1):
        idx = sampler.sample()
        if hook is not None:
            hook.step = step
            hook.present = canary_ids[idx[idx >= n] - n]
            # worst case: the real examples' contributions are neutralised inside the release, so
            # the step gets none of them (their forward passes would change nothing released),
            # unless the hook exercises the batch (the noise check)
            idx = idx[:0] if hook.neutralises and not hook.runs_batch else idx[idx < n]
        x, y = private.batch(idx, device)
        method.take_step(x, y, step)


def run_audit(cfg: DictConfig, run_dir: str | Path, hydra_record: str | Path | None = None,
              last: LastSummary | None = None) -> dict:
    """Train once with canaries into `run_dir` and audit; returns the summary (also summary.json).
    `hydra_record`: where Hydra staged this launch's record, moved into `.hydra/` when the audit
    starts writing (after every check that can refuse it). `last`: where the summary it writes is
    noted (the command's, for a Ctrl-C after the audit ended)."""
    a = AuditConfig.from_cfg(cfg.audit)
    validate_config(cfg)
    _check_run(cfg, a)
    run_dir = Path(run_dir)
    started = time.perf_counter()
    with debug_break(a.debug_break):
        c = train_canary_run(cfg, a, run_dir, hydra_record, last)
    result, score_info, noise, metrics = attack(cfg, a, c)
    model, plan, device = c.r.model, c.r.plan, c.r.device
    final = model.evaluate(c.r.data.test, cfg.train.eval_batch_size) if model.all_finite() else None
    audit = audit_record(a, c, result, score_info, noise, metrics, started)
    summary = {"status": "finished", "kind": "audit", "method": cfg.method.name, "dataset": cfg.dataset.name,
               "model": cfg.model.name, "device": str(device), "run_dir": str(run_dir),  # the seed: config.yaml only
               "privacy": plan.as_dict(), "final_test_accuracy": final["accuracy"] if final else None,
               "audit": audit}
    c.recorder.write_record("audit.json", audit)
    c.recorder.write_summary(summary)
    c.recorder.close(failed=False)
    log_audit(a, c, result, audit)
    log.info(f"  results: {run_dir}")
    return summary


@dataclass
class CanaryRun:
    """A finished training run with canaries: what scoring and the audit's record read of it."""
    r: object                  # the run as `build_run` built it
    recorder: Recorder
    included: np.ndarray       # which canaries were in the private data (never passed to scoring)
    hook: object | None        # the white box's canaries between method and privatiser
    canary_examples: object | None   # the black box's canary examples
    printed: float             # the run's epsilon at its own delta
    delta: float               # the audit's delta
    comparable: float          # the run's epsilon at the audit's delta: what the bound is compared with


def train_canary_run(cfg, a: AuditConfig, run_dir: Path, hydra_record, last: LastSummary | None = None) -> CanaryRun:
    """The run without canaries as training builds it (q = b / n, sigma, T and the printed epsilon),
    its canaries added and trained; its files start once every check has passed."""
    inclusion_rng = np.random.default_rng([AUDIT_ENTROPY, cfg.seed, 0])
    design_rng = np.random.default_rng([AUDIT_ENTROPY, cfg.seed, 1])
    m = a.canaries
    r = build_run(run_config(cfg), time_engines=False)  # no engine start-up timing in an audit
    plan, total_steps = r.plan, r.total_steps
    check_canaries_fit(cfg, a, r)
    recorder = start_writing(run_dir, cfg, hydra_record, last)
    included = inclusion_rng.random(m) < 0.5  # never passed to the scoring code
    hook, private, canary_examples = None, r.data.private, None
    if a.threat == "black_box":
        canary_examples = example_canaries(r.data.private, m, r.data.num_classes, design_rng)
        private = with_examples(r.data.private, canary_examples, included)
    else:
        hook = attach_white_box(r.method, m, a.canary_scale, design_rng, a.worst_case, plan.sample_rate)
    canary_ids = np.flatnonzero(included)
    sampler = FixedRatePoissonSampler(r.n + len(canary_ids), plan.sample_rate, r.streams.numpy["data"])
    log.info(f"audit: {cfg.method.name} on {cfg.dataset.name}, {a.threat}, {m} canaries "
             f"({len(canary_ids)} included), {total_steps} steps, sigma {plan.sigma:.4g}, q {plan.sample_rate:.4g}"
             + (f", DEBUG BREAK {a.debug_break}" if a.debug_break else ""))
    r.module.train()
    train_with_canaries(r.method, private, r.n, canary_ids, sampler, total_steps, r.device, hook)
    printed = epsilon_spent(plan, total_steps)
    delta = plan.delta if a.delta is None else min(a.delta, plan.delta)
    # the same run's guarantee at the audit's delta: the epsilon the bound is compared with
    comparable = printed if delta == plan.delta else epsilon_spent(replace(plan, delta=delta), total_steps)
    return CanaryRun(r, recorder, included, hook, canary_examples, printed, delta, comparable)


def attack(cfg, a: AuditConfig, c: CanaryRun) -> tuple[dict, dict, dict | None, dict]:
    """The canaries' scores turned into guesses and the bound on epsilon, the white box's noise
    check and the membership metrics: (bound result, score info, noise check or None, metrics)."""
    if a.threat == "black_box":
        scores, score_info = black_box_scores(c.r.model, c.canary_examples, c.r.device), {}
    else:
        scores, score_info = c.hook.scores(public_seeds(c.r.streams), c.r.device)
    result = audit_guesses(scores, c.included, beta=1 - a.confidence, delta=c.delta)
    noise = None
    if a.threat == "white_box":  # the run's steps again with nothing added: the releases are its noise
        with debug_break(a.debug_break):
            probe = noise_pass(cfg)
        # tested at the level of one of the bounds' tries, so that it adds little to the audit's false alarms
        plan = c.r.plan
        noise = probe and noise_check(probe_statistic(probe, plan), probe.values, plan, c.r.total_steps, c.delta,
                                      1 - result["per_test_beta"], c.comparable)
    metrics = membership_metrics(scores, c.included, a.confidence, seed=int(np.random.default_rng(
        [AUDIT_ENTROPY, cfg.seed, 2]).integers(2**63)))
    return result, score_info, noise, metrics


def audit_record(a: AuditConfig, c: CanaryRun, result: dict, score_info: dict, noise: dict | None, metrics: dict,
                 started: float) -> dict:
    """audit.json (and summary.json's audit block): the settings, the bounds, the run's epsilons
    they are compared with, the checks and the verdict over them."""
    plan, comparable = c.r.plan, c.comparable
    audit = {**asdict(a), **result, "printed_epsilon": c.printed, "printed_delta": plan.delta,
             "audit_delta": c.delta, "epsilon_at_audit_delta": comparable, "target_epsilon": plan.target_epsilon,
             "sigma": plan.sigma, "sample_rate": plan.sample_rate, "steps": c.r.total_steps,
             "canaries_included": int(c.included.sum()),
             "exceeds_printed_canaries": result["epsilon_lower_bound"] > comparable,
             "exceeds_printed_fdp": result["epsilon_lower_bound_fdp"] > comparable,
             "membership": metrics, "scores": score_info, "noise_check": noise,
             "threads": torch.get_num_threads(), "seconds": time.perf_counter() - started}
    audit.update(verdict(audit, comparable))
    return audit


def log_audit(a: AuditConfig, c: CanaryRun, result: dict, audit: dict) -> None:
    """The audit's findings in the log: each bound against the run's epsilon, the noise check, the verdict."""
    plan, comparable, printed, delta = c.r.plan, c.comparable, c.printed, c.delta
    metrics, noise = audit["membership"], audit["noise_check"]
    log.info(f"audit: epsilon lower bound {result['epsilon_lower_bound']:.4f} at {a.confidence:.0%} confidence "
             f"({result['correct']} of {result['guesses']} guesses correct: {result['guesses_in']} in, "
             f"{result['guesses_out']} out; ceiling {result['ceiling']:.3f} with {a.canaries} canaries, "
             f"delta {delta:.3g}); "
             f"the run's epsilon at that delta {comparable:.4f} (printed: {printed:.4f} at delta {plan.delta:.3g})"
             + (" -> the run is NOT as private as printed" if audit["exceeds_printed_canaries"] else ""))
    log.info(f"audit: f-DP lower bound {result['epsilon_lower_bound_fdp']:.4f} ({result['fdp_correct']} of "
             f"{result['fdp_guesses']} guesses correct; ceiling {result['ceiling_fdp']:.3f})"
             + (" -> the run is NOT as private as printed" if audit["exceeds_printed_fdp"] else "")
             + f"; AUROC {_fmt(metrics['auroc'])}, TPR at 1% FPR {_fmt(metrics['tpr_at_fpr_0.01'])}, "
             f"at 0.1% FPR {_fmt(metrics['tpr_at_fpr_0.001'])}")
    if noise is not None:
        log.info(f"audit: noise check: the releases' noise {noise['noise_ratio']:.3f}x the claimed (at most "
                 f"{noise['noise_ratio_upper']:.3f}x at {noise['confidence']:.2%} confidence, "
                 f"{noise['released_values']} values): sigma at most {noise['sigma_upper']:.4g} of "
                 f"{plan.sigma:.4g}, epsilon at it "
                 + ("by the run's Laplace account " if noise["epsilon_from"] == "laplace_account" else "at least ")
                 + f"{noise['epsilon_at_sigma_upper']:.4f} if q, T and the clip are as the run says"
                 + (" -> the run is NOT as private as printed" if noise["exceeds_printed"] else ""))
    log.info(f"audit: verdict: audited epsilon {audit['epsilon_audited']:.4f} ({audit['epsilon_audited_from']}) "
             f"against the run's {comparable:.4f}: "
             + ("the run is NOT as private as printed" if audit["exceeds_printed"] else "no evidence against it"))


def verdict(audit: dict, comparable: float) -> dict:
    """The audit's top-level verdict over all its checks: `epsilon_audited`, the largest epsilon it
    shows the run spends at least (the canaries' bound, the f-DP one, and the noise check's epsilon
    at the realised sigma where that exceeds the run's: it rests on q, T and the clip being as the
    run says), which of them gave it, and `exceeds_printed`: whether it exceeds the run's epsilon
    at the audit's delta (`comparable`), i.e. whether any check does."""
    found = {"canaries": audit["epsilon_lower_bound"], "fdp": audit["epsilon_lower_bound_fdp"]}
    noise = audit["noise_check"]
    if noise and noise["exceeds_printed"]:
        found["noise_check"] = noise["epsilon_at_sigma_upper"]
    source = max(found, key=found.get)
    return {"epsilon_audited": found[source], "epsilon_audited_from": source,
            "exceeds_printed": found[source] > comparable}


def noise_pass(cfg: DictConfig, min_values: int = NOISE_CHECK_VALUES):
    """The run's T steps again, built as training builds them, through `method.take_step` on the run's
    own Poisson batches with every example's contribution zero inside each release
    (`pazo.audit.noise_check`), repeated until at least `min_values` values are released: returns
    the probe that collected the releases' noise, or None where the method has no privatiser."""
    r = build_run(run_config(cfg), time_engines=False)
    probe = attach_noise_probe(r.method)
    if probe is None:
        return None
    sampler = FixedRatePoissonSampler(r.n, r.plan.sample_rate, r.streams.numpy["data"])
    r.module.train()
    while probe.values < min_values:
        before = probe.values
        train_with_canaries(r.method, r.data.private, r.n, np.empty(0, dtype=np.int64), sampler, r.total_steps,
                            r.device, probe)
        if probe.values == before:  # the method released nothing through the probe: no check
            return None
    return probe


def _fmt(x) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def disk_fault(err: OSError, run_dir) -> WriteFault | None:
    """The audit's files refused by the disk (full, over quota, read-only) as a WriteFault naming
    the file; None for another OSError (a data file that cannot be read is not a disk fault)."""
    if isinstance(err, WriteFault):
        return err
    if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
        return WriteFault(err.filename or run_dir, err)
    return None


#: what the audit table reads from an audit's summary.json: key -> type
AUDIT_FIELDS = {"threat": str, "target_epsilon": (int, float), "printed_epsilon": (int, float),
                "printed_delta": (int, float), "epsilon_at_audit_delta": (int, float), "audit_delta": (int, float),
                "epsilon_lower_bound": (int, float), "confidence": (int, float), "correct": int, "guesses": int,
                "ceiling": (int, float), "canaries": int, "steps": int, "exceeds_printed": bool}


def _audit_problem(summary: dict) -> str | None:
    a = summary.get("audit")
    if not isinstance(a, dict):
        return "its audit block is missing or not a mapping"
    wrong = [k for k, kind in AUDIT_FIELDS.items() if not isinstance(a.get(k), kind)]
    if a.get("threat") not in ("white_box", "black_box"):
        wrong.append("threat")
    if "debug_break" not in a or not isinstance(summary.get("method"), str) or "seed" not in summary:
        wrong.append("method/seed (config.yaml)/debug_break")
    return f"summary.json's audit lacks or mistypes {', '.join(wrong)}" if wrong else None


def _config_seed(path: Path) -> int | None:
    """The seed in an audit's config.yaml, or None when it has none that reads."""
    try:
        seed = OmegaConf.to_container(OmegaConf.load(path)).get("seed")
    except Exception:  # a missing or broken config.yaml: the audit is named as lacking a seed
        return None
    return seed if isinstance(seed, int) else None


def read_audits(roots) -> list[dict]:
    """The summaries of the audits below `roots` (directories); a run directory whose summary.json
    does not parse, or whose audit block lacks a field the table shows, is left out, named on stderr."""
    out = []
    for root in map(Path, roots):
        for path in sorted(root.rglob("summary.json")):
            try:
                summary = read_json_object(path)
            except ValueError as err:
                skipped(path.parent, str(err))
                continue
            if summary.get("kind") != "audit":
                continue
            if "seed" not in summary:  # the table's seed column: from config.yaml, the one file that holds it
                summary["seed"] = _config_seed(path.parent / "config.yaml")
                if summary["seed"] is None:
                    del summary["seed"]
            problem = _audit_problem(summary)
            if problem:
                skipped(path.parent, problem)
            else:
                out.append(summary)
    return out
