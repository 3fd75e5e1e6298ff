"""Seeded generators of the public set: a random fraction or per-class counts of a pool, with an
optional class imbalance (the paper's mild distribution shift between public and private data).

Imbalance follows a geometric profile over a seeded random order of the classes: with
``imbalance = r`` the most frequent class keeps weight 1 and the rarest ``1 - r``
(``r = 0`` is balanced). The per-class counts are recorded in the run summary.
"""
from __future__ import annotations

import numpy as np


def imbalanced_class_counts(total: int, available: np.ndarray, imbalance: float,
                            rng: np.random.Generator) -> np.ndarray:
    """Split `total` over classes with the geometric imbalance profile, capped by availability."""
    if not 0 <= imbalance < 1:
        raise ValueError(f"imbalance must be in [0, 1), got {imbalance}")
    k = len(available)
    ranks = rng.permutation(k)
    weights = (1 - imbalance) ** (ranks / max(k - 1, 1))
    counts = np.floor(total * weights / weights.sum()).astype(int)
    # hand out the rounding remainder to the largest fractional parts, deterministic order
    remainder = total - counts.sum()
    frac = total * weights / weights.sum() - counts
    for c in np.argsort(-frac, kind="stable")[:remainder]:
        counts[c] += 1
    return np.minimum(counts, available)


def split_public(labels: np.ndarray, rng: np.random.Generator, *, fraction: float | None = None,
                 per_class: int | None = None, imbalance: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Return (public_indices, private_indices) of a pool with integer `labels`.

    Exactly one of `fraction` (of the whole pool) or `per_class` sets the public size.
    """
    labels = np.asarray(labels)
    if (fraction is None) == (per_class is None):
        raise ValueError("give exactly one of fraction or per_class")
    classes = np.unique(labels)
    available = np.array([(labels == c).sum() for c in classes])
    if fraction is not None:
        if not 0 < fraction < 1:
            raise ValueError(f"public fraction must be in (0, 1), got {fraction}")
        total = int(round(fraction * len(labels)))
    else:
        if per_class < 1:
            raise ValueError(f"per_class must be >= 1, got {per_class}")
        total = per_class * len(classes)
    counts = imbalanced_class_counts(total, available, imbalance, rng)
    public = [rng.choice(np.flatnonzero(labels == c), size=n, replace=False)
              for c, n in zip(classes, counts)]
    public_idx = np.sort(np.concatenate(public)) if public else np.empty(0, dtype=np.int64)
    private_idx = np.setdiff1d(np.arange(len(labels)), public_idx)
    return public_idx, private_idx


def stratified_holdout(labels: np.ndarray, fraction: float, rng: np.random.Generator):
    """Seeded stratified split of a pool into (kept, held_out) index arrays."""
    labels = np.asarray(labels)
    held = [rng.choice(idx, size=int(round(fraction * len(idx))), replace=False)
            for idx in (np.flatnonzero(labels == c) for c in np.unique(labels))]
    held_idx = np.sort(np.concatenate(held))
    return np.setdiff1d(np.arange(len(labels)), held_idx), held_idx
