"""Minimal model structure for input reconstruction, executed.

Qian, Nassar and Hansen, "Minimal Model Structure Analysis for Input Reconstruction in
Federated Learning" (the source of the ``minimal-structure`` chapter). Three cases:

1. **One instance through an MLP** (Sec. 2.2; proof in the source's appendix 6): for the first hidden layer
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
   Adam or L-BFGS: the attack ``regularised_matching``. Demixing a batch of ``B`` needs at
   least ``B`` hidden units (:func:`demixing_condition`, :func:`batch_span_residual`).

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

Numpy float64 for the exact part (:class:`MLP`, :func:`mlp_gradients`); torch readers
(:func:`first_layer_gradients`, :func:`two_step`) take gradients from a torch model.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from . import attacks, models
from . import gradients as grads
from . import validation as check
from .registry import Registry

# ----------------------------------------------------------------------------------
# Monotonic activations, with their derivative and (where it exists) their inverse
# ----------------------------------------------------------------------------------


class Activation(NamedTuple):
    """A monotonic activation: value, derivative from the pre-activation, and inverse.

    ``inverse`` returns NaN where the output does not determine the input (a ReLU at 0, a
    sigmoid rounded to exactly 0 or 1): those equations are unusable, not wrong.
    """

    forward: Callable[[np.ndarray], np.ndarray]
    derivative: Callable[[np.ndarray], np.ndarray]
    inverse: Callable[[np.ndarray], np.ndarray]


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|


def _logit(a):
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.log(a) - np.log1p(-a)
    return np.where(np.isfinite(z), z, np.nan)


def _relu_inverse(a):
    return np.where(a > 0, a, np.nan)


def _tanh_inverse(a):
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.arctanh(a)
    return np.where(np.isfinite(z), z, np.nan)


ACTIVATIONS: Registry = Registry("activation")
ACTIVATIONS.add("sigmoid", Activation(_sigmoid, lambda z: _sigmoid(z) * (1 - _sigmoid(z)), _logit))
ACTIVATIONS.add("relu", Activation(lambda z: np.maximum(z, 0.0), lambda z: (z > 0).astype(float), _relu_inverse))
ACTIVATIONS.add("tanh", Activation(np.tanh, lambda z: 1 - np.tanh(z) ** 2, _tanh_inverse))

# ----------------------------------------------------------------------------------
# A float64 MLP and its analytic gradient
# ----------------------------------------------------------------------------------


@dataclass
class MLP:
    """``z_l = W_l a_l + b_l``; hidden layers followed by ``activation``, the last linear (logits).

    Attributes
    ----------
    weights : list of numpy.ndarray
        ``W_l`` shaped ``(out_l, in_l)``.
    biases : list of numpy.ndarray
        ``b_l`` shaped ``(out_l,)``; the first one is what the closed form needs.
    activation : str
        A name in :data:`ACTIVATIONS` (``sigmoid`` in the paper).
    """

    weights: list
    biases: list
    activation: str = "sigmoid"

    def __post_init__(self):
        ACTIVATIONS[self.activation]  # unknown names fail here, naming the known ones
        if len(self.weights) == 0 or len(self.weights) != len(self.biases):
            raise check.GradcoreValueError(f"an MLP needs one bias per weight matrix and at least one layer; got {len(self.weights)} "
                                           f"weights and {len(self.biases)} biases")
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if weight.ndim != 2 or bias.shape != (weight.shape[0],):
                raise check.GradcoreValueError(f"layer {index}: weight {weight.shape} and bias {bias.shape} do not fit")
            if index and weight.shape[1] != self.weights[index - 1].shape[0]:
                raise check.GradcoreValueError(f"layer {index} takes {weight.shape[1]} inputs, layer {index - 1} gives {self.weights[index - 1].shape[0]}")

    @property
    def widths(self) -> list[int]:
        return [self.weights[0].shape[1]] + [w.shape[0] for w in self.weights]


def random_mlp(widths: Sequence[int], rng: np.random.Generator, activation: str = "sigmoid", scale: float = 1.0,
               bias_scale: float = 0.3) -> MLP:
    """A random :class:`MLP` with ``W_l ~ N(0, scale^2 / in_l)``, ``b_l ~ N(0, bias_scale^2)``.

    ``widths`` lists the input size, the hidden widths and the number of classes.
    """
    widths = [int(w) for w in widths]
    if len(widths) < 2 or min(widths) < 1:
        raise check.GradcoreValueError(f"widths must list the input size and at least one layer, all positive; got {widths}")
    weights = [rng.normal(0.0, scale / math.sqrt(n_in), (n_out, n_in)) for n_in, n_out in zip(widths[:-1], widths[1:])]
    return MLP(weights, [rng.normal(0.0, bias_scale, n) for n in widths[1:]], activation)


def mlp_from_torch(model: nn.Module) -> MLP:
    """Float64 copy of ``models.build("mlp", ...)``: ``[Flatten] (Linear Act)* Linear``."""
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    names = {nn.Sigmoid: "sigmoid", nn.ReLU: "relu", nn.Tanh: "tanh"}
    found = {names[type(m)] for m in model.modules() if type(m) in names}
    if not layers or any(layer.bias is None for layer in layers) or len(found) > 1:
        raise check.GradcoreValueError("needs an MLP of biased Linear layers with one kind of activation (sigmoid, relu or tanh)")
    to_numpy = lambda t: t.detach().double().cpu().numpy()
    return MLP([to_numpy(l.weight) for l in layers], [to_numpy(l.bias) for l in layers], found.pop() if found else "sigmoid")


def mlp_gradients(network: MLP, inputs: np.ndarray, labels: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Analytic ``(dL/dW_l, dL/db_l)`` of the batch-mean cross-entropy, by backpropagation.

    ``inputs`` is ``(B, d)``, ``labels`` ``(B,)`` class indices; the result has one pair per layer.
    """
    inputs = np.atleast_2d(np.asarray(inputs, dtype=np.float64))
    labels = np.asarray(labels).reshape(-1)
    if inputs.shape[1] != network.widths[0] or len(labels) != len(inputs):
        raise check.GradcoreValueError(f"inputs {inputs.shape} and labels {labels.shape} do not fit an MLP taking {network.widths[0]} inputs")
    act = ACTIVATIONS[network.activation]
    activations, pre = [inputs], []
    for index, (weight, bias) in enumerate(zip(network.weights, network.biases)):
        pre.append(activations[-1] @ weight.T + bias)
        if index < len(network.weights) - 1:
            activations.append(act.forward(pre[-1]))
    logits = pre[-1]
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    delta = probabilities.copy()
    delta[np.arange(len(labels)), labels] -= 1.0
    delta /= len(labels)  # the batch mean
    result = []
    for index in range(len(network.weights) - 1, -1, -1):
        result.append((delta.T @ activations[index], delta.sum(axis=0)))
        if index:
            delta = (delta @ network.weights[index]) * act.derivative(pre[index - 1])
    return result[::-1]


