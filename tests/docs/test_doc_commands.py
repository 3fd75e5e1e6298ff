"""Every command in README.md and the docs composes (Hydra) or parses (argparse), so that a renamed
config key, group option, command or flag fails the build with the page and line that show it."""
import textwrap

import pytest
from hypothesis import example, given, settings, strategies as st

from tools.docs.commands import called_another_way, check_pages, documented_pages, extract, split, tool_lines


def page(tmp_path, text, name="page.md"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.slow   # composes every documented command twice (about a minute); `make docs-run` (CI) runs them all; in
# the quick suite: the check's rules on pages of random commands (the tests below) and
# test_entry_points.py::test_each_hydra_entry_point_resolves_its_own_run_dir
def test_every_command_in_the_readme_and_the_docs_composes_or_parses():
    pages = documented_pages()
    count, problems = check_pages(pages)
    assert not problems, "commands in the docs that do not compose or parse:\n" + "\n".join(problems)
    # the generated CLI reference shows examples of every Hydra entry point and the sweep: at least those
    assert count >= 7


def test_commands_are_read_from_shell_blocks_with_prompts_and_continuations(tmp_path):
    path = page(tmp_path, """\
        # A page

        ```console
        $ pazo-train \\
            method=dpzero privacy.epsilon=0.5
        step 10 loss 2.3 method=not_a_command
        ```

        ```text
        pazo-train not.checked=1
        ```

        ```bash
        # a comment
        OMP_NUM_THREADS=1 pazo-bench step-ops --settings digits && pazo-report tables --selection val
        ```
        """)
    commands = extract(path)
    assert [(c.line, c.text) for c in commands] == [
        (4, "pazo-train method=dpzero privacy.epsilon=0.5"),
        (15, "OMP_NUM_THREADS=1 pazo-bench step-ops --settings digits && pazo-report tables --selection val")]
    assert split(commands[1].text) == [["pazo-bench", "step-ops", "--settings", "digits"],
                                       ["pazo-report", "tables", "--selection", "val"]]
    count, problems = check_pages([path])
    assert count == 2 and problems == []


def test_a_renamed_key_option_flag_or_target_is_named_with_its_file_and_line(tmp_path):
    path = page(tmp_path, """\
        ```bash
        pazo-train privacy.epsilonn=1
        python -m pazo.train method=pazo_x
        make run ARGS="train.epoch=3"
        make nosuch
        .venv/bin/pazo-bench methods --iterz 5
        pazo-report tables --selection best
        pazo-sweep table9_nothing --dry-run
        pazo-sweep demo --launcher joblib train.epoch=3
        python -m pazo.audit audit.threats=black_box
        pazo-train method=dpzero,pazo_m
        pazo-train methodx.lr=<value>
        python scripts/benchmark_methods.py --settings digits --bogus
        ```
        """)
    count, problems = check_pages([path])
    assert count == 12
    lines = [p.split(": ", 1)[0] for p in problems]
    assert lines == [f"page.md:{n}" for n in range(2, 14)] or all(ln.endswith(f":{n}") for ln, n in
                                                                    zip(lines, range(2, 14))), problems
    text = "\n".join(problems)
    for expected in ("epsilonn", "pazo_x", "train.epoch", "no make target nosuch", "--iterz", "invalid choice",
                     "table9_nothing", "audit.threats", "needs -m", "methodx", "--bogus"):
        assert expected in text, (expected, text)


def test_placeholders_and_other_programs_are_left_alone_but_their_keys_are_checked(tmp_path):
    path = page(tmp_path, """\
        ```shell
        pip install -e . && git status
        pazo-train method=<name> privacy.epsilon=<epsilon>
        pazo-train -m method=dpzero,pazo_m privacy.epsilon=0.5,1
        make demo ARGS="train.epochs=1"
        make test
        pazo-sweep demo --dry-run --methods dpzero
        pazo-report llm-table outputs/sweeps/<sweep> --out table.md
        ```
        """)
    count, problems = check_pages([path])
    assert count == 7 and problems == []


def test_a_hydra_interpolation_that_does_not_resolve_is_named(tmp_path):
    """The override check leaves `hydra.*` out; composing with Hydra's own config resolves the run
    and sweep directories as the entry point does, so an unregistered resolver there is caught."""
    from tools.docs.commands import resolve_hydra

    for name, run_dir in [("good", "outputs/${method}/${pazo_unique:}"),
                          ("unregistered", "outputs/${nosuch_resolver:}"), ("dangling", "outputs/${nosuch.key}")]:
        (tmp_path / f"{name}.yaml").write_text(
            f"method: dpzero\nsweep_name: s\nhydra:\n  run:\n    dir: {run_dir}\n"
            "  sweep:\n    dir: out/${sweep_name}\n    subdir: ${hydra:job.override_dirname}\n")
    assert resolve_hydra("good", [], tmp_path) is None
    assert "nosuch_resolver" in resolve_hydra("unregistered", [], tmp_path)
    assert "nosuch" in resolve_hydra("dangling", [], tmp_path)
    assert resolve_hydra("config", ["method=dpzero"]) is None and resolve_hydra("audit", ["method=dpzero"]) is None


def test_every_documented_command_calls_each_pazo_tool_one_way():
    """The docs called the tools three ways (`python -m pazo.train`, `.venv/bin/python -m pazo.train`,
    `.venv/bin/pazo-train`): every command of a shell block, every `$ ` line of any code block and
    every line of a `text` block that starts with a tool (a plugin guide's bare `pazo-train`), in
    README.md and docs/, now calls them as the venv's entry points."""
    commands = [c for path in documented_pages() for c in [*extract(path, every_fence=True), *tool_lines(path)]]
    assert len(commands) > 60
    other = [f"{c.where}: {way}" for c in commands for way in called_another_way(c.text)]
    assert not other, "pazo tools called another way than .venv/bin/pazo-<name>:\n" + "\n".join(other)


#: (tool, its command) as the entry point names them, with the module `python -m` runs for it
TOOLS = [("train", "", "train"), ("sweep", "demo --dry-run", "sweep"), ("audit", "", "audit"),
         ("bench", "methods", "bench"), ("report", "tables", "report"), ("bench", "", "bench.methods"),
         ("report", "", "report.audit_table"), ("privacy", "sigma --epsilon 1", "privacy.command"),
         ("eval", "outputs/run", "eval")]
#: ways of calling a tool: (how it is written, whether it is the docs' one way)
WAYS = st.sampled_from([(".venv/bin/pazo-{tool}", True), ("/path/to/pazo/.venv/bin/pazo-{tool}", True),
                        ("pazo-{tool}", False), ("python -m pazo.{module}", False),
                        (".venv/bin/python -m pazo.{module}", False), ("python3 -m pazo.{module}", False)])
OTHERS = st.sampled_from(["make run", "make docs", "git status", "cd /tmp", ".venv/bin/python -m pytest -m gpu",
                          "python -c 'print(1)'", "wandb sync"])


def tool_call(way: str, tool: tuple[str, str, str]) -> str:
    name, command, module = tool
    return f"{way.format(tool=name, module=module)} {command}".rstrip()


@given(st.lists(st.one_of(st.tuples(WAYS, st.sampled_from(TOOLS)), OTHERS), min_size=1, max_size=5),
       st.sampled_from([" && ", "; ", " | "]), st.booleans())
@example([(("python -m pazo.{module}", False), TOOLS[0])], " && ", False)
@example([(("pazo-{tool}", False), TOOLS[1]), "make run"], "; ", True)
def test_a_tool_called_another_way_is_named_and_the_one_way_passes(parts, joiner, with_env):
    """The rule over random command lines: chains of tool calls written each way and other programs'
    commands (make targets among them), with a leading `VAR=value`: exactly the calls not written as
    `.venv/bin/pazo-<name>` are named, in order."""
    texts, wrong = [], []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
            continue
        (way, canonical), tool = part
        texts.append(tool_call(way, tool) + " train.steps=2")
        if not canonical:
            wrong.append(texts[-1].split(" -m ")[0] if " -m " in texts[-1] else texts[-1].split()[0])
    line = ("OMP_NUM_THREADS=1 " if with_env else "") + joiner.join(texts)
    found = called_another_way(line)
    assert len(found) == len(wrong) and all(f.startswith(w) for f, w in zip(found, wrong)), (line, found)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(WAYS, st.sampled_from(TOOLS)), min_size=1, max_size=4),
       st.sampled_from(["text", "console", "", "text title=\"try it\""]), st.booleans())
