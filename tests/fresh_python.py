"""Run a snippet in a fresh interpreter, as a user's shell would start pazo: no plugin from the
test session's environment, a working directory outside the checkout, and a bounded time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def fresh_python(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The finished process (exit 0 asserted, with its stderr's tail when not)."""
    env = {k: v for k, v in os.environ.items() if k != "PAZO_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


#: modules that take seconds to import, which no refusal of a command's input needs
HEAVY = ("torch", "pandas", "scipy.stats", "transformers")


def codes_and_heavy(code: str, cwd: Path) -> tuple[list, list[str], subprocess.CompletedProcess]:
    """Run `code`, which collects the exit codes of the commands it calls in a list `codes`, in a fresh
    interpreter: those codes, the `HEAVY` modules imported by its end, and the finished process."""
    out = fresh_python("import json, sys\n" + code +
                       f"print(json.dumps([codes, sorted(m for m in {HEAVY!r} if m in sys.modules)]))\n", cwd)
    codes, heavy = json.loads(out.stdout.splitlines()[-1])
    return codes, heavy, out
