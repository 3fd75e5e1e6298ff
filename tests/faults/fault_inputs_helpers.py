"""Shared by the bad-input fault tests (test_fault_config_values, test_fault_caches,
test_fault_tools): run an entry point in-process as a user would, and check that a mistake ends
in exactly one `pazo: error:` line, a non-zero exit and no traceback."""
from __future__ import annotations

import contextlib
import io
import logging
import signal
import sys


def run_entry(entry, argv: list[str], capsys, prog: str = "pazo") -> tuple[int, str, str]:
    """Call `entry()` (a console script's function) with `sys.argv = [prog, *argv]`, or
    `entry(argv)` when it takes its arguments; (exit status, stdout, stderr). The logging handlers
    an entry point adds (Hydra's job logging, `use_console`) and Hydra's global state are undone
    afterwards, so that a later in-process run prints its lines once."""
    from hydra.core.global_hydra import GlobalHydra

    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.root.manager.loggerDict))]
    saved_logging = [(lg, list(lg.handlers), lg.level) for lg in loggers]
    saved, handler = sys.argv, signal.getsignal(signal.SIGINT)  # (pazo-train sets its own SIGINT handler)
    sys.argv = [prog, *argv]
    out_buf, err_buf = io.StringIO(), io.StringIO()
    try:
        # the entry point writes to buffers of its own, never to pytest's capture files
        with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
            try:
                code = entry(argv) if _takes_argv(entry) else entry()
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
                if isinstance(stop.code, str):
                    print(stop.code, file=sys.stderr)
    finally:
        sys.argv = saved
        signal.signal(signal.SIGINT, handler)
        for lg, handlers, level in saved_logging:
            for h in lg.handlers:
                if h not in handlers:
                    h.close()
            lg.handlers[:], lg.level = handlers, level
        GlobalHydra.instance().clear()
    out, err = capsys.readouterr()
    return int(code or 0), out_buf.getvalue() + out, err_buf.getvalue() + err


def _takes_argv(entry) -> bool:
    import inspect
    try:
        return bool(inspect.signature(entry).parameters)
    except (TypeError, ValueError):
        return False


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("pazo: error:")]


def assert_one_error(code: int, stderr: str, *needles: str) -> str:
    """A user's mistake: non-zero exit, exactly one `pazo: error:` line (holding each of `needles`,
    case-insensitively), and no traceback. Returns the line."""
    assert code != 0, f"exit 0 for a mistake; stderr: {stderr[-500:]}"
    assert "Traceback" not in stderr, stderr[-2000:]
    lines = error_lines(stderr)
    assert len(lines) == 1, f"expected one 'pazo: error:' line, got {lines!r}; stderr: {stderr[-1000:]}"
    for needle in needles:
        assert needle.lower() in lines[0].lower(), f"{needle!r} not in {lines[0]!r}"
    return lines[0]
