"""Plan privacy before running: `pazo-privacy sigma|epsilon|steps [options]` answers the noise
multiplier a target epsilon needs, the epsilon a noise multiplier spends, or the steps a budget
allows, for the Poisson-subsampled Gaussian mechanism, by pazo's PRV accountant or dp-accounting's
PLD or RDP (`--accountant all`: the three side by side). Public arithmetic: no data is read.

Examples:
  pazo-privacy sigma --epsilon 1 --delta 1e-5 --sample-rate 0.01 --steps 1000
  pazo-privacy epsilon --sigma 1.1 --delta 1e-5 --batch-size 64 --n 1165 --epochs 30 --accountant all
  pazo-privacy steps --epsilon 2 --sigma 1.5 --delta 1e-5 --sample-rate 0.05
"""
from __future__ import annotations

import sys

from pazo.commands.interrupts import stop_status, stop_word
from pazo.commands.start import ArgumentParser, summary_of
from pazo.privacy.accountants import BudgetError, default_eps_error
from pazo.privacy.accountants import ACCOUNTANTS
from pazo.privacy.planner import epsilon_of, sample_rate_of, sigma_for, steps_of, upper_epsilon_of
from pazo.privacy.steps_budget import steps_for

ANSWERS = ("sigma", "epsilon", "steps")


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="pazo-privacy", description=summary_of(__doc__),
                       epilog="q is --sample-rate, or --batch-size / --n; T is --steps, or --epochs / q.")
    p.add_argument("answer", choices=ANSWERS, help="what to compute: sigma for an epsilon, the epsilon of a "
                   "sigma, or the steps an epsilon allows at a sigma")
    p.add_argument("--epsilon", type=float, help="the target epsilon (sigma, steps)")
    p.add_argument("--sigma", type=float, help="the noise multiplier (epsilon, steps)")
    p.add_argument("--delta", type=float, required=True, help="delta, in (0, 1)")
    p.add_argument("--sample-rate", type=float, help="the Poisson sample rate q, in (0, 1]")
    p.add_argument("--batch-size", type=int, help="the expected batch size b (q = b / n)")
    p.add_argument("--n", type=int, help="the private set's size n")
    p.add_argument("--steps", type=int, help="the steps T (sigma, epsilon)")
    p.add_argument("--epochs", type=float, help="epochs instead of steps: T = round(epochs / q)")
    p.add_argument("--accountant", default="prv", choices=[*ACCOUNTANTS, "all"],
                   help="prv (pazo's own, what runs use; default), pld or rdp (dp-accounting), or all three")
    return p


def _needed(args, answer: str) -> None:
    wanted = {"sigma": ("epsilon",), "epsilon": ("sigma",), "steps": ("epsilon", "sigma")}[answer]
    missing = [f"--{name}" for name in wanted if getattr(args, name) is None]
    if missing:
        raise BudgetError(f"pazo-privacy {answer} needs {' and '.join(missing)}")
    if answer == "steps" and (args.steps is not None or args.epochs is not None):
        raise BudgetError("pazo-privacy steps computes the steps: give no --steps or --epochs")
    if answer in ("sigma", "epsilon") and getattr(args, answer) is not None:
        raise BudgetError(f"pazo-privacy {answer} computes {answer}: give no --{answer}")


def answer_line(args, accountant: str) -> str:
    """One line: the answer and the inputs it holds for."""
    q = sample_rate_of(args.sample_rate, args.batch_size, args.n)
    if args.answer == "steps":
        steps = steps_for(args.epsilon, args.sigma, q, args.delta, accountant)
        none_fits = (f": one step already spends epsilon "
                     f"{upper_epsilon_of(args.sigma, q, 1, args.delta, accountant):.4f}" if steps == 0 else "")
        return (f"steps = {steps} at sigma {args.sigma:g} within epsilon {args.epsilon:g} (delta {args.delta:g}, "
                f"q {q:.4g}; {accountant}){none_fits}")
    steps = steps_of(args.steps, args.epochs, q)
    if args.answer == "sigma":
        sigma = sigma_for(args.epsilon, q, steps, args.delta, accountant)
        spent = upper_epsilon_of(sigma, q, steps, args.delta, accountant, default_eps_error(args.epsilon))
        return (f"sigma = {sigma:.4f} for epsilon {args.epsilon:g} (spends {spent:.4f}; delta {args.delta:g}, "
                f"q {q:.4g}, T {steps}; {accountant})")
    account = epsilon_of(args.sigma, q, steps, args.delta, accountant)
    bounds = f", at least {account.lower:.4f}" if account.lower > 0 else ""
    return (f"epsilon = {account.upper:.4f}{bounds} at sigma {args.sigma:g} (delta {args.delta:g}, q {q:.4g}, "
            f"T {steps}; {accountant})")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        _needed(args, args.answer)
        for accountant in ACCOUNTANTS if args.accountant == "all" else (args.accountant,):
            print(answer_line(args, accountant), flush=True)
    except BudgetError as err:
        print(f"pazo: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:   # (a SIGTERM too: `Terminated`)
        print(f"pazo: {stop_word(stop)}", file=sys.stderr)
        return stop_status(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
