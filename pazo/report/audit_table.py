"""Gather privacy audits (`python -m pazo.audit`) into one markdown table.

    pazo-report audit-table outputs/audit_sweeps/audit_table [more dirs] [--out FILE]

(or `python -m pazo.report.audit_table`, or `python scripts/make_audit_table.py`)

One row per audit (summary.json with an `audit` block) below the given directories: method, threat,
debug break, the epsilon the run prints (at its delta), the run's epsilon at the audit's delta, the
audited lower bound at its confidence, correct guesses of guesses, the bound's ceiling with that
many canaries, and whether the bound exceeds the run's epsilon (a bug)."""
from __future__ import annotations

import sys
from pathlib import Path

from pazo.commands import ArgumentParser
from pazo.audit.run import read_audits
from pazo.methods import METHODS

ORDER = {name: i for i, name in enumerate(METHODS.names())}
THREAT = {"white_box": "white box", "black_box": "black box"}


def table(summaries: list[dict]) -> str:
    rows = sorted(summaries, key=lambda s: (s["audit"]["debug_break"] or "", s["audit"]["threat"],
                                            ORDER.get(s["method"], 99), s["audit"]["target_epsilon"], s["seed"]))
    lines = ["| method | threat | debug break | printed epsilon (delta) | epsilon at audit delta | audited lower bound "
             "| correct / guesses | ceiling | canaries | steps | seed | exceeds |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        a = s["audit"]
        label = METHODS.get(s["method"]).label if s["method"] in ORDER else s["method"]
        lines.append(
            f"| {label} | {THREAT[a['threat']]} | {a['debug_break'] or '-'} | {a['printed_epsilon']:.2f} "
            f"({a['printed_delta']:.1e}) | {a['epsilon_at_audit_delta']:.2f} ({a['audit_delta']:.0e}) | "
            f"{a['epsilon_lower_bound']:.2f} ({a['confidence']:.0%}) | {a['correct']} / {a['guesses']} | "
            f"{a['ceiling']:.2f} | {a['canaries']} | {a['steps']} | {s['seed']} | "
            f"{'**yes**' if a['exceeds_printed'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="directories holding audit run directories")
    parser.add_argument("--out", help="write the table here too")
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not Path(d).is_dir()]
    if missing:
        print(f"pazo: error: no such directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    summaries = read_audits(args.dirs)
    if not summaries:
        print(f"pazo: error: no audit summary.json below {', '.join(args.dirs)}", file=sys.stderr)
        return 2
    text = table(summaries)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def cli() -> None:
    """`pazo-report audit-table`, `python -m pazo.report.audit_table`, `python scripts/make_audit_table.py`."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
