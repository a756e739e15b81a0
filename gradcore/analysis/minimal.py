"""Minimal model structure for input reconstruction, executed.

Qian, Nassar and Hansen, "Minimal Model Structure Analysis for Input Reconstruction in
Federated Learning" (the source of the ``minimal-structure`` chapter). Three cases:

1. **One instance through an MLP** (Sec. 2.2; proof in the source's appendix 6): for the first
hidden layer
   ``z = W x + b`` and one sample, ``dL/db = dL/dz`` and ``dL/dW = outer(dL/dz, x)``
   whatever the depth above it and whatever the (monotonic) activation. Every row with
   ``dL/db_i != 0`` gives ``x``; one hidden unit is enough. :func:`first_layer_inversion`
   solves all usable rows at once in least squares, skips dead (zero) and vanishing rows,
   and raises when none is left.
2. **One instance through a CNN** (Sec. 2.3, eq. (2); appendix 7): *demixing*, the same closed
   form on the dense layer above the convolution, returns the convolution's (activated)
   output; *deconvolution* inverts the activation and solves the linear system of the
   convolution, which has ``(d')^2 h`` equations for ``d^2 C`` unknowns and so needs
   ``h >= (d / d')^2 C`` kernels (:func:`conv_counting`, :func:`deconvolve`,
   :func:`two_step`).
3. **A batch** (Sec. 2.2 and 3): no closed form; gradient matching plus a regulariser
   (none, orthogonality ``sum_{k != k'} (x_k . x_k')^2`` or L2 ``sum_k |x_k|^2``), with
   Adam or L-BFGS: the attack ``regularised_matching`` (:mod:`gradcore.attacks.regularised`).
   Demixing a batch of ``B`` needs at least ``B`` hidden units (:func:`demixing_condition`,
   :func:`batch_span_residual`).

Choices where the source is loose (stated again in the chapter):

* the output width is ``floor((d + 2p - k) / s) + 1`` (PyTorch's rule; the source writes
  the fraction without rounding);
* the counting conditions are necessary, not sufficient. They compare the number of
  equations with the number of unknowns; they say nothing about whether the equations
  are independent. The rank of the convolution matrix can fall short of the unknowns
  with the count met: when the stride skips pixels (``s > k``), and also at stride 1 (a
  2x7x7 input under 3 kernels of 2x2 without padding gives 108 equations for 98 unknowns,
  of rank 92). :func:`conv_counting` therefore reports the rank of a random layer of the
  kind where it can be computed (``ConvCount.rank``, ``ConvCount.determined``), and so
  does :func:`solvability_table`;
* when the convolution feeds the output layer directly the source requires
  ``h >= (d/d')^2 C B``, ``n0 >= n1 (B - 1) / (n1 - B)`` and ``1 < B < n1`` (``n0`` the
  convolution's output size, ``n1`` the output units); we implement these as stated, and
  for ``B = 1`` only the kernel count (a single instance needs no demixing condition);
* the orthogonality and L2 regularisers act on the flattened reconstructions as written,
  scaled by a weight ``lambda`` from :mod:`gradcore.papers`;
* labels are given to the batch attack (or read off the output layer, iDLG-style): the
  source studies the input, not the label;
* stacks of several convolutional layers (the source's appendix 7) are not covered: the
  two-step attack here undoes one convolution.

Numpy float64 for the exact part (the network and its analytic gradient are
:mod:`gradcore.analysis.dense`'s, with a sigmoid, ReLU or tanh activation); torch readers
(:func:`first_layer_gradients`, :func:`two_step`) take gradients from a torch model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import gradients as grads
from .. import validation as check
from .blas import single_thread
from .dense import ACTIVATION_FUNCTIONS

# ----------------------------------------------------------------------------------
# Sec. 2.2: one instance from the first hidden layer's gradients
# ----------------------------------------------------------------------------------


@dataclass
class Inversion:
    """What :func:`first_layer_inversion` recovered and from which rows.

    Attributes
    ----------
    input : numpy.ndarray
        The recovered layer input ``x``, ``(d,)``.
    rows : numpy.ndarray
        Indices of the hidden units used (``|dL/db_i|`` above the tolerance).
    dead_rows : int
        Units whose bias gradient is exactly zero (dead ReLUs, a zero loss derivative).
    vanishing_rows : int
        Non-zero but below ``tolerance * max |dL/db|``: skipped, their ratio is mostly rounding.
    rank_one_residual : float
        ``max |dW - outer(db, x)| / max |dW|``: round-off for one instance, large for a
        batch (whose gradient is a sum of ``B`` outer products, not one).
    """

    input: np.ndarray
    rows: np.ndarray
    dead_rows: int
    vanishing_rows: int
    rank_one_residual: float


def first_layer_inversion(
    weight_gradient, bias_gradient, tolerance: float = 1e-8, check_single: bool = True
) -> Inversion:
    """The input of one instance from ``dL/dW`` and ``dL/db`` of its first hidden layer.

    Qian et al., Sec. 2.2 (appendix 6): ``dL/dW_i = (dL/db_i) x`` for every hidden unit
    ``i``, at any depth and for any activation. The least-squares solution over the usable
    rows, ``x = sum_i db_i dW_i / sum_i db_i^2``, weighs each row by its size, so a
    nearly-dead row cannot spoil the result.

    Parameters
    ----------
    weight_gradient : array_like, ``(n1, d)``
    bias_gradient : array_like, ``(n1,)``
    tolerance : float
        Rows with ``|dL/db_i| <= tolerance * max |dL/db|`` are treated as vanishing.
    check_single : bool
        Raise when the gradient is not rank one (a batch, or a gradient from elsewhere).

    Raises
    ------
    ValueError
        Shapes that do not fit, non-finite entries, every bias gradient zero ("blocked":
        no unit passes any signal back, so no row carries ``x``), or a gradient that mixes
        several instances.
    """
    check.number("tolerance", tolerance, low=0, high=1, low_open=True)
    check.boolean("check_single", check_single)
    weight_gradient = check.real_array("the weight gradient", weight_gradient).astype(np.float64)
    bias_gradient = (
        check.real_array("the bias gradient", bias_gradient).astype(np.float64).reshape(-1)
    )
    if (
        weight_gradient.ndim != 2
        or weight_gradient.shape[0] != len(bias_gradient)
        or weight_gradient.size == 0
    ):
        raise check.GradcoreValueError(
            "the weight gradient must be (n1, d) with one bias gradient per row; got "
            f"{weight_gradient.shape} and {bias_gradient.shape}"
        )
    if not (np.isfinite(weight_gradient).all() and np.isfinite(bias_gradient).all()):
        raise check.GradcoreValueError("the first layer's gradient has NaN or infinite entries")
    magnitude = np.abs(bias_gradient)
    if magnitude.max() == 0:
        raise check.AttackRefused(
            f"blocked: all {len(bias_gradient)} rows of the first hidden layer's bias gradient are "
            "zero (dead or saturated units, or a zero loss derivative): no row carries the input"
        )
    usable = magnitude > tolerance * magnitude.max()
    dead = int((magnitude == 0).sum())
    rows = np.flatnonzero(usable)
    chosen = bias_gradient[rows]
    recovered = chosen @ weight_gradient[rows] / (chosen @ chosen)
    scale = np.abs(weight_gradient).max()
    residual = (
        float(np.abs(weight_gradient - np.outer(bias_gradient, recovered)).max() / scale)
        if scale > 0
        else 0.0
    )
    if check_single and residual > 1e-6:
        raise check.AttackRefused(
            f"the gradient is not one instance's: dW differs from outer(db, x) by {residual:.2g} "
            "(relative); a batch needs hidden units >= batch size and an optimisation (see "
            "regularised_matching)"
        )
    return Inversion(recovered, rows, dead, int(len(bias_gradient) - dead - len(rows)), residual)


def relative_error(estimate, truth) -> float:
    """``|estimate - truth| / |truth|`` in the Euclidean norm (float64)."""
    estimate, truth = (
        np.asarray(estimate, dtype=np.float64).ravel(),
        np.asarray(truth, dtype=np.float64).ravel(),
    )
    return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth))


def first_layer_gradients(
    model: nn.Module, gradient: Sequence[torch.Tensor], after: type | None = None
) -> tuple:
    """``(dL/dW, dL/db)`` of a torch model's first Linear layer (after a layer of type ``after``) as
    float64 numpy."""
    seen = after is None
    for module in model.modules():
        if after is not None and isinstance(module, after):
            seen = True
        if seen and isinstance(module, nn.Linear):
            if module.bias is None:
                raise check.AttackRefused(
                    "the closed form needs a bias in the first fully-connected layer"
                )
            pick = lambda p: (
                tuple(gradient)[grads.parameter_index(model, p)].detach().double().cpu().numpy()
            )
            return pick(module.weight), pick(module.bias)
    raise check.AttackRefused(
        "the model has no fully-connected layer" + (f" after a {after.__name__}" if after else "")
    )


# ----------------------------------------------------------------------------------
# Counting conditions (Sec. 2.3: Proposition 2 and the count after eq. (2))
# ----------------------------------------------------------------------------------


def conv_output_width(width: int, kernel_size: int, padding: int = 0, stride: int = 1) -> int:
    """``d' = (d + 2p - k) / s + 1``, rounded down as PyTorch does."""
    for name, value, low in (
        ("width d", width, 1),
        ("kernel size k", kernel_size, 1),
        ("stride s", stride, 1),
        ("padding p", padding, 0),
    ):
        check.integer(name, value, low=low)
    if min(width, kernel_size, stride) < 1 or padding < 0:
        raise check.GradcoreValueError(
            f"need d, k, s >= 1 and p >= 0; got d={width}, k={kernel_size}, s={stride}, p={padding}"
        )
    if width + 2 * padding < kernel_size:
        raise check.GradcoreValueError(
            f"a {kernel_size}-wide kernel does not fit a {width}-wide input padded by {padding}"
        )
    return (width + 2 * padding - kernel_size) // stride + 1


