"""Parameters on several devices (`model.device_map`: accelerate spreads a model over the GPUs of a
node): what is added to the parameters must be on each parameter's device.

Directions and flat vectors (updates, public gradients) are made on one device - the first
parameter's, or the run's - so their numbers do not depend on how the model is split; each tensor
is then moved to its parameter's device just before it is added. On one device nothing is moved
and nothing is copied: the tensors given are returned as they are.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def to_param_devices(tensors: Sequence[torch.Tensor], params: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
    """`tensors` with each one on the device of the parameter at the same position: the same list
    (no copy) when all are already there, else a list where only the misplaced ones are copies
    (`non_blocking` into a GPU, so that a copy overlaps the next one; a copy into host memory is
    synchronous, or the add could read it before it has arrived)."""
    if all(t.device == p.device for t, p in zip(tensors, params)):
        return tensors
    return [to_param_device(t, p) for t, p in zip(tensors, params)]


def to_param_device(tensor: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """`tensor` on `param`'s device: itself if there already, else a copy, `non_blocking` only into
    a GPU (see `to_param_devices`)."""
    if tensor.device == param.device:
        return tensor
    return tensor.to(param.device, non_blocking=param.device.type == "cuda")

