"""The library entry's (`pazo.private`) checks of a user's own objects, and its messages in its own words.

A library user hands pazo a model, a per-example loss and data; what fails inside them would
otherwise surface deep in a step as torch's error (`IndexError: Target 7 is out of bounds` at
step 7). So, before any step, the model and the loss run on two examples of each data set given
(`check_model_and_loss`) and the labels are checked against the model's outputs; an error a
step still meets in the user's objects is attributed to the argument it came from
(`user_culprit`). And since the library shares the framework's checks, whose messages name
config keys (`train.batch_size`), `library_terms` words them in the library's argument names.
"""
from __future__ import annotations

import contextlib
import re

import numpy as np
import torch
from torch import nn

from pazo.data.base import TensorSplit
from pazo.errors import ConfigError, UserCodeError, require
from pazo.models.functional import FunctionalModel
from pazo.privacy.accountants import BudgetError

#: (pattern, replacement) from the framework's config keys to the library's arguments, in order
LIBRARY_TERMS = (
    (r"\bprivacy=none\b", "epsilon=None"),
    (r"\bprivacy\.epsilon=null\b", "epsilon=None"),
    (r"\bengine\.name\b", "engine"),
    (r"\b(?:train|privacy|engine|method)\.(?=[a-z_])", ""),
    (r"\bunknown key\b", "unknown keyword argument"),
    (r"=null\b", "=None"), (r"=true\b", "=True"), (r"=false\b", "=False"),
    (r"but the data set has none", "but no public data were given (public=)"),
)


def library_terms(message: str) -> str:
    """A framework message in the library's terms: `train.batch_size=100` as `batch_size=100`,
    `method.lr` as `lr`, `privacy=none` as `epsilon=None`."""
    for pattern, replacement in LIBRARY_TERMS:
        message = re.sub(pattern, replacement, message)
    return message


@contextlib.contextmanager
def in_library_terms():
    """Raise a pazo error (ConfigError, BudgetError) met inside with its message in the library's terms."""
    try:
        yield
    except (ConfigError, BudgetError) as err:
        message = library_terms(str(err))
        if message == str(err):
            raise
        raise type(err)(message) from err.__cause__   # (the cause kept: a user's error inside their own code)


#: examples scanned at a time for non-finite inputs (bounds the scan's temporary memory)
FINITE_CHUNK = 4096


def check_finite_data(split: TensorSplit, what: str) -> None:
    """Every floating-point input of `split` is finite: the private steps count an example whose
    loss is not finite as contributing zero, so a NaN or infinite private input would be dropped
    from training silently (a public one would make a public gradient NaN). One ConfigError naming
    `what`, the first such example and its value, before any step (labels are integer class
    indices, never non-finite)."""
    inputs = split.inputs
    if not (inputs.is_floating_point() or inputs.is_complex()):
        return
    for start in range(0, len(inputs), FINITE_CHUNK):
        chunk = inputs[start:start + FINITE_CHUNK]
        bad = ~torch.isfinite(chunk.reshape(len(chunk), -1))
        rows = bad.any(dim=1).nonzero()
        if len(rows):
            row = int(rows[0])
            value = chunk[row].reshape(-1)[int(bad[row].nonzero()[0])].item()
            raise ConfigError(f"{what}: the inputs of example {start + row} hold {value}: inputs must be finite "
                              "(a non-finite input would be left out of training, or spoil it, silently); remove "
                              "or repair it before calling private_zo")


def check_finite_model(module: nn.Module) -> None:
    """The model's initial parameters and buffers are finite (a non-finite one makes every loss
    NaN, and every example would be left out): one ConfigError naming the tensor and the position."""
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in named:
            if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.is_meta:
                continue
            bad = (~torch.isfinite(tensor.detach())).reshape(-1).nonzero()
            if len(bad):
                index = int(bad[0])
                raise ConfigError(f"model: {kind} {name!r} holds {tensor.detach().reshape(-1)[index].item()} at "
                                  f"flat index {index}: the initial parameters must be finite")


def check_user_objects(model, loss_fn) -> None:
    """`model` a torch `nn.Module` and `loss_fn` callable, before anything reads them: else one
    ConfigError naming the argument (a string for a model ended in an AttributeError on its
    parameters)."""
    require(isinstance(model, nn.Module), f"model must be a torch.nn.Module, got {_kind(model)}")
    require(callable(loss_fn), f"loss_fn must be callable as loss_fn(outputs, targets), got {_kind(loss_fn)}")


def _kind(value) -> str:
    """What a value is, in a few words (`a str: 'mlp'`), its text held short."""
    text = repr(value)
    return f"a {type(value).__name__}: {text if len(text) <= 40 else text[:37] + '...'}"


