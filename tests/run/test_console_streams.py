"""A logging set-up in the process (Hydra's, at every run: logging.config closes every handler the
process ever made) leaves open the streams that were sys.stdout / sys.stderr when a library that
makes its own handler at import came in (absl, through dp-accounting): pytest's capture file, a
notebook's stream, a `contextlib.redirect_stderr` buffer."""
from __future__ import annotations

import contextlib
import io
import logging.config
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

#: a logging set-up as Hydra's `configure_log` makes it (dictConfig with a console handler)
HYDRA_LIKE = {"version": 1, "disable_existing_loggers": False,
              "handlers": {"console": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout"}},
              "root": {"handlers": ["console"], "level": "INFO"}}


@pytest.mark.parametrize("module", ["pazo.privacy.selection", "dp_accounting.rdp.rdp_privacy_accountant"])
def test_the_stream_at_absl_import_stays_open_after_a_logging_setup(module):
    """In a fresh process: absl comes in (through pazo's selection, or through dp-accounting and
    then spared by pazo's console module) while a buffer stands in for stderr, the stream absl's
    handler takes; the buffer is still open after the logging set-up."""
    redirected = "stderr"
    spare = ("" if module.startswith("pazo")
             else "from pazo.commands.console import spare_absl_stream; spare_absl_stream()")
    code = textwrap.dedent(f"""
        import contextlib, io, logging.config, json
        buffer = io.StringIO()
        with contextlib.redirect_{redirected}(buffer):
            import {module}
        {spare}
        logging.config.dictConfig({HYDRA_LIKE!r})
        assert not buffer.closed, "the stream absl came in under was closed"
        print("open")
    """)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().endswith("open"), done.stderr


@pytest.mark.parametrize("redirected", ["stdout", "stderr"])
def test_pytest_capture_survives_an_in_process_run_logging_setup(redirected):
    """The test session's own case: absl was imported while pytest captured (conftest, or a test
    module importing dp-accounting), and an in-process run configures logging with its output
    redirected (as tests/faults' `run_cli` and `capsys` do); pytest's capture streams stay open for
    the tests after."""
    import absl.logging  # noqa: F401

    streams = sys.stdout, sys.stderr
    redirect = getattr(contextlib, f"redirect_{redirected}")
    try:
        with redirect(io.StringIO()):
            logging.config.dictConfig(HYDRA_LIKE)
        assert not any(s.closed for s in streams)
    finally:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})


NAMES = ["pazo", "pazo.private", "pazo.sweep", "pazo.private.deep"]


@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6), st.sampled_from(NAMES), st.booleans())
def test_whatever_loggers_asked_for_the_console_each_line_is_shown_once(calls, speaker, job_logging):
    """`use_console` for a logger and for one above it (the library's `pazo.private` after a sweep's
    `pazo`, in one process), then perhaps Hydra's job logging (a console on the root at INFO: an
    entry point run in-process after them), shows each line once, not once per console handler on
    the way up."""
    import contextlib
    import io
    import logging

    from pazo.commands.console import ConsoleHandler, use_console

    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in NAMES)]
    saved = [(lg, list(lg.handlers), lg.level) for lg in loggers]
    try:
        for lg in loggers:
            lg.handlers[:] = [h for h in lg.handlers if not isinstance(h, ConsoleHandler)]
            lg.setLevel(logging.NOTSET if lg.name != "root" else logging.WARNING)
        for name in calls:
            use_console(name)
        if job_logging:
            logging.getLogger().setLevel(logging.INFO)
            logging.getLogger().addHandler(ConsoleHandler())
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            logging.getLogger(speaker).info("a line")
        shown = job_logging or any(speaker == c or speaker.startswith(c + ".") for c in calls)
        assert out.getvalue() == ("a line\n" if shown else ""), (calls, speaker, job_logging, out.getvalue())
    finally:
        for lg, handlers, level in saved:
            lg.handlers[:], lg.level = handlers, level
