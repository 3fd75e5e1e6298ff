"""`pazo-bench memory --device X` on a machine without X is one `pazo: error:` line and exit 2
before any measurement (the GPU guide's command on a CPU machine ended in CUDA's traceback)."""
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pazo.bench import memory
from pazo.bench.settings import check_device
from pazo.errors import ConfigError


def device_problem(name):
    try:
        check_device(name)
    except ConfigError as err:
        return str(err)
    return None


@settings(deadline=None)
@given(index=st.one_of(st.none(), st.integers(0, 64)))
def test_a_cuda_device_this_machine_lacks_is_named_and_one_present_is_not(index):
    name = "cuda" if index is None else f"cuda:{index}"
    present = torch.cuda.is_available() and (index is None or index < torch.cuda.device_count())
    problem = device_problem(name)
    assert (problem is None) == present
    if problem:
        assert problem.startswith(f"--device {name}:") and "\n" not in problem
    assert device_problem("cpu") is None
    assert device_problem("no_such_device") is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_the_command_stops_in_one_line_before_measuring(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["pazo-bench memory", "--device", "cuda", "--dtype", "float16"])
    monkeypatch.setattr(memory.subprocess, "run", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as stop:
        memory.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and err[0].startswith("pazo: error: --device cuda:")
