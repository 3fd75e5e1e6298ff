#!/usr/bin/env bash
# A short check that pazo runs on a CUDA GPU as on the CPU: the CUDA tests (`pytest -m gpu`), each
# private method's default digits run with device=cuda (epsilon, sigma, accuracy, engine chosen,
# seconds per step), and white-box audits on CUDA (a correct DPZero run and three debug breaks).
# Writes scripts/results/cuda_check_digits.json (or $RESULT; COMMIT=... names the commit where the
# machine's copy has no git history of its own). About two minutes on an H100.
#
#   bash scripts/gpu_check.sh                                  # on a machine with CUDA
#   PYTHON=python3 PYTHONPATH=/path/to/site:$PWD bash scripts/gpu_check.sh   # pazo not installed there
#   DEVICE=cpu TRAIN_ARGS=train.epochs=1 bash scripts/gpu_check.sh          # a smoke run of the script itself
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
DEVICE=${DEVICE:-cuda}
TRAIN_ARGS=${TRAIN_ARGS:-}
RESULT=${RESULT:-scripts/results/cuda_check_digits.json}
WORK=$(mktemp -d)
METHODS="dpsgd dpzero dp_zo pazo_m pazo_p pazo_s dp_aggzo"
AUDITS=("dpzero" "dpzero audit.debug_break=no_clip" "pazo_s audit.debug_break=noise_from_direction_seed"
        "dpsgd audit.debug_break=noise_div10")
if [[ $DEVICE == cuda* ]]; then
  "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "gpu_check: no CUDA device")' || exit 1
  "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider $(grep -rl "pytest.mark.gpu" tests) 2>&1 | tail -1 | tee "$WORK/pytest.txt"
fi
for m in $METHODS; do
  "$PYTHON" -m pazo.train device="$DEVICE" logger.mode=disabled method="$m" $TRAIN_ARGS \
    hydra.run.dir="$WORK/train/$m" 2>&1 | grep -E "test accuracy|epsilon spent|error" || true
done
for i in "${!AUDITS[@]}"; do
  "$PYTHON" -m pazo.audit device="$DEVICE" logger.mode=disabled method=${AUDITS[$i]} train.epochs=2 \
    hydra.run.dir="$WORK/audit/$i" 2>&1 | grep -E "^audit: (epsilon|f-DP)|error" || true
done
"$PYTHON" - "$WORK" "$RESULT" "$DEVICE" "$TRAIN_ARGS" <<'PY'
"""Gather the runs' summary.json and audit.json into one result file with its provenance."""
import json, sys
from pathlib import Path
import os
from pazo.bench.common import git_commit, machine_details, write_result
work, result, device, train_args = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]


def torch_device_name(device: str) -> str:
    import torch
    return torch.cuda.get_device_name() if device.startswith("cuda") else "cpu"


rows = []
for run in sorted((work / "train").iterdir()):
    s = json.loads((run / "summary.json").read_text())
    rows.append({"kind": "train", "method": run.name, "status": s["status"], "device": s["device"],
                 "final_test_accuracy": s["final_test_accuracy"], "best_test_accuracy": s["best_test_accuracy"],
                 "epsilon_spent": s["privacy"]["epsilon_spent"], "sigma": s["privacy"]["sigma"],
                 "median_s_per_iter": s["median_s_per_iter"], "engine": s["engine"]["name"]})
for run in sorted((work / "audit").iterdir()):
    a = json.loads((run / "audit.json").read_text())
    s = json.loads((run / "summary.json").read_text())
    rows.append({"kind": "audit", "method": s["method"], "device": s["device"], "debug_break": a["debug_break"],
                 "epsilon_at_audit_delta": a["epsilon_at_audit_delta"], "epsilon_lower_bound": a["epsilon_lower_bound"],
                 "epsilon_lower_bound_fdp": a["epsilon_lower_bound_fdp"], "auroc": a["membership"]["auroc"],
                 "exceeds": a["exceeds_printed"] or a["exceeds_printed_fdp"]})
pytest_line = (work / "pytest.txt").read_text().strip() if (work / "pytest.txt").exists() else None
write_result(Path(result), {"command": f"DEVICE={device} TRAIN_ARGS='{train_args}' bash scripts/gpu_check.sh",
                            "commit": os.environ.get("COMMIT") or git_commit(),
                            "machine": machine_details(device=torch_device_name(device)), "pytest_gpu": pytest_line,
                            "results": rows})
print(f"gpu_check: wrote {result} ({len(rows)} rows)")
PY