def mlp_loss(network: MLP, inputs: np.ndarray, labels: np.ndarray) -> float:
    """Batch-mean cross-entropy of :class:`MLP` (for finite-difference checks)."""
    act, a = ACTIVATIONS[network.activation], np.atleast_2d(inputs)
    for index, (weight, bias) in enumerate(zip(network.weights, network.biases)):
        a = a @ weight.T + bias
        if index < len(network.weights) - 1:
            a = act.forward(a)
    shifted = a - a.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_p[np.arange(len(a)), np.asarray(labels).reshape(-1)].mean())


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


def first_layer_inversion(weight_gradient, bias_gradient, tolerance: float = 1e-8, check_single: bool = True) -> Inversion:
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
    bias_gradient = check.real_array("the bias gradient", bias_gradient).astype(np.float64).reshape(-1)
    if weight_gradient.ndim != 2 or weight_gradient.shape[0] != len(bias_gradient) or weight_gradient.size == 0:
        raise check.GradcoreValueError(f"the weight gradient must be (n1, d) with one bias gradient per row; got {weight_gradient.shape} "
                                       f"and {bias_gradient.shape}")
    if not (np.isfinite(weight_gradient).all() and np.isfinite(bias_gradient).all()):
        raise check.GradcoreValueError("the first layer's gradient has NaN or infinite entries")
    magnitude = np.abs(bias_gradient)
    if magnitude.max() == 0:
        raise check.GradcoreValueError(f"blocked: all {len(bias_gradient)} rows of the first hidden layer's bias gradient are zero (dead or "
                                       "saturated units, or a zero loss derivative): no row carries the input")
    usable = magnitude > tolerance * magnitude.max()
    dead = int((magnitude == 0).sum())
    rows = np.flatnonzero(usable)
    chosen = bias_gradient[rows]
    recovered = chosen @ weight_gradient[rows] / (chosen @ chosen)
    scale = np.abs(weight_gradient).max()
    residual = float(np.abs(weight_gradient - np.outer(bias_gradient, recovered)).max() / scale) if scale > 0 else 0.0
    if check_single and residual > 1e-6:
        raise check.GradcoreValueError(f"the gradient is not one instance's: dW differs from outer(db, x) by {residual:.2g} (relative); "
                                       "a batch needs hidden units >= batch size and an optimisation (see regularised_matching)")
    return Inversion(recovered, rows, dead, int(len(bias_gradient) - dead - len(rows)), residual)


