"""Batch reconstruction as regularised gradient matching (Qian et al., Sec. 2.1, Algorithm 3).

``regularised_matching`` minimises DLG's Euclidean gradient distance plus ``lambda`` times
a regulariser of :data:`REGULARISERS`: none, orthogonality ``sum_{k != k'} (x_k . x_k')^2``
(also on centred images), or L2 ``sum_k |x_k|^2``.
"""

from __future__ import annotations

from typing import Sequence

import torch

from .. import gradients as grads
from ..registry import Registry
from .base import (
    ATTACKS,
    INITIALISERS,
    OPTIMISERS,
    AttackResult,
    Observation,
    OptimiserSteps,
    optimise,
)
from .shared import euclidean_distance, infer_labels


def _orthogonality(batch: torch.Tensor) -> torch.Tensor:
    flat = batch.flatten(1)
    gram = flat @ flat.T
    return gram.pow(2).sum() - gram.diagonal().pow(2).sum()


REGULARISERS: Registry = Registry("regulariser")
REGULARISERS.add("none", lambda batch: batch.new_zeros(()))
REGULARISERS.add("orthogonality", _orthogonality)  # sum over k != k' of (x_k . x_k')^2
# The same on centred images (each minus its own mean pixel): images with non-negative pixels
# cannot be orthogonal, their centred versions can (then the penalty asks them to be uncorrelated).
REGULARISERS.add(
    "orthogonality_centred",
    lambda batch: _orthogonality(batch.flatten(1) - batch.flatten(1).mean(1, keepdim=True)),
)
REGULARISERS.add("l2", lambda batch: batch.pow(2).sum())  # sum over k of x_k . x_k


@ATTACKS.register("regularised_matching")
def regularised_matching(
    observation: Observation,
    regulariser: str = "none",
    weight: float = 1e-3,
    optimiser: str = "adam",
    iterations: int = 300,
    lr: float = 0.1,
    init: str = "randn",
    init_scale: float = 1.0,
    max_iter: int = 20,
    line_search: str | None = "strong_wolfe",
    record_every: int = 10,
    snapshots: Sequence[int] = (),
) -> AttackResult:
    """Batch reconstruction as optimisation: ``L(x_hat) + lambda R(x_hat)`` (Qian et al., Sec. 2.1
    and Algorithm 3).

    ``L`` is the Euclidean gradient distance of DLG, ``R`` one of :data:`REGULARISERS`.
    Labels are the given ones, else read off the output layer (iDLG).

    Parameters
    ----------
    regulariser : {"none", "orthogonality", "l2"}
    weight : float
        ``lambda``.
    optimiser : {"adam", "lbfgs", "gd"}
        For L-BFGS one iteration makes up to ``max_iter`` evaluations.
    init, init_scale : str, float
        Dummy initialisation (see :data:`gradcore.INITIALISERS`), multiplied by
        ``init_scale``; a large scale saturates sigmoids from the start.
    """
    penalty = REGULARISERS[regulariser]
    labels = observation.labels
    if labels is None:
        labels = infer_labels(observation.model, observation.gradient, observation.batch_size)
    generator = torch.Generator().manual_seed(observation.seed)
    dtype, device = observation.gradient[0].dtype, observation.gradient[0].device
    start = INITIALISERS[init]((observation.batch_size, *observation.shape), generator) * init_scale
    dummy = start.to(device, dtype).requires_grad_(True)
    options = {"max_iter": max_iter, "line_search": line_search} if optimiser == "lbfgs" else {}
    optimizer = OPTIMISERS[optimiser]([dummy], lr, **options)
    model, target, loss = observation.model, observation.gradient, observation.loss

    def objective(inputs: torch.Tensor, create_graph: bool) -> torch.Tensor:
        candidate = grads.batch_gradient(model, inputs, labels, loss, create_graph=create_graph)
        return euclidean_distance(candidate, target) + weight * penalty(inputs)

    def closure():
        optimizer.zero_grad()
        value = objective(dummy, True)
        value.backward()
        return value

    steps = OptimiserSteps(
        optimizer, closure, dummy, lambda inputs: objective(inputs, False).item()
    )
    result = optimise(
        observation, steps, iterations, f"{regulariser} ({optimiser})", snapshots, record_every
    )
    result.labels = labels
    return result
