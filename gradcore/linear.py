"""The exact numpy analysis of one linear unit (the DLG warm-up).

A frozen unit ``o_j = W . x_j + b`` is trained with the half squared error on B
private samples; the client shares the batch averages

    dW = (1/B) sum_j (o_j - y_j) x_j,        db = (1/B) sum_j (o_j - y_j).

For B = 1 the input is ``x = dW / db`` exactly. Everything here is float64 numpy,
so the chapter can assert equalities to 1e-12, independently of torch.
"""

from __future__ import annotations

import numpy as np


def forward(weight: np.ndarray, bias: float, inputs: np.ndarray) -> np.ndarray:
    """Outputs ``o_j = W . x_j + b`` for inputs shaped ``(B, D)``."""
    return inputs @ weight + bias


def gradients(weight: np.ndarray, bias: float, inputs: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, float]:
    """Batch-averaged gradients ``(dW, db)`` of ``(1/2B) sum_j (o_j - y_j)^2``."""
    inputs = np.atleast_2d(inputs)
    residual = forward(weight, bias, inputs) - targets
    return residual @ inputs / len(inputs), float(residual.mean())


def loss(weight: np.ndarray, bias: float, inputs: np.ndarray, targets: np.ndarray) -> float:
    """The half squared error ``(1/2B) sum_j (o_j - y_j)^2``."""
    return float(0.5 * np.mean((forward(weight, bias, np.atleast_2d(inputs)) - targets) ** 2))


def closed_form(weight_gradient: np.ndarray, bias_gradient: float) -> np.ndarray:
    """The single private input, ``x = dW / db`` (Zhu et al., 2019, linear case).

    Raises
    ------
    ValueError
        When ``db`` is zero: the sample is fitted exactly and its gradient vanishes.
    """
    if bias_gradient == 0:
        raise ValueError("the bias gradient is zero (the sample is fitted exactly), so dW = 0 carries no input")
    return np.asarray(weight_gradient) / bias_gradient


def batch_mixture(weight_gradient: np.ndarray, bias_gradient: float) -> np.ndarray:
    """What the closed form returns for a batch: ``sum_j w_j x_j`` with ``w_j = r_j / sum_k r_k``.

    The residual-weighted average of the batch, one image that is none of them.
    """
    return closed_form(weight_gradient, bias_gradient)


def finite_difference(function, point: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar ``function`` at ``point`` (for checking gradients)."""
    point = np.asarray(point, dtype=np.float64)
    result = np.zeros_like(point)
    for index in np.ndindex(point.shape):
        shift = np.zeros_like(point)
        shift[index] = step
        result[index] = (function(point + shift) - function(point - shift)) / (2 * step)
    return result


def parameters(model) -> tuple[np.ndarray, float]:
    """``(W, b)`` of a gradcore ``linear_unit`` as float64 numpy."""
    layer = model[1]
    return layer.weight.detach().double().cpu().numpy().ravel(), float(layer.bias.detach().double().item())
