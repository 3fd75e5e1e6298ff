"""Run by the slow test of `test_library_distributed.py`, as one process or under torchrun (the default
suite calls `run_method` in its one launch, `distributed_launch.py`): the library loop
(`pazo.private.private_zo`) for a few steps of each method on a small model and data, and, on rank 0,
a JSON line per method with its parameters' bytes (hex), its epsilon and whether every rank holds them.
The first loop joins torchrun's group itself (RANK, WORLD_SIZE); the next find it initialised, as a
user's own `init_process_group` leaves it.

    python library_steps.py STEPS METHOD ...
"""
import hashlib
import json
import sys

import torch
import torch.distributed as dist
from torch import nn

from pazo.private import private_zo


def tensors(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def run_method(method: str, steps: int, sigma: float | None = None, nan_input: bool = False) -> dict:
    """`method`'s loop for `steps` steps (noise multiplier `sigma` as given, else calibrated): its
    parameters' bytes, its epsilon, whether the ranks agree. `nan_input`: a NaN in the private data's
    first example (private_zo refuses it before any step)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    private = method != "mezo"
    data = tensors(300, 0)
    if nan_input:
        data[0][0, 0] = float("nan")
    engine = private_zo(model, nn.CrossEntropyLoss(reduction="none"), data, method=method,
                        epsilon=1.0 if private else None, delta=1e-5 if private else None, steps=steps,
                        batch_size=96, public=tensors(60, 1), sigma=sigma if private else None, seed=1234,
                        verbose=False)
    for batch in engine.batches():
        engine.step(batch)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().tobytes()
    return {"method": method, "params": flat.hex(), "epsilon": engine.epsilon(),
            "world_size": engine.group.world_size, "bytes_exchanged": engine.group.bytes_exchanged,
            "ranks_agree": ranks_agree(engine.group, flat)}


def ranks_agree(group, params: bytes) -> bool:
    """Whether every rank holds these parameters, to the bit (each sends a digest of its own)."""
    if not group.several:
        return True
    digests: list = [None] * group.world_size
    dist.all_gather_object(digests, hashlib.sha256(params).hexdigest())
    return len(set(digests)) == 1


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    steps, methods = int(argv[0]), argv[1:]
    for method in methods:
        result = run_method(method, steps)
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(json.dumps(result), flush=True)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
