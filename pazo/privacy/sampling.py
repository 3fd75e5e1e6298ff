"""Batch samplers for the private training set.

Poisson sampling (each example independently with rate q = b/n) is what the accountant assumes.
Shuffled fixed-size batches are available as a named shortcut: the run's summary flags that the
printed epsilon does not hold for them.
"""
from __future__ import annotations

import numpy as np


class PoissonSampler:
    """Each step includes every example independently with probability `sample_rate`."""

    name = "poisson"
    matches_accountant = True

    def __init__(self, num_examples: int, expected_batch_size: int, rng: np.random.Generator):
        self.n, self.rng = num_examples, rng
        self.sample_rate = expected_batch_size / num_examples

    def sample(self) -> np.ndarray:
        return np.flatnonzero(self.rng.random(self.n) < self.sample_rate)

    def state(self) -> dict:
        return {}  # memoryless: its generator is one of the run's streams

    def load_state(self, state: dict) -> None:
        pass


class ShuffleSampler:
    """Fixed-size batches from a reshuffled permutation each epoch (drop_last). Not what the
    Poisson accountant assumes: the guarantee printed for such a run does not hold."""

    name = "shuffle"
    matches_accountant = False

    def __init__(self, num_examples: int, expected_batch_size: int, rng: np.random.Generator):
        self.n, self.b, self.rng = num_examples, expected_batch_size, rng
        self.sample_rate = expected_batch_size / num_examples
        self._order, self._pos = np.empty(0, dtype=np.int64), 0

    def sample(self) -> np.ndarray:
        if self._pos + self.b > len(self._order):
            self._order, self._pos = self.rng.permutation(self.n), 0
        batch = self._order[self._pos:self._pos + self.b]
        self._pos += self.b
        return np.sort(batch)

    def state(self) -> dict:
        return {"order": self._order.tolist(), "pos": self._pos}

    def load_state(self, state: dict) -> None:
        self._order, self._pos = np.asarray(state["order"], dtype=np.int64), int(state["pos"])


SAMPLERS = {"poisson": PoissonSampler, "shuffle": ShuffleSampler}
