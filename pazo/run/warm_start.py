"""Warm start: a few epochs of plain SGD on the public data before private training (no privacy
cost: only public examples are touched), cached on disk keyed by everything that determines the
result, so that a sweep trains it once. A cached file is used only if it holds this key, its
content hashes to the digest it records (`pazo.files.cache_files`) and its tensors have the model's
names and shapes; otherwise the warm start is trained again and the file overwritten."""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
from pazo.files.cache_files import load_entry, save_entry

log = logging.getLogger(__name__)


def _key(cfg) -> str:
    """The full sha256 of what determines the warm-started weights (file names carry a prefix): the
    data set, model and warm-start sections as the run resolved them, each value cast to its
    schema's type (`RunConfig.values`), and the seed."""
    values = cfg.values
    facts = {"dataset": {k: v for k, v in values["dataset"].items() if k not in ("root", "download")},
             "model": values["model"],
             "warm_start": {k: v for k, v in values["warm_start"].items() if k != "cache"},
             "seed": cfg.seed, "version": 1}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def _shape_problem(state: dict, module) -> str | None:
    """Why `state` is not a state dict of `module` (its names, shapes and dtypes), or None."""
    want = module.state_dict()
    if not isinstance(state, dict) or set(state) != set(want):
        return "its tensors are not this model's parameters"
    for name, tensor in want.items():
        got = state[name]
        if not isinstance(got, torch.Tensor) or got.shape != tensor.shape or got.dtype != tensor.dtype:
            return f"{name} is {getattr(got, 'shape', type(got).__name__)}, the model's is {tuple(tensor.shape)}"
    return None


def warm_start(model, public, cfg, streams, device) -> dict:
    """Train `model` in place on `public` as the run's typed config (`pazo.run.typed.RunConfig`)
    says: its `warm_start` section, the cache in `privacy.cache_dir`; returns facts for the run summary."""
    w = cfg.warm_start
    if not w.epochs:
        return {"epochs": 0}
    key = _key(cfg)
    path = Path(os.path.expanduser(str(cfg.privacy.cache_dir))) / "warm_start" / f"{key[:24]}.pt"
    state = load_entry(path, "warm_start", key) if w.cache else None
    if state is not None:
        problem = _shape_problem(state, model.module)
        if problem is None:
            model.module.load_state_dict(state)
            return {"epochs": w.epochs, "cached": True}
        log.warning("warm_start cache entry in %s ignored: %s; recomputing and overwriting it", path.parent, problem)
    rng = np.random.default_rng(streams.seeds["public"] + 1)
    optimizer = torch.optim.SGD(model.module.parameters(), lr=w.lr)
    model.module.train()
    steps = 0
    for _ in range(int(w.epochs)):
        order = rng.permutation(len(public))
        for start in range(0, len(order), w.batch_size):
            x, y = public.batch(np.sort(order[start:start + w.batch_size]), device)
            optimizer.zero_grad(set_to_none=True)
            model.current_losses(x, y).mean().backward()
            optimizer.step()
            steps += 1
    if w.cache:
        save_entry(path, "warm_start", key, {k: v.detach().cpu() for k, v in model.module.state_dict().items()})
    # (no path: the file's name is a hash of the config and the seed, from which a small seed can be found)
    return {"epochs": w.epochs, "cached": False, "steps": steps}
