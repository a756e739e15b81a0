"""What a federated client computes: gradients, per-sample gradients, local updates.

A gradient is a tuple of tensors, one per trainable parameter, in
``model.parameters()`` order. What the client then *shares*, after its defense, is
:func:`gradcore.client.shared_gradient` (the single entry point for "what the server sees").
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import validation as check
from .registry import Registry

Gradient = tuple  # tuple[torch.Tensor, ...], one entry per trainable parameter

LOSSES: Registry = Registry("loss")


@LOSSES.register("cross_entropy")
def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``targets`` are class indices or per-class probabilities."""
    if not targets.is_floating_point():
        return F.cross_entropy(outputs, targets.long())
    return -(targets * F.log_softmax(outputs, dim=-1)).sum(dim=-1).mean()


@LOSSES.register("half_squared_error")
def half_squared_error(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``(1/2B) sum_j (o_j - y_j)^2``: its gradient is the DLG source's ``(1/B) sum (o_j - y_j)
    x_j``."""
    return (
        0.5
        * (outputs.reshape(len(targets), -1) - targets.reshape(len(targets), -1).to(outputs.dtype))
        .pow(2)
        .sum(dim=1)
        .mean()
    )


def check_loss(name: str, value) -> None:
    """A loss by name in :data:`LOSSES`, or a callable; unknown names fail listing the known
    ones."""
    if isinstance(value, str):
        LOSSES[value]
    elif not callable(value):
        raise check.GradcoreTypeError(
            f"{name} must be a loss name ({', '.join(LOSSES.names())}) or a callable; got "
            f"{check.describe(value)}"
        )


def loss_function(loss: str | Callable) -> Callable:
    """A loss given by name (see :data:`LOSSES`) or as a callable."""
    return LOSSES[loss] if isinstance(loss, str) else loss


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters a gradient is taken with respect to."""
    return [p for p in model.parameters() if p.requires_grad]


def parameter_index(model: nn.Module, parameter: torch.Tensor) -> int:
    """Position of ``parameter`` among ``model``'s trainable parameters: its entry in a shared
    gradient."""
    for index, candidate in enumerate(trainable(model)):
        if candidate is parameter:
            return index
    raise check.GradcoreValueError(
        "that layer's parameters are not trainable, so the gradient holds nothing for them"
    )


def batch_gradient(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
    create_graph: bool = False,
) -> Gradient:
    """Gradient of the batch-mean loss with respect to every trainable parameter.

    ``create_graph=True`` keeps the graph so the result can itself be differentiated
    with respect to ``inputs``, which is what every gradient-matching attack does.
    Its arguments are not checked: it runs inside every attack's loop. The checked entry
    points are :func:`gradcore.client.shared_gradient`, :func:`per_sample_gradients` and
    :func:`local_update`.
    """
    objective = loss_function(loss)(model(inputs), targets)
    return tuple(torch.autograd.grad(objective, trainable(model), create_graph=create_graph))


def per_sample_gradients(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
) -> Gradient:
    """One gradient per sample, vectorised with ``torch.func`` (leading batch dimension).

    Their mean over the batch equals :func:`batch_gradient` for mean-reduced losses.
    The model must not use batch statistics (no batch norm in training mode).
    """
    check_batch(model, inputs, targets, loss)
    from torch.func import functional_call, grad, vmap

    names = [name for name, p in model.named_parameters() if p.requires_grad]
    params = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
    buffers = {name: b.detach() for name, b in model.named_buffers()}
    objective = loss_function(loss)

    def single(parameters, x, y):
        outputs = functional_call(model, (parameters, buffers), (x.unsqueeze(0),))
        return objective(outputs, y.unsqueeze(0))

    gradients = vmap(grad(single), in_dims=(None, 0, 0))(params, inputs, targets)
    return tuple(gradients[name] for name in names)


def validate(gradient: Sequence[torch.Tensor], model: nn.Module) -> Gradient:
    """Check that ``gradient`` can be one of ``model``'s and carries something to invert.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Not a sequence of tensors, empty, the wrong number of tensors, a shape, dtype or
        device that differs from its parameter's, non-finite entries (the message names
        the parameter), or a gradient that is zero everywhere.
    """
    gradient = check.gradient(gradient, model)
    if all(torch.count_nonzero(g) == 0 for g in gradient):
        raise check.GradcoreValueError(
            "the gradient is zero everywhere: it carries no information to invert"
        )
    return gradient


def check_batch(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss: str | Callable
) -> None:
    """What every client-side entry point checks: the model, a batch it can take, and targets that
    fit the loss."""
    check_loss("loss", loss)
    outputs = check.inputs_for(model, inputs)
    check.targets_for("targets", targets, len(inputs), outputs, loss, trainable(model)[0].device)


def flatten(gradient: Sequence[torch.Tensor]) -> torch.Tensor:
    """All entries of a gradient as one vector."""
    return torch.cat([g.reshape(-1) for g in gradient])


def norm(gradient: Sequence[torch.Tensor]) -> torch.Tensor:
    """Euclidean norm of the whole gradient."""
    return torch.sqrt(sum(g.pow(2).sum() for g in gradient))


def _minibatches(count: int, batch_size: int | None) -> list[slice]:
    size = count if batch_size is None else batch_size
    if not 1 <= size <= count:
        raise check.GradcoreValueError(
            f"local batch size must be between 1 and the {count} local samples, got {size}"
        )
    return [slice(start, min(start + size, count)) for start in range(0, count, size)]


def stateless(model: nn.Module) -> nn.Module:
    """The model itself, or, if it trains batch norm, a copy whose batch norm stops tracking running
    statistics.

    In training mode batch norm normalises with the batch's own statistics, which is what
    the gradient depends on; updating the running averages is an in-place side effect that
    ``torch.func`` transforms refuse and that must not leak into the server's model.
    """
    import copy

    if not model.training or not any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()
    ):
        return model
    copied = copy.deepcopy(model)
    torch.func.replace_all_batch_norm_modules_(copied)
    return copied


