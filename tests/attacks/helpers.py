"""Inputs the attack tests share."""

from __future__ import annotations

import torch


def digit(digits, seed=0, dtype=torch.float64):
    images, labels = digits.batch(1, seed=seed)
    return images.to(dtype), labels



def random_images(shape, batch=1, seed=0, dtype=torch.float32):
    return torch.rand((batch, *shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)

