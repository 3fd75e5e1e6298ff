"""`python -m tools.docs run`: the documented commands run from outside the checkout, with the size,
skip, error and output comments their pages give; here on a small page of cheap commands, and the
rules over random inputs (the page's comments, the size appended, the shown output's numbers)."""
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from pazo import REPO_ROOT
from tools.docs.commands import documented_pages, read_page
from tools.docs.run import command_line, compare_output, problems_in_comments, run_pages


def page(tmp_path, text, name="page.md"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


CHEAP = """\
    # A page

    <!-- docs-run `pazo-train`: train.steps=2 logger.mode=disabled -->
    <!-- docs-run `dataset.root=/nonexistent`: error -->
    <!-- docs-run `make bench-gpu`: skip because it needs CUDA -->
    ```bash
    pazo-train method=dpzero privacy.epsilon=0.5     # a private run
    pazo-train dataset=torchvision dataset.torchvision_name=FashionMNIST dataset.root=/nonexistent
    make bench-gpu
    pazo-report --help
    ```

    <!-- docs-run `pazo-report --help`: output below -->
    ```text
    usage: pazo-report <name> [args] ...
      llm-table ...
    ```

    <!-- docs-run: error -->
    ```bash
    pazo-report run outputs/runs/digits/dpzero
    ```

    ```bash
    pazo-report nosuch
    ```
    """


def test_a_page_of_cheap_commands_runs_from_outside_the_checkout(tmp_path):
    """Run, expected error, skip, compared output and a broken command, in one temporary directory
    per page: only the broken one fails, named by its page and line."""
    path = page(tmp_path, CHEAP)
    said: list[str] = []
    failures = run_pages([path], Path(sys.prefix), timeout=300, say=said.append)
    assert len(failures) == 1 and failures[0].startswith(
        f"{path}:25: pazo-report nosuch: exit 2: pazo: error: unknown pazo-report command 'nosuch'"), failures
    log = "\n".join(said)
    workdir = Path(said[0].rsplit(" in ", 1)[1])
    assert not workdir.exists() and REPO_ROOT not in workdir.parents     # outside the checkout, removed
    assert f"skip  {path}:9: make bench-gpu  (it needs CUDA)" in log
    for line in (7, 8, 10, 21):
        assert f"ok    {path}:{line} " in log, log
    assert "train.steps=2 logger.mode=disabled" in log


def test_a_command_that_does_not_do_what_its_page_says_fails(tmp_path):
    """An expected error that does not come, and shown output the command does not print."""
    path = page(tmp_path, """\
        <!-- docs-run: error -->
        ```bash
        pazo-report --help
        ```

        <!-- docs-run `pazo-report --help`: output below -->
        ```
        usage: pazo-report <name> [args] and nothing like this
        ```
        """)
    failures = run_pages([path], Path(sys.prefix), timeout=120, say=lambda _: None)
    assert len(failures) == 1 and "expected one `pazo: error:` line and exit 2, got exit 0" in failures[0]
    path.write_text(path.read_text().replace("<!-- docs-run: error -->\n", ""))
    failures = run_pages([path], Path(sys.prefix), timeout=120, say=lambda _: None)
    assert len(failures) == 1 and "nothing printed matches it" in failures[0]


def test_every_comment_in_the_docs_selects_a_command_and_every_command_has_a_plan():
    pages = documented_pages()
    problems = [p for path in pages for p in problems_in_comments(path)]
    assert not problems, problems
    plans = [d for path in pages for d in read_page(path)]
    assert len(plans) >= 60
    skipped = [d for d in plans if d.skip]
    assert all(d.skip != "no reason given" for d in skipped)
    assert any(d.output is not None for d in plans if "README" in d.where)    # make run's seeded lines


words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=10)


@given(program=st.sampled_from(["pazo-train", ".venv/bin/pazo-train", "python -m pazo.train", "make run"]),
       args=st.lists(words.map(lambda w: f"{w}=1"), max_size=4),
       sizes=st.lists(words.map(lambda w: f"{w}=2"), min_size=1, max_size=3),
       comment=st.sampled_from(["", "   # a comment"]), prefix=st.sampled_from(["", "OMP_NUM_THREADS=1 "]))
