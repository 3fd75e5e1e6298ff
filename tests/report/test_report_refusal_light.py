"""`pazo-report tables` refuses its input (a sweep folder or a benchmark file that does not exist, a
file where the --out folder would be) in one line before pandas or the method registry (torch)
loads: a user's mistake is said before compute, not after seconds of imports."""
from __future__ import annotations

import json

from fresh_python import fresh_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

#: modules that take seconds to import, which no refusal of a command's input needs
HEAVY = ("torch", "pandas", "scipy.stats", "transformers")

names = st.text(alphabet="abcxyz_019", min_size=1, max_size=8)


@st.composite
def refused_inputs(draw) -> tuple[list[str], str]:
    """A `pazo-report tables` command line with one mistake in its input, and the line it is
    refused with (relative paths, under the fresh process's working folder)."""
    kind = draw(st.sampled_from(["sweep", "benchmark", "out"]))
    options = draw(st.sampled_from([[], ["--selection", "test"], ["--metric", "best_accuracy", "--include-shuffle"]]))
    if kind == "sweep":
        missing = draw(st.lists(names, min_size=1, max_size=3, unique=True))
        return [*missing, *options], f"no sweep directory {', '.join(missing)}"
    if kind == "benchmark":
        missing = draw(names) + ".json"
        return [*options, "--benchmark", missing], (
            f"no benchmark result file {missing} (pazo-bench methods writes them, e.g. "
            "scripts/results/methods_cpu_digits.json)")
    return [*options, "--out", "a_file/tables"], "--out a_file/tables: a_file is a file, not a folder; give another --out"


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines=st.lists(refused_inputs(), min_size=2, max_size=3))
def test_a_refused_report_input_loads_nothing_heavy(command_lines, tmp_path):
    """The rule, over random missing folders and files and the command's options, through
    `pazo-report`'s own start in a fresh process: each is one `pazo: error:` line, the one it says
    after the heavy imports too, exit 2, and no heavy module is imported by the end."""
    (tmp_path / "a_file").write_text("not a folder")
    argvs = [argv for argv, _ in command_lines]
    code = ("import json, sys\n"
            "from pazo.report import main\n"
            f"codes = [main(['tables', *argv]) for argv in {argvs!r}]\n"
            f"print(json.dumps([codes, sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n")
    out = fresh_python(code, tmp_path)
    codes, heavy = json.loads(out.stdout.splitlines()[-1])
    assert codes == [2] * len(argvs), out.stderr
    assert out.stderr.splitlines() == [f"pazo: error: {line}" for _, line in command_lines]
    assert heavy == []
