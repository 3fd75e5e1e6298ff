#!/usr/bin/env bash
# All four paper settings on one CUDA GPU: every method, both zeroth-order engines, their floors
# and peak memory, our DP-SGD beside Opacus (hooks and ghost clipping). Writes
# scripts/results/methods_cuda_<setting>.json, one file per setting, each with its command; then
# the float16 OPT memory benchmarks (scripts/results/memory_cuda_opt-*_float16.json). Part
# `profile` (run first, about a minute a setting) pairs our DPZero step and a minimal hand-written
# one with their floor and records our step's operators under torch.profiler
# (scripts/results/zo_step_profile_cuda_<setting>.json): where a step's time over its floor goes.
# Part `public` times PAZO-P's k public gradients taken together against one by one
# (scripts/results/public_grads_cuda.json): the evidence for the models' default way.
#
#   bash scripts/run_gpu_benchmarks.sh            # or: make bench-gpu
#   PYTHON=/path/to/python ITERS=20 bash scripts/run_gpu_benchmarks.sh
#   SETTINGS="imdb_lstm mnli_roberta" PARTS=methods bash scripts/run_gpu_benchmarks.sh   # a share of it
#   SETTINGS=tiny_imagenet_vit PARTS=profile bash scripts/run_gpu_benchmarks.sh
#
# A job (one method and engine in its own subprocess) took about 22 s on an H100 for CIFAR-10,
# Tiny-ImageNet and IMDB and about 40 s for MNLI (20 timed steps on the first two, 10 on the others),
# much of it start-up (interpreter, imports, CUDA, the models): the methods part is 7-14 minutes per
# setting, the whole over 40, more than one 30-minute lease. SETTINGS (default all four) and PARTS
# (default "profile methods engines public tables memory") split it; each part writes its own files, and a setting
# named runs all its jobs again and replaces its file.
#
# Needs requirements.txt, requirements-bench.txt (Opacus) and pazo (pip install -e . --no-deps);
# no data set and no download (synthetic inputs of each setting's shapes, random weights).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
ALL_SETTINGS="cifar10_nf224 tiny_imagenet_vit imdb_lstm mnli_roberta"
SETTINGS=${SETTINGS:-$ALL_SETTINGS}
PARTS=${PARTS:-profile methods engines public tables memory}
part() { [[ " $PARTS " == *" $1 "* ]]; }
for p in $PARTS; do
  case $p in profile|methods|engines|public|tables|memory) ;;
    *) echo "run_gpu_benchmarks: unknown part '$p' (profile, methods, engines, public, tables, memory)" >&2; exit 2;;
  esac
done
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "run_gpu_benchmarks: no CUDA device")'
if part profile; then
  for setting in $SETTINGS; do
    "$PYTHON" scripts/profile_zo_step.py --device cuda --setting "$setting" --pairs 50 --warmup 10 --trace-steps 10 \
      --out "scripts/results/zo_step_profile_cuda_${setting}.json"
  done
fi
if part methods; then
  for setting in $SETTINGS; do
    "$PYTHON" scripts/benchmark_methods.py --device cuda --settings "$setting" --iters "$ITERS" --warmup "$WARMUP" \
      --out "scripts/results/methods_cuda_${setting}.json"
  done
fi
# the two engines alternated in one process (what engine.name=auto measures at start-up; the LSTM
# always gets the in-place engine, so imdb_lstm is left out)
engine_settings=$(for s in $SETTINGS; do if [[ $s != imdb_lstm ]]; then printf '%s,' "$s"; fi; done)
if part engines && [[ -n $engine_settings ]]; then
  "$PYTHON" scripts/benchmark_engines.py --device cuda --threads 0 --iters "$ITERS" \
    --settings "${engine_settings%,}" --out scripts/results/engines_cuda.json
fi
# PAZO-P's k public gradients in one pass against one by one, alternated in one process
if part public; then
  settings_list=$(printf '%s,' $SETTINGS)
  "$PYTHON" scripts/benchmark_engines.py --public-grads --device cuda --threads 0 --iters "$ITERS" \
    --settings "${settings_list%,}" --out scripts/results/public_grads_cuda.json
fi
# Table 5 and the speedup over DP-SGD beside the paper's ratios (outputs/tables/table5_*.md), from
# the settings' files there are
files=()
for s in $ALL_SETTINGS; do
  if [[ -f scripts/results/methods_cuda_$s.json ]]; then files+=("scripts/results/methods_cuda_$s.json"); fi
done
if part tables && (( ${#files[@]} )); then
  "$PYTHON" scripts/make_tables.py --benchmark "${files[@]}"
fi
# Large language models: peak memory of a float16 forward and of one MeZO/DPZero/DP-ZO step (in-place
# engine, queries on the fly) for OPT shapes with random weights from their configs; the larger
# shapes find the largest that fits this GPU (a shape that does not fit is reported, not fatal).
if part memory; then
  for shape in opt-1.3b opt-6.7b opt-13b opt-30b; do
    "$PYTHON" scripts/benchmark_memory.py --device cuda --dtype float16 --shape "$shape" \
      || echo "run_gpu_benchmarks: benchmark_memory --shape $shape did not complete on this GPU (above)"
  done
fi
