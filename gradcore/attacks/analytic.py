"""Analytic attacks: the input computed from the gradient, no optimisation.

* ``closed_form``: the single-sample leak through a biased first linear layer,
  ``x = dL/dW_i / dL/db_i`` (Zhu et al., 2019, Sec. 3; Geiping et al., 2020, Prop. 3.1
  for one layer), from the best-conditioned row.
* ``minimal_mlp``: the same closed form in least squares over every usable row (Qian et
  al., Sec. 2.2; :func:`gradcore.analysis.minimal.first_layer_inversion`).
* ``two_step``: demixing the dense layer above one convolution, then deconvolving (Qian
  et al., Sec. 2.3; :func:`gradcore.analysis.minimal.two_step`).
* ``walk_back``: the exact walk-back of Geiping et al. (2020, Prop. 3.1) through a ReLU
  MLP (:func:`gradcore.analysis.walkback.walk_back_torch`).
"""

from __future__ import annotations

import torch

from .. import gradients as grads
from .. import validation as check
from ..analysis import minimal
from ..analysis.walkback import walk_back_torch
from .base import ATTACKS, AttackResult, Observation, first_linear


@ATTACKS.register("closed_form")
def closed_form(observation: Observation) -> AttackResult:
    """Exact input of a single sample from a biased fully-connected first layer.

    For ``z = W x + b`` and one sample, ``dL/dW_i = (dL/dz_i) x`` and ``dL/db_i = dL/dz_i``,
    so any row with ``dL/db_i != 0`` gives ``x = (dL/dW_i) / (dL/db_i)`` with no
    optimisation (Zhu et al., 2019; Geiping et al., 2020, Prop. 3.1). The row with the
    largest ``|dL/db_i|`` is used, as the best conditioned.
    """
    if observation.batch_size != 1:
        raise check.AttackRefused(
            f"the closed form recovers a single sample; a batch of {observation.batch_size} yields "
            "only a mixture of its inputs (use 'dlg')"
        )
    layer = first_linear(observation.model)
    if layer.bias is None:
        raise check.AttackRefused("the closed form needs a bias in the first fully-connected layer")
    weight_gradient = observation.gradient[grads.parameter_index(observation.model, layer.weight)]
    bias_gradient = observation.gradient[grads.parameter_index(observation.model, layer.bias)]
    row = int(torch.argmax(bias_gradient.abs()))
    if bias_gradient[row] == 0:
        raise check.AttackRefused(
            "blocked: every row of the first layer's bias gradient is zero, so no row can be "
            "divided out"
        )
    reconstruction = (weight_gradient[row] / bias_gradient[row]).reshape(1, *observation.shape)
    return AttackResult.one_shot(observation, reconstruction, observation.labels)


@ATTACKS.register("minimal_mlp")
def minimal_mlp(observation: Observation, tolerance: float = 1e-8) -> AttackResult:
    """The Sec. 2.2 closed form of Qian et al. as an attack: one instance from the first Linear
    layer,
    least squares over the usable rows."""
    if observation.batch_size != 1:
        raise check.AttackRefused(
            f"the closed form recovers one instance; a batch of {observation.batch_size} needs "
            "'regularised_matching'"
        )
    weight_gradient, bias_gradient = minimal.first_layer_gradients(
        observation.model, observation.gradient
    )
    recovered = minimal.first_layer_inversion(weight_gradient, bias_gradient, tolerance).input
    reference = observation.gradient[0]
    reconstruction = torch.as_tensor(
        recovered, dtype=reference.dtype, device=reference.device
    ).reshape(1, *observation.shape)
    return AttackResult.one_shot(observation, reconstruction, observation.labels)


@ATTACKS.register("two_step")
def two_step(
    observation: Observation, method: str = "auto", iterations: int = 2000
) -> AttackResult:
    """Qian et al., Sec. 2.3 as an attack: demix the dense layer's gradient, then deconvolve (one
    instance).

    The model is ``Conv2d, activation, Flatten, Linear, ...`` (see
    :func:`gradcore.models.conv_mlp`); any other model is refused with a
    ``GradcoreValueError`` that says why. ``method`` and ``iterations`` are those of
    :func:`gradcore.analysis.minimal.deconvolve`. The labels are not recovered.
    """
    if observation.batch_size != 1:
        raise check.AttackRefused(
            f"the two-step attack recovers one instance, not a batch of {observation.batch_size}"
        )
    result = minimal.two_step(
        observation.model, observation.gradient, observation.shape, method, iterations
    )
    reference = observation.gradient[0]
    reconstruction = torch.as_tensor(result.input, dtype=reference.dtype, device=reference.device)
    return AttackResult.one_shot(observation, reconstruction.reshape(1, *observation.shape))


@ATTACKS.register("walk_back")
def walk_back(observation: Observation) -> AttackResult:
    """Prop. 3.1 of Inverting Gradients as an attack: exact for one sample through a ReLU MLP.

    Raises :class:`gradcore.errors.AttackRefused` for a batch or a model outside ``[Flatten] Linear
    (ReLU Linear)*`` (the attack does not apply). A defended gradient can block the walk (no live
    row to divide by); the attacker then has nothing and guesses uniform gray (``diverged`` is
    set). Pixels are clipped to [0, 1], the range the attacker knows.
    """
    if observation.batch_size != 1:
        raise check.AttackRefused(
            "the walk-back applies to one sample; a batch gives a mixture of its inputs"
        )
    result = walk_back_torch(observation.model, observation.gradient, observation.shape)
    if result.recovered:
        reconstruction = result.reconstruction.clamp(0, 1)
    else:
        reconstruction = torch.full(
            (1, *observation.shape),
            0.5,
            dtype=observation.gradient[0].dtype,
            device=observation.gradient[0].device,
        )
    return AttackResult.one_shot(
        observation, reconstruction, observation.labels, diverged=not result.recovered
    )
