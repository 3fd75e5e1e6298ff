"""The accountant never takes the machine down: every hard input ends in seconds, in bounded memory,
either accounted or refused with one BudgetError line.

Each case runs in its own process (numpy's memory is only visible to ru_maxrss), under an address
space cap so that a regression fails the test instead of the machine, and reports its time and peak
memory growth over the imports. The process is forked from one that has imported the accountant
and what it imports when it accounts (3-4 s of torch, scipy and pazo imports, against under a
second for the hardest case): a forked child's ru_maxrss starts at its own resident size, so its
growth is its case's alone."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

N, B, T = 1294, 64, 607  # the digits defaults: q = 64/1294, T = 607 (30 epochs), delta = 1/n
#: a bound against a blow-up (a grid of 1e7 steps takes minutes), not a speed check: the hardest case takes
#: under a second, so a loaded machine's tenfold slow-down still passes
MAX_SECONDS, MAX_GROWTH_MB = 60, 2048
CASE_TIMEOUT_S = 120

#: reads one case (JSON) a line; for each, a forked child runs it and writes one JSON line
HARNESS = textwrap.dedent("""
    import json, os, resource, signal, sys, time
    from types import SimpleNamespace
    import prv_accountant, scipy.fft, scipy.special, scipy.stats  # what the accountant imports when it accounts
    from pazo.privacy.accountants import BudgetError
    from pazo.privacy.plan import epsilon_spent, make_plan
    from pazo.privacy.sampling import SAMPLERS

    def plan(epsilon, sigma=None, n={n}, b={b}, steps={t}, noise="gaussian", delta=None):
        pcfg = SimpleNamespace(epsilon=epsilon, delta=delta, sigma=sigma, eps_error=None,
                               adjacency="add_remove", sampling="poisson", secure_mode=False,
                               cache_dir=None)
        release = SimpleNamespace(queries=1, mechanisms=1, noise=noise)
        p = make_plan(pcfg, n, b, steps, release, SAMPLERS["poisson"])
        return {{"sigma": p.sigma, "epsilon": epsilon_spent(p, steps)}}

    def run_case(kwargs):
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # a runaway grid fails, not the machine
        signal.alarm({timeout})                                      # and a runaway loop too
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        try:
            out = {{"result": plan(**kwargs)}}
        except BudgetError as err:
            out = {{"error": str(err)}}
        out["seconds"] = time.perf_counter() - t0
        out["growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        return out

    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:
            try:
                out = run_case(json.loads(line))
            except BaseException as err:
                out = {{"crash": repr(err)}}
            sys.stdout.write(json.dumps(out) + "\\n")
            sys.stdout.flush()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status:
            print(json.dumps({{"crash": f"the case's process ended with wait status {{status}}"}}), flush=True)
""").format(n=N, b=B, t=T, timeout=CASE_TIMEOUT_S)


@pytest.fixture(scope="module")
def harness():
    proc = subprocess.Popen([sys.executable, "-c", HARNESS], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    yield proc
    proc.stdin.close()
    proc.wait(timeout=60)


def run_case(harness, **kwargs) -> dict:
    harness.stdin.write(json.dumps(kwargs) + "\n")
    harness.stdin.flush()
    line = harness.stdout.readline()
    assert line, f"the harness ended (exit {harness.poll()})"
    out = json.loads(line)
    assert "crash" not in out, out
    return out


CASES = {
    # given sigma far too small: refused by the exact one-step bound, no grid
    "sigma=0.1": ({"epsilon": 1.0, "sigma": 0.1}, "above the target"),
    "sigma=1e-6": ({"epsilon": 1.0, "sigma": 1e-6}, "above the target"),
    # targets outside [0.001, 50]
    "epsilon=1000": ({"epsilon": 1000.0}, "out of reach"),
    "epsilon=1e9": ({"epsilon": 1e9}, "out of reach"),
    "epsilon=1e-6": ({"epsilon": 1e-6}, "out of reach"),
    "epsilon=1e9 laplace": ({"epsilon": 1e9, "noise": "laplace"}, "out of reach"),
    # a huge sigma is accounted (epsilon ~ 0)
    "sigma=1e6": ({"epsilon": 1.0, "sigma": 1e6}, None),
    # 1e7 steps: the PRV grid would not fit; the exact Laplace account does
    "T=1e7 calibrate": ({"epsilon": 1.0, "steps": 10_000_000}, "PRV grid"),
    "T=1e7 sigma=3": ({"epsilon": 1.0, "sigma": 3.0, "steps": 10_000_000}, "PRV grid"),
    "T=1e7 laplace": ({"epsilon": 1.0, "steps": 10_000_000, "noise": "laplace"}, None),
    # full batch (q = 1): closed form, any sigma
    "q=1 calibrate": ({"epsilon": 1.0, "b": N}, None),
    "q=1 sigma=1e-6": ({"epsilon": 1.0, "sigma": 1e-6, "b": N}, "above the target"),
    "laplace sigma=1e-6": ({"epsilon": 1.0, "sigma": 1e-6, "noise": "laplace"}, "above the target"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hard_inputs_end_fast_in_bounded_memory(name, harness):
    kwargs, refused = CASES[name]
    out = run_case(harness, **kwargs)
    assert out["seconds"] < MAX_SECONDS and out["growth_mb"] < MAX_GROWTH_MB, out
    if refused is None:
        assert "result" in out, out
        assert out["result"]["epsilon"] <= kwargs["epsilon"]
    else:
        assert refused in out.get("error", ""), out
        assert "\n" not in out["error"]  # one line for `pazo: error: ...`
