"""What a run prints before its first step: the assumptions of its guarantee once, in one line, each
in words, their whole text in summary.json."""
import pytest
from hypothesis import given, strategies as st

from pazo.privacy.plan import guarantee_assumptions
from pazo.run.summary import ASSUMPTION_WORDS, assumptions_line


@pytest.mark.parametrize("secure_mode", [False, True])
def test_every_assumption_is_named_in_words_on_one_line(secure_mode):
    assumptions = guarantee_assumptions(secure_mode)
    line = assumptions_line(assumptions)
    assert "\n" not in line and line.startswith("assumes: ") and len(line) <= 160
    assert set(assumptions) <= set(ASSUMPTION_WORDS)   # a new assumption needs its words here
    assert all(ASSUMPTION_WORDS[name] in line for name in assumptions)
    assert ("secret" in line) == (not secure_mode)


# --- a multirun's header: what its jobs share once, then one line per job -------------------------------

header_line = st.sampled_from(["pazo: dpzero on digits (small_cnn, d=9930)", "pazo: mezo on digits (small_cnn)",
                               "privacy: target epsilon=1.0 -> sigma=0.7704",
                               "privacy: target epsilon=2.0 -> sigma=0.6088",
                               "assumes: n is public", "note: seed=0 is the shipped default"])


@given(headers=st.lists(st.lists(header_line, min_size=1, max_size=4, unique=True), min_size=1, max_size=6))
def test_a_multirun_shows_the_first_header_whole_then_one_line_per_job_hiding_no_line(headers):
    """Whatever the jobs' headers: the first is shown whole, every later job in exactly one line, and
    every line of a job's header is shown, either in the first header or in the job's own line (a
    job's own guarantee is never left out; was: the four lines again for every job)."""
    from pazo.run.cli import MultirunJob
    from pazo.train import MultirunProgress

    jobs = [MultirunJob(n, [f"method.lr={n}"], [f"method.lr={n}"]) for n in range(len(headers))]
    progress = MultirunProgress(jobs)
    shown = [progress.header(n, lines) for n, lines in enumerate(headers)]
    assert shown[0] == headers[0]
    for n, (lines, said) in enumerate(zip(headers[1:], shown[1:]), start=1):
        assert len(said) == 1 and said[0].startswith(f"job {n + 1} of {len(jobs)} (method.lr={n}): ")
        assert all(line in headers[0] or line in said[0] for line in lines)
        assert all(line not in said[0] for line in lines if line in headers[0])


@given(headers=st.lists(st.lists(header_line, min_size=1, max_size=4, unique=True), min_size=2, max_size=6))
def test_a_later_job_reads_as_job_1s_header_only_where_its_lines_are_job_1s(headers):
    """A later job's line says "as job 1's header" only where its header is job 1's line for line;
    otherwise it names every line job 1's header has and it has not (was: a job without job 1's
    "note: seed=0 is the shipped default" line read "as job 1's header")."""
    from pazo.run.cli import MultirunJob
    from pazo.train import MultirunProgress

    progress = MultirunProgress([MultirunJob(n, [f"seed={n}"], [f"seed={n}"]) for n in range(len(headers))])
    shown = [progress.header(n, lines) for n, lines in enumerate(headers)]
    for lines, [said] in zip(headers[1:], shown[1:]):
        assert said.endswith("as job 1's header") == (lines == headers[0])
        assert all(f"without job 1's line '{line}'" in said for line in headers[0] if line not in lines)


@given(accuracy=st.one_of(st.none(), st.floats(0, 1)))
def test_a_relaunch_into_a_finished_run_shows_its_accuracy_as_the_summary_does(accuracy):
    """The finished run's accuracy in 4 decimals ("-" for none), never every digit of the float."""
    import re

    from pazo.run.summary import finished_line

    line = finished_line("outputs/s1", {"final_test_accuracy": accuracy})
    shown = "-" if accuracy is None else f"{accuracy:.4f}"
    assert line.endswith(f"(final test accuracy {shown})") and not re.search(r"\d\.\d{5}", line)
