"""A small convolutional classifier for small images (the offline default on 8x8 digits)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pazo.config_schema import dropout_rate
from pazo.errors import at_least_one


@dataclass
class SmallCnnSchema:
    name: str = "small_cnn"
    width: int = 16
    dropout: float = 0.0

    def __post_init__(self):
        at_least_one(self.width, "model.width")
        dropout_rate(self.dropout, "model.dropout")


class SmallCNN(nn.Module):
    """conv-ReLU-conv-ReLU-avgpool-linear; no normalisation layers, so it is vmap- and DP-safe."""

    mode_free_forward = True  # only its dropout (a child) depends on train/eval mode

    def __init__(self, in_channels: int, num_classes: int, image_size: int, width: int = 16,
                 dropout: float = 0.0):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(),
            nn.AvgPool2d(2), nn.Flatten(), nn.Dropout(dropout))
        self.head = nn.Linear(2 * width * (image_size // 2) ** 2, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))
