"""What a federated client shares: its gradient or its FedAvg update, after its defense.

This module sits above :mod:`gradcore.gradients` (what a client computes) and
:mod:`gradcore.defenses` (what it does to that before sending it), and is the one place
that combines them: :func:`share` for any update, :func:`shared_gradient` for the plain
FedSGD gradient. Defenses that need more than the gradient (Soteria and CENSOR see the
model and the batch) get it from :func:`gradcore.defenses.context`.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from . import defenses
from . import gradients as grads
from . import validation as check

Gradient = grads.Gradient


def share(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
    defense: str | None = None,
    seed: int = 0,
    local: dict | None = None,
    **defense_options,
) -> Gradient:
    """The update a client sends: one gradient (FedSGD), or ``local`` training's update (FedAvg),
    defended.

    ``local`` holds :func:`gradcore.gradients.local_update`'s ``lr``, ``epochs`` and
    ``batch_size``; without it the client shares :func:`shared_gradient`.
    """
    check.local_training("local", local)
    if local is None:
        return shared_gradient(model, inputs, targets, loss, defense, seed, **defense_options)
    update = grads.local_update(model, inputs, targets, loss, **local)
    if defense is None:
        return update
    return defenses.defend(
        update,
        defense,
        seed,
        context=defenses.context(model, inputs, targets, loss),
        **defense_options,
    )


def shared_gradient(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
    defense: str | None = None,
    seed: int = 0,
    **defense_options,
) -> Gradient:
    """The update a federated client sends: the batch-averaged gradient, defended.

    Parameters
    ----------
    defense : str, optional
        Name in :data:`gradcore.defenses.DEFENSES` (e.g. ``"noise"``, ``"clip"``);
        ``None`` shares the raw gradient, as in Zhu et al. (2019).
    seed : int
        Seed of any randomness in the defense.
    **defense_options
        Passed to the defense, e.g. ``sigma=0.01`` or ``bound=1.0``.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Inputs the model cannot take (shape, dtype, device, an empty batch, NaN), labels
        that do not fit the loss and the model's outputs, or a defense option of the wrong
        type or range; checked before anything is computed.
    """
    grads.check_batch(model, inputs, targets, loss)
    if defense is not None:
        check.integer("seed", seed)
        defenses.check_options(defense, defenses.DEFENSES[defense], defense_options)
    gradient = tuple(g.detach() for g in grads.batch_gradient(model, inputs, targets, loss))
    if defense is None:
        return gradient
    context = defenses.context(model, inputs, targets, loss)
    return defenses.defend(gradient, defense, seed=seed, context=context, **defense_options)