def test_a_size_is_appended_to_the_pazo_command_and_never_swallowed_by_a_comment(
        tmp_path_factory, program, args, sizes, comment, prefix):
    import shlex

    text = f"{prefix}{program} {' '.join(args)}".rstrip() + comment
    if program == "make run":
        text = f"{prefix}make run ARGS=\"{' '.join(args)}\"" + comment
    path = tmp_path_factory.mktemp("p") / "p.md"
    path.write_text(f"<!-- docs-run: {' '.join(sizes)} -->\n```bash\n{text}\n```\n")
    [documented] = read_page(path)
    words = shlex.split(command_line(documented))
    assert "#" not in " ".join(words)
    if program == "make run":
        [make_args] = [w for w in words if w.startswith("ARGS=")]
        assert shlex.split(make_args.removeprefix("ARGS=")) == [*args, *sizes]
    else:
        assert words[len(words) - len(sizes) - len(args):] == [*args, *sizes]
    assert (words[0] == "OMP_NUM_THREADS=1") == bool(prefix)


numbers = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False).map(lambda x: round(x, 4))


@given(shown=st.lists(numbers, min_size=1, max_size=4), shift=st.floats(-0.01, 0.01),
       spread=st.sampled_from([0.0, 0.003]))
def test_shown_numbers_match_within_the_stated_spread(shown, shift, spread):
    shift = round(shift, 4)
    line = "  test accuracy: " + ", ".join(f"{x:.4f}" for x in shown) + " (seed ...)"
    printed = "header\n  test accuracy: " + ", ".join(f"{x + shift:.4f}" for x in shown) + " (seed 0 of <run>)\n"
    problem = compare_output([line], printed, spread)
    assert (problem is None) == (abs(shift) <= spread + 1e-9), (line, printed, problem)
    assert compare_output(["  nothing like: 1.0"], printed, spread) is not None


@pytest.mark.parametrize("shown", ["results: outputs/runs/digits/pazo_m/<time>_<token>",
                                   "s/iter: mean ..., median ..."])
def test_placeholders_match_anything(shown):
    printed = ("  s/iter: mean 0.0123, median 0.0121\n"
               "  results: outputs/runs/digits/pazo_m/2026-11-26_11-00-00_abc123\n")
    assert compare_output([shown], printed, 0.0) is None


def test_a_command_past_its_time_is_stopped_with_every_process_it_started(tmp_path):
    import subprocess

    marker = "317.25"         # a sleep only this test starts
    path = page(tmp_path, f"""\
        ```bash
        bash -c "sleep {marker}" && pazo-report --help
        ```
        """)
    failures = run_pages([path], Path(sys.prefix), timeout=1, say=lambda _: None)
    assert len(failures) == 1 and "still running after 1 s" in failures[0]
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout
    assert left.strip() == "", left


@given(count=st.integers(1, 6), data=st.data())
def test_only_page_line_chooses_the_commands_starting_on_those_lines_and_refuses_any_other(
        tmp_path_factory, count, data):
    """`--only PAGE:LINE`: any set of a page's command lines selects exactly those commands, in page
    order; a line where no command starts is refused, naming the lines where one does."""
    from tools.docs.run import chosen_commands

    path = tmp_path_factory.mktemp("p") / "p.md"
    path.write_text("# A page\n\n```bash\n" + "".join(f"pazo-report --help  # {i}\n" for i in range(count)) + "```\n")
    starts = [d.command.line for d in read_page(path)]
    assert starts == list(range(4, 4 + count))
    wanted = data.draw(st.sets(st.sampled_from(starts), min_size=1))
    assert [d.command.line for d in chosen_commands(path, wanted)] == sorted(wanted)
    assert chosen_commands(path, None) == read_page(path)
    stray = data.draw(st.integers(1, 4 + count + 3).filter(lambda n: n not in starts))
    with pytest.raises(ValueError, match=f"starts on line {stray} .*start on lines {', '.join(map(str, starts))}"):
        chosen_commands(path, wanted | {stray})


