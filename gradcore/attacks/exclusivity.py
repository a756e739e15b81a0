"""The deterministic attacks of neuron exclusivity (Pan et al., USENIX Security 2022, Sec. 5).

* ``exclusivity``: every sample of an insecure batch, exactly, from a ReLU MLP's gradient
  (:func:`gradcore.analysis.exclusivity.reconstruct` on the float64 numpy network);
* ``exclusivity_hybrid``: on a CNN, the head's feature maps by the same attack, then each
  input by feature matching through the trunk (Fig. 4).

The analysis they rest on (exclusive neurons, the secure boundary, artifact batches,
exclusivity reduction) is :mod:`gradcore.analysis.exclusivity`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import validation as check
from ..analysis import dense, walkback
from ..analysis import exclusivity as analysis
from .base import ATTACKS, AttackResult, Observation, OptimiserSteps, optimise


@ATTACKS.register("exclusivity")
def exclusivity(observation: Observation, tolerance: float | None = None) -> AttackResult:
    """The deterministic attack of Pan et al. (2022, Sec. 5) on a torch ReLU MLP, as a registered
    attack.

    The model must be ``[Flatten] Linear (ReLU Linear)*`` with biased hidden layers, trained
    with cross-entropy; the gradient is converted to float64 numpy and
    :func:`gradcore.analysis.exclusivity.reconstruct` runs on it. The batch size comes from the
    observation; given labels are ignored (the attack reads them off the gradient).

    Parameters
    ----------
    tolerance : float, optional
        Column-grouping tolerance; by default ``1e-12`` for a float64 gradient, ``1e-5``
        for lower precision (whose round-off bends parallel columns apart by ~1e-7).

    Raises
    ------
    NotInsecureError
        The batch is not insecure; also for a model after exclusivity reduction (a first
        hidden layer without ReLU), whose first layer has no exclusive neuron for ``M >= 2``.
    """
    if observation.loss != "cross_entropy":
        raise check.AttackRefused(
            "the exclusivity attack reads cross-entropy loss vectors; got loss "
            f"{observation.loss!r}"
        )
    _refuse_reduced(observation.model, observation.batch_size)
    pairs = walkback.gradient_pairs_from_torch(
        observation.model, observation.gradient
    )  # refuses a non-ReLU MLP
    network = dense.from_torch(observation.model)
    if math.prod(observation.shape) != network.widths[0]:
        raise check.GradcoreValueError(
            f"an input of shape {observation.shape} has {math.prod(observation.shape)} entries, "
            f"but the first Linear layer takes {network.widths[0]}"
        )
    if tolerance is None:
        tolerance = 1e-12 if observation.gradient[0].dtype == torch.float64 else 1e-5
    recovery = analysis.reconstruct(network, pairs, observation.batch_size, tolerance)
    reference = observation.gradient[0]
    reconstruction = torch.as_tensor(
        recovery.inputs, dtype=reference.dtype, device=reference.device
    )
    reconstruction = reconstruction.reshape(observation.batch_size, *observation.shape)
    labels = torch.as_tensor(recovery.labels, dtype=torch.int64, device=reference.device)
    return AttackResult.one_shot(
        observation, reconstruction, labels, objective=recovery.gradient_residual
    )


def _refuse_reduced(model: nn.Module, batch_size: int) -> None:
    """A clear refusal for the reduced architecture ``[Flatten] Linear Linear ...`` (Sec. 6)."""
    modules = (
        [module for module in model if not isinstance(module, nn.Flatten)]
        if isinstance(model, nn.Sequential)
        else []
    )
    if (
        len(modules) >= 2
        and isinstance(modules[0], nn.Linear)
        and isinstance(modules[1], nn.Linear)
    ):
        if batch_size >= 2:
            raise analysis.NotInsecureError(
                "not insecure: the first hidden layer has no ReLU (exclusivity reduction), so all "
                f"{batch_size} samples pass all its {modules[0].out_features} units and none is "
                "exclusive"
            )
        raise check.AttackRefused(
            "the exclusivity attack needs a ReLU after every hidden Linear layer; for a single "
            "sample use the 'closed_form' attack"
        )


@ATTACKS.register("exclusivity_hybrid")
def exclusivity_hybrid(
    observation: Observation,
    iterations: int = 100,
    tolerance: float | None = None,
    max_iter: int = 20,
) -> AttackResult:
    """The two-stage attack on a CNN ``f = head . trunk`` (Pan et al., 2022, Sec. 5, Fig. 4).

    1. The head is an FCN whose gradient is the average gradient of its own input, the
       trunk's feature maps: :func:`gradcore.analysis.exclusivity.reconstruct` recovers each
       sample's feature map and label.
    2. Each input is found by feature matching, ``min_x ||trunk(x) - feature_m||^2`` with
       ``x`` in ``[0, 1]`` (L-BFGS on a sigmoid parameterisation), one sample at a time in
       one batched objective.

    Parameters
    ----------
    iterations : int
        L-BFGS steps of the feature matching (``max_iter`` evaluations each).
    tolerance : float, optional
        Of :func:`gradcore.analysis.exclusivity.loss_groups`; by default by dtype, as in
        :func:`exclusivity`.

    Raises
    ------
    NotInsecureError
        The batch is not insecure for the head.
    """
    model = observation.model
    start = analysis.split_head(model)
    trunk, head = model[:start], model[start:]
    head_parameters = list(head.parameters())
    positions = {id(parameter): index for index, parameter in enumerate(model.parameters())}
    head_gradient = tuple(
        observation.gradient[positions[id(parameter)]] for parameter in head_parameters
    )
    head_observation = Observation(
        head,
        head_gradient,
        (head[0].in_features,),
        observation.batch_size,
        loss=observation.loss,
        progress=False,
    )
    features = exclusivity(head_observation, tolerance=tolerance)
    reference = observation.gradient[0]
    target = features.reconstruction.to(reference.dtype)
    generator = torch.Generator().manual_seed(observation.seed)
    logits = torch.randn((observation.batch_size, *observation.shape), generator=generator).to(
        reference.device, reference.dtype
    )
    logits.requires_grad_(True)
    optimizer = torch.optim.LBFGS(
        [logits], lr=1.0, max_iter=max_iter, history_size=100, line_search_fn="strong_wolfe"
    )

    def distance() -> torch.Tensor:
        return (trunk(torch.sigmoid(logits)).flatten(1) - target).pow(2).sum()

    def closure():
        optimizer.zero_grad()
        value = distance()
        value.backward()
        return value

    def distance_at(reconstruction: torch.Tensor) -> float:
        with torch.no_grad():
            return (trunk(reconstruction).flatten(1) - target).pow(2).sum().item()

    steps = OptimiserSteps(optimizer, closure, logits, distance_at, view=torch.sigmoid)
    result = optimise(observation, steps, iterations)  # no progress bar: a second stage, short
    result.labels = features.labels
    return result