def relative_error(estimate, truth) -> float:
    """``|estimate - truth| / |truth|`` in the Euclidean norm (float64)."""
    estimate, truth = np.asarray(estimate, dtype=np.float64).ravel(), np.asarray(truth, dtype=np.float64).ravel()
    return float(np.linalg.norm(estimate - truth) / np.linalg.norm(truth))


def first_layer_gradients(model: nn.Module, gradient: Sequence[torch.Tensor], after: type | None = None) -> tuple:
    """``(dL/dW, dL/db)`` of a torch model's first Linear layer (after a layer of type ``after``) as float64 numpy."""
    seen = after is None
    for module in model.modules():
        if after is not None and isinstance(module, after):
            seen = True
        if seen and isinstance(module, nn.Linear):
            if module.bias is None:
                raise check.GradcoreValueError("the closed form needs a bias in the first fully-connected layer")
            pick = lambda p: tuple(gradient)[attacks._parameter_index(model, p)].detach().double().cpu().numpy()
            return pick(module.weight), pick(module.bias)
    raise check.GradcoreValueError("the model has no fully-connected layer" + (f" after a {after.__name__}" if after else ""))


@attacks.ATTACKS.register("minimal_mlp")
def minimal_mlp(observation: attacks.Observation, tolerance: float = 1e-8) -> attacks.AttackResult:
    """The Sec. 2.2 closed form as an attack: one instance from the first Linear layer, least squares over usable rows."""
    if observation.batch_size != 1:
        raise check.GradcoreValueError(f"the closed form recovers one instance; a batch of {observation.batch_size} needs 'regularised_matching'")
    weight_gradient, bias_gradient = first_layer_gradients(observation.model, observation.gradient)
    recovered = first_layer_inversion(weight_gradient, bias_gradient, tolerance).input
    reference = observation.gradient[0]
    reconstruction = torch.as_tensor(recovered, dtype=reference.dtype, device=reference.device).reshape(1, *observation.shape)
    history = attacks._empty_history(observation)
    attacks._recorder(observation, history)(0, 0.0, reconstruction)
    return attacks.AttackResult(reconstruction, observation.labels, history)


# ----------------------------------------------------------------------------------
# Counting conditions (Sec. 2.3: Proposition 2 and the count after eq. (2))
# ----------------------------------------------------------------------------------


def conv_output_width(width: int, kernel_size: int, padding: int = 0, stride: int = 1) -> int:
    """``d' = (d + 2p - k) / s + 1``, rounded down as PyTorch does."""
    for name, value, low in (("width d", width, 1), ("kernel size k", kernel_size, 1), ("stride s", stride, 1), ("padding p", padding, 0)):
        check.integer(name, value, low=low)
    if min(width, kernel_size, stride) < 1 or padding < 0:
        raise check.GradcoreValueError(f"need d, k, s >= 1 and p >= 0; got d={width}, k={kernel_size}, s={stride}, p={padding}")
    if width + 2 * padding < kernel_size:
        raise check.GradcoreValueError(f"a {kernel_size}-wide kernel does not fit a {width}-wide input padded by {padding}")
    return (width + 2 * padding - kernel_size) // stride + 1


def demixing_condition(hidden_units: int, batch_size: int) -> bool:
    """Proposition 2: a dense layer demixes a batch when it has at least as many units as samples."""
    check.positive_int("hidden units", hidden_units)
    check.positive_int("batch size", batch_size)
    if hidden_units < 1 or batch_size < 1:
        raise check.GradcoreValueError(f"hidden units and batch size must be positive, got {hidden_units} and {batch_size}")
    return hidden_units >= batch_size


def output_layer_demixing(inputs: int, outputs: int, batch_size: int) -> bool:
    """Demixing through the output layer alone: ``n0 >= n1 (B - 1) / (n1 - B)`` and ``1 < B < n1``.

    Equations ``n1 (n0 + 1)`` (weight and bias gradients) against unknowns ``B (n0 + n1)``
    (each sample's layer input and output derivative). One instance always demixes.
    """
    for name, value in (("inputs n0", inputs), ("outputs n1", outputs), ("batch size B", batch_size)):
        check.positive_int(name, value)
    if min(inputs, outputs, batch_size) < 1:
        raise check.GradcoreValueError(f"sizes must be positive, got n0={inputs}, n1={outputs}, B={batch_size}")
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
        """The convolution matrix has full column rank (``None`` where the rank was not computed)."""
        return None if self.rank is None else self.rank == self.unknowns // self.batch_size

    def row(self) -> list:
        dense = "none (to output)" if self.dense_units is None else self.dense_units
        return [f"{self.channels}x{self.width}x{self.width}", self.kernel_size, self.stride, self.padding, self.output_width,
                self.kernels, self.kernels_needed, dense, self.batch_size, self.equations, self.unknowns, self.solvable]