def test_only_names_pages_and_lines_of_the_docs(capsys):
    """PAGE:LINE on the real pages, a page without a line whole, and a line or page that does not
    exist one `pazo: error:` line (exit 2) before anything runs."""
    from tools.docs.run import main

    guide = REPO_ROOT / "docs" / "guides" / "auditing.md"
    lines = {d.command.text.split()[1]: d.command.line for d in read_page(guide) if "pazo-sweep" in d.command.text}
    no_clip = next(d.command.line for d in read_page(guide) if "no_clip" in d.command.text)
    images = lines["audit_table_images"]
    assert main(["--list", "--only", f"docs/guides/auditing.md:{no_clip}", "--only", f"auditing.md:{images}"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[0] for line in listed] == [f"docs/guides/auditing.md:{n}" for n in (no_clip, images)]
    assert "audit.debug_break=no_clip" in listed[0] and "[error line expected]" in listed[1]
    assert main(["--list", "--only", "auditing.md"]) == 0
    assert len(capsys.readouterr().out.splitlines()) > 2
    for wrong in (f"auditing.md:{no_clip + 1}", "nosuch.md", "nosuch.md:3"):
        assert main(["--list", "--only", wrong]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pazo: error: no "), err


# --- transcripts: a `$ ` block's shown output is compared; `exit N` -------------------------------------

shown_line = st.from_regex(r"[a-z][a-z ,:.=]{0,20}", fullmatch=True)


@given(entries=st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.lists(shown_line, max_size=3)),
                        min_size=1, max_size=5))
def test_a_transcript_gives_each_command_the_lines_up_to_the_next_prompt(tmp_path_factory, entries):
    """Whatever the commands (continued over two lines or not) and their lines: each command of a
    block with `$ ` prompts is read with exactly the non-empty lines after it, up to the next prompt
    (was: a transcript's shown lines were not read at all, so they could drift unnoticed)."""
    body, want = [], {}
    for n, continued, lines in entries:
        start = len(body) + 3   # (the page's first two lines: the comment and the fence)
        body += ["$ pazo-report --help  \\", f"    # {n}"] if continued else [f"$ pazo-report --help  # {n}"]
        body += [*lines, ""]
        want[start] = [line.rstrip() for line in lines if line.strip()] or None
    path = tmp_path_factory.mktemp("p") / "p.md"
    path.write_text("<!-- docs-run: error -->\n```console\n" + "\n".join(body) + "\n```\n")
    documented = read_page(path)
    assert {d.command.line: d.output for d in documented} == want
    assert all(d.error for d in documented)


def test_a_transcript_that_drifts_from_what_the_command_prints_fails_and_exit_n_is_checked(tmp_path):
    path = page(tmp_path, """\
        <!-- docs-run: error -->
        ```console
        $ pazo-report nosuch
        pazo: error: unknown pazo-report command 'nosuch' (choices: audit-table, ...)
        $ pazo-report nope
        pazo: error: unknown pazo-report command 'nope'; options: tables
        ```

        <!-- docs-run: exit 3 -->
        ```console
        $ pazo-report nosuch
        ```
        """)
    failures = run_pages([path], Path(sys.prefix), timeout=120, say=lambda _: None)
    assert len(failures) == 2, failures
    assert failures[0].startswith(f"{path}:5: pazo-report nope: the page shows ") and "nothing printed" in failures[0]
    assert failures[1].startswith(f"{path}:11: pazo-report nosuch: exit 2, not 3"), failures[1]


def test_the_static_check_leaves_a_command_shown_failing_to_its_run(tmp_path):
    from tools.docs.commands import check_pages

    path = page(tmp_path, """\
        <!-- docs-run: error -->
        ```console
        $ pazo-train method=pazom
        pazo: error: unknown method=pazom; did you mean method=pazo_m? (choices: ...)
        ```

        ```bash
        pazo-train method=pazom
        ```
        """)
    count, problems = check_pages([path])
    assert count == 2 and len(problems) == 1 and ":8: " in problems[0], problems
