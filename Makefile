# Two commands on a fresh machine: `make run` (the offline default) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test test-slow test-all lint docs docs-pages docs-run check-defaults setup bench-calibration bench-cpu bench-gpu bench-threads bench-dpsgd-cpu bench-dpsgd-gpu demo clean

## The pinned requirements, then pazo itself in editable mode (entry points pazo-train, pazo-sweep, pazo-bench, pazo-report),
## and JAX-Privacy without its dependencies: its one-run f-DP estimator is the tests' independent
## check of ours, and its auditing module needs numpy and scipy only (not JAX).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet -e . --no-deps
	$(PY) -m pip install --quiet --no-deps jax-privacy==2.0.0
	touch $(STAMP)

setup: $(STAMP)

## Train PAZO-M on the bundled digits data set at epsilon = 1 (a few minutes at most on 2 CPU cores).
run: $(STAMP)
	$(PY) -m pazo.train $(ARGS)

## Fast test suite (slow tests are marked and skipped) in one pytest session on 2 worker processes
## (pytest-xdist); `make test-slow` runs the rest, `make test-all` everything.
test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(PY) -m pytest -q -n 2 -m slow $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 $(PYTEST_ARGS)

## Lint: ruff, and the package's layers (import-linter: no circle, no import that runs back up),
## both configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

## The documentation site in site/: first a check that the generated pages (docs/reference/, docs/results/)
## match the code, configs/ and scripts/results/ (`make docs-pages` regenerates them), then
## MkDocs in strict mode (a broken link or reference, or a page missing from the nav, fails).
## The tooling is the checkout's tools/docs/ (`$(PY) -m tools.docs --help`), not the installed package.
docs: $(STAMP)
	$(PY) -m tools.docs pages --check
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

## Regenerate the generated pages (docs/reference/, docs/results/) from the code, configs/ and
## scripts/results/; commit what changed (`make docs` fails while they are stale).
docs-pages: $(STAMP)
	$(PY) -m tools.docs pages

## Every command shown in README.md and docs/, run from a temporary directory outside the checkout
## through .venv's entry points, with the size each page's `<!-- docs-run: ... -->` comment gives;
## commands that need absent data must end in their one `pazo: error:` line. The list, without running:
## `$(PY) -m tools.docs run --list`; one page: `--only PAGE`, one command: `--only PAGE:LINE`.
docs-run: $(STAMP)
	$(PY) -m tools.docs run --venv $(VENV)

## Re-run every method's digits default and compare with scripts/results/defaults_digits_cpu.json
## (seeded, one thread per run: every number must come out the same; about 2 minutes on 2 cores).
check-defaults: $(STAMP)
	$(PY) -m pazo.bench.defaults --check scripts/results/defaults_digits_cpu.json --runs $(or $(TMPDIR),/tmp)/pazo-check-defaults

## Time sigma calibration (writes scripts/results/calibration_<host>.json).
bench-calibration: $(STAMP)
	$(PY) scripts/benchmark_calibration.py

## Seconds per step, floors and peak memory of every method on the two CPU settings (1 thread),
## the two engines' steps compared in one process (the evidence for engine.name=auto on CPU), PAZO-P's
## public gradients together against one by one (the evidence for the models' default way), and
## the tensor operations each zeroth-order step issues besides its floor's (also for the GPU settings).
bench-cpu: $(STAMP)
	$(PY) scripts/benchmark_methods.py --settings digits --iters 200 --warmup 20 --threads 1 \
	  --out scripts/results/methods_cpu_digits.json
	$(PY) scripts/benchmark_methods.py --settings cifar_shape --iters 5 --warmup 1 --threads 1 \
	  --out scripts/results/methods_cpu_cifar_shape.json
	$(PY) scripts/benchmark_engines.py --settings digits,cifar_shape --threads 1 --out scripts/results/engines_cpu.json
	$(PY) scripts/benchmark_engines.py --public-grads --settings digits,cifar_shape,imdb_lstm --threads 1 \
	  --out scripts/results/public_grads_cpu.json
	$(PY) scripts/profile_zo_step.py --setting digits --threads 1
	$(PY) scripts/count_step_ops.py --settings digits,cifar_shape,cifar10_nf224,tiny_imagenet_vit,imdb_lstm,mnli_roberta

## DP-SGD by each clip engine (per-example, book-keeping) beside SGD on every CPU-sized paper shape
## (scripts/results/dpsgd_engines_cpu.json; about 10 minutes on 2 cores).
bench-dpsgd-cpu: $(STAMP)
	$(PY) -m pazo.bench.methods --device cpu --settings digits,cifar_shape,cifar10_nf32,imdb_lstm,tiny_imagenet_vit \
	  --methods sgd,dpsgd --iters 5 --warmup 1 --threads 1 --batch-size 16 --out scripts/results/dpsgd_engines_cpu.json

## CPU threads against step time, and the default run at each count and at train.threads=auto
## (scripts/results/threads_cpu.json): the evidence for the auto rule (pazo/threads.py).
bench-threads: $(STAMP)
	$(PY) -m pazo.bench.threads

## DP-SGD by each clip engine (per-example, ghost) against SGD on the four paper settings on CUDA.
bench-dpsgd-gpu: $(STAMP)
	$(PY) -m pazo.bench.methods --device cuda --settings cifar10_nf224,tiny_imagenet_vit,imdb_lstm,mnli_roberta --methods sgd,dpsgd --iters 30 --warmup 5 --out scripts/results/dpsgd_engines_cuda.json

## The same on a CUDA GPU for all four paper settings (scripts/results/methods_cuda_<setting>.json).
bench-gpu: $(STAMP)
	PYTHON=$(PY) bash scripts/run_gpu_benchmarks.sh

## Offline demonstration: DPZero, PAZO-M/P/S, DP-SGD and DOPE-SGD on digits at three epsilons
## (38 runs, 2 at a time), then the table and figures in outputs/demo/.
demo: $(STAMP)
	$(PY) -m pazo.sweep demo --launcher joblib logger.mode=disabled $(ARGS)
	$(PY) scripts/make_tables.py outputs/sweeps/demo --out outputs/demo
	$(PY) scripts/make_figures.py outputs/sweeps/demo --out outputs/demo

clean:
	rm -rf $(VENV) .pytest_cache site
