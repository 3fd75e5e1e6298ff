"""A `pazo-report` command refuses its input (a folder or a file that does not exist, a file where
the --out folder would be) in one line before pandas, the methods (torch) or the audit load: a
user's mistake is said before compute, not after seconds of imports."""
from __future__ import annotations


from fresh_python import codes_and_heavy
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

names = st.text(alphabet="abcxyz_019", min_size=1, max_size=8)


@st.composite
def refused_inputs(draw) -> tuple[list[str], str]:
    """A `pazo-report` command line with one mistake in its input, and the line it is refused with
    (relative paths, under the fresh process's working folder)."""
    command = draw(st.sampled_from(["tables", "figures", "llm-table", "audit-table", "run"]))
    missing = draw(st.lists(names, min_size=1, max_size=1 if command == "run" else 3, unique=True))
    if command == "run":
        return [command, *missing], (f"no metrics.jsonl in {missing[0]} (a run directory is "
                                     "outputs/runs/<dataset>/<method>/<time>_<token>)")
    if command == "audit-table":
        return [command, *missing], f"no such directory: {', '.join(missing)}"
    options = [] if command == "llm-table" else draw(st.sampled_from([[], ["--selection", "test"],
                                                                      ["--metric", "best_accuracy"]]))
    kind = draw(st.sampled_from(["sweep", "benchmark", "out"] if command == "tables" else ["sweep", "out"]))
    if kind == "benchmark":
        file = draw(names) + ".json"
        return [command, *options, "--benchmark", file], (
            f"no benchmark result file {file} (pazo-bench methods writes them, e.g. "
            "scripts/results/methods_cpu_digits.json)")
    if kind == "out" and command != "llm-table":
        return [command, ".", *options, "--out", "a_file/x"], ("--out a_file/x: a_file is a file, not a folder; "
                                                              "give another --out")
    return [command, *missing, *options], f"no sweep directory {', '.join(missing)}"


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command_lines=st.lists(refused_inputs(), min_size=2, max_size=3))
@example(command_lines=[(["tables", "x"], "no sweep directory x"), (["figures", "x", "y"], "no sweep directory x, y"),
                        (["llm-table", "x"], "no sweep directory x"), (["audit-table", "x"], "no such directory: x"),
                        (["run", "x"], "no metrics.jsonl in x (a run directory is "
                                       "outputs/runs/<dataset>/<method>/<time>_<token>)")])
def test_a_refused_report_input_loads_nothing_heavy(command_lines, tmp_path):
    """The rule, over random missing folders and files and the command's options, through
    `pazo-report`'s own start in a fresh process: each is one `pazo: error:` line, the one it says
    after the heavy imports too, exit 2, and no heavy module is imported by the end."""
    (tmp_path / "a_file").write_text("not a folder")
    argvs = [argv for argv, _ in command_lines]
    codes, heavy, out = codes_and_heavy("from pazo.report import main\n"
                                        f"codes = [main(argv) for argv in {argvs!r}]\n", tmp_path)
    assert codes == [2] * len(argvs), out.stderr
    assert out.stderr.splitlines() == [f"pazo: error: {line}" for _, line in command_lines]
    assert heavy == []
