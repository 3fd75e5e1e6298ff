"""NF-ResNet18: a ResNet-18 without normalisation layers (Brock et al. 2021), as in the PAZO
authors' CIFAR-10 code: scaled weight-standardised convolutions (timm's ScaledStdConv2d) with the
ReLU gain, residual branches scaled by alpha = 0.2 and inputs divided by beta = 1.

No BatchNorm, so per-example clipping bounds each example's influence and the model works under
`torch.func.vmap` (both engines, per-example gradients).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pazo.errors import at_least_one, one_of, positive

RELU_GAIN = math.sqrt(2 / (1 - 1 / math.pi))  # keeps the variance of ReLU activations at 1


def ScaledStdConv2d(*args, **kwargs) -> nn.Module:  # noqa: N802 (stands for the class)
    """timm's ScaledStdConv2d, imported when a model is built rather than with this module: timm
    brings torchvision and torch._dynamo along (about 3.6 s of every launch on the 2-core CPU
    machine, `python -X importtime`), which only NF-ResNet runs need."""
    from timm.layers import ScaledStdConv2d as conv

    return conv(*args, **kwargs)


class NFBasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, alpha: float, beta: float):
        super().__init__()
        self.alpha, self.beta = alpha, beta
        self.conv1 = ScaledStdConv2d(cin, cout, 3, stride=stride, padding=1, gamma=RELU_GAIN)
        self.conv2 = ScaledStdConv2d(cout, cout, 3, padding=1, gamma=RELU_GAIN)
        self.shortcut = (ScaledStdConv2d(cin, cout, 1, stride=stride, gamma=RELU_GAIN)
                         if stride != 1 or cin != cout else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(x) / self.beta
        skip = self.shortcut(out) if self.shortcut is not None else x
        out = self.conv2(F.relu(self.conv1(out)))
        return skip + self.alpha * out


@dataclass
class NfResnetSchema:
    name: str = "nf_resnet18"
    width: int = 64
    stem: str = "auto"
    alpha: float = 0.2
    beta: float = 1.0

    def __post_init__(self):
        at_least_one(self.width, "model.width")
        one_of(self.stem, ("auto", "cifar", "imagenet"), "model.stem")
        positive(self.alpha, "model.alpha")
        positive(self.beta, "model.beta")


class NFResNet18(nn.Module):
    """`stem="cifar"`: 3x3 conv at full resolution (32x32 inputs); `stem="imagenet"`: 7x7 stride-2
    conv and max-pool (the authors resize CIFAR-10 to 224)."""

    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 64, stem: str = "cifar",
                 alpha: float = 0.2, beta: float = 1.0):
        super().__init__()
        if stem == "cifar":
            self.stem = ScaledStdConv2d(in_channels, width, 3, padding=1)
        elif stem == "imagenet":
            self.stem = nn.Sequential(ScaledStdConv2d(in_channels, width, 7, stride=2, padding=3),
                                      nn.MaxPool2d(3, stride=2, padding=1))
        else:
            raise ValueError(f"unknown stem {stem!r}; choices: cifar, imagenet")
        blocks, cin = [], width
        for i, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
            for j in range(2):
                blocks.append(NFBasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1, alpha, beta))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.blocks(self.stem(x)))
        return self.head(out.mean(dim=(2, 3)))
