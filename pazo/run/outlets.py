"""What may leave a run, listed once: every key of every outlet with its status under the
guarantee. The recorder sends the loggers (W&B, TensorBoard, metrics.csv) only what this list
releases, the run's `outside_guarantee` names what it lists as private, docs/concepts/guarantee.md
is generated from it, and a test checks every file of a real run against it. A private selection
releases its chosen run through `RELEASE` alone: the files it names, each with the keys its rule
keeps. Which files each computation holds, and with which mode, is `pazo.run.gate.FILES`: the gate
writes them.

Statuses:

- `released`: a function of the noisy releases (the model, the epsilon): covered by the epsilon;
- `public`: from the config, the public or test data or the machine, not from private examples;
- `outside`: from private data without noise, released anyway and named in `outside_guarantee`
  (how long a step took grows with its realised Poisson batch);
- `private`: from private data without noise (a private diagnostic): kept in the run directory
  (metrics.jsonl, summary.json), named in `outside_guarantee`, sent to the loggers (W&B, TensorBoard,
  metrics.csv) only with `logger.private_diagnostics=true`;
- `secret`: never leaves; written only where the `seed_secret` assumption says (config.yaml and
  Hydra's launch record .hydra/).

A key not listed is withheld from W&B (as if private) and fails the outlet test: a new key is
added here, with its status, before it leaves.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

RELEASED, PUBLIC, OUTSIDE, PRIVATE, SECRET = "released", "public", "outside", "private", "secret"

#: a row of metrics.jsonl and of W&B's history (`key*`: every key with that prefix)
METRICS = {
    "step": (PUBLIC, "the step number"),
    "epoch": (PUBLIC, "step / expected steps per epoch"),
    "sigma": (PUBLIC, "the noise multiplier, from the config and the accountant"),
    "epsilon": (PUBLIC, "the privacy spent so far, from the accountant"),
    "s_per_iter": (OUTSIDE, "the mean time of the window's steps: grows with the realised batch size"),
    "train_loss": (PRIVATE, "the private batch's mean loss, without noise"),
    "residual_share": (PRIVATE, "GEP: the share of the private gradients outside the public subspace, without noise"),
    "nonfinite_examples": (PRIVATE, "per step, the private examples whose value was NaN or infinite (each "
                                    "contributed zero to the release)"),
    "val_accuracy": (PRIVATE, "accuracy on the validation split (held-out private examples), without noise"),
    "val_loss": (PRIVATE, "loss on the validation split (held-out private examples), without noise"),
    "test_*": (RELEASED, "the released model on the test set (not private examples)"),
    "projected_grad": (RELEASED, "mean |s_j| of the step's noisy released scalars"),
    "grad_norm": (RELEASED, "DP-SGD: the norm of the noisy gradient"),
    "param_norm": (RELEASED, "DPZero with a projection radius: the released model's norm"),
    "public_grad_norm": (PUBLIC, "the norm of a gradient on public examples"),
    "alpha": (PUBLIC, "DPMD: the step's mixing weight (a schedule)"),
    "lr": (PUBLIC, "the step size lr * schedule(step), from the config and the step number"),
    "subspace_rank": (PUBLIC, "PAZO-P: the rank of the public gradients' subspace"),
    "noisy_candidate_won": (RELEASED, "PAZO-S: whether the perturbed candidate won, on noisy losses"),
    "chosen_public_index": (RELEASED, "PAZO-S: the candidate picked on noisy losses"),
}

#: the top-level keys of summary.json (W&B's run summary gets the flat ones)
SUMMARY = {
    "status": (PUBLIC, "how the run ended"),
    "failure": (RELEASED, "why it failed: a crash, divergence read from the parameters, over budget"),
    "method": (PUBLIC, "the config"), "dataset": (PUBLIC, "the config"), "model": (PUBLIC, "the config"),
    "device": (PUBLIC, "the machine"), "parameter_devices": (PUBLIC, "the machine"),
    "host": (PUBLIC, "the machine"), "pid": (PUBLIC, "the machine"), "heartbeat": (PUBLIC, "a clock"),
    "dim": (PUBLIC, "the model's size"), "run_dir": (PUBLIC, "where the files are"),
    "attempt": (PUBLIC, "the launch count"), "resumed_from_step": (PUBLIC, "the checkpoint's step"),
    "earlier_attempt_moved_to": (PUBLIC, "where an earlier attempt was archived"),
    "wandb_run_id": (PUBLIC, "W&B's id"),
    "steps_done": (PUBLIC, "the steps run"), "steps_planned": (PUBLIC, "from the config and n"),
    "stopped_at_step": (PUBLIC, "where a preempted or interrupted run stopped"),
    "privacy": (PUBLIC, "the plan and the epsilon spent, from the accountant"),
    "computation": (PUBLIC, "the config's fingerprint, sigma, the devices, dataset.root (no data digest)"),
    "data": (PUBLIC, "sizes, the public class histogram; what a loader reads without noise is in "
                     "outside_guarantee"),
    "engine": (PUBLIC, "the engine chosen (timed on test examples only)"),
    "threads": (PUBLIC, "the CPU threads: from train.threads, the environment, the model's size and the idle cores"),
    "warm_start": (PUBLIC, "trained on public examples only (no cache file name: it hashes the seed)"),
    "method_departures": (PUBLIC, "the config"), "public_grads": (PUBLIC, "the config and the devices"),
    "update_rule": (PUBLIC, "the config: the step-size schedule and the optimiser, where not the default"),
    "outside_guarantee": (PUBLIC, "what the epsilon does not cover"),
    "warnings": (RELEASED, "the chance-level warning, from the test accuracy"),
    "final_test_accuracy": (RELEASED, "the released model on the test set"),
    "final_test_loss": (RELEASED, "the released model on the test set"),
    "final_test_metrics": (RELEASED, "the released model on the test set"),
    "best_test_accuracy": (RELEASED, "the released models on the test set"),
    "noisy_candidate_win_rate": (RELEASED, "PAZO-S: the share of steps the candidate won, on noisy losses"),
    "mean_s_per_iter": (OUTSIDE, "step times: grow with the realised batch size"),
    "median_s_per_iter": (OUTSIDE, "step times: grow with the realised batch size"),
    "final_val_accuracy": (PRIVATE, "accuracy on the validation split (private examples), without noise"),
    "best_val_accuracy": (PRIVATE, "accuracy on the validation split (private examples), without noise"),
    "selection": (PUBLIC, "a private selection's released run: the distribution of K (not K), the cell's total "
                          "epsilon, from the accountant"),
}

#: the top-level keys of an audit's summary.json (`pazo.audit`; its audit.json is the `audit` block)
AUDIT_SUMMARY = {
    "status": (PUBLIC, "how the audit ended"), "kind": (PUBLIC, "audit"),
    "method": (PUBLIC, "the config"), "dataset": (PUBLIC, "the config"), "model": (PUBLIC, "the config"),
    "device": (PUBLIC, "the machine"), "run_dir": (PUBLIC, "where the files are"),
    "privacy": (PUBLIC, "the plan, from the accountant"),
    "final_test_accuracy": (RELEASED, "the released model on the test set"),
    "audit": (RELEASED, "the audit's bounds and scores: the released model and the noisy releases against "
                        "the audit's own canaries"),
}

#: the config's keys that never leave through W&B (or any outlet but config.yaml and .hydra/)
CONFIG_SECRET = {"seed": (SECRET, "the noise and the Poisson batches follow from it (the seed_secret assumption)")}

OUTLETS = {"metrics": METRICS, "summary": SUMMARY, "audit_summary": AUDIT_SUMMARY}

#: the `outside_guarantee` sentence of a private run's step times (`s_per_iter`, `*_s_per_iter`)
STEP_TIMES_SENTENCE = "s_per_iter and the step times: the time of a step grows with its realised Poisson batch size"


@dataclass(frozen=True)
class ReleasedFile:
    """How one file of a private selection's chosen run leaves: `outlet`'s keys whose status is in
    RELEASE_STATUSES (the config: every key but CONFIG_SECRET's), less the `withheld` ones (dotted
    paths); `outlet` None: the file whole."""
    outlet: str | None
    withheld: tuple[str, ...] = ()


#: the statuses a private selection's release keeps: what the run's noise covers and what is public.
#: Outside and private keys stay behind (step times, noiseless statistics of private data).
RELEASE_STATUSES = (RELEASED, PUBLIC)
#: What a private selection releases of its chosen run (`pazo.sweep.selection.release`): these files alone,
#: each as its rule says. Everything else stays in the sweep's private workspace: train.log and
#: stdout.log (launch times, the run's folder), .hydra/ (the seed, the launch record),
#: the run's private workspace private/ (the checkpoint, the private data's digest), attempts/, W&B,
#: tensorboard/ (its event files' names and records carry the host, the process and the clock). The withheld
#: keys tell the run's process, machine or clock (so how many runs ran before or beside it: K), or
#: hash its config with its seed (the fingerprint).
RELEASE = {
    "summary.json": ReleasedFile("summary", ("host", "pid", "heartbeat", "attempt", "resumed_from_step",
                                             "earlier_attempt_moved_to", "wandb_run_id", "stopped_at_step",
                                             "threads", "engine.reason", "computation.fingerprint")),
    "metrics.jsonl": ReleasedFile("metrics"),
    "metrics.csv": ReleasedFile("metrics"),
    "config.yaml": ReleasedFile("config"),
    "model.safetensors": ReleasedFile(None),
}

#: where each outlet's keys go (for the guarantee page)
WHERE = {"metrics": "a row of metrics.jsonl and of the loggers (W&B's history, metrics.csv, TensorBoard's "
                    "scalars)",
         "summary": "summary.json and W&B's run summary (its flat values)",
         "audit_summary": "an audit's summary.json (its `audit` block is also audit.json)"}


def status(outlet: str, key: str) -> str | None:
    """The status of `key` in `outlet`, or None when it is not listed."""
    listed = OUTLETS[outlet]
    if key in listed:
        return listed[key][0]
    for pattern, (what, _) in listed.items():
        if pattern.endswith("*") and key.startswith(pattern[:-1]):
            return what
    return None


def unlisted(outlet: str, keys) -> list[str]:
    """The keys of `keys` that `outlet`'s list does not name."""
    return sorted(k for k in keys if status(outlet, k) is None)


