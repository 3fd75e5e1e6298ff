"""Image batches: uint8 storage -> float inputs at the model's size, and the public-data
augmentation of the PAZO authors (horizontal flip, translation up to 10%, 8x8 Cutout filled with
the image mean). Transforms run per batch, so a 224-pixel model never needs a resized copy of the
whole data set in memory.

Inputs are in [0, 1]; `normalize=True` maps them to [-1, 1] with the fixed mean 0.5 and std 0.5
per channel. Fixed on purpose: a mean and std measured on the private training images would be
statistics of private data released without noise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


class ImageTransform:
    def __init__(self, image_size: int, augment: bool = False, translate: float = 0.1, cutout: int = 8,
                 generator: torch.Generator | None = None, normalize: bool = False):
        self.image_size, self.augment, self.normalize = image_size, augment, normalize
        self.translate, self.cutout, self.generator = translate, cutout, generator

    def _augment(self, x: torch.Tensor) -> torch.Tensor:
        g = self.generator
        n, _, h, w = x.shape
        out = x.clone()
        flips = torch.rand(n, generator=g) < 0.5
        out[flips] = out[flips].flip(-1)
        max_dy, max_dx = int(self.translate * h), int(self.translate * w)
        shifts = torch.stack([torch.randint(-max_dy, max_dy + 1, (n,), generator=g),
                              torch.randint(-max_dx, max_dx + 1, (n,), generator=g)], dim=1)
        corners = torch.stack([torch.randint(0, h, (n,), generator=g), torch.randint(0, w, (n,), generator=g)], 1)
        for i in range(n):
            dy, dx = shifts[i].tolist()
            shifted = torch.zeros_like(out[i])  # translation fills with zeros, like RandomAffine
            shifted[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
                out[i][:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
            cy, cx = corners[i].tolist()
            half = self.cutout // 2
            y0, y1, x0, x1 = max(cy - half, 0), min(cy + half, h), max(cx - half, 0), min(cx + half, w)
            shifted[:, y0:y1, x0:x1] = shifted.mean()
            out[i] = shifted
        return out

    def __call__(self, x: torch.Tensor, device) -> torch.Tensor:
        x = x.float() / 255.0
        if self.augment:
            x = self._augment(x)
        x = x.to(device)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False)
        return (x - 0.5) / 0.5 if self.normalize else x
