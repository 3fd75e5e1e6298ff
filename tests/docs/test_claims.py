"""The numbers the docs' prose states are read from the results files they come from: a re-measured
file that changes one fails here until the sentence is changed with it."""
import json
import re

from pazo import REPO_ROOT

RESULTS = REPO_ROOT / "scripts" / "results"
INDEX = (REPO_ROOT / "docs" / "index.md").read_text()


def _rows(name):
    return json.loads((RESULTS / name).read_text())["results"]


def _inplace(rows, method):
    return next(r for r in rows if r["method"] == method and r.get("engine") == "inplace")


def test_the_index_states_the_cpu_floor_ratios_of_the_results_files():
    claim = re.search(r"PAZO-P' at (\d\.\d\d)-(\d\.\d\d)x by their median times", INDEX)
    assert claim, "the sentence on the floor ratios changed: update this test with it"
    digits = _rows("methods_cpu_digits.json")
    medians = sorted(_inplace(digits, m)["floor_ratio"] for m in ("pazo_p", "pazo_p_prime"))
    assert [f"{x:.2f}" for x in medians] == list(claim.groups())
    assert all(_inplace(digits, m)["paired_floor_ratio"] <= 1.15 for m in ("pazo_p", "pazo_p_prime"))
    aggzo = _inplace(_rows("methods_cpu_digits_dp_aggzo.json"), "dpzero")["paired_floor_ratio"]
    assert f"DPZero at {aggzo:.2f}x paired in DP-AggZO's own run" in INDEX
    cifar = [r for r in _rows("methods_cpu_cifar_shape.json") if r.get("engine") == "inplace"]
    assert cifar and all(r["paired_floor_ratio"] <= 1.15 and r["floor_ratio"] <= 1.15 for r in cifar)


def test_the_methods_the_index_says_have_no_step_timing_have_none():
    assert "DP-ZO and DP-ZOGD have no step timing yet" in INDEX
    timed = {r.get("method") for path in RESULTS.glob("methods_*.json")
             for r in json.loads(path.read_text()).get("results", [])}
    assert not timed & {"dp_zo", "dp_zogd"}


def _exit_table(page: str) -> dict[int, str]:
    """The rows of a guide's "## Exit statuses" table: status -> meaning."""
    section = page.split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.*) \|$", section, re.MULTILINE)}


def test_the_faults_guide_lists_every_exit_status_a_command_ends_with():
    """pazo-train's statuses and pazo-sweep's for each signal it passes on to its runs (was: 143 and
    129, SIGTERM and SIGHUP to a sweep, missing from the table)."""
    from pazo.sweep.child_runs import PASSED_ON, exit_status
    from pazo.train import EXIT_CODES

    table = _exit_table((REPO_ROOT / "docs" / "guides" / "faults.md").read_text())
    statuses = {0, 2, *EXIT_CODES.values(), *(exit_status(signum) for signum in PASSED_ON)}
    assert statuses <= set(table), sorted(statuses - set(table))
    for signum in PASSED_ON:
        if exit_status(signum) != exit_status(None):   # (SIGINT: Ctrl-C's row, 130)
            assert "pazo-sweep" in table[exit_status(signum)] and signum.name in table[exit_status(signum)]
