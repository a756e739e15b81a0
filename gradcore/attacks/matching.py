"""Gradient matching: DLG (Zhu et al., 2019) and iDLG's labels (Zhao et al., 2020).

* ``dlg``: Euclidean gradient matching over a batch of dummies, with L-BFGS as in Zhu
  et al. (2019), plain gradient descent as in the linear-unit demonstration, or Adam.
  Without given labels, the dummy labels are optimised jointly as soft labels.
* ``idlg``: labels read off the last layer's gradient (:func:`infer_labels`), then DLG.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import torch

from .. import gradients as grads
from .. import validation as check
from .base import (
    ATTACKS,
    INITIALISERS,
    OPTIMISERS,
    AttackResult,
    Observation,
    OptimiserSteps,
    last_linear,
    optimise,
)
from .shared import euclidean_distance, infer_labels


@ATTACKS.register("dlg")
def dlg(
    observation: Observation,
    optimiser: str = "lbfgs",
    iterations: int = 300,
    lr: float = 1.0,
    init: str = "randn",
    max_iter: int = 20,
    line_search: str | None = None,
    snapshots: Sequence[int] = (),
    record_every: int = 1,
    restarts: int = 1,
    restart_above: float = 0.0,
) -> AttackResult:
    """Deep Leakage from Gradients: match the shared gradient with dummy inputs.

    Minimises :func:`euclidean_distance` over a batch of dummy inputs (and, without
    known labels, dummy soft labels) jointly (Zhu et al., 2019, Algorithm 1).

    Parameters
    ----------
    optimiser : {"lbfgs", "gd", "adam"}
        L-BFGS as in the paper; ``gd`` is plain gradient descent with step ``lr``.
    iterations : int
        Optimiser steps (for L-BFGS each step makes up to ``max_iter`` evaluations).
    lr : float
        Step size.
    init : {"randn", "rand", "gray"}
        Dummy initialisation.
    snapshots : sequence of int
        Iterations at which to keep a copy of the reconstruction (0 is the start).
    record_every : int
        Record history every so many iterations.
    restarts : int
        At most this many independent starts, run one after another from the seeded
        generator (the first is the single run's); the one that ends with the smallest
        gradient distance wins, which the attacker can see without the truth. DLG does not
        converge from every start, which is why later attacks restart (Geiping et al., 2020,
        Sec. 4).
    restart_above : float
        Start again only while the best final gradient distance is above this (0: run all
        ``restarts``): an attacker restarts a run that did not match the gradient, not one
        that did.
    """
    check.positive_int("restarts", restarts)
    check.number("restart_above", restart_above, low=0.0)
    generator = torch.Generator().manual_seed(observation.seed)
    best = None
    for _ in range(restarts):
        result = _dlg_run(
            observation,
            generator,
            optimiser,
            iterations,
            lr,
            init,
            max_iter,
            line_search,
            snapshots,
            record_every,
        )
        if best is None or (best.diverged, best.final("objective")) > (
            result.diverged,
            result.final("objective"),
        ):
            best = result
        if not best.diverged and best.final("objective") <= restart_above:
            break
    return best


def _dlg_run(
    observation: Observation,
    generator: torch.Generator,
    optimiser: str,
    iterations: int,
    lr: float,
    init: str,
    max_iter: int,
    line_search: str | None,
    snapshots: Sequence[int],
    record_every: int,
) -> AttackResult:
    """One start of :func:`dlg`, drawing its dummies (and dummy labels) from ``generator``."""
    batch = (observation.batch_size, *observation.shape)
    # Dummies live in the model's precision and on its device; drawn on the CPU so seeds repeat
    # everywhere.
    dtype, device = observation.gradient[0].dtype, observation.gradient[0].device
    dummy = INITIALISERS[init](batch, generator).to(device, dtype).requires_grad_(True)
    variables = [dummy]
    learn_labels = observation.labels is None
    if learn_labels:
        if observation.loss != "cross_entropy":
            raise check.AttackRefused(
                "labels can only be learned for a cross-entropy loss; pass the regression targets"
            )
        num_classes = last_linear(observation.model).out_features
        label_logits = (
            torch.randn((observation.batch_size, num_classes), generator=generator)
            .to(device, dtype)
            .requires_grad_(True)
        )
        variables.append(label_logits)
    model, target, loss = observation.model, observation.gradient, observation.loss
    options = {"max_iter": max_iter, "line_search": line_search} if optimiser == "lbfgs" else {}
    optimizer = OPTIMISERS[optimiser](variables, lr, **options)

    def current_labels():
        return torch.softmax(label_logits, dim=-1) if learn_labels else observation.labels

    def closure():
        optimizer.zero_grad()
        candidate = grads.batch_gradient(model, dummy, current_labels(), loss, create_graph=True)
        distance = euclidean_distance(candidate, target)
        distance.backward()
        return distance

    def objective_at(inputs: torch.Tensor) -> float:
        return euclidean_distance(
            grads.batch_gradient(model, inputs, current_labels().detach(), loss), target
        ).item()

    result = optimise(
        observation,
        OptimiserSteps(optimizer, closure, dummy, objective_at),
        iterations,
        f"dlg ({optimiser})",
        snapshots,
        record_every,
    )
    labels = current_labels().detach()
    result.labels = labels.argmax(dim=-1) if learn_labels else labels
    return result


@ATTACKS.register("idlg")
def idlg(observation: Observation, **config) -> AttackResult:
    """iDLG: infer the labels from the output layer (Zhao et al., 2020), then run DLG with them
    fixed."""
    if observation.labels is None:  # a copy: the caller's observation keeps its unknown labels
        observation = dataclasses.replace(
            observation,
            labels=infer_labels(observation.model, observation.gradient, observation.batch_size),
        )
    return dlg(observation, **config)
