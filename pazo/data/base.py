"""What every data set hands to the training loop: private, public, validation and test splits."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from pazo.config_schema import fraction, integer_at_least, optional
from pazo.errors import at_least_one, require


@dataclass
class DatasetSchema:
    """What several data sets share; each adds its own keys."""
    name: str = ""
    val_fraction: float = 0.1

    def __post_init__(self):
        fraction(self.val_fraction, "dataset.val_fraction", low_open=False)
        for key in ("image_size", "n_train", "n_val", "public_size", "public_per_class", "k_shot", "test_size",
                    "max_length", "premise_limit", "vocab_size", "max_new_tokens"):
            optional(at_least_one, getattr(self, key, None), f"dataset.{key}")
        for key in ("public_fraction", "test_fraction"):
            optional(fraction, getattr(self, key, None), f"dataset.{key}")
        if getattr(self, "public_imbalance", None) is not None:
            fraction(self.public_imbalance, "dataset.public_imbalance", low_open=False)
        if getattr(self, "val_k_shot", None) is not None:
            integer_at_least(self.val_k_shot, 0, "dataset.val_k_shot")
            # (a loader that draws its own validation sample, MNLI's and the prompted tasks')
            require(not (self.val_fraction and self.val_k_shot),
                    f"dataset.val_fraction={self.val_fraction} and dataset.val_k_shot={self.val_k_shot} both ask for "
                    "a validation split; set one of them to 0")


class TensorSplit:
    """An in-memory split: inputs and integer labels, fetched by index arrays.

    `transform(x, device)` turns a stored batch into model inputs on `device` (e.g. uint8 images
    -> floats, resized, augmented for public data); by default the stored tensors are used as is.
    """

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor, transform=None):
        if len(inputs) != len(labels):
            raise ValueError(f"{len(inputs)} inputs but {len(labels)} labels")
        self.inputs, self.labels, self.transform = inputs, labels.long(), transform

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, indices: np.ndarray | torch.Tensor, device: torch.device | str = "cpu"):
        """The examples at `indices` (a 1-D sequence of non-negative positions), on `device` (gathered
        with `index_select`, which costs about half of tensor indexing in a small model's step, where
        every batch pays it)."""
        idx = torch.from_numpy(np.asarray(indices, dtype=np.int64))   # no copy of an int64 array
        x = self.inputs.index_select(0, idx.to(self.inputs.device))
        x = self.transform(x, device) if self.transform is not None else x.to(device)
        return x, self.labels.index_select(0, idx.to(self.labels.device)).to(device)

    def class_histogram(self, num_classes: int) -> list[int]:
        return torch.bincount(self.labels, minlength=num_classes).tolist()

    def subset(self, indices: np.ndarray) -> TensorSplit:
        """The examples at `indices`, with this split's transform (a validation split carved from
        the private set is fed to the model exactly as the private batches are)."""
        idx = torch.as_tensor(np.asarray(indices), dtype=torch.long)
        return TensorSplit(self.inputs[idx], self.labels[idx], self.transform)


# What a data set reads from its private examples outside the DP mechanism goes to
# `info["outside_guarantee"]` (a list of sentences), which the run's summary lists.
VAL_OUTSIDE_GUARANTEE = ("validation accuracy is measured without noise on held-out private examples: a "
                         "non-private selection statistic, outside the DP guarantee (which covers the "
                         "training on the n_private examples only)")


@dataclass
class DataBundle:
    name: str
    private: TensorSplit
    public: TensorSplit
    test: TensorSplit
    num_classes: int
    input_shape: tuple[int, ...]
    info: dict = field(default_factory=dict)  # recorded in the run summary (sizes, histograms, seeds)
    # held-out private examples, never trained on; None = no validation data (an empty split)
    val: TensorSplit | None = None

    def __post_init__(self):
        if self.val is None:
            self.val = self.private.subset(np.empty(0, dtype=np.int64))

    def describe(self) -> dict:
        return {
            "dataset": self.name,
            "n_private": len(self.private),
            "n_public": len(self.public),
            "n_val": len(self.val),
            "n_test": len(self.test),
            # the model's shape facts (`pazo.load_run` builds the model from them without the data)
            "input_shape": list(self.input_shape), "num_classes": self.num_classes,
            "public_class_histogram": self.public.class_histogram(self.num_classes),
            **({"val_outside_guarantee": VAL_OUTSIDE_GUARANTEE} if len(self.val) else {}),
            **self.info,
        }
