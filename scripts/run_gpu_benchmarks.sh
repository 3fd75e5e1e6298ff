#!/usr/bin/env bash
# All four paper settings on one CUDA GPU: every method, both zeroth-order engines, their floors
# and peak memory, our DP-SGD beside Opacus (hooks and ghost clipping). Writes
# scripts/results/methods_cuda_<setting>.json, one file per setting, each with its command; then
# the float16 OPT memory benchmarks (scripts/results/memory_cuda_opt-*_float16.json).
#
#   bash scripts/run_gpu_benchmarks.sh            # or: make bench-gpu
#   PYTHON=/path/to/python ITERS=20 bash scripts/run_gpu_benchmarks.sh
#
# Needs requirements.txt, requirements-bench.txt (Opacus) and pazo (pip install -e . --no-deps);
# no data set and no download (synthetic inputs of each setting's shapes, random weights).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "run_gpu_benchmarks: no CUDA device")'
for setting in cifar10_nf224 tiny_imagenet_vit imdb_lstm mnli_roberta; do
  "$PYTHON" scripts/benchmark_methods.py --device cuda --settings "$setting" --iters "$ITERS" --warmup "$WARMUP" \
    --out "scripts/results/methods_cuda_${setting}.json"
done
# the two engines alternated in one process (what engine.name=auto measures at start-up)
"$PYTHON" scripts/benchmark_engines.py --device cuda --threads 0 --iters "$ITERS" \
  --settings cifar10_nf224,tiny_imagenet_vit,mnli_roberta --out scripts/results/engines_cuda.json
# Table 5 and the speedup over DP-SGD beside the paper's ratios (outputs/tables/table5_*.md)
"$PYTHON" scripts/make_tables.py --benchmark scripts/results/methods_cuda_{cifar10_nf224,tiny_imagenet_vit,imdb_lstm,mnli_roberta}.json
# Large language models: peak memory of a float16 forward and of one MeZO/DPZero/DP-ZO step (in-place
# engine, queries on the fly) for OPT shapes with random weights from their configs; the larger
# shapes find the largest that fits this GPU (a shape that does not fit is reported, not fatal).
for shape in opt-1.3b opt-6.7b opt-13b opt-30b; do
  "$PYTHON" scripts/benchmark_memory.py --device cuda --dtype float16 --shape "$shape" \
    || echo "run_gpu_benchmarks: benchmark_memory --shape $shape did not complete on this GPU (above)"
done
