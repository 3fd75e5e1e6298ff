"""The long results pages (speed, engines, step-ops, audits) lead with a figure and a few lines that
say what their rows say, the files' full rows folded below (and rendered as tables by MkDocs); the
lines are computed from the rows over random rows here, and the figures come out the same bytes on
every drawing."""
from __future__ import annotations

import re
import statistics

import markdown
from hypothesis import given, settings, strategies as st
from mkdocs.config import load_config

from pazo import REPO_ROOT
from tools.docs import overview as docs_overview
from pazo.report.audit_table import exceeds
from tools.docs.overview import (audits_overview, engines_overview, scaling_overview, speed_overview,
                                 step_ops_overview, times)
from tools.docs.results import PAGES

LONG_PAGES = [page.name for page in PAGES if page.overview] + ["audits"]
#: the generated pages as committed (test_generated_pages checks that they are what the generator writes now)
RESULTS = REPO_ROOT / "docs" / "results"
methods = st.sampled_from(["mezo", "dpzero", "pazo_m", "pazo_p", "pazo_s", "dp_aggzo"])
ratios = st.floats(0.3, 9.0, allow_nan=False).map(lambda v: round(v, 4))


def test_each_long_page_leads_with_its_figure_and_lines_and_folds_the_files_rows():
    assert set(LONG_PAGES) == {"speed", "engines", "step-ops", "scaling", "audits"}
    for name in LONG_PAGES:
        text = (RESULTS / f"{name}.md").read_text()
        head = text.split("\n## ", 1)[0]
        figure = re.search(r"!\[[^\]]+\]\(figures/(overview_\w+\.svg)\)", head)
        assert figure and (RESULTS / "figures" / figure[1]).is_file(), name
        lines = head.split("\n\n")[2:-1]          # after the title and the intro, before the figure
        assert 2 <= len(lines[0].splitlines()) <= 4 and lines[0].startswith("- "), (name, lines)
        sections = text.split("\n## ")[1:]
        files = [s for s in sections if not s.startswith("Summary")]
        assert files and all(s.count("<details markdown>") == s.count("</details>") == 1 for s in files), name
        # (the rows as tables, led by the columns said once where a table too wide was split)
        assert all(re.search(r"<details markdown>\n<summary>[^<]+</summary>\n\n(?:(?:In every|No value)[^\n]+\n\n)?\|",
                             s) for s in files), name


def test_the_folded_rows_render_as_tables_on_the_site():
    config = load_config(str(REPO_ROOT / "mkdocs.yml"))
    md = markdown.Markdown(extensions=config["markdown_extensions"], extension_configs=config["mdx_configs"])
    html = md.convert((RESULTS / "speed.md").read_text())
    folded = re.findall(r"<details>.*?</details>", html, re.S)
    assert folded and all("<table>" in block and "|---|" not in block for block in folded)


def speed_rows(draw_rows):
    return [{"file": f"methods_{device}_{setting}.json", "setting": setting, "method": method,
             "paired_floor_ratio": ratio} for device, setting, method, ratio in draw_rows]


@settings(max_examples=5, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["cpu", "cuda"]), st.sampled_from(["digits", "cifar_shape", "imdb_lstm"]),
                          methods, ratios), min_size=1, max_size=20,
                unique_by=lambda r: (r[0], r[1], r[2])))
def test_the_speed_lines_name_the_least_the_most_and_the_median_step_over_its_floor(tmp_path_factory, drawn):
    rows = speed_rows(drawn)
    out = tmp_path_factory.mktemp("figures")
    overview = speed_overview(rows, out)
    values = [r["paired_floor_ratio"] for r in rows]
    first = overview.lines[0]
    assert first.startswith(f"{len(rows)} measurements of {len({r['method'] for r in rows})} methods")
    assert f"from {times(min(values))} its floor" in first and f"to {times(max(values))}" in first
    assert f"{times(statistics.median(values))} at the median" in first
    drawn_once = (out / overview.figure).read_bytes()
    speed_overview(rows, out)
    assert (out / overview.figure).read_bytes() == drawn_once and drawn_once.startswith(b"<?xml")


@settings(max_examples=8, deadline=None)
@given(st.dictionaries(st.sampled_from(list(docs_overview.ENGINE_RATIOS)), st.lists(ratios, min_size=1, max_size=8),
                       min_size=1))
