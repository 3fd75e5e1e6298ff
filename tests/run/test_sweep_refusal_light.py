"""`pazo-sweep` refuses a mistake in its plan (an unknown spec, a --methods name the spec lacks, an
unknown launcher or --set, a grid larger than --max-runs) in one line before torch loads: the plan is
read from the spec and the grid files, and a method's registered grid (the method registry, whose
modules import torch) is read only for a method its setting's grid file does not name."""
from __future__ import annotations


from fresh_python import codes_and_heavy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pazo import REPO_ROOT
from pazo.errors import ConfigError
from pazo.sweep.command import _parser, _planned_sweep
from pazo.sweep.spec import count_runs, load_spec

#: specs of training sweeps whose settings each have a grid file (a registered grid needs the registry)
SPECS = ("demo", "table1_cifar10", "table3_imdb", "table4_mnli")
names = st.text(alphabet="abcxyz_", min_size=1, max_size=8)


@st.composite
def refused_plans(draw) -> list[str]:
    """A `pazo-sweep <spec> --dry-run` command line with one mistake in its plan."""
    spec = draw(st.sampled_from(SPECS))
    kind = draw(st.sampled_from(["spec", "methods", "launcher", "set", "max_runs"]))
    if kind == "spec":
        return [f"no_{draw(names)}", "--dry-run"]
    if kind == "methods":
        known = load_spec(spec)["methods"]
        wrong = draw(names.filter(lambda n: n not in known))
        return [spec, "--dry-run", "--methods", ",".join([*draw(st.lists(st.sampled_from(known), max_size=2)), wrong])]
    if kind == "launcher":
        return [spec, "--dry-run", "--launcher", f"no_{draw(names)}"]
    if kind == "set":
        return [spec, "--dry-run", "--set", draw(st.sampled_from([draw(names), f"launcher={draw(names)}"]))]
    return [spec, "--dry-run", "--max-runs", str(draw(st.integers(1, count_runs(load_spec(spec)) - 1)))]


def refusal_line(argv: list[str]) -> str:
    """The line the plan's check refuses `argv` with, found in this process (torch loaded)."""
    try:
        _planned_sweep(_parser().parse_intermixed_args(argv))
    except ConfigError as err:
        return f"pazo: error: {err}"
    raise AssertionError(f"{argv} was not refused")


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines=st.lists(refused_plans(), min_size=2, max_size=3))
def test_a_refused_sweep_plan_loads_nothing_heavy(command_lines, tmp_path):
    """The rule, over random mistakes in the plans of several specs, through `pazo-sweep`'s own start
    in a fresh process: each is the plan check's one `pazo: error:` line, exit 2, and no heavy module
    is imported by the end."""
    codes, heavy, out = codes_and_heavy(f"import os\nos.chdir({str(REPO_ROOT)!r})\n"
                                        "from pazo.sweep.command import cli\n"
                                        f"codes = [cli(argv) for argv in {command_lines!r}]\n", tmp_path)
    assert codes == [2] * len(command_lines), out.stderr
    assert out.stderr.splitlines() == [refusal_line(argv) for argv in command_lines]
    assert heavy == []