def demixing_condition(hidden_units: int, batch_size: int) -> bool:
    """Proposition 2: a dense layer demixes a batch when it has at least as many units as
    samples."""
    check.positive_int("hidden units", hidden_units)
    check.positive_int("batch size", batch_size)
    if hidden_units < 1 or batch_size < 1:
        raise check.GradcoreValueError(
            f"hidden units and batch size must be positive, got {hidden_units} and {batch_size}"
        )
    return hidden_units >= batch_size


def output_layer_demixing(inputs: int, outputs: int, batch_size: int) -> bool:
    """Demixing through the output layer alone: ``n0 >= n1 (B - 1) / (n1 - B)`` and ``1 < B < n1``.

    Equations ``n1 (n0 + 1)`` (weight and bias gradients) against unknowns ``B (n0 + n1)``
    (each sample's layer input and output derivative). One instance always demixes.
    """
    for name, value in (
        ("inputs n0", inputs),
        ("outputs n1", outputs),
        ("batch size B", batch_size),
    ):
        check.positive_int(name, value)
    if min(inputs, outputs, batch_size) < 1:
        raise check.GradcoreValueError(
            f"sizes must be positive, got n0={inputs}, n1={outputs}, B={batch_size}"
        )
    if batch_size == 1:
        return True
    return batch_size < outputs and inputs * (outputs - batch_size) >= outputs * (batch_size - 1)


