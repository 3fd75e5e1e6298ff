"""Evaluate a finished run's released model: `pazo-eval <run dir> [dataset overrides]` prints its
accuracy and loss on the run's test split, or on the test split of another data set of the same
label space (`dataset=<name>`, `dataset.<key>=<value>`); `--export-hf DIR` writes a language-model
run in the Hugging Face format instead (a LoRA run as a peft adapter).

Post-processing of the released model (`model.safetensors`): it costs no privacy. An evaluation split
that holds any of the run's private training examples (overrides that re-split the run's data) is
refused, since an accuracy on them is a noiseless statistic of private data. Nothing is written into
the run directory. A user's mistake is one `pazo: error:` line and exit 2; a Ctrl-C, one line and
exit 130. This module imports only the standard library at its top (`pazo.commands.interrupts`).

Examples:
  pazo-eval outputs/runs/digits/pazo_m/<run>
  pazo-eval outputs/runs/digits/pazo_m/<run> dataset.test_fraction=0.2
  pazo-eval outputs/runs/sst2/dpzero/<run> --export-hf exported/
"""
from __future__ import annotations

import sys

from pazo.commands.start import quiet_when_the_reader_leaves
from pazo.commands.interrupts import stop_status, stop_word, until_work_starts, work_starts


def parser():
    from pazo.commands.start import ArgumentParser, summary_of
    from pazo.files.file_kinds import path_argument

    p = ArgumentParser(prog="pazo-eval", description=summary_of(__doc__),
                       epilog="Overrides take the data set only, as pazo-train does: dataset=<name> picks another "
                              "data set's config, dataset.<key>=<value> sets one of its keys.")
    p.add_argument("run_dir", help="a finished run's directory (pazo-train's hydra.run.dir)")
    p.add_argument("overrides", nargs="*", default=[],   # (a default: argparse then names run_dir alone as missing)
                   help="dataset=<name> and dataset.<key>=<value> (default: the run's own test split)")
    p.add_argument("--device", default="auto", help="where to evaluate: auto (CUDA if there is one), cpu, cuda, "
                   "cuda:N, mps (default: auto)")
    p.add_argument("--batch-size", type=int, default=None, help="examples per forward (default: the run's "
                   "train.eval_batch_size)")
    p.add_argument("--export-hf", metavar="DIR", type=path_argument, default=None,
                   help="write a language-model run in the Hugging Face format into DIR (new or empty) instead of "
                   "evaluating it")
    return p


def evaluate(args) -> list[str]:
    """What `pazo-eval` prints for `args` (its parsed command line)."""
    from pazo.errors import ConfigError
    from pazo.run.build import resolve_device
    from pazo.run.loaded import load_run

    if args.batch_size is not None and args.batch_size < 1:
        raise ConfigError(f"--batch-size must be an integer >= 1, got {args.batch_size}")
    run = load_run(args.run_dir, device=str(resolve_device(args.device)))
    if args.export_hf is not None:
        if args.overrides:
            raise ConfigError("--export-hf writes the model and evaluates nothing: give it no overrides")
        folder = run.export_hf(args.export_hf)
        return [f"pazo: {run.path}: exported to {folder} ({_loads_with(run)})"]
    return run.evaluate(args.overrides, args.batch_size).lines()


def _loads_with(run) -> str:
    lora = run.config.raw.model.get("lora")
    causal = run.config.raw.model.name == "hf_causal_lm"
    if lora is not None and lora.enabled:
        auto = "AutoPeftModelForCausalLM" if causal else "AutoPeftModel"
        return f"peft.{auto}.from_pretrained(folder) loads the adapter over the base adapter_config.json names"
    auto = "AutoModelForCausalLM" if causal else "AutoModelForMaskedLM"
    return f"transformers.{auto}.from_pretrained(folder) loads it"


@quiet_when_the_reader_leaves
def cli() -> None:
    """`pazo-eval` / `python -m pazo.eval`."""
    until_work_starts("before the evaluation started: nothing was evaluated")
    args = parser().parse_intermixed_args()
    from pazo.run.cli import USER_ERRORS

    work_starts()
    try:
        lines = evaluate(args)
    except USER_ERRORS as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as stop:   # (a SIGTERM too: `Terminated`)
        print(f"pazo: {stop_word(stop)}: nothing was written into the run directory", file=sys.stderr)
        sys.exit(stop_status(stop))
    for line in lines:
        print(line)


if __name__ == "__main__":
    cli()