def check_model_and_loss(model: FunctionalModel, data: dict[str, TensorSplit], device) -> None:
    """The model and the loss on two examples of each data set given (`what` -> split), in eval
    mode (no dropout draw) and without gradients, before any step: an error inside either is one
    UserCodeError naming it; the losses must be one per example; the labels class indices of the
    model's outputs."""
    for what, split in data.items():
        if len(split):
            _check_on_examples(model, split, what, device)


def _check_on_examples(model: FunctionalModel, split: TensorSplit, what: str, device) -> None:
    """The model on two examples of `split`, its outputs against all of the split's labels, then the
    loss on the two."""
    x, y = split.batch(np.arange(min(2, len(split))), device)
    where = f"on {len(y)} examples of {what}, before any step"
    was_training = model.module.training
    model.module.eval()
    try:
        with torch.no_grad():
            outputs = call_user("model", lambda: model.module(x), where, dtype_hint(model, x, what))
            check_labels(outputs, split.labels, what)
            losses = call_user("loss_fn", lambda: model.loss_fn(outputs, y), where)
    finally:
        model.module.train(was_training)
    check_losses(losses, len(y))


def call_user(what: str, call, where: str, hint: str = ""):
    """`call()`, whose error is one UserCodeError naming the user's argument `what` (cause chained)."""
    try:
        return call()
    except Exception as err:
        raise UserCodeError(f"{what} raised {type(err).__name__} {where}: {first_line(err)}{hint}") from err


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "(no message)"


def dtype_hint(model: FunctionalModel, x: torch.Tensor, what: str) -> str:
    """Where floating inputs and the model's floating parameters differ in dtype: what to change."""
    dtypes = {p.dtype for p in model.params if p.is_floating_point()}
    if not x.is_floating_point() or len(dtypes) != 1 or x.dtype in dtypes:
        return ""
    (dtype,) = dtypes
    return (f" ({what}'s inputs are {x.dtype} but the model's parameters {dtype}: give the inputs as {dtype}, "
            f"x.to({dtype}), or the model as {x.dtype}, model.to({x.dtype}))")


def check_losses(losses, count: int) -> None:
    """One floating-point loss per example (a mean would not be clipped per example)."""
    require(isinstance(losses, torch.Tensor), f"loss_fn must return a tensor of one loss per example "
            f"(reduction='none'), got a {type(losses).__name__}")
    require(losses.is_floating_point(), f"loss_fn must return floating-point losses, got {losses.dtype}")
    require(tuple(losses.shape) == (count,), f"loss_fn must return one loss per example (reduction='none'): "
            f"got shape {tuple(losses.shape)} for {count} examples")


def check_labels(outputs, labels: torch.Tensor, what: str) -> None:
    """A classifier's labels (outputs [B, C], labels [n]) are class indices in [0, C): checked on
    every label, since one outside would fail (on CUDA: abort) only at the step that draws it."""
    if not (isinstance(outputs, torch.Tensor) and outputs.dim() == 2 and labels.dim() == 1 and len(labels)):
        return
    classes = outputs.shape[1]
    outside = ((labels < 0) | (labels >= classes)).nonzero()
    if len(outside):
        index = int(outside[0])
        raise ConfigError(f"{what}: label {int(labels[index])} (example {index}) is outside the model's {classes} "
                          f"outputs: labels must be class indices in [0, {classes})")


def user_culprit(err: BaseException, model: nn.Module, loss_fn) -> str | None:
    """Which of the user's arguments an error came from: `loss_fn` or `model` by the innermost frame
    of its traceback that runs the loss's code or a method of one of the model's modules (None:
    neither, pazo's own)."""
    model_ids = {id(m) for m in model.modules()}
    loss_ids = {id(loss_fn), *(id(m) for m in loss_fn.modules())} if isinstance(loss_fn, nn.Module) else {id(loss_fn)}
    loss_codes = {code for code in (_code_of(loss_fn), _code_of(getattr(loss_fn, "func", None))) if code}
    culprit, tb = None, err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = id(frame.f_locals.get("self")) if "self" in frame.f_code.co_varnames else None
        if frame.f_code in loss_codes or owner in loss_ids:
            culprit = "loss_fn"
        elif owner in model_ids:
            culprit = "model"
        tb = tb.tb_next
    return culprit


def _code_of(fn):
    """The code object a function or bound method runs (a module's or callable object's frames are
    told by their `self`)."""
    return getattr(getattr(fn, "__func__", fn), "__code__", None)
