"""`pazo-train --help`: what pazo is, the common commands, and the choices a user makes (methods,
data sets, paper settings, models), one line each, read from the first comment of each config file,
so a new method or data set appears here without editing this page, and an option registered in code
alone (a plugin's) from its registry. It imports no torch: every option pazo ships has its yaml, so
the registries (whose modules import torch) are read only once a plugin has loaded them.
Hydra's own help (`--hydra-help`) stays as it is; its generated listing of config groups would show
the internal `*_schema` entries and the per-setting tuning files, which a user never names."""
from __future__ import annotations

import re
from pathlib import Path

from pazo import CONFIG_DIR

USAGE = """\
pazo-train: one differentially private training run (PAZO-M/P/P'/S, the zeroth-order baselines MeZO,
DPZero, DP-ZO, DP-ZOGD, DP-AggZO, and the first-order ones), Poisson sampling, sigma calibrated to the
target epsilon, every release accounted. One run, one directory; relaunching into it resumes.

usage: pazo-train [key=value ...]        one run into outputs/runs/<dataset>/<method>/<time>_<token>/
       pazo-train -m key=a,b [...]       one run per combination, into outputs/sweeps/<sweep_name>/

examples:
  pazo-train                                            PAZO-M on digits at epsilon 1 (offline, a minute or two)
  pazo-train method=dpzero privacy.epsilon=0.5          another method, another budget
  pazo-train experiment=cifar10 dataset.root=/data      a paper setting (data read from dataset.root)
  pazo-train privacy=none method=mezo                   a non-private run
  pazo-train hydra.run.dir=runs/a                       a named run directory: the same command resumes it
  pazo-train method=dpzero --cfg job                    print the composed config and exit
  pazo-train privacy.accountant=rdp --plan              the privacy plan: n, q, T, sigma, epsilon by each accountant
  pazo-sweep table1_cifar10 --dry-run                   a paper grid (pazo-sweep --help)
"""

FOOTER = """\
privacy (privacy=...): default (DP, sigma calibrated to privacy.epsilon at privacy.delta) | none
every key with its default and meaning: pazo-report configs [group] (the composed config: pazo-train --cfg job);
the guarantee and what it assumes: the privacy: and assumes: lines each run prints, in full in its
summary.json (privacy.assumptions); Hydra's own flags: pazo-train --hydra-help
"""

AUDIT_USAGE = """\
pazo-audit: a privacy audit in one training run (Steinke, Nasr and Jagielski 2023): the training run of
the same overrides with m canaries added to the private data, then a lower bound on its epsilon at 95%
confidence, next to the epsilon the run prints. A bound above it: the run is NOT as private as printed.

usage: pazo-audit [key=value ...]       one audit into outputs/audits/<dataset>/<method>/<threat>/<time>_<token>/
       pazo-audit -m key=a,b [...]      one audit per combination, into outputs/audit_sweeps/<sweep_name>/

examples:
  pazo-audit method=dpzero train.epochs=2                          white box, worst case (the default)
  pazo-audit method=pazo_s train.epochs=2 audit.threat=black_box   the final model's losses only
  pazo-audit method=dpzero audit.debug_break=no_clip               a deliberately broken run, for the audit to catch

audit settings (audit.*; every training override applies too): canaries, threat (white_box | black_box),
worst_case, confidence, delta, canary_scale, debug_break; each in full: pazo-report configs audit
"""


#: the end of a config comment's first sentence: a full stop and a space, not that of "et al." or "e.g."
SENTENCE_END = re.compile(r"(?<!\bet al)(?<!\be\.g)(?<!\bi\.e)\. ")


def config_summary(path: Path) -> str:
    """The first sentence of a config file's leading comment (after Hydra's `# @package` line)."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        words.append(text)
    text = " ".join(words)
    sentence = SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".")
    if len(sentence) <= 100:
        return sentence
    cut = max(sentence.rfind(mark, 30, 100) for mark in (": ", "; ", " (", ", "))
    short = sentence[:cut] if cut > 0 else sentence[:97].rstrip() + "..."
    while short.count("(") > short.count(")"):   # never leave a parenthesis open
        short = short[:short.rfind(" (")] if " (" in short else short.replace("(", "")
    return short


def group_lines(group: str) -> list[str]:
    """`name  summary` for each user-facing option of a config group (not the tuning files or schemas)."""
    files = sorted((CONFIG_DIR / group).glob("*.yaml"))
    extra = yamlless_options(group, {f.stem for f in files})
    width = max((len(n) for n in [f.stem for f in files] + list(extra)), default=0)
    return ([f"  {f.stem:{width}s}  {config_summary(f) or '-'}" for f in files]
            + [f"  {name:{width}s}  {what}" for name, what in extra.items()])


def yamlless_options(group: str, yamls: set[str]) -> dict[str, str]:
    """The methods, data sets or models registered without a yaml (a plugin's, `pazo.plugins`):
    name -> who registered it. Only a plugin registers one (pazo's own options each have a yaml), so
    without a plugin loaded the registries, and torch with them, are not imported."""
    from pazo.plugins import LOADED

    if group not in ("method", "dataset", "model") or not LOADED:
        return {}
    registry = _registry(group)
    return {n: f"registered by {registry.origin(n)}" for n in registry.names() if n not in yamls}


def _registry(group: str):
    """The registry of a config group's options, pazo's own registered in it."""
    if group == "method":
        from pazo.methods.registry import METHODS
        import pazo.methods  # noqa: F401  (registers pazo's own)
        return METHODS
    from pazo.catalog import DATASETS, MODELS
    import pazo.data  # noqa: F401  (registers pazo's own)
    import pazo.models  # noqa: F401

    return DATASETS if group == "dataset" else MODELS


def audit_help(exit_codes: dict[str, int]) -> str:
    """`pazo-audit --help`: what it does, examples, and its exit statuses (`exit_codes`: meaning ->
    status), which a script or CI gates on."""
    width = max(len(str(code)) for code in exit_codes.values())
    statuses = [f"  {code:>{width}}  {meaning}" for meaning, code in sorted(exit_codes.items(), key=lambda kv: kv[1])]
    return "\n".join([AUDIT_USAGE, "exit status:", *statuses, "",
                      "Hydra's own flags: pazo-audit --hydra-help", ""])


def train_help() -> str:
    sections = [USAGE, "methods (method=...):", *group_lines("method"), "",
                "data sets (dataset=...):", *group_lines("dataset"),
                "", "paper and LLM settings (experiment=..., which also set the data set, model and method defaults):",
                *group_lines("experiment"), "", "models (model=...):", *group_lines("model"), "", FOOTER]
    return "\n".join(sections)
