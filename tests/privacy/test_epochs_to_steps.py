"""Epochs become steps by one rule, T = round(epochs / q), on the command line (`pazo-privacy
--epochs`) and in a run (`train.epochs` without `train.steps`): epochs that give fewer than one step
are refused in one line naming the key, never turned into one step silently."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pazo.errors import ConfigError
from pazo.run.build import planned_steps
from pazo.privacy.accountants import BudgetError
from pazo.privacy.cli import main
from pazo.privacy.planner import steps_of

EPOCHS = st.floats(1e-6, 50, allow_nan=False)


@given(epochs=EPOCHS, batch_size=st.integers(1, 512), extra=st.integers(0, 60_000))
@example(epochs=0.0001, batch_size=64, extra=1165 - 64)   # the reported case: 0.002 steps, run as 1
def test_epochs_give_round_epochs_over_q_steps_or_are_refused(epochs, batch_size, extra):
    n = batch_size + extra
    q, expected = batch_size / n, round(epochs / (batch_size / n))
    train = SimpleNamespace(steps=None, epochs=epochs, batch_size=batch_size)
    if expected >= 1:
        assert steps_of(None, epochs, q) == planned_steps(train, n) == expected
        return
    with pytest.raises(BudgetError, match=r"^--epochs .* fewer than one: give at least .* epochs \(one step\), "
                                          r"or --steps$"):
        steps_of(None, epochs, q)
    with pytest.raises(ConfigError, match=r"^train.epochs .* fewer than one: .*, or train.steps$"):
        planned_steps(train, n)


def test_pazo_privacy_refuses_epochs_of_no_step_in_one_line(capsys):
    assert main(["epsilon", "--sigma", "1.1", "--delta", "1e-5", "--batch-size", "64", "--n", "1165",
                 "--epochs", "0.0001"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("pazo: error: --epochs 0.0001 gives 0.00182 steps at sampling rate q = 0.05494 "
                                 "(T = round(epochs / q)), fewer than one: give at least 0.05494 epochs (one step), "
                                 "or --steps\n")