@example([((".venv/bin/pazo-{tool}", True), TOOLS[0]), (("pazo-{tool}", False), TOOLS[1])], "text", False)
def test_a_tool_called_another_way_in_any_code_block_is_named_with_its_line(tmp_path_factory, calls, info, prompted):
    """The rule over pages of random blocks (a `text` block of commands, a terminal session, a block
    with no language): a line that starts with a pazo tool not called as `.venv/bin/pazo-<name>` is
    found, with its page and line; a tool named inside what a command printed is not a call."""
    lines = [("$ " if prompted else "") + tool_call(way, tool) for (way, _), tool in calls]
    body = [line for pair in zip(lines, ["usage: pazo-train [-h] (printed)"] * len(lines)) for line in pair]
    path = page(tmp_path_factory.mktemp("page"), "# A page\n\n```" + info + "\n" + "\n".join(body) + "\n```\n")
    found = [(c.line, c.text) for c in tool_lines(path) if called_another_way(c.text)]
    wrong = [(4 + 2 * k, lines[k].removeprefix("$ ")) for k, ((_, canonical), _) in enumerate(calls) if not canonical]
    if info in ("console",):   # (a shell block's commands: `extract` reads them, and its own test checks those)
        wrong = []
    assert found == wrong


TORCHRUN_OPTIONS = st.lists(st.sampled_from(["--standalone", "--nproc_per_node=2", "--nproc_per_node 4", "--nnodes=1",
                                             "--master_port 29511"]), unique=True, max_size=3)


