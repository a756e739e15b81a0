"""What the attack families share: the two matching distances and iDLG's label inference.

DLG and regularised matching measure the Euclidean distance between gradients, Inverting
Gradients and the GAN-prior searches their cosine distance; every attack that is not given
the labels reads them off the output layer first.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from .. import gradients as grads
from .. import validation as check
from .base import last_linear


def infer_labels(
    model: nn.Module, gradient: Sequence[torch.Tensor], batch_size: int = 1
) -> torch.Tensor:
    """Labels from the output layer's weight gradient (Zhao et al., 2020, iDLG).

    With cross-entropy and one sample of class ``c``, row ``i`` of ``dL/dW`` is
    ``(p_i - [i = c]) a`` where ``a`` is the layer's input. When ``a`` is
    non-negative (sigmoid or ReLU features), only row ``c`` has a negative sum, so the
    label is the arg-min of the row sums: exact, not a guess. For a batch this is a
    heuristic: the ``batch_size`` most negative rows, a label possibly repeated.
    """
    gradient = check.gradient(gradient, model)
    check.positive_int("batch_size", batch_size)
    layer = last_linear(model)
    weight_gradient = tuple(gradient)[grads.parameter_index(model, layer.weight)]
    row_sums = weight_gradient.sum(dim=1)
    if batch_size == 1:
        return torch.argmin(row_sums).reshape(1)
    order = torch.argsort(row_sums)
    negative = order[row_sums[order] < 0]
    picks = negative[:batch_size] if len(negative) else order[:1]
    return picks.repeat((batch_size + len(picks) - 1) // len(picks))[:batch_size].sort().values


def euclidean_distance(
    candidate: Sequence[torch.Tensor], target: Sequence[torch.Tensor]
) -> torch.Tensor:
    """``sum_l ||g_l(x_hat) - g_l(x)||^2``: DLG's matching objective (Zhu et al., 2019, Eq. 4)."""
    return sum((c - t).pow(2).sum() for c, t in zip(candidate, target))


def cosine_distance(
    candidate: Sequence[torch.Tensor], target: Sequence[torch.Tensor]
) -> torch.Tensor:
    """``1 - cos(g, g*)`` over the whole gradient, all layers as one vector (Geiping et al., Eq.
    4)."""
    dot = sum((c * t).sum() for c, t in zip(candidate, target))
    candidate_norm = torch.sqrt(sum(c.pow(2).sum() for c in candidate))
    target_norm = torch.sqrt(sum(t.pow(2).sum() for t in target))
    return 1 - dot / (candidate_norm * target_norm + 1e-12)
