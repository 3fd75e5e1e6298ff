"""Checks every paper model must pass: the two zeroth-order engines agree (vmapped parameter sets
vs in-place perturbation), and vmapped per-example gradients equal one backward pass per example."""
import torch

from pazo.methods.per_example import per_example_grads
from pazo.zo.directions import SeededDirections
from pazo.zo.engines import InPlaceEngine, VectorisedEngine


def check_engines_and_per_example_grads(model, x, y, chunk: int, atol: float = 1e-5) -> None:
    dirs = SeededDirections(model.shapes, [1, 2])
    points = [(0, 1e-2), (0, -1e-2), (1, 1e-2), (1, -1e-2)]
    vectorised = VectorisedEngine().losses(model, x, y, dirs, points)
    in_place = InPlaceEngine().losses(model, x, y, dirs, points)
    assert vectorised.shape == (4, len(y)) and torch.allclose(vectorised, in_place, atol=atol)
    assert not torch.allclose(vectorised[0], vectorised[1])  # the perturbation reached the model
    grads = per_example_grads(model, x, y, chunk=chunk)
    for i in range(len(y)):
        assert torch.allclose(grads[i], model.mean_loss_grad(x[i:i + 1], y[i:i + 1]), atol=atol)
