"""The interface every training method implements, and what it tells the accountant."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from pazo.data.base import TensorSplit
from pazo.models.functional import FunctionalModel
from pazo.privacy.mechanisms import NoiseSpec
from pazo.rng import RandomStreams


@dataclass(frozen=True)
class Release:
    """What one step releases about the private batch.

    queries: noisy sums of the same Poisson batch, the noise split over them
             (std sqrt(queries) * S * sigma each): together one Gaussian mechanism.
    mechanisms: independent Gaussian mechanisms per step, each with multiplier sigma.
    noise: "gaussian", or "laplace" (scale queries * S * sigma per query: a (1/sigma)-DP step).
    """

    queries: int
    mechanisms: int = 1
    noise: str = "gaussian"


class PublicBatches:
    """Uniform public batches of size b' without replacement within a batch (public data costs no
    privacy, so any sampling is fine; this one is seeded from the run's public stream)."""

    def __init__(self, split: TensorSplit, batch_size: int, rng: np.random.Generator, device):
        if batch_size > len(split):
            raise ValueError(f"public batch size {batch_size} exceeds the {len(split)} public examples")
        self.split, self.batch_size, self.rng, self.device = split, batch_size, rng, device

    def sample(self):
        idx = self.rng.choice(len(self.split), size=self.batch_size, replace=False)
        return self.split.batch(np.sort(idx), self.device)


@dataclass
class MethodContext:
    model: FunctionalModel
    noise: NoiseSpec
    streams: RandomStreams
    public: TensorSplit
    engine: object
    device: torch.device
    query_train_mode: bool = False
    total_steps: int = 1


class Method(ABC):
    """One optimisation method. `step` consumes a private batch and updates the model in place."""

    #: False for methods that never touch private data with noise (MeZO, SGD): runs are non-private.
    supports_privacy: bool = True
    #: whether the method uses the public split (checked before compute)
    uses_public: bool = False
    #: what the printed epsilon means for this method, where it needs saying (run summary)
    privacy_note: str | None = None

    def __init__(self, cfg, ctx: MethodContext):
        self.cfg, self.ctx, self.model = cfg, ctx, ctx.model
        self.lr = float(cfg.lr)

    def public_batches(self) -> PublicBatches:
        """Sampler of public batches of size cfg.public_batch_size from the run's public stream."""
        return PublicBatches(self.ctx.public, int(self.cfg.public_batch_size),
                             self.ctx.streams.numpy["public"], self.ctx.device)

    @classmethod
    @abstractmethod
    def release_for(cls, cfg) -> Release:
        """What one step releases with this config, for the accountant and the noise scale."""

    @property
    def release(self) -> Release:
        return self.release_for(self.cfg)

    @abstractmethod
    def step(self, x: torch.Tensor, y: torch.Tensor, step: int) -> dict[str, float]:
        """One update from a private batch; returns numeric stats, at least `loss`."""