@given(TORCHRUN_OPTIONS, st.sampled_from(["torchrun", ".venv/bin/torchrun"]),
       st.lists(st.sampled_from(["method=pazo_m", "train.steps=5", "hydra.run.dir=outputs/two"]), unique=True))
@example([], ".venv/bin/torchrun", [])
def test_a_module_under_torchrun_is_checked_as_that_module_and_is_the_one_way(options, torchrun, overrides):
    """`torchrun [options] -m pazo.train ...` (the guide on many processes): its overrides are the
    entry point's (before: torchrun was another program's, its overrides never composed), and
    torchrun is how a module runs under it (not "another way"); a script path is not pazo's."""
    from tools.docs.commands import classify

    words = [torchrun, *" ".join(options).split(), "-m", "pazo.train", *overrides]
    assert classify(words) == ("pazo-train", overrides)
    assert called_another_way(" ".join(words)) == []
    assert classify([torchrun, *" ".join(options).split(), "train.py", *overrides]) is None


def test_a_bad_override_under_torchrun_is_named(tmp_path):
    path = page(tmp_path, """\
        ```bash
        .venv/bin/torchrun --standalone --nproc_per_node=2 -m pazo.train method=pazo_m trian.steps=5
        ```
        """)
    count, problems = check_pages([path])
    assert count == 1 and len(problems) == 1 and "trian" in problems[0], problems


@pytest.mark.parametrize("flag_first", [True, False])
def test_pazo_train_plan_is_checked_as_the_run_its_overrides_describe(tmp_path, flag_first):
    """`--plan` is pazo-train's own flag (read before Hydra): the overrides beside it still compose,
    and a misspelt one is still reported."""
    def command(override):
        return f"pazo-train --plan {override}" if flag_first else f"pazo-train {override} --plan"

    path = page(tmp_path, f"""\
        ```bash
        {command("train.steps=3")}
        {command("trian.steps=3")}
        ```
        """)
    count, problems = check_pages([path])
    assert count == 2 and len(problems) == 1 and "trian.steps" in problems[0], problems