@dataclass
class ConvCount:
    """Equations and unknowns of one convolutional layer (Qian et al., Sec. 2.3).

    ``solvable`` is the counting verdict of the source: enough kernels (and demixing). It
    is necessary, not sufficient: it compares how many equations there are with how many
    unknowns, not whether the equations are independent. ``rank`` is the rank of the
    convolution matrix of one random layer of this kind (for one sample; ``None`` where
    that matrix is too large to decompose), and ``determined`` says whether it reaches the
    unknowns, which is what least-squares deconvolution needs.
    """

    width: int
    channels: int
    kernels: int
    kernel_size: int
    stride: int
    padding: int
    batch_size: int
    output_width: int
    equations: int
    unknowns: int
    kernels_needed: float
    dense_units: int | None
    solvable: bool
    rank: int | None = None

    @property
    def determined(self) -> bool | None:
        """The convolution matrix has full column rank (``None`` where the rank was not
        computed)."""
        return None if self.rank is None else self.rank == self.unknowns // self.batch_size

    def row(self) -> list:
        dense = "none (to output)" if self.dense_units is None else self.dense_units
        return [
            f"{self.channels}x{self.width}x{self.width}",
            self.kernel_size,
            self.stride,
            self.padding,
            self.output_width,
            self.kernels,
            self.kernels_needed,
            dense,
            self.batch_size,
            self.equations,
            self.unknowns,
            self.solvable,
        ]