def local_update(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
    lr: float = 1e-4,
    epochs: int = 1,
    batch_size: int | None = None,
) -> Gradient:
    """The parameter update a FedAvg client sends after local training (McMahan et al., 2017).

    The client runs ``epochs`` passes of plain SGD with step ``lr`` over its samples in
    mini-batches of ``batch_size`` (all at once when ``None``), in a fixed order, and
    shares ``theta_0 - theta_K``. Geiping et al. (2020, Sec. 5) attack exactly this. The
    model itself is left unchanged.
    """
    check_batch(model, inputs, targets, loss)
    check.number("lr", lr, low=0, low_open=True)
    check.positive_int("epochs", epochs)
    check.integer("local batch size", batch_size, low=1, high=len(inputs), allow_none=True)
    parameters = {
        name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad
    }
    updated = unrolled_update(
        stateless(model),
        parameters,
        inputs,
        targets,
        loss,
        lr,
        epochs,
        batch_size,
        differentiable=False,
    )
    return tuple((parameters[name] - updated[name]).detach() for name in parameters)


def unrolled_update(
    model: nn.Module,
    parameters: dict,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable,
    lr: float,
    epochs: int,
    batch_size: int | None,
    differentiable: bool = True,
) -> dict:
    """Local SGD written functionally, so an attacker can differentiate through every step.

    Returns the parameters after training. With ``differentiable=True`` (the attack)
    the result carries the graph back to ``inputs``; it also runs under ``torch.func.vmap``.
    """
    from torch.func import functional_call, grad

    buffers = {name: b for name, b in model.named_buffers()}
    objective = loss_function(loss)

    def batch_loss(params, x, y):
        return objective(functional_call(model, (params, buffers), (x,)), y)

    step_gradient = grad(batch_loss)
    current = dict(parameters)
    for _ in range(epochs):
        for part in _minibatches(len(inputs), batch_size):
            step = step_gradient(current, inputs[part], targets[part])
            current = {
                name: value - lr * (step[name] if differentiable else step[name].detach())
                for name, value in current.items()
            }
    return current


def loss_after_update(
    model: nn.Module,
    update: Sequence[torch.Tensor],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss: str | Callable = "cross_entropy",
) -> float:
    """The client's loss on its own data at ``theta - update``: has local training helped or
    diverged?"""
    from torch.func import functional_call

    trained = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    if len(trained) != len(update):
        raise ValueError(
            f"the update has {len(update)} tensors, the model {len(trained)} trainable parameters"
        )
    parameters = {name: p.detach() - u for (name, p), u in zip(trained, update)}
    buffers = {name: b for name, b in model.named_buffers()}
    with torch.no_grad():
        return loss_function(loss)(
            functional_call(model, (parameters, buffers), (inputs,)), targets
        ).item()
