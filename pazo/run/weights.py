"""A finished run's trained weights as a file: `model.safetensors` (`pazo.files.rundir.MODEL_FILE`), which
any safetensors reader opens without running code from the file (a pickled state dict, the
`model.pt` of older runs, runs whatever the pickle names when loaded without `weights_only`).

safetensors keeps one copy of each tensor: names that are views of one tensor (tied weights, e.g. a
language model's input embeddings and output projection) are written once and listed in the file's
metadata (`pazo_tied`: the name left out -> the name written), so that reading gives every name of
the state dict back."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from pazo.run import gate
from pazo.files.rundir import OLD_MODEL_FILE

TIED_KEY = "pazo_tied"


def _view_key(tensor: torch.Tensor) -> tuple:
    """What makes two tensors the same values: one storage, offset, shape and strides."""
    return (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
            tensor.stride(), tensor.dtype)


def state_bytes(state: dict[str, torch.Tensor]) -> bytes:
    """`state` (a module's state dict) in the safetensors format: tied names once (`pazo_tied`), every
    other tensor contiguous, on the CPU and in a storage of its own (safetensors refuses shared ones)."""
    from safetensors.torch import save

    written, tied, by_view, storages = {}, {}, {}, set()
    for name, tensor in state.items():
        tensor = tensor.detach()
        view = _view_key(tensor)
        if view in by_view:
            tied[name] = by_view[view]
            continue
        by_view[view] = name
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
        copy = tensor.clone() if storage in storages else tensor
        storages.add(storage)
        written[name] = copy.to("cpu").contiguous()
    return in_one_order(save(written, metadata={"format": "pt", TIED_KEY: json.dumps(tied, sort_keys=True)}))


def in_one_order(blob: bytes) -> bytes:
    """safetensors' bytes with its header's metadata in sorted order. safetensors writes the metadata in
    the order of a Rust hash map, which changes from call to call, so one model's weights written twice
    (the same run on one process and on two, compared with `cmp`) differed in their header. The
    tensors' entries and data stay as written; the header keeps its length (the same keys, padded as
    safetensors pads it)."""
    length = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + length])
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + blob[8 + length:]


def save_weights(path: Path | str, module: torch.nn.Module) -> None:
    """`module`'s state dict into `path` (safetensors), a released file written whole or not at all
    (`pazo.run.gate`)."""
    content = state_bytes(module.state_dict())
    gate.write_released(path, content)


def read_weights(path: Path | str) -> dict[str, torch.Tensor]:
    """The state dict in `path`: a safetensors file with its tied names restored, or an older run's
    `model.pt` (a torch state dict, read with `weights_only=True`: tensors, no code)."""
    path = Path(path)
    if path.name == OLD_MODEL_FILE:
        return torch.load(path, map_location="cpu", weights_only=True)
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        state = {name: f.get_tensor(name) for name in f.keys()}
        tied = json.loads((f.metadata() or {}).get(TIED_KEY, "{}"))
    state.update({name: state[source] for name, source in tied.items()})
    return state