def conv_counting(
    width: int,
    channels: int,
    kernels: int,
    kernel_size: int,
    padding: int = 0,
    stride: int = 1,
    batch_size: int = 1,
    dense_units: int | None = 64,
    num_classes: int = 10,
    weight: np.ndarray | None = None,
    seed: int = 0,
    largest_rank: int = 1024,
) -> ConvCount:
    """Whether one convolutional layer can be inverted, by counting (Sec. 2.3, after eq. (2)), and
    its rank.

    With a dense layer of ``dense_units`` above: demixing needs ``dense_units >= B`` and
    deconvolution ``(d')^2 B h >= d^2 B C``, i.e. ``h >= (d / d')^2 C``. With the
    convolution feeding the output layer directly (``dense_units=None``) the source asks for
    ``h >= (d / d')^2 C B`` and :func:`output_layer_demixing` with ``n0 = h (d')^2`` and
    ``n1 = num_classes``.

    The count is necessary, not sufficient (see :class:`ConvCount`): the result also holds
    the rank of the convolution matrix of ``weight`` (``(h, C, k, k)``; by default a
    standard normal draw seeded by ``seed``), computed when the layer has at most
    ``largest_rank`` unknowns per sample. The rank of a random layer is the rank of almost
    every layer of the kind.
    """
    for name, value in (
        ("channels C", channels),
        ("kernels h", kernels),
        ("batch size B", batch_size),
        ("num_classes", num_classes),
        ("largest_rank", largest_rank),
    ):
        check.positive_int(name, value)
    check.positive_int("dense_units", dense_units, allow_none=True)
    check.integer("seed", seed)
    out = conv_output_width(width, kernel_size, padding, stride)
    direct = dense_units is None
    needed = (width / out) ** 2 * channels * (batch_size if direct else 1)
    if direct:
        demixes = output_layer_demixing(kernels * out * out, num_classes, batch_size)
    else:
        demixes = demixing_condition(dense_units, batch_size)
    rank = None
    if weight is not None or channels * width * width <= largest_rank:
        if weight is None:
            weight = np.random.default_rng(seed).normal(
                size=(kernels, channels, kernel_size, kernel_size)
            )
        weight = check.real_array("weight", weight)
        if weight.shape != (kernels, channels, kernel_size, kernel_size):
            raise check.GradcoreValueError(
                "weight must be shaped (h, C, k, k) = "
                f"{(kernels, channels, kernel_size, kernel_size)}; got {weight.shape}"
            )
        rank, _ = svd_solve(convolution_matrix(weight, width, padding, stride))
    return ConvCount(
        width,
        channels,
        kernels,
        kernel_size,
        stride,
        padding,
        batch_size,
        out,
        out * out * batch_size * kernels,
        width * width * batch_size * channels,
        needed,
        dense_units,
        bool(demixes and kernels >= needed),
        rank,
    )


def convolution_matrix(
    weight: np.ndarray, width: int, padding: int = 0, stride: int = 1
) -> np.ndarray:
    """The matrix ``A`` with ``A vec(x) = vec(conv(x))`` (no bias), float64, in ``nn.Flatten``
    order.

    Built by convolving each basis image, so it is the layer PyTorch computes.
    """
    weight = torch.as_tensor(np.asarray(weight, dtype=np.float64))
    channels = weight.shape[1]
    unknowns = channels * width * width
    basis = torch.eye(unknowns, dtype=torch.float64).reshape(unknowns, channels, width, width)
    return F.conv2d(basis, weight, stride=stride, padding=padding).reshape(unknowns, -1).T.numpy()


