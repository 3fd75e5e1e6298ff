"""Warm start: a few epochs of plain SGD on the public data before private training (no privacy
cost: only public examples are touched), cached on disk keyed by everything that determines the
result, so that a sweep trains it once."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf


def _key(cfg) -> str:
    facts = {"dataset": OmegaConf.to_container(cfg.dataset, resolve=True),
             "model": OmegaConf.to_container(cfg.model, resolve=True),
             "warm_start": {k: v for k, v in OmegaConf.to_container(cfg.warm_start, resolve=True).items()
                            if k != "cache"},
             "seed": cfg.seed, "version": 1}
    facts["dataset"].pop("root", None)
    facts["dataset"].pop("download", None)
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def warm_start(model, public, cfg, streams, device) -> dict:
    """Train `model` in place on `public`; returns facts for the run summary."""
    w = cfg.warm_start
    if not w.epochs:
        return {"epochs": 0}
    path = Path(os.path.expanduser(str(cfg.privacy.cache_dir))) / "warm_start" / f"{_key(cfg)}.pt"
    if w.cache and path.exists():
        state = torch.load(path, map_location=device)
        model.module.load_state_dict(state)
        return {"epochs": w.epochs, "cached": True, "path": str(path)}
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
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(model.module.state_dict(), tmp)
        os.replace(tmp, path)
    return {"epochs": w.epochs, "cached": False, "steps": steps, "path": str(path) if w.cache else None}