def test_the_engines_lines_count_the_ratios_below_one_of_each_kind(tmp_path_factory, drawn):
    rows = [{"file": "engines_cpu.json", "setting": f"s{i}", "method": "mezo", column: v}
            for column, values in drawn.items() for i, v in enumerate(values)]
    overview = engines_overview(rows, tmp_path_factory.mktemp("figures"))
    assert len(overview.lines) == len(drawn)
    kinds = [c for c in docs_overview.ENGINE_RATIOS if c in drawn]
    for line, column in zip(overview.lines, kinds):
        (title, below), values = docs_overview.ENGINE_RATIOS[column], drawn[column]
        assert line.startswith(f"{title}: {times(min(values))} to {times(max(values))}")
        assert line.endswith(f"below 1 ({below}) in {sum(v < 1 for v in values)}.")


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["digits", "imdb_lstm"]), methods, st.integers(0, 3000)), min_size=1,
                max_size=12, unique_by=lambda r: (r[0], r[1])))
def test_the_step_ops_lines_name_the_fewest_and_the_most_extra_operations(tmp_path_factory, drawn):
    rows = [{"file": "step_ops_cpu.json", "setting": s, "method": m, "extra_ops": n} for s, m, n in drawn]
    first = step_ops_overview(rows, tmp_path_factory.mktemp("figures")).lines[0]
    counts = [n for _, _, n in drawn]
    assert f"issue from {min(counts)} (" in first and f") to {max(counts)} (" in first


def audit(debug_break, bound, epsilon, flagged):
    return {"method": "dpzero", "seed": 0,
            "audit": {"debug_break": debug_break, "epsilon_lower_bound": bound, "epsilon_lower_bound_fdp": None,
                      "epsilon_at_audit_delta": epsilon, "exceeds_printed": flagged, "noise_check": None}}


@settings(max_examples=8, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "no_clip", "noise_div10"]), st.floats(0, 20), st.floats(0.5, 10),
                          st.booleans()), min_size=1, max_size=20))
def test_the_audits_lines_count_what_the_audit_flagged_among_correct_and_broken_runs(tmp_path_factory, drawn):
    summaries = [audit(*d) for d in drawn]
    correct = [s for s in summaries if not s["audit"]["debug_break"]]
    broken = [s for s in summaries if s["audit"]["debug_break"]]
    if not correct:
        summaries.append(audit(None, 0.0, 1.0, False))
        correct = summaries[-1:]
    lines = audits_overview(summaries, tmp_path_factory.mktemp("figures")).lines
    assert lines[0].startswith(f"{len(summaries)} audits: {len(correct)} of correct runs, {len(broken)} of runs")
    assert f"in {sum(exceeds(s['audit']) for s in correct)} of the {len(correct)} correct runs" in lines[1]
    assert f"in {sum(exceeds(s['audit']) for s in broken)} of the {len(broken)} broken ones" in lines[1]
    never = sorted({s["audit"]["debug_break"] for s in broken if not any(
        exceeds(o["audit"]) for o in broken if o["audit"]["debug_break"] == s["audit"]["debug_break"])})
    assert (f"never in a run of {', '.join(never)}." in lines[1]) == bool(never)


@settings(max_examples=5, deadline=None)
@given(st.dictionaries(st.tuples(methods, st.integers(1, 4)), st.lists(st.floats(1e-3, 1.0), min_size=1, max_size=3),
                       min_size=1, max_size=8))
def test_the_scaling_lines_give_each_median_its_spread_and_efficiency_and_the_bytes(tmp_path_factory, drawn):
    from pazo.bench.scaling import scaling_rows

    runs = {key: [{"median_s": t, "rank_bytes_per_step": 0.0 if key[1] == 1 else 1176.0, "command": "c"}
                  for t in times] for key, times in drawn.items()}
    rows = scaling_rows(runs)
    figures = tmp_path_factory.mktemp("figures")
    out = scaling_overview(rows, figures)
    assert 3 <= len(out.lines) <= 4 and (figures / out.figure).is_file()
    for row in rows:
        label = docs_overview._label(row["method"])
        part = out.lines[0].split(f"{label} ", 1)[1].split(";")[0]
        assert f"{row['median_s'] * 1e3:.1f} ms on {row['world_size']}" in part
        if row["world_size"] > 1 and "efficiency" in row:
            assert f"{row['median_s'] * 1e3:.1f} ms on {row['world_size']} (efficiency {row['efficiency']:.2f})" in part
        spread = out.lines[1].split(f"{label} ", 1)[1].split(";")[0]
        assert f"{row['min_s'] * 1e3:.1f} ms to {row['max_s'] * 1e3:.1f} ms on {row['world_size']}" in spread
    several = any(n > 1 for _, n in drawn)
    assert ("1,176" in out.lines[2]) == several
