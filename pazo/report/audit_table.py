"""Gather privacy audits (`pazo-audit`) into one markdown table.

    pazo-report audit-table outputs/audit_sweeps/audit_table [more dirs] [--out FILE]

(or `python -m pazo.report.audit_table`, or `python scripts/make_audit_table.py`)

One row per audit (summary.json with an `audit` block) below the given directories: method, threat
(and whether the white box was the worst case), debug break, the epsilon the run prints (at its
delta), the run's epsilon at the audit's delta, the audited lower bounds at the audit's confidence
(Steinke et al.'s (epsilon, delta) bound and Mahloujifar et al.'s f-DP bound), correct guesses of
guesses for the first, AUROC and TPR at 1% / 0.1% FPR of the canary scores with their intervals,
the white box's noise check (the realised sigma at most, the epsilon at it, and whether that exceeds
the run's epsilon: a bound that assumes q, T and the clip are as the run says), and whether any of
the three exceeds the run's epsilon (a bug)."""
from __future__ import annotations

import sys
from pathlib import Path

from pazo.files.file_kinds import output_file, path_argument
from pazo.commands.start import ArgumentParser, command, summary_of
from pazo.report import show_table

THREAT = {"white_box": "white box", "black_box": "black box"}


def _num(x, fmt=".2f") -> str:
    return "undefined" if x is None else format(x, fmt)


def _interval(x) -> str:
    return "" if x is None else f" [{x[0]:.2f}, {x[1]:.2f}]"


def exceeds(audit: dict) -> bool:
    """Whether any of the audit's checks (the canaries' bound, the f-DP one, the noise check) exceeds
    the run's epsilon: a bug (audits written before the f-DP bound and the noise check have neither)."""
    nc = audit.get("noise_check")  # None: the black box, or a release the probe does not read
    return audit["exceeds_printed"] or bool(audit.get("exceeds_printed_fdp")) or bool(nc and nc["exceeds_printed"])


def audited_epsilon(audit: dict) -> float:
    """The largest epsilon the audit shows the run spends at least: its lower bounds, and the noise
    check's epsilon at the realised sigma where that exceeds the run's (as the audit's verdict)."""
    found = [audit["epsilon_lower_bound"], audit.get("epsilon_lower_bound_fdp") or 0.0]
    nc = audit.get("noise_check")
    if nc and nc["exceeds_printed"]:
        found.append(nc["epsilon_at_sigma_upper"])
    return max(found)


def table(summaries: list[dict]) -> str:
    from pazo.methods import METHODS   # (imports torch: a refusal of the command's input needs it not)

    order = {name: i for i, name in enumerate(METHODS.names())}
    rows = sorted(summaries, key=lambda s: (s["audit"]["debug_break"] or "", s["audit"]["threat"],
                                            order.get(s["method"], 99), s["audit"]["target_epsilon"], s["seed"]))
    lines = ["| method | threat | debug break | printed epsilon (delta) | epsilon at audit delta "
             "| lower bound, (eps, delta) | lower bound, f-DP | correct / guesses | AUROC [CI] | TPR at 1% FPR [CI] "
             "| TPR at 0.1% FPR | canaries | steps | seed | noise check: sigma at most, epsilon at it | exceeds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        a = s["audit"]
        mi = a.get("membership")  # audits written before the f-DP bound and the metrics have neither: "-"
        fdp = _num(a["epsilon_lower_bound_fdp"]) if "epsilon_lower_bound_fdp" in a else "-"
        auroc = f"{_num(mi['auroc'], '.3f')}{_interval(mi['auroc_interval'])}" if mi else "-"
        tpr1 = f"{_num(mi['tpr_at_fpr_0.01'], '.3f')}{_interval(mi['tpr_at_fpr_0.01_interval'])}" if mi else "-"
        tpr01 = _num(mi["tpr_at_fpr_0.001"], ".3f") if mi else "-"
        label = METHODS.get(s["method"]).label if s["method"] in order else s["method"]
        threat = THREAT[a["threat"]] + (" (worst case)" if a.get("worst_case") else "")
        nc = a.get("noise_check")
        noise = "-" if not nc else (f"{nc['sigma_upper']:.3g}, {nc['epsilon_at_sigma_upper']:.3g}"
                                    + (" **exceeds**" if nc["exceeds_printed"] else ""))
        lines.append(
            f"| {label} | {threat} | {a['debug_break'] or '-'} | {a['printed_epsilon']:.2f} "
            f"({a['printed_delta']:.1e}) | {a['epsilon_at_audit_delta']:.2f} ({a['audit_delta']:.0e}) | "
            f"{a['epsilon_lower_bound']:.2f} | {fdp} | {a['correct']} / {a['guesses']} | {auroc} | {tpr1} | {tpr01} | "
            f"{a['canaries']} | {a['steps']} | {s['seed']} | "
            f"{noise} | {'**yes**' if exceeds(a) else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = ArgumentParser(description=summary_of(__doc__))
    parser.add_argument("dirs", nargs="+", type=path_argument, help="directories holding audit run directories")
    parser.add_argument("--out", type=output_file, help="write the table here too")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not Path(d).is_dir()]
    if missing:
        print(f"pazo: error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    from pazo.audit.run import read_audits   # (imports torch: read after the refusals)

    summaries = read_audits(args.dirs)
    if not summaries:
        print(f"pazo: error: no audit summary.json below {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    text = table(summaries)
    return show_table(text, args.out)


#: `pazo-report audit-table`, `python -m pazo.report.audit_table`, `python scripts/make_audit_table.py`.
cli = command(main)


if __name__ == "__main__":
    cli()