def _svd(matrix: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD in float64 that succeeds whatever the thread count.

    Torch's SVD first, because it keeps to torch's thread count (a multi-threaded BLAS
    slows to a crawl on a shared two-core machine). Its divide-and-conquer driver can fail
    to converge on a well-conditioned matrix on one thread and succeed on two (a system
    with many zero rows, the outputs of a convolution that see only padding); then
    LAPACK's QR-iteration driver (``gesvd``, through scipy, on one thread) decomposes it.
    """
    tensor = torch.as_tensor(matrix, dtype=torch.float64)
    try:
        return torch.linalg.svd(tensor, full_matrices=False)
    except torch.linalg.LinAlgError:
        from scipy.linalg import svd

        with single_thread():
            u, singular, vt = svd(
                np.asarray(matrix, dtype=np.float64), full_matrices=False, lapack_driver="gesvd"
            )
        return torch.as_tensor(u), torch.as_tensor(singular), torch.as_tensor(vt)


def svd_solve(system: np.ndarray, target: np.ndarray | None = None):
    """Rank (numpy's tolerance), minimum-norm least-squares solution and largest singular value,
    from one SVD.

    Rows that are exactly zero carry no equation (``0 = t``): they are dropped before the
    SVD, which changes neither the rank nor the least-squares solution, and spares the
    SVD the matrices it can fail on (see :func:`_svd`).
    """
    system = np.asarray(system, dtype=np.float64)
    live = np.any(system != 0, axis=1)
    if not live.all():
        system = system[live]
        target = None if target is None else np.asarray(target)[live]
    if system.shape[0] == 0:  # nothing but zero rows: rank 0, the minimum-norm solution is zero
        return (0, None) if target is None else (0, np.zeros(system.shape[1]), 0.0)
    u, singular, vt = _svd(system)
    keep = singular > max(system.shape) * np.finfo(np.float64).eps * singular[0]
    rank = int(keep.sum())
    if target is None:
        return rank, None
    coefficients = (u[:, keep].T @ torch.as_tensor(target, dtype=torch.float64)) / singular[keep]
    return rank, (vt[keep].T @ coefficients).numpy(), float(singular[0])


# ----------------------------------------------------------------------------------
# The two-step CNN attack: demixing, then deconvolution
# ----------------------------------------------------------------------------------


@dataclass
class Deconvolution:
    """Result of :func:`deconvolve`."""

    input: np.ndarray
    rank: int
    unknowns: int
    usable_equations: int
    method: str

    @property
    def determined(self) -> bool:
        """The usable equations pin the input down (full column rank)."""
        return self.rank == self.unknowns


def deconvolve(
    layer: nn.Conv2d,
    activated: np.ndarray,
    activation: str,
    width: int,
    method: str = "auto",
    iterations: int = 2000,
) -> Deconvolution:
    """Recover a convolution's input from its activated output (the second step).

    The activation is inverted where it can be (sigmoid: ``logit``, dropping outputs
    rounded to 0 or 1; ReLU: only the active units), the bias subtracted, and the linear
    system ``A x = z`` solved: by least squares (``"lstsq"``) or, for an underdetermined
    system, by projected gradient descent on ``|A x - z|^2`` within the pixel box [0, 1]
    (``"optimise"``). ``"auto"`` takes least squares exactly when ``A`` has full column rank.
    """
    check.one_of("deconvolution method", method, ("auto", "lstsq", "optimise"))
    check.positive_int("iterations", iterations)
    weight = layer.weight.detach().double().cpu().numpy()
    matrix = convolution_matrix(weight, width, layer.padding[0], layer.stride[0])
    activated = np.asarray(activated, dtype=np.float64).ravel()
    if len(activated) != matrix.shape[0]:
        raise check.GradcoreValueError(
            f"the convolution gives {matrix.shape[0]} outputs, {len(activated)} were passed"
        )
    bias = (
        np.zeros(layer.out_channels)
        if layer.bias is None
        else layer.bias.detach().double().cpu().numpy()
    )
    target = ACTIVATION_FUNCTIONS[activation].inverse(activated) - np.repeat(
        bias, matrix.shape[0] // layer.out_channels
    )
    usable = np.isfinite(target)
    if not usable.any():
        raise check.AttackRefused(
            "blocked: every convolution output is saturated or inactive, so none can be inverted"
        )
    system, target = matrix[usable], target[usable]
    rank, least_squares, largest = svd_solve(system, target)
    if largest == 0:
        raise check.AttackRefused(
            "blocked: every usable convolution output sees only the zero padding, so its equation "
            "carries nothing about the input"
        )
    if method == "auto":
        method = "lstsq" if rank == matrix.shape[1] else "optimise"
    if method == "lstsq":
        solution = least_squares
    else:  # projected gradient with the step 1 / |A|^2, which cannot overshoot
        a, b = torch.as_tensor(system), torch.as_tensor(target)
        step, estimate = 1.0 / largest**2, torch.full((matrix.shape[1],), 0.5, dtype=torch.float64)
        for _ in range(iterations):
            estimate = torch.clamp(estimate - step * (a.T @ (a @ estimate - b)), 0.0, 1.0)
        solution = estimate.numpy()
    return Deconvolution(solution, rank, matrix.shape[1], int(usable.sum()), method)


@dataclass
class TwoStep:
    """Result of :func:`two_step`: the conv output from demixing, then the input."""

    input: np.ndarray
    conv_output: np.ndarray
    deconvolution: Deconvolution
    demixing: Inversion


def _conv_and_activation(model: nn.Module) -> tuple[nn.Conv2d, str]:
    modules = list(model.modules())
    convs = [m for m in modules if isinstance(m, nn.Conv2d)]
    if len(convs) != 1:
        raise check.AttackRefused(
            f"the two-step attack handles one convolutional layer, the model has {len(convs)}"
        )
    index = modules.index(convs[0])
    names = {nn.Sigmoid: "sigmoid", nn.ReLU: "relu", nn.Tanh: "tanh"}
    following = next((names.get(type(m)) for m in modules[index + 1 :] if type(m) in names), None)
    if following is None:
        raise check.AttackRefused(
            "the convolution must be followed by a sigmoid, ReLU or tanh activation"
        )
    return convs[0], following


def two_step(
    model: nn.Module,
    gradient: Sequence[torch.Tensor],
    shape: Sequence[int],
    method: str = "auto",
    iterations: int = 2000,
) -> TwoStep:
    """Qian et al., Sec. 2.3: demix the dense layer's gradient, then deconvolve.

    ``model`` is ``Conv2d, activation, Flatten, Linear, ...`` (see :func:`conv_mlp`).

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        Before any work: a gradient that does not fit the model, a shape the model cannot
        take, an unknown method or a non-positive number of iterations; afterwards, a
        gradient the closed form cannot demix or a convolution it cannot undo ("blocked").
    """
    gradient = check.gradient(gradient, model)
    check.input_shape("shape", shape)
    check.model_outputs(model, tuple(shape), "inputs")
    check.one_of("method", method, ("auto", "lstsq", "optimise"))
    check.positive_int("iterations", iterations)
    layer, activation = _conv_and_activation(model)
    channels, width = int(shape[0]), int(shape[-1])
    if layer.in_channels != channels:
        raise check.GradcoreValueError(
            f"an input of shape {tuple(shape)} has {channels} channels, the convolution takes "
            f"{layer.in_channels}"
        )
    weight_gradient, bias_gradient = first_layer_gradients(model, gradient, after=nn.Conv2d)
    demixed = first_layer_inversion(weight_gradient, bias_gradient)
    deconvolution = deconvolve(layer, demixed.input, activation, width, method, iterations)
    return TwoStep(deconvolution.input.reshape(shape), demixed.input, deconvolution, demixed)


# ----------------------------------------------------------------------------------
# A batch: the span of the first layer's gradient, and regularised gradient matching
# ----------------------------------------------------------------------------------


def batch_span_residual(
    weight_gradient: np.ndarray, inputs: np.ndarray, tolerance: float = 1e-10
) -> float:
    """How far the private batch lies outside the row space of ``dL/dW`` (relative, worst sample).

    A batch gradient is ``sum_k outer(delta_k, x_k) / B``: its rows span at most
    ``min(n1, B)`` directions. With ``n1 >= B`` hidden units (and independent rows) that
    span is the batch's own, so every ``x_k`` is in it (residual at round-off): the
    information to demix is there. With fewer units it is not.
    """
    weight_gradient = np.asarray(weight_gradient, dtype=np.float64)
    inputs = np.atleast_2d(np.asarray(inputs, dtype=np.float64))
    if inputs.shape[1] != weight_gradient.shape[1]:
        raise check.GradcoreValueError(
            f"inputs of size {inputs.shape[1]} do not fit a gradient taking "
            f"{weight_gradient.shape[1]}"
        )
    _, singular, vt = (t.numpy() for t in _svd(weight_gradient))
    if singular.size == 0 or singular[0] == 0:
        raise check.AttackRefused("the weight gradient is zero: it spans nothing")
    basis = vt[singular > tolerance * singular[0]]
    residual = inputs - (inputs @ basis.T) @ basis
    return float((np.linalg.norm(residual, axis=1) / np.linalg.norm(inputs, axis=1)).max())


def saturation(model: nn.Module, inputs: torch.Tensor, threshold: float = 4.0) -> float:
    """Share of sigmoid inputs outside ``[-threshold, threshold]``, where ``sigma' < 0.018``.

    The source's failure mode: there the sigmoid is flat, so its output, and the gradient
    the attack follows, barely changes with the input.
    """
    seen: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _, args, __: seen.append(args[0].detach()))
        for m in model.modules()
        if isinstance(m, nn.Sigmoid)
    ]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    if not seen:
        raise check.GradcoreValueError("the model has no sigmoid activations")
    return float(
        sum((s.abs() > threshold).sum().item() for s in seen) / sum(s.numel() for s in seen)
    )
