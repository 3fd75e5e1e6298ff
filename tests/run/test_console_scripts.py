"""Every console script of pyproject's [project.scripts], run as its installed wrapper runs it
(`sys.argv[0]` the script's name, `sys.exit(<entry>())`): its usage names the script itself, and a
reader that goes away (`pazo-audit --help | head -1`) ends it quietly, never a BrokenPipeError."""
from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from conftest import ROOT

SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
#: what setuptools' wrapper does, with argv[0] the script's name as the shell gives it
WRAPPER = ("import importlib, sys\nsys.argv[0] = sys.argv.pop(1)\n"
           "module, _, function = sys.argv.pop(1).partition(':')\n"
           "sys.exit(getattr(importlib.import_module(module), function)())")


def script(name: str, *args: str, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", WRAPPER, name, SCRIPTS[name], *args]
    return subprocess.Popen(argv, env=env, cwd=ROOT.parent, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_reader_that_goes_away_ends_the_script_quietly(name):
    """The reported case, `pazo-audit --help | head -1`, at its most certain: the reader has gone
    before the script writes its first byte."""
    process = script(name, "--help", stdout=subprocess.PIPE)
    process.stdout.close()
    stderr = process.stderr.read()
    assert process.wait(timeout=120) == 0, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr and "Exception ignored" not in stderr


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_usage_names_the_script_itself(name):
    process = script(name, "--help", stdout=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    usage = next(line for line in stdout.splitlines() if line.startswith("usage:"))
    assert usage.startswith(f"usage: {name} ") and "python" not in usage
