"""Defenses a client applies to its gradient before sharing it.

Each defense is a function ``(gradient, generator, **options) -> gradient`` registered
in :data:`DEFENSES`; :func:`defend` looks one up by name. Later chapters register
more (sparsification, Soteria, CENSOR) with the same contract.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .gradients import Gradient, norm
from .registry import Registry

DEFENSES: Registry = Registry("defense")


def defend(gradient: Sequence[torch.Tensor], name: str, seed: int = 0, **options) -> Gradient:
    """Apply the defense registered as ``name`` with a seeded generator."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(DEFENSES[name](tuple(gradient), generator, **options))


@DEFENSES.register("none")
def no_defense(gradient: Gradient, generator: torch.Generator) -> Gradient:
    """Share the gradient as it is."""
    return gradient


@DEFENSES.register("noise")
def gaussian_noise(gradient: Gradient, generator: torch.Generator, sigma: float) -> Gradient:
    """Add i.i.d. N(0, sigma^2) to every entry: the noise half of DP-SGD (Abadi et al., 2016)."""
    if sigma < 0:
        raise ValueError(f"noise scale sigma must be non-negative, got {sigma}")
    return tuple(g + sigma * torch.randn(g.shape, generator=generator, dtype=g.dtype).to(g.device) for g in gradient)


@DEFENSES.register("clip")
def clip(gradient: Gradient, generator: torch.Generator, bound: float) -> Gradient:
    """Rescale the whole gradient to Euclidean norm at most ``bound``: DP-SGD's other half."""
    if bound <= 0:
        raise ValueError(f"clip bound must be positive, got {bound}")
    scale = torch.clamp(bound / (norm(gradient) + 1e-12), max=1.0)
    return tuple(g * scale for g in gradient)


@DEFENSES.register("dp")
def clip_then_noise(gradient: Gradient, generator: torch.Generator, bound: float, sigma: float) -> Gradient:
    """Clip to norm ``bound``, then add N(0, sigma^2): the order DP-SGD uses."""
    return gaussian_noise(clip(gradient, generator, bound), generator, sigma)
