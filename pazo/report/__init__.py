"""Tables and figures from run directories and result files: `pazo-report <name> [args]` (or
`python -m pazo.report.<module>`, or the launchers in scripts/). The paper's published values,
`paper_values.csv`, ship with this package."""
from __future__ import annotations

#: name -> (module, one line for `pazo-report --help`)
COMMANDS = {
    "tables": ("pazo.report.tables", "the paper's tables from sweeps (and Table 5 from benchmark files)"),
    "figures": ("pazo.report.figures", "the paper's figures from sweeps, as PNG and PDF"),
    "audit-table": ("pazo.report.audit_table", "privacy audits gathered into one markdown table"),
    "llm-table": ("pazo.report.llm_table", "mean and spread over data seeds of the LLM sweeps"),
    "configs": ("pazo.report.config_reference", "every config key with its default and meaning (the config reference)"),
    "run": ("pazo.report.run_figure", "one run directory's curves (accuracy, loss, epsilon against the step) as a PNG"),
}


def nothing_usable(problem: str) -> int:
    """A report's ending when its folders hold nothing it can use: one `pazo: error:` line and exit
    2, as a folder that does not exist and every other mistake in a pazo command's input end."""
    import sys
    print(f"pazo: error: {problem}", file=sys.stderr)
    return 2


def status_counts(runs) -> str:
    """How many run directories of `runs` (`pazo.run.results.load_runs`) ended each way: `2 failed, 1
    interrupted`, for a line that says why nothing could be tabulated."""
    return ", ".join(f"{n} {status}" for status, n in runs.status.value_counts().items()) or "none readable"


def none_finished(runs, where: str) -> str | None:
    """Why `runs` give a report nothing to show (no run finished, so no run's numbers), or None."""
    if (runs.status == "finished").any():
        return None
    return f"nothing to report under {where}: no finished run (run directories: {status_counts(runs)})"


def show_table(text: str, out: str | None) -> int:
    """A table command's ending: the table on stdout, and into `out` too where one is named
    (written whole or not at all); the command's status, 0."""
    from pazo.files.rundir import write_text_atomic
    print(text)
    if out:
        write_text_atomic(out, text + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`pazo-report <name> [args]`."""
    from pazo.commands.start import dispatch
    return dispatch("pazo-report", "tables and figures", COMMANDS, argv)
