"""A benchmark's results file records the command that made it, runnable again as written: a shell
splits it back into the arguments the benchmark was given, whatever they hold."""
import shlex
import sys

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pazo.bench.common import command_line

arguments = st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
                     max_size=5)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=arguments, prog=st.sampled_from(["pazo-bench scaling", "pazo-report tables", "scripts/benchmark_x.py"]))
@example(args=["--note", "a shared 2-core machine", "--steps", "3"], prog="pazo-bench scaling")
@example(args=[], prog="pazo-bench scaling")
def test_the_recorded_command_splits_back_into_its_arguments(args, prog, monkeypatch):
    monkeypatch.setattr(sys, "argv", [prog, *args])   # (set afresh for every example)
    words = shlex.split(command_line())
    if prog.startswith("pazo-"):
        assert words == [*prog.split(), *args]
    else:
        assert words == ["python", prog, *args]
