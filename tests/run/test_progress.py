"""Progress where nobody watches: outside a terminal, a line at most every `train.progress_seconds`
with the step, epoch, epsilon so far and the time left; none on a terminal (tqdm's bar shows it)."""
import re
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from pazo.run.loop import Progress

LINE = re.compile(r"^progress: step (\d+)/(\d+) \((\d+)%\), epoch ([\d.]+), epsilon ([\d.]+|-), ([\d.e+-]+) s/iter, "
                  r"about .+ left$")


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.integers(0, 50), st.floats(0.5, 30),
       st.lists(st.floats(0.0, 5.0), min_size=1, max_size=400), st.booleans())
def test_lines_are_spaced_well_formed_and_silent_on_a_terminal(total, first, every, step_seconds, quiet):
    first = min(first, total - 1)
    clock = [0.0]
    said = []
    progress = Progress(said.append, total, 7.5, first, every, quiet=quiet, clock=lambda: clock[0])
    times = []
    for i, step in enumerate(range(first + 1, total + 1)):
        clock[0] += step_seconds[i % len(step_seconds)]
        if progress.update(step, epsilon=0.01 * step if step % 3 == 0 else None):
            times.append((clock[0], step))
    if quiet:
        assert said == []
        return
    assert len(said) == len(times)
    assert all(b[0] - a[0] >= every for a, b in zip([(0.0, first)] + times, times))  # never more often than asked
    for line, (_, step) in zip(said, times):
        m = LINE.match(line)
        assert m, line
        assert int(m.group(1)) == step < total and int(m.group(2)) == total
        assert m.group(5) == "-" or float(m.group(5)) <= 0.01 * step + 1e-9


def test_a_run_piped_to_a_file_shows_its_progress(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pazo.train", "train.steps=30", "device=cpu", "logger.mode=disabled",
                          "train.progress_seconds=0.001", f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("progress:")]
    assert len(lines) >= 10 and all(LINE.match(line) for line in lines)
    steps = [int(LINE.match(line).group(1)) for line in lines]
    assert steps == sorted(steps) and steps[-1] < 30
    assert sum("progress:" in line for line in (tmp_path / "run" / "train.log").read_text().splitlines()) == len(lines)