def conv_counting(width: int, channels: int, kernels: int, kernel_size: int, padding: int = 0, stride: int = 1,
                  batch_size: int = 1, dense_units: int | None = 64, num_classes: int = 10, weight: np.ndarray | None = None,
                  seed: int = 0, largest_rank: int = 1024) -> ConvCount:
    """Whether one convolutional layer can be inverted, by counting (Sec. 2.3, after eq. (2)), and its rank.

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
    for name, value in (("channels C", channels), ("kernels h", kernels), ("batch size B", batch_size), ("num_classes", num_classes),
                        ("largest_rank", largest_rank)):
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
            weight = np.random.default_rng(seed).normal(size=(kernels, channels, kernel_size, kernel_size))
        weight = check.real_array("weight", weight)
        if weight.shape != (kernels, channels, kernel_size, kernel_size):
            raise check.GradcoreValueError(f"weight must be shaped (h, C, k, k) = {(kernels, channels, kernel_size, kernel_size)}; "
                                           f"got {weight.shape}")
        rank, _ = _svd_solve(convolution_matrix(weight, width, padding, stride))
    return ConvCount(width, channels, kernels, kernel_size, stride, padding, batch_size, out, out * out * batch_size * kernels,
                     width * width * batch_size * channels, needed, dense_units, bool(demixes and kernels >= needed), rank)


def convolution_matrix(weight: np.ndarray, width: int, padding: int = 0, stride: int = 1) -> np.ndarray:
    """The matrix ``A`` with ``A vec(x) = vec(conv(x))`` (no bias), float64, in ``nn.Flatten`` order.

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

        from .exclusivity import _single_thread

        with _single_thread():
            u, singular, vt = svd(np.asarray(matrix, dtype=np.float64), full_matrices=False, lapack_driver="gesvd")
        return torch.as_tensor(u), torch.as_tensor(singular), torch.as_tensor(vt)


