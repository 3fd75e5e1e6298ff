"""Record the golden runs: `python -m tests.paper.golden.record` from the repository root (only when a
change is *meant* to change the numbers; say so in the commit)."""
from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

from .cases import CASES, COMMON, IGNORED

HERE = Path(__file__).resolve().parent


@contextmanager
def default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def run_case(name: str, overrides, workdir: Path) -> dict:
    """One case's run in float64 (the model's parameters and the digits images follow torch's
    default dtype). In float32 the CPU's kernels decide the last bits, and 24 steps amplify them:
    on one AVX2 machine, other kernels (ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE, oneDNN
    off, 1 thread instead of 2) moved these runs' numbers by up to 0.33 (relative) in float32; in
    float64 ATen's capability alone, or oneDNN off with 1 thread, moved none by more than 5e-13, and
    all four together kept every one within the test's 1e-9. So only float64 numbers can be recorded
    on one machine and compared on another."""
    from hydra import compose, initialize_config_dir

    import pazo.run.validate  # noqa: F401  (registers the schemas the config composes with)
    from pazo.run.launch import run

    with initialize_config_dir(config_dir=str(HERE.parents[2] / "configs"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*COMMON, *overrides])
    with default_dtype(torch.float64):
        summary = run(cfg, workdir / name)
    rows = [json.loads(line) for line in (workdir / name / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: v for k, v in r.items() if k not in IGNORED} for r in rows]
    return {"rows": rows, "epsilon_spent": summary["privacy"].get("epsilon_spent"),
            "sigma": summary["privacy"].get("sigma"), "final_test_accuracy": summary["final_test_accuracy"]}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PAZO_CACHE_DIR"] = str(Path(tmp) / "cache")
        out = {name: run_case(name, ov, Path(tmp)) for name, ov in CASES.items()}
    (HERE / "digits_runs.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(out)} runs in {HERE / 'digits_runs.json'}")


if __name__ == "__main__":
    main()
