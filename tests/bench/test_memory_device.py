"""One device resolver (`pazo.run.build.resolve_device`) for runs and benchmarks: a device this
machine lacks, or a name torch does not know, is one line naming the option as the user spelled it
(`device=` in a run's config, `--device ` on a benchmark's command line), and `pazo-bench memory
--device X` on a machine without X is one `pazo: error:` line and exit 2 before any measurement (the
GPU guide's command on a CPU machine ended in CUDA's traceback)."""
import sys

import pytest
import torch
from hypothesis import example, given, settings, strategies as st

from pazo.bench import memory
from pazo.errors import ConfigError
from pazo.run.build import resolve_device


def device_problem(name, option):
    try:
        resolve_device(name, option=option)
    except ConfigError as err:
        return str(err)
    return None


@settings(deadline=None)
@given(index=st.one_of(st.none(), st.integers(0, 64)), option=st.sampled_from(["device=", "--device "]))
@example(index=None, option="--device ")
def test_a_cuda_device_this_machine_lacks_is_named_and_one_present_is_not(index, option):
    name = "cuda" if index is None else f"cuda:{index}"
    present = torch.cuda.is_available() and (index is None or index < torch.cuda.device_count())
    problem = device_problem(name, option)
    assert (problem is None) == present
    if problem:
        assert problem.startswith(f"{option}{name} asked for but") and "\n" not in problem
    assert device_problem("cpu", option) is None
    assert resolve_device("auto", option) == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert "\n" not in device_problem("no_such_device", option)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_command_stops_in_one_line_before_measuring(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pazo-bench memory", "--device", "cuda", "--dtype", "float16"])
    monkeypatch.setattr(memory.subprocess, "run", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as stop:
        memory.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("pazo: error: --device cuda asked for but")


def test_the_device_is_resolved_in_one_place():
    """No second resolver: the package names `cuda.is_available()` to choose a device only there
    (the checkpoint's use reads CUDA's random state, not a device)."""
    from pathlib import Path

    import pazo
    root = Path(pazo.__file__).parent
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "cuda.is_available()" in p.read_text()
                   and p.name not in ("checkpoint.py", "distributed.py"))
    assert users == ["run/build.py"], users


@settings(max_examples=20, deadline=None)
@given(name=st.one_of(st.sampled_from(["cuda", "mps"]), st.integers(0, 64).map("cuda:{}".format)))
def test_a_run_assembled_without_its_launch_refuses_the_device_before_reading_data(name):
    """`build_run` with no device resolved for it (an audit's, a benchmark's) refuses a device this
    machine lacks (a name the config's schema accepts), in the resolver's line, before it reads a
    byte of data: a mistake is one line before any work, as a training run's launch refuses it."""
    from conftest import tiny_cfg
    from pazo.run import build
    from pazo.run.typed import run_config

    problem = device_problem(name, "device=")
    if problem is None:   # (present here: nothing to refuse)
        return
    cfg = run_config(tiny_cfg(f"device={name}"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "build_dataset", lambda *a, **k: pytest.fail("read the data first"))
        with pytest.raises(ConfigError) as refused:
            build.build_run(cfg, time_engines=False)
    assert str(refused.value) == problem