def private_keys() -> list[str]:
    """Every key listed as a private diagnostic, in any outlet."""
    return sorted({k for listed in OUTLETS.values() for k, (what, _) in listed.items() if what == PRIVATE})


def released_row(outlet: str, values: dict, private_diagnostics: bool = False) -> dict:
    """The part of `values` (a metrics row or the flat summary) that every logger receives (W&B,
    TensorBoard, CSV, a plugin's): listed, not secret, a private diagnostic only with
    `logger.private_diagnostics`; None values left out."""
    allowed = {RELEASED, PUBLIC, OUTSIDE} | ({PRIVATE} if private_diagnostics else set())
    return {k: v for k, v in values.items() if v is not None and status(outlet, k) in allowed}


def without_secrets(config: dict) -> dict:
    """The resolved config less its secret keys (W&B's config)."""
    return {k: v for k, v in config.items() if k not in CONFIG_SECRET}


def for_release(file: str, values: dict) -> dict:
    """The part of `values` (the chosen run's summary, one metrics row, or its config, as read from
    `file`) that a private selection's release lets out (`RELEASE[file]`)."""
    rule = RELEASE[file]
    if rule.outlet == "config":
        kept = without_secrets(values)
    else:
        kept = {k: v for k, v in values.items() if status(rule.outlet, k) in RELEASE_STATUSES}
    kept = copy.deepcopy(kept)   # (the withheld keys go from copies, never from the caller's values)
    for path in rule.withheld:
        *parents, key = path.split(".")
        node = kept
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(key, None)
    return kept


