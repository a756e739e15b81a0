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


def gradients(
    weight: np.ndarray, bias: float, inputs: np.ndarray, targets: np.ndarray
) -> tuple[np.ndarray, float]:
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
        raise ValueError(
            "the bias gradient is zero (the sample is fitted exactly), so dW = 0 carries no input"
        )
    return np.asarray(weight_gradient) / bias_gradient


def batch_mixture(weight_gradient: np.ndarray, bias_gradient: float) -> np.ndarray:
    """What the closed form returns for a batch: ``sum_j w_j x_j`` with ``w_j = r_j / sum_k r_k``.

    The residual-weighted average of the batch, one image that is none of them.
    """
    return closed_form(weight_gradient, bias_gradient)


def matching_curvature(
    weight: np.ndarray, weight_gradient: np.ndarray, bias_gradient: float
) -> float:
    """An upper bound on the curvature of DLG's matching distance at the private input (B = 1).

    DLG descends on ``D(x) = ||r(x) x - dW||^2 + (r(x) - db)^2`` with ``r(x) = W . x + b - y``.
    At the private input its Gauss-Newton Hessian is ``2 J^T J`` with ``J = [r I + x W^T; W^T]``,
    whose largest eigenvalue is at most ``2 ((|r| + ||x|| ||W||)^2 + ||W||^2)``. The server
    reads ``|r| = |db|`` and ``||x|| = ||dW|| / |db|`` off the shared gradient, so it can bound
    the curvature without knowing the input.
    """
    if bias_gradient == 0:
        raise ValueError(
            "the bias gradient is zero (the sample is fitted exactly): no curvature to bound"
        )
    residual = abs(bias_gradient)
    input_norm = float(np.linalg.norm(weight_gradient)) / residual
    weight_norm = float(np.linalg.norm(weight))
    return 2 * ((residual + input_norm * weight_norm) ** 2 + weight_norm**2)


def step_size(
    weight: np.ndarray, weight_gradient: np.ndarray, bias_gradient: float, fraction: float = 0.5
) -> float:
    """The gradient-descent step ``fraction * 2 / L`` for DLG on the linear unit (B = 1).

    ``L`` is :func:`matching_curvature`; below ``2 / L`` gradient descent is stable near the
    private input, for any digit and any draw of the unit's weights. A fixed step is not:
    0.01 locked onto only 26 of 40 random digits within 400 steps, and 0.03 diverged on 22
    (gradcore's measurement, seeds 0-39), because the curvature varies eightfold between draws.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    return fraction * 2.0 / matching_curvature(weight, weight_gradient, bias_gradient)


def descent(
    weights: np.ndarray,
    biases: np.ndarray,
    targets: np.ndarray,
    weight_gradients: np.ndarray,
    bias_gradients: np.ndarray,
    starts: np.ndarray,
    steps: np.ndarray,
    iterations: int,
    truth: np.ndarray | None = None,
):
    """DLG's gradient descent on the linear unit (B = 1) for many draws at once.

    Row ``n`` of every argument is one draw: the unit ``(W_n, b_n)``, the sample's target
    ``y_n``, the shared gradient ``(dW_n, db_n)``, the dummy's start and the step. Each step
    is ``x <- x - step * dD/dx`` with ``dD/dx = 2 (r e_W + (x . e_W) W + e_b W)``, where
    ``e_W = r x - dW`` and ``e_b = r - db`` are the gradient mismatches: exactly what the
    torch attack (``gradcore.attack("dlg", optimiser="gd")``) differentiates, in float64.

    Returns the final dummies ``(N, D)``; with ``truth`` (the private inputs), also the MSE of
    every draw after every step, ``(iterations + 1, N)`` (infinite once a draw overflows).
    """
    dummies = np.array(starts, dtype=np.float64)
    steps = np.broadcast_to(np.asarray(steps, dtype=np.float64), (len(dummies),))[:, None]
    history = [] if truth is None else [((dummies - truth) ** 2).mean(axis=1)]
    with np.errstate(
        over="ignore", invalid="ignore"
    ):  # a draw past its stable step overflows; the others go on
        for _ in range(iterations):
            residual = np.einsum("nd,nd->n", dummies, weights) + biases - targets
            error_weight = residual[:, None] * dummies - weight_gradients
            error_bias = residual - bias_gradients
            along = np.einsum("nd,nd->n", dummies, error_weight)
            direction = 2 * (
                residual[:, None] * error_weight + (along + error_bias)[:, None] * weights
            )
            dummies = dummies - steps * direction
            if truth is not None:
                history.append(np.nan_to_num(((dummies - truth) ** 2).mean(axis=1), nan=np.inf))
    return dummies if truth is None else (dummies, np.stack(history))


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
    return layer.weight.detach().double().cpu().numpy().ravel(), float(
        layer.bias.detach().double().item()
    )
