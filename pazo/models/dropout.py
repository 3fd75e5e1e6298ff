"""Which models draw random numbers in a training-mode forward: a dropout module of nonzero rate, or
a float dropout rate a layer keeps for `nn.functional.dropout` (Hugging Face's OPT and Llama: no
dropout module at all). Where a forward is random, a data-parallel run cannot split work that one
process does in one order (each rank would draw its own masks), and a second forward is not the
first one again."""
from __future__ import annotations

from torch import nn

#: dropout-like classes whose `p` / `drop_prob` is their rate (torch's dropouts, timm's DropPath)
_RATE_ATTRS = ("p", "drop_prob")


def is_dropout_rate(name: str) -> bool:
    """A layer attribute that transformers reads as a dropout probability in its forward
    (`dropout`, `attention_dropout`, `hidden_dropout_prob`, `attn_pdrop`); not `layerdrop`, the
    chance of skipping a whole layer."""
    return name == "dropout" or name.endswith(("_dropout", "dropout_prob", "_pdrop"))


def is_random_in_training(module: nn.Module) -> bool:
    """Whether a training-mode forward can draw random numbers: a dropout (or timm DropPath) of
    nonzero rate, or a float dropout rate, or OPT's `layerdrop`, above zero in any layer. (The other
    layers of pazo's models are deterministic.)"""
    for m in module.modules():
        name = type(m).__name__.lower()
        if "drop" in name and any(float(getattr(m, a, 0) or 0) > 0 for a in _RATE_ATTRS):
            return True
        if any(isinstance(value, float) and value > 0 and (is_dropout_rate(key) or key == "layerdrop")
               for key, value in vars(m).items()):
            return True
    return False
