"""Entry point: `pazo-audit [overrides]` / `python -m pazo.audit [overrides]` (Hydra), the command
around one audit (`pazo.audit.run.run_audit`).

Its exit status says the verdict, so that a script or CI can gate on it: 0 when the audit found no
evidence against the epsilon the run prints, `NOT_AS_PRIVATE` (4) when it found the run NOT as
private as printed; 2 a user's mistake (one `pazo: error:` line, before any compute), 75 a write
the machine refused, 130 interrupted, 1 an audit that failed. This module imports only the standard
library at its top, so that a Ctrl-C while torch, a plugin or Hydra loads meets pazo's handler
(`pazo.commands.interrupts`)."""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pazo import CONFIG_DIR
from pazo.commands.start import quiet_when_the_reader_leaves
from pazo.commands.interrupts import INTERRUPTED, TERMINATED, stop_status, stop_word, until_work_starts, work_starts

log = logging.getLogger("pazo.audit")
#: the exit status of an audit whose verdict is that the run is NOT as private as printed
NOT_AS_PRIVATE = 4
#: every exit status of the command, as its --help lists them
EXIT_CODES = {"the audit found no evidence against the epsilon the run prints": 0,
              "the audit failed (an error of the program, with its traceback)": 1,
              "a mistake on the command line (one pazo: error: line, before any compute)": 2,
              "the audit found the run NOT as private as printed (its verdict line says which check)": NOT_AS_PRIVATE,
              "a write the machine refused (a full disk): the audit wrote no result": os.EX_TEMPFAIL,
              "interrupted (Ctrl-C)": INTERRUPTED,
              "terminated (SIGTERM: a kill, timeout or a scheduler's time limit)": TERMINATED}
#: the run directories of a multirun's audits whose verdict was NOT as private as printed
_NOT_AS_PRIVATE: list[str] = []


def main(cfg) -> float | None:
    """Hydra's task (`hydra_main`): one audit, or one job of a multirun; its exit status."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from pazo.run import cli as command_line
    from pazo.audit import run as audit_run
    from pazo.files.rundir import drop_hydra_record, is_staging
    from pazo.run.recorder import LastSummary

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    staged = run_dir / hc.output_subdir if is_staging(hc.output_subdir) else None
    sweeping = hc.mode == RunMode.MULTIRUN
    work_starts()
    command_line.launched_into(run_dir)
    last = LastSummary()   # (the summary the audit writes at its end, for a Ctrl-C after it)
    try:
        summary = audit_run.run_audit(cfg, run_dir, hydra_record=staged, last=last)
    except command_line.USER_ERRORS as err:
        log.error(f"pazo: error: {err}")
        if sweeping:
            return None
        sys.exit(2)
    except KeyboardInterrupt as stop:  # an audit is one short run, written at its end: nothing to resume
        _interrupted(run_dir, stop, last.summary, sweeping)
    except OSError as err:
        fault = audit_run.disk_fault(err, run_dir)
        if fault is None:
            raise
        log.error(f"pazo: error: {fault}; the audit wrote no result: free space (or fix the permissions), "
                  "then run it again")
        sys.exit(os.EX_TEMPFAIL)
    finally:
        drop_hydra_record(staged)   # (accepted: moved into .hydra/ already)
    return _verdict(summary, sweeping)


def _interrupted(run_dir: Path, stop: KeyboardInterrupt, mine: dict | None, sweeping: bool) -> None:
    """End an audit that `stop` interrupted: before it wrote its summary (`mine`: the one it wrote,
    or None), it left no result and exits with the signal's status; after (as it logged its lines
    or handed its summary back), its result is written, and a single audit exits with its verdict's
    status (a multirun stops, with the signal's)."""
    if mine is None or mine.get("status") != "finished":
        log.error(f"pazo: {stop_word(stop)}; the audit in {run_dir} did not finish and wrote no result (run it again)")
        sys.exit(stop_status(stop))
    log.error(f"pazo: {stop_word(stop)} after the audit ended: {run_dir}/audit.json holds its result")
    if sweeping:
        sys.exit(stop_status(stop))
    _verdict(mine, sweeping)
    sys.exit(0)


def _verdict(summary: dict, sweeping: bool) -> float:
    """The audited epsilon; an audit that found the run NOT as private as printed exits 4 (a
    multirun's job is counted, and the multirun exits 4 at its end)."""
    audit = summary["audit"]
    if audit["exceeds_printed"]:
        if not sweeping:
            sys.exit(NOT_AS_PRIVATE)
        _NOT_AS_PRIVATE.append(summary["run_dir"])
    return audit["epsilon_audited"]


def hydra_main() -> None:
    """Hydra's command line around `main` (made here, so that importing this module loads no Hydra)."""
    import hydra

    import pazo.run.cli  # noqa: F401  (registers the resolvers the config names)
    import pazo.run.validate  # noqa: F401  (registers the schemas of methods, data sets and models Hydra composes with)

    hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="audit")(main)()


@quiet_when_the_reader_leaves
def cli() -> None:
    """`pazo-audit`: its own --help; a command line that is wrong, or a run directory that cannot be
    written, is one line before anything starts; an audit refused or interrupted before it writes
    removes the directories it made (`pazo.run.cli.Launch`)."""
    until_work_starts("before the audit started: nothing was run")
    from pazo.plugins import load_plugins

    load_plugins()   # (before any config is composed: a plugin's names are choices too)
    argv = sys.argv[1:]
    if "--help" in argv or "-h" in argv:   # pazo's own (Hydra's: --hydra-help)
        from pazo.help import audit_help
        print(audit_help(EXIT_CODES))
        return
    single = not any(a.startswith("-") for a in argv)
    problem = _command_line_problem(argv, single)
    if problem:
        print(f"pazo: error: {problem}", file=sys.stderr)
        sys.exit(2)
    if not single:
        hydra_main()
        _multirun_verdict()
        return
    from pazo.run.cli import launch_single

    launch_single(argv, hydra_main)


def _command_line_problem(argv: list[str], single: bool) -> str | None:
    """The overrides composed and checked with the audit's own checks, and where it would write."""
    from pazo.run import cli as command_line
    from pazo.audit.run import AuditConfig, _check_run
    from pazo.run.build import resolve_device

    problem = command_line.check_overrides(argv, config_name="audit", check=lambda cfg: (
        resolve_device(cfg.device), _check_run(cfg, AuditConfig.from_cfg(cfg.audit))))
    if problem or not single:
        return problem
    return command_line.check_single_launch(argv, config_name="audit")


def _multirun_verdict() -> None:
    found, _NOT_AS_PRIVATE[:] = list(_NOT_AS_PRIVATE), []
    if found:
        print(f"pazo: {len(found)} audit(s) of the multirun found the run NOT as private as printed: "
              f"{', '.join(found)}", file=sys.stderr)
        sys.exit(NOT_AS_PRIVATE)