def private_diagnostics_sentence() -> str:
    """The `outside_guarantee` entry of a private run's noiseless private statistics."""
    return (f"{', '.join(private_keys())} (those the run records) are computed on private data without noise: "
            "they stay in metrics.jsonl and summary.json, and go to W&B only with logger.private_diagnostics=true")


def as_markdown() -> str:
    """The allow-list as the guarantee page's tables (`make docs-pages` writes it)."""
    lines = []
    for outlet, listed in [*OUTLETS.items(), ("config", CONFIG_SECRET)]:
        where = WHERE.get(outlet, "W&B's config: the resolved config less these keys")
        lines += [f"## {where[0].upper()}{where[1:]}", "", "| key | status | why |", "|---|---|---|"]
        lines += [f"| `{k}` | {what} | {why.replace('|', chr(92) + '|')} |" for k, (what, why) in listed.items()]
        lines.append("")
    return "\n".join([*lines, *_release_markdown()]).rstrip() + "\n"


def _release_markdown() -> list[str]:
    """`RELEASE` as the page's last table: each file a private selection releases and what of it."""
    kept = " or ".join(RELEASE_STATUSES)
    lines = ["## A private selection's released run (`pazo-sweep --selection private`)", "",
             "The chosen run's files that leave the sweep's private workspace, and no other:", "",
             "| file | what of it | withheld besides |", "|---|---|---|"]
    for name, rule in RELEASE.items():
        what = ("the whole file" if rule.outlet is None else "every key but the secret ones" if rule.outlet == "config"
                else f"the keys of its list above that are {kept}")
        withheld = ", ".join(f"`{k}`" for k in (rule.withheld or (CONFIG_SECRET if rule.outlet == "config" else ())))
        lines.append(f"| `{name}` | {what} | {withheld or '-'} |")
    return lines
