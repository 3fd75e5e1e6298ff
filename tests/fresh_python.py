"""Run a snippet in a fresh interpreter, as a user's shell would start pazo: no plugin from the
test session's environment, a working directory outside the checkout, and a bounded time."""
from __future__ import annotations

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
