"""One start for every `pazo-bench` / `pazo-report` command (`pazo.commands.start.command`): the console
script (through `dispatch`), `python -m pazo.<package>.<module>` and the launcher in scripts/ all end
a command the same way: its status, a Ctrl-C one line and 130 (a SIGTERM: 143), `sys.exit("message")`
the message and 1, a refused output one line and 75 (2 where the path is the user's input), a reader
gone 0."""
import errno
import importlib
import sys

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

import pazo.bench
import pazo.report
from pazo.commands.start import command, dispatch, finish
from pazo.commands.interrupts import INTERRUPTED, TERMINATED, Terminated

#: (what main does, the exit status, what stderr says)
OUTCOMES = st.one_of(
    st.integers(0, 255).map(lambda n: (("return", n), n, "")),
    st.just((("return", None), 0, "")),
    st.integers(0, 255).map(lambda n: (("exit", n), n, "")),
    st.text("abc xyz", min_size=1, max_size=20).map(lambda m: (("exit", m), 1, m)),
    st.just((("raise", KeyboardInterrupt()), INTERRUPTED, "pazo: interrupted; ")),
    st.just((("raise", Terminated()), TERMINATED, "pazo: terminated; ")),   # a SIGTERM before the command's own
    st.sampled_from([errno.ENOSPC, errno.EROFS, errno.EACCES]).map(
        lambda e: (("raise", OSError(e, "refused", "/tmp/x")), 75, "pazo: error: /tmp/x: refused")),
    st.sampled_from([errno.ENOENT, errno.ENOTDIR, errno.EISDIR]).map(
        lambda e: (("raise", OSError(e, "no such", "/tmp/y")), 2, "pazo: error: /tmp/y: no such")),
)


def main_that(what):
    kind, value = what

    def main():
        if kind == "return":
            return value
        if kind == "exit":
            sys.exit(value)
        raise value
    return main


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outcome=OUTCOMES)
@example(outcome=(("raise", KeyboardInterrupt()), INTERRUPTED, "pazo: interrupted; "))
@example(outcome=(("raise", Terminated()), TERMINATED, "pazo: terminated; "))
def test_every_ending_of_a_command_is_its_status_and_at_most_one_line(outcome, capfd):
    what, status, said = outcome
    assert finish(main_that(what)) == status
    err = capfd.readouterr().err
    assert err.startswith(said) and len(err.splitlines()) <= 1
    with pytest.raises(SystemExit) as stop:   # the start of `python -m ...`: the same status
        command(main_that(what))()
    assert stop.value.code == status
    capfd.readouterr()


def test_an_interrupt_names_the_command_typed(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pazo-report tables"])
    assert finish(main_that(("raise", KeyboardInterrupt()))) == INTERRUPTED
    assert capsys.readouterr().err == "pazo: interrupted; pazo-report tables stopped\n"


@pytest.mark.parametrize("package", [pazo.bench, pazo.report])
def test_every_command_module_starts_through_the_one_start(package):
    """No module keeps its own tail: each `cli` is `command(...)`'s, which dispatch runs too."""
    for module, _ in package.COMMANDS.values():
        cli = importlib.import_module(module).cli
        assert cli.__qualname__ == command(lambda: 0).__qualname__, module


def test_dispatch_ends_a_command_as_its_module_does(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pazo_fake_command", type(sys)("pazo_fake_command"))
    sys.modules["pazo_fake_command"].cli = command(main_that(("raise", KeyboardInterrupt())))
    code = dispatch("pazo-report", "t", {"fake": ("pazo_fake_command", "a fake")}, ["fake"])
    assert code == INTERRUPTED
    assert capsys.readouterr().err == "pazo: interrupted; pazo-report fake stopped\n"