def _svd_solve(system: np.ndarray, target: np.ndarray | None = None):
    """Rank (numpy's tolerance), minimum-norm least-squares solution and largest singular value, from one SVD.

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


def solvability_table(configurations: Sequence[dict], seed: int = 0, largest_rank: int = 1024):
    """One row per layer configuration: the counting verdict and the rank of a random such layer.

    Each configuration holds the keyword arguments of :func:`conv_counting`. The rank
    column checks the count against linear algebra: a full-rank convolution matrix is what
    least-squares deconvolution actually needs (computed up to ``largest_rank`` unknowns).
    """
    from .claims import Table

    rng, rows = np.random.default_rng(seed), []
    for configuration in configurations:
        shape = (configuration["kernels"], configuration["channels"], configuration["kernel_size"], configuration["kernel_size"])
        weight = rng.normal(size=shape)
        unknowns = configuration["channels"] * configuration["width"] ** 2
        count = conv_counting(**configuration, **({"weight": weight} if unknowns <= largest_rank else {"largest_rank": largest_rank}))
        if count.rank is not None:
            rows.append(count.row() + [f"{count.rank}/{unknowns}"])
        else:  # an SVD that size takes longer than the point is worth
            rows.append(count.row() + ["not computed"])
    header = ["input", "k", "s", "p", "d'", "h", "h needed", "dense units", "B", "equations", "unknowns", "solvable", "rank (B=1)"]
    return Table("Solvability of one convolutional layer by counting", header, rows)


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


def deconvolve(layer: nn.Conv2d, activated: np.ndarray, activation: str, width: int, method: str = "auto",
               iterations: int = 2000) -> Deconvolution:
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
        raise check.GradcoreValueError(f"the convolution gives {matrix.shape[0]} outputs, {len(activated)} were passed")
    bias = np.zeros(layer.out_channels) if layer.bias is None else layer.bias.detach().double().cpu().numpy()
    target = ACTIVATIONS[activation].inverse(activated) - np.repeat(bias, matrix.shape[0] // layer.out_channels)
    usable = np.isfinite(target)
    if not usable.any():
        raise check.GradcoreValueError("blocked: every convolution output is saturated or inactive, so none can be inverted")
    system, target = matrix[usable], target[usable]
    rank, least_squares, largest = _svd_solve(system, target)
    if largest == 0:
        raise check.GradcoreValueError("blocked: every usable convolution output sees only the zero padding, so its equation "
                                       "carries nothing about the input")
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
        raise check.GradcoreValueError(f"the two-step attack handles one convolutional layer, the model has {len(convs)}")
    index = modules.index(convs[0])
    names = {nn.Sigmoid: "sigmoid", nn.ReLU: "relu", nn.Tanh: "tanh"}
    following = next((names.get(type(m)) for m in modules[index + 1:] if type(m) in names), None)
    if following is None:
        raise check.GradcoreValueError("the convolution must be followed by a sigmoid, ReLU or tanh activation")
    return convs[0], following


def two_step(model: nn.Module, gradient: Sequence[torch.Tensor], shape: Sequence[int], method: str = "auto",
             iterations: int = 2000) -> TwoStep:
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
        raise check.GradcoreValueError(f"an input of shape {tuple(shape)} has {channels} channels, the convolution takes {layer.in_channels}")
    weight_gradient, bias_gradient = first_layer_gradients(model, gradient, after=nn.Conv2d)
    demixed = first_layer_inversion(weight_gradient, bias_gradient)
    deconvolution = deconvolve(layer, demixed.input, activation, width, method, iterations)
    return TwoStep(deconvolution.input.reshape(shape), demixed.input, deconvolution, demixed)


def two_step_attack(model: nn.Module, gradient: Sequence[torch.Tensor], shape: Sequence[int], truth: torch.Tensor | None = None,
                    method: str = "auto", iterations: int = 2000) -> attacks.AttackResult:
    """:func:`two_step` behind the attacks' result type (one instance), timed like :func:`gradcore.attack`.

    Not in :data:`gradcore.ATTACKS`: it needs a convolutional model, which the registry's
    common contract (any attack on any MLP) cannot offer.
    """
    gradient = grads.validate(gradient, model)
    check.input_shape("shape", shape)
    observation = attacks.Observation(model, gradient, tuple(shape), 1, truth=truth)
    start = time.perf_counter()
    result = two_step(model, gradient, shape, method, iterations)
    reconstruction = torch.as_tensor(result.input, dtype=gradient[0].dtype, device=gradient[0].device).reshape(1, *shape)
    history = attacks._empty_history(observation)
    attacks._recorder(observation, history)(0, 0.0, reconstruction)
    return attacks.AttackResult(reconstruction, None, history, attack="two_step", seconds=time.perf_counter() - start)


def cnn_case(dataset, seed: int = 0, **options):
    """A one-instance :class:`gradcore.experiments.Scenario` on a seeded float64 :func:`conv_mlp`."""
    from .experiments import scenario

    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = conv_mlp(dataset.shape, dataset.num_classes, **options)
    finally:
        torch.random.set_rng_state(state)
    return scenario(dataset, model, 1, seed=seed, dtype=torch.float64)


def conv_mlp(shape: Sequence[int], num_classes: int, kernels: int = 4, kernel_size: int = 3, stride: int = 1, padding: int = 1,
             hidden: int | None = 32, activation: str = "sigmoid") -> nn.Sequential:
    """One convolution, then (``hidden`` units of) a dense layer, then the output: Qian et al.'s CNN.

    ``hidden=None`` feeds the convolution straight into the output layer.
    """
    channels, width = shape[0], shape[-1]
    out = conv_output_width(width, kernel_size, padding, stride)
    layers = [nn.Conv2d(channels, kernels, kernel_size, stride, padding), models.ACTIVATIONS[activation](), nn.Flatten()]
    features = kernels * out * out
    if hidden is not None:
        layers += [nn.Linear(features, hidden), models.ACTIVATIONS[activation]()]
        features = hidden
    return nn.Sequential(*layers, nn.Linear(features, num_classes))


# ----------------------------------------------------------------------------------
# A batch: the span of the first layer's gradient, and regularised gradient matching
# ----------------------------------------------------------------------------------


def batch_span_residual(weight_gradient: np.ndarray, inputs: np.ndarray, tolerance: float = 1e-10) -> float:
    """How far the private batch lies outside the row space of ``dL/dW`` (relative, worst sample).

    A batch gradient is ``sum_k outer(delta_k, x_k) / B``: its rows span at most
    ``min(n1, B)`` directions. With ``n1 >= B`` hidden units (and independent rows) that
    span is the batch's own, so every ``x_k`` is in it (residual at round-off): the
    information to demix is there. With fewer units it is not.
    """
    weight_gradient = np.asarray(weight_gradient, dtype=np.float64)
    inputs = np.atleast_2d(np.asarray(inputs, dtype=np.float64))
    if inputs.shape[1] != weight_gradient.shape[1]:
        raise check.GradcoreValueError(f"inputs of size {inputs.shape[1]} do not fit a gradient taking {weight_gradient.shape[1]}")
    _, singular, vt = (t.numpy() for t in _svd(weight_gradient))
    if singular.size == 0 or singular[0] == 0:
        raise check.GradcoreValueError("the weight gradient is zero: it spans nothing")
    basis = vt[singular > tolerance * singular[0]]
    residual = inputs - (inputs @ basis.T) @ basis
    return float((np.linalg.norm(residual, axis=1) / np.linalg.norm(inputs, axis=1)).max())


def _orthogonality(batch: torch.Tensor) -> torch.Tensor:
    flat = batch.flatten(1)
    gram = flat @ flat.T
    return gram.pow(2).sum() - gram.diagonal().pow(2).sum()


REGULARISERS: Registry = Registry("regulariser")
REGULARISERS.add("none", lambda batch: batch.new_zeros(()))
REGULARISERS.add("orthogonality", _orthogonality)  # sum over k != k' of (x_k . x_k')^2
# The same on centred images (each minus its own mean pixel): images with non-negative pixels
# cannot be orthogonal, their centred versions can (then the penalty asks them to be uncorrelated).
REGULARISERS.add("orthogonality_centred", lambda batch: _orthogonality(batch.flatten(1) - batch.flatten(1).mean(1, keepdim=True)))
REGULARISERS.add("l2", lambda batch: batch.pow(2).sum())  # sum over k of x_k . x_k


@attacks.ATTACKS.register("regularised_matching")
def regularised_matching(observation: attacks.Observation, regulariser: str = "none", weight: float = 1e-3, optimiser: str = "adam",
                         iterations: int = 300, lr: float = 0.1, init: str = "randn", init_scale: float = 1.0, max_iter: int = 20,
                         line_search: str | None = "strong_wolfe", record_every: int = 10, snapshots: Sequence[int] = ()) -> attacks.AttackResult:
    """Batch reconstruction as optimisation: ``L(x_hat) + lambda R(x_hat)`` (Qian et al., Sec. 2.1 and Algorithm 3).

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
        Dummy initialisation (see :data:`gradcore.attacks.INITIALISERS`), multiplied by
        ``init_scale``; a large scale saturates sigmoids from the start.
    """
    penalty = REGULARISERS[regulariser]
    labels = observation.labels
    if labels is None:
        labels = attacks.infer_labels(observation.model, observation.gradient, observation.batch_size)
    generator = torch.Generator().manual_seed(observation.seed)
    dtype, device = observation.gradient[0].dtype, observation.gradient[0].device
    start = attacks.INITIALISERS[init]((observation.batch_size, *observation.shape), generator) * init_scale
    dummy = start.to(device, dtype).requires_grad_(True)
    options = {"max_iter": max_iter, "line_search": line_search} if optimiser == "lbfgs" else {}
    optimizer = attacks.OPTIMISERS[optimiser]([dummy], lr, **options)
    model, target, loss = observation.model, observation.gradient, observation.loss

    def objective(inputs: torch.Tensor, create_graph: bool) -> torch.Tensor:
        candidate = grads.batch_gradient(model, inputs, labels, loss, create_graph=create_graph)
        return attacks.euclidean_distance(candidate, target) + weight * penalty(inputs)

    def closure():
        optimizer.zero_grad()
        value = objective(dummy, True)
        value.backward()
        return value

    result = attacks.optimise(observation, dummy, optimizer, closure, lambda inputs: objective(inputs, False).item(), iterations,
                              f"{regulariser} ({optimiser})", snapshots, record_every)
    result.labels = labels
    return result


def saturation(model: nn.Module, inputs: torch.Tensor, threshold: float = 4.0) -> float:
    """Share of sigmoid inputs outside ``[-threshold, threshold]``, where ``sigma' < 0.018``.

    The source's failure mode: there the sigmoid is flat, so its output, and the gradient
    the attack follows, barely changes with the input.
    """
    seen: list[torch.Tensor] = []
    hooks = [m.register_forward_hook(lambda _, args, __: seen.append(args[0].detach())) for m in model.modules()
             if isinstance(m, nn.Sigmoid)]
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    if not seen:
        raise check.GradcoreValueError("the model has no sigmoid activations")
    return float(sum((s.abs() > threshold).sum().item() for s in seen) / sum(s.numel() for s in seen))


def batch_sweep(dataset, batch_sizes: Sequence[int], regularisers: Sequence[str], model_options: dict, attack_options: dict,
                weights: dict, seed: int = 0, progress: bool = True) -> dict:
    """``{regulariser: {B: AttackResult}}``: the same seeded batch and model for every regulariser.

    ``weights`` maps a regulariser to its ``lambda``; the model is ``models.build("mlp",
    ...)`` with ``model_options``, in float64 so round-off never decides a comparison.
    """
    from .experiments import scenario

    runs: dict = {name: {} for name in regularisers}
    cases = {size: scenario(dataset, "mlp", size, seed=seed, dtype=torch.float64, **model_options) for size in batch_sizes}
    jobs = [(name, size) for name in regularisers for size in batch_sizes]
    for name, size in tqdm(jobs, desc=f"batch sweep ({dataset.name})", disable=not progress, file=sys.stderr, mininterval=2.0, ncols=80):
        runs[name][size] = cases[size].attack("regularised_matching", regulariser=name, weight=weights.get(name, 0.0),
                                              seed=seed, **attack_options)
    return runs


def weight_sweep(dataset, batch_size: int, regularisers: Sequence[str], weights: Sequence[float], model_options: dict,
                 attack_options: dict, seed: int = 0, known: dict | None = None) -> dict:
    """``{regulariser: {lambda: final MSE}}`` on one seeded batch and model (Qian et al., Sec. 3).

    The source gives no ``lambda``; before a regulariser is said not to help, it is tried at
    several weights on the same batch, model and start (the same as :func:`batch_sweep`'s for
    this batch size and seed). ``known`` (``{regulariser: {lambda: final MSE}}``) holds runs
    already made on that case, which are taken as they are instead of being repeated.
    """
    from .experiments import scenario

    known = known or {}
    case = scenario(dataset, "mlp", batch_size, seed=seed, dtype=torch.float64, **model_options)

    def final(name, weight):
        if weight in known.get(name, {}):
            return known[name][weight]
        return case.attack("regularised_matching", regulariser=name, weight=weight, seed=seed, **attack_options).final("mse")

    return {name: {weight: final(name, weight) for weight in weights} for name in regularisers}


# ----------------------------------------------------------------------------------
# Surveys the chapter shows as tables
# ----------------------------------------------------------------------------------


def exactness_rows(image: torch.Tensor, label: torch.Tensor, architectures: dict, activations: Sequence[str], num_classes: int,
                   seed: int = 0) -> list[list]:
    """The Sec. 2.2 closed form over architectures: ``[activation, network, rows used, dead rows, relative error]`` per model.

    Each model is ``models.build("mlp", ...)`` in float64; the gradient is what the client
    shares; a model whose first layer passes nothing back is reported as ``blocked``.
    """
    rows = []
    for activation in activations:
        for name, widths in architectures.items():
            model = models.build("mlp", tuple(image.shape[1:]), num_classes, seed=seed, widths=widths, activation=activation).double()
            gradient = grads.shared_gradient(model, image.double(), label)
            weight_gradient, bias_gradient = first_layer_gradients(model, gradient)
            try:
                inversion = first_layer_inversion(weight_gradient, bias_gradient)
            except ValueError:
                rows.append([activation, name, 0, len(bias_gradient), "blocked"])
                continue
            rows.append([activation, name, len(inversion.rows), inversion.dead_rows, relative_error(inversion.input, image.numpy())])
    return rows


def span_rows(dataset, batch_size: int, hidden_units: Sequence[int], seed: int = 0) -> list[list]:
    """Proposition 2 over widths: ``[hidden units, n1 >= B, rank of dL/dW, batch outside its span]`` per width."""
    from .experiments import scenario

    rows = []
    for hidden in hidden_units:
        case = scenario(dataset, "mlp", batch_size, seed=seed, dtype=torch.float64, widths=(hidden,), activation="sigmoid")
        weight_gradient = case.gradient()[0].numpy()
        rank, _ = _svd_solve(weight_gradient)
        residual = batch_span_residual(weight_gradient, case.inputs.flatten(1).numpy())
        rows.append([hidden, demixing_condition(hidden, batch_size), rank, residual])
    return rows


def compare_with_dlg(cases: dict, dlg_config: dict, iterations: int, seed: int = 0) -> dict:
    """``{name: (two-step AttackResult, DLG AttackResult)}`` on the same one-instance CNN cases.

    The two-step attack runs with ``deconvolution_iterations=iterations`` where it must
    optimise; DLG (Zhu et al., 2019) runs for ``dlg_config["iterations"]`` steps with the labels known.
    """
    return {name: (two_step_attack(case.model, case.gradient(), case.shape, case.inputs, iterations=iterations),
                   case.attack("dlg", seed=seed, **dlg_config)) for name, case in cases.items()}



def closed_form_gallery(images: torch.Tensor, labels: torch.Tensor, architectures: dict, activation: str, num_classes: int,
                        seed: int = 0) -> list[tuple[str, torch.Tensor]]:
    """``[(architecture, reconstructions)]``: each image attacked alone with ``minimal_mlp``, one row per MLP."""
    rows = []
    for name, widths in architectures.items():
        model = models.build("mlp", tuple(images.shape[1:]), num_classes, seed=seed, widths=widths, activation=activation).double()
        recovered = [attacks.attack("minimal_mlp", model, grads.shared_gradient(model, image[None].double(), label[None]),
                                    shape=images.shape[1:]).reconstruction for image, label in zip(images, labels)]
        rows.append((name, torch.cat(recovered)))
    return rows


def cnn_gallery(dataset, configurations: dict, count: int, dlg_config: dict, iterations: int, seed: int = 0) -> tuple:
    """Private images ``(count, C, H, W)`` and ``{row label: reconstructions}`` of the two-step attack and DLG.

    One single-instance case per seed ``seed .. seed + count - 1`` and per ``conv_mlp``
    configuration (``{label: options}``); the images depend only on the seed, so every
    row lines up with the same private images.
    """
    truth, rows = None, {}
    for label, options in configurations.items():
        cases = {k: cnn_case(dataset, seed=seed + k, **options) for k in range(count)}
        truth = torch.cat([case.inputs for case in cases.values()])
        results = compare_with_dlg(cases, dlg_config, iterations, seed)
        rows[f"two-step, {label}"] = torch.cat([two.reconstruction for two, _ in results.values()])
        rows[f"DLG, {label}"] = torch.cat([dlg.reconstruction for _, dlg in results.values()])
    return truth, rows


@dataclass
class Race:
    """Result of :func:`race`: the two-step attack and DLG timed to the same accuracy target."""

    target: float  # relative input error both attacks must reach
    dlg_iterations: int | None  # L-BFGS steps DLG needs to reach the target (None: not within its budget)
    two_step_error: float
    two_step_seconds: float  # median over the repeats
    dlg_seconds: float | None  # median over the repeats of a DLG run stopped at ``dlg_iterations``

    @property
    def speedup(self) -> float:
        """DLG's time over the two-step attack's (inf when DLG never reaches the target)."""
        return math.inf if self.dlg_seconds is None else self.dlg_seconds / self.two_step_seconds


def race(case, dlg_config: dict, target: float, repeats: int = 5, iterations: int = 2000, seed: int = 0) -> Race:
    """Time the two-step attack (Qian et al., Sec. 2.3) against DLG (Zhu et al., 2019) to one accuracy target.

    The source says the two-step route "speeds up the overall reconstruction". A fair race
    asks both attacks for the same relative input error ``target``: one DLG run with the full
    budget ``dlg_config["iterations"]`` finds the first L-BFGS step at which DLG is within the
    target; then, alternately, ``repeats`` two-step runs and ``repeats`` DLG runs stopped at
    that step (recording nothing in between) are timed in this process, and the medians kept.
    Absolute seconds vary between machines and runs; the ratio (:attr:`Race.speedup`) is what
    a chapter should compare.
    """
    check.positive_int("repeats", repeats)
    if not 0 < target < 1:
        raise check.GradcoreValueError(f"target is a relative error in (0, 1); got {target!r}")
    gradient, truth = case.gradient(), case.inputs
    norm = float(truth.norm())
    scout = case.attack("dlg", seed=seed, **{**dlg_config, "record_every": 1})
    errors = [math.sqrt(mse * truth.numel()) / norm for mse in scout.history["mse"]]
    steps = next((step for step, error in zip(scout.history["iteration"], errors) if error <= target), None)
    two_times, dlg_times, error = [], [], math.nan
    for _ in range(repeats):
        start = time.perf_counter()
        result = two_step(case.model, gradient, case.shape, iterations=iterations)
        two_times.append(time.perf_counter() - start)
        error = relative_error(result.input, truth.numpy())
        if steps is not None:
            run = case.attack("dlg", seed=seed, **{**dlg_config, "iterations": max(steps, 1), "record_every": max(steps, 1)})
            dlg_times.append(run.seconds)
    return Race(target, steps, error, float(np.median(two_times)), float(np.median(dlg_times)) if dlg_times else None)
