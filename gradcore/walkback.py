"""Proposition 3.1 of Inverting Gradients, executed: walk a ReLU network's input out of its gradient.

Geiping, Bauermeister, Droege and Moeller (2020), "Inverting Gradients: How easy is it to
break privacy in federated learning?", NeurIPS 2020, Proposition 3.1 and its proof in the
supplementary material. In a stack of fully-connected layers with ReLUs between them, one
biased layer whose loss derivative has a non-zero entry is enough to recover, from the
shared gradient alone and with no optimiser, the input of that layer and of every layer
below it, down to the network input.

For a layer ``z = W a + b`` and a single sample,

    dL/db = dL/dz,        dL/dW = outer(dL/dz, a),

so every row ``i`` with ``dL/dz_i != 0`` gives the layer's input as a ratio,
``a = (dL/dW)[i] / (dL/dz)[i]``. The recovered ``a`` is the ReLU output of the layer below,
so it also says which of that layer's units were active (``a > 0``), and the chain rule
through the known weights, ``dL/dz_below = (a > 0) * (W^T dL/dz)``, hands the layer below
its own ``dL/dz``. The division repeats, layer by layer, to the input. A biased layer
lower down reads its ``dL/dz`` straight from its bias gradient instead.

Conventions: layers are numbered ``0 .. L-1`` from the input; ``inputs[l]`` is the input of
layer ``l``, so ``inputs[0]`` is the network input. Hidden layers are followed by a ReLU,
the last layer is linear and feeds the loss.

It applies to one sample. For a batch-averaged gradient the same division returns a
weighted combination ``sum_k w_k a_k`` of the batch's inputs (see
:func:`batch_mixture_weights`), which is none of them.

Two halves:

* float64 numpy, independent of torch: :class:`DenseNetwork`, :func:`forward`,
  :func:`gradients` (analytic backpropagation), :func:`walk_back`, and the analyses a
  chapter asserts on: :func:`central_difference_check`, :func:`magnitude_invariance`,
  :func:`batch_mixture_weights`, :func:`dead_layer_network`, :func:`blocked_fraction`;
* torch: :func:`walk_back_torch` for the ``nn.Sequential`` MLPs that
  ``gradcore.models.build("mlp", ..., activation="relu")`` returns, and
  :func:`from_torch` / :func:`gradient_pairs_from_torch` to compare the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from .validation import GradcoreValueError

NUMPY_LOSSES = ("cross_entropy", "half_squared_error")

#: Per-layer gradient of a :class:`DenseNetwork`: ``(dL/dW_l, dL/db_l)``, the second ``None`` for an unbiased layer.
LayerGradients = list  # list[tuple[np.ndarray, np.ndarray | None]]


# ----------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------


@dataclass
class DenseNetwork:
    """A fully-connected ReLU network in float64: ``z_l = W_l a_l + b_l``.

    Attributes
    ----------
    weights : list of numpy.ndarray
        ``W_l`` shaped ``(out_l, in_l)``; consecutive layers must chain.
    biases : list of (numpy.ndarray or None), optional
        ``b_l`` shaped ``(out_l,)``, or ``None`` for an unbiased layer; omitted, no layer
        is biased.

    Every hidden layer is followed by a ReLU; the last layer is linear (its output is
    the logits of the cross-entropy, or the prediction of the half squared error).
    """

    weights: list
    biases: list | None = None

    def __post_init__(self):
        if len(self.weights) == 0:
            raise GradcoreValueError("a network needs at least one layer; got an empty list of weights")
        self.weights = [np.array(weight, dtype=np.float64) for weight in self.weights]
        if self.biases is None:
            self.biases = [None] * len(self.weights)
        if len(self.biases) != len(self.weights):
            raise GradcoreValueError(f"{len(self.weights)} weight matrices but {len(self.biases)} biases "
                                     "(use None for an unbiased layer)")
        self.biases = [None if bias is None else np.array(bias, dtype=np.float64) for bias in self.biases]
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if weight.ndim != 2 or weight.size == 0:
                raise GradcoreValueError(f"weight of layer {layer} must be a non-empty (out, in) matrix, got shape {weight.shape}")
            if bias is not None and bias.shape != (weight.shape[0],):
                raise GradcoreValueError(f"bias of layer {layer} has shape {bias.shape}, expected ({weight.shape[0]},)")
            if layer > 0 and weight.shape[1] != self.weights[layer - 1].shape[0]:
                raise GradcoreValueError(f"layer {layer} takes {weight.shape[1]} inputs but layer {layer - 1} "
                                         f"has {self.weights[layer - 1].shape[0]} outputs")

    @property
    def depth(self) -> int:
        """Number of layers (weight matrices)."""
        return len(self.weights)

    @property
    def widths(self) -> tuple[int, ...]:
        """``(input size, hidden widths..., output size)``."""
        return (self.weights[0].shape[1],) + tuple(weight.shape[0] for weight in self.weights)

    @property
    def biased_layers(self) -> list[int]:
        """Indices of the layers that have a bias."""
        return [layer for layer, bias in enumerate(self.biases) if bias is not None]

    def scaled(self, factor: float) -> "DenseNetwork":
        """A copy with every weight and bias multiplied by ``factor``.

        A ReLU network is positively homogeneous in each layer, so this scales the logits
        by roughly ``factor ** depth``: a small factor gives a near-uniform softmax, a
        large one a confident model.
        """
        return DenseNetwork([weight * factor for weight in self.weights],
                            [None if bias is None else bias * factor for bias in self.biases])


def random_network(widths: Sequence[int], rng: np.random.Generator, bias: bool | Sequence[bool] = True,
                   scale: float = 1.0, bias_scale: float = 0.3) -> DenseNetwork:
    """A random :class:`DenseNetwork` with ``W_l ~ N(0, scale^2 / in_l)`` and ``b_l ~ N(0, bias_scale^2)``.

    Parameters
    ----------
    widths : sequence of int
        ``(input size, hidden widths..., output size)``; at least two entries.
    rng : numpy.random.Generator
        Source of the weights.
    bias : bool or sequence of bool
        Whether every layer, or each layer in turn, has a bias.
    scale : float
        Weight scale; ``1 / sqrt(in_l)`` keeps activations of order one at any width.
    bias_scale : float
        Standard deviation of the biases.
    """
    widths = [int(width) for width in widths]
    if len(widths) < 2 or min(widths) < 1:
        raise GradcoreValueError(f"widths must list the input size and at least one layer's output size, all positive; got {widths}")
    depth = len(widths) - 1
    has_bias = [bool(bias)] * depth if isinstance(bias, (bool, np.bool_)) else [bool(flag) for flag in bias]
    if len(has_bias) != depth:
        raise GradcoreValueError(f"bias flags for {len(has_bias)} layers given, but the widths describe {depth} layers")
    weights = [rng.normal(0.0, scale / math.sqrt(fan_in), (fan_out, fan_in)) for fan_in, fan_out in zip(widths[:-1], widths[1:])]
    biases = [rng.normal(0.0, bias_scale, fan_out) if flag else None for fan_out, flag in zip(widths[1:], has_bias)]
    return DenseNetwork(weights, biases)


@dataclass(frozen=True)
class ForwardPass:
    """Everything a forward pass computes, one entry per layer.

    Attributes
    ----------
    inputs : list of numpy.ndarray
        Input of each layer: the network input first, then each hidden ReLU output.
    pre_activations : list of numpy.ndarray
        ``z_l = W_l inputs[l] + b_l``; the last is the network output.
    activations : list of numpy.ndarray
        ``relu(z_l)`` for hidden layers, ``z_l`` itself for the (linear) output layer.
    """

    inputs: list
    pre_activations: list
    activations: list

    @property
    def output(self) -> np.ndarray:
        """The network output (logits)."""
        return self.activations[-1]


def forward(network: DenseNetwork, inputs: np.ndarray) -> ForwardPass:
    """Forward pass of one sample ``(D,)`` or a batch ``(B, D)``; entries keep that leading shape."""
    inputs = _check_inputs(network, inputs, allow_single=True)
    layer_inputs, pre_activations, activations = [], [], []
    current = inputs
    for layer, (weight, bias) in enumerate(zip(network.weights, network.biases)):
        layer_inputs.append(current)
        pre_activation = current @ weight.T
        if bias is not None:
            pre_activation = pre_activation + bias
        is_hidden = layer < network.depth - 1
        activation = np.maximum(pre_activation, 0.0) if is_hidden else pre_activation
        pre_activations.append(pre_activation)
        activations.append(activation)
        current = activation
    return ForwardPass(layer_inputs, pre_activations, activations)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the maximum so it cannot overflow."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def loss_value(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, loss: str = "cross_entropy") -> float:
    """The batch-mean loss: cross-entropy on class indices, or ``(1/2B) sum_k ||o_k - y_k||^2``."""
    inputs, labels = _check_batch(network, inputs, labels, loss)
    output = forward(network, inputs).output
    if loss == "cross_entropy":
        shifted = output - output.max(axis=1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return float(-log_probabilities[np.arange(len(labels)), labels].mean())
    return float(0.5 * ((output - labels) ** 2).sum(axis=1).mean())


def per_sample_sensitivities(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray,
                             loss: str = "cross_entropy") -> tuple[ForwardPass, list]:
    """``dL_k/dz_l`` of each sample's own loss at every layer, shaped ``(B, out_l)``.

    At the output this is the residual: ``p_k - onehot(y_k)`` for the cross-entropy,
    ``o_k - y_k`` for the half squared error. The batch-mean gradient's sensitivity is
    their mean over ``k``.
    """
    inputs, labels = _check_batch(network, inputs, labels, loss)
    passed = forward(network, inputs)
    output = passed.output
    if loss == "cross_entropy":
        residual = softmax(output)
        residual[np.arange(len(labels)), labels] -= 1.0
    else:
        residual = output - labels
    sensitivities = [None] * network.depth
    sensitivities[-1] = residual
    for layer in range(network.depth - 1, 0, -1):
        # ReLU derivative: 1 where the unit was active (z > 0), 0 elsewhere, including at the kink.
        below = sensitivities[layer] @ network.weights[layer]
        sensitivities[layer - 1] = below * (passed.pre_activations[layer - 1] > 0)
    return passed, sensitivities


def gradients(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, loss: str = "cross_entropy") -> LayerGradients:
    """Analytic batch-mean gradient, one ``(dL/dW_l, dL/db_l)`` pair per layer.

    Parameters
    ----------
    network : DenseNetwork
    inputs : numpy.ndarray
        One sample ``(D,)`` or a batch ``(B, D)``.
    labels : numpy.ndarray
        Class indices ``(B,)`` (an int for one sample) for ``cross_entropy``; targets
        ``(B, C)`` (or ``(C,)``) for ``half_squared_error``.
    loss : {"cross_entropy", "half_squared_error"}

    Returns
    -------
    list of (numpy.ndarray, numpy.ndarray or None)
        ``dL/dW_l = (1/B) sum_k outer(g_k, a_k)`` and ``dL/db_l = (1/B) sum_k g_k``, with
        ``g_k = dL_k/dz_l``; ``None`` in place of ``dL/db_l`` for an unbiased layer.
    """
    passed, sensitivities = per_sample_sensitivities(network, inputs, labels, loss)
    batch = len(passed.inputs[0])
    result = []
    for layer, bias in enumerate(network.biases):
        sensitivity = sensitivities[layer]
        weight_gradient = sensitivity.T @ passed.inputs[layer] / batch
        bias_gradient = None if bias is None else sensitivity.mean(axis=0)
        result.append((weight_gradient, bias_gradient))
    return result


def scale_gradients(layer_gradients: LayerGradients, factor: float) -> LayerGradients:
    """Every entry of a gradient multiplied by ``factor`` (what a smaller loss does to its magnitude)."""
    return [(weight * factor, None if bias is None else bias * factor) for weight, bias in layer_gradients]


def flatten_gradients(layer_gradients: LayerGradients) -> np.ndarray:
    """All entries of a gradient as one vector, layer by layer, weight before bias."""
    parts = []
    for weight, bias in layer_gradients:
        parts.append(np.ravel(weight))
        if bias is not None:
            parts.append(np.ravel(bias))
    return np.concatenate(parts)


# ----------------------------------------------------------------------------------
# The walk-back
# ----------------------------------------------------------------------------------


@dataclass
class WalkBackResult:
    """What :func:`walk_back` and :func:`walk_back_torch` recover.

    Attributes
    ----------
    inputs : list
        Recovered input of each layer (1-D arrays, or tensors for the torch version), the
        network input first. Layers above ``start`` are filled by a forward pass from the
        recovered input of ``start``; ``None`` where nothing was recovered (at and below a
        block).
    rows : list of (int or None)
        The row of ``dL/dW_l`` that was divided out at each layer (the one with the largest
        ``|dL/dz_l|``, the best conditioned); ``None`` where no division was made.
    live_rows : list of (int or None)
        How many rows of ``dL/dz_l`` were non-zero at each walked layer.
    start : int
        The biased layer the walk started from.
    blocked : str or None
        ``None`` when the network input was recovered; otherwise a message naming the layer
        at which no row of ``dL/dz`` was non-zero, so nothing could be divided.
    blocked_layer : int or None
        That layer's index.
    reconstruction : numpy.ndarray or torch.Tensor or None
        The network input in the caller's shape: ``(D,)`` from :func:`walk_back`,
        ``(1, *shape)`` from :func:`walk_back_torch`; ``None`` when blocked.
    """

    inputs: list
    rows: list
    live_rows: list
    start: int
    blocked: str | None = None
    blocked_layer: int | None = None
    reconstruction: object = None

    @property
    def recovered(self) -> bool:
        """True when the walk reached the network input."""
        return self.blocked is None

    def require(self):
        """The reconstruction, or a ``ValueError`` carrying the block message."""
        if self.blocked is not None:
            raise GradcoreValueError(self.blocked)
        return self.reconstruction


def _blocked_message(layer: int, biased: bool, description: str = "") -> str:
    where = f"layer {layer}{f' ({description})' if description else ''}"
    if biased:
        reason = f"every entry of its bias gradient dL/db_{layer} (= dL/dz_{layer} for one sample) is zero"
    else:
        reason = f"every entry of dL/dz_{layer}, carried down by the chain rule, is zero"
    return (f"walk-back blocked at {where}: {reason}, so no row of dL/dW_{layer} can be divided out. "
            f"None of this layer's outputs influences the loss (for a ReLU layer: all its units are inactive); "
            f"for a single sample the gradient of this layer and of every layer below it is then zero")


def walk_back(network: DenseNetwork, layer_gradients: LayerGradients, start: int | None = None) -> WalkBackResult:
    """Recover every layer's input from a single sample's gradient (Geiping et al., 2020, Prop. 3.1).

    At a biased layer ``dL/dz_l = dL/db_l``; the row ``i`` with the largest ``|dL/dz_l[i]|``
    gives the layer's input ``a_l = (dL/dW_l)[i] / (dL/dz_l)[i]``. Its positive entries are
    the live ReLUs of the layer below, so ``dL/dz_{l-1} = (a_l > 0) * (W_l^T dL/dz_l)``,
    and the division repeats down to the network input. An unbiased layer uses that
    chain-rule ``dL/dz``; a biased one reads its own bias gradient, which is observed
    rather than derived (for one sample the two are equal).

    Parameters
    ----------
    network : DenseNetwork
        The weights the server sent (the attacker knows them).
    layer_gradients : list of (numpy.ndarray, numpy.ndarray or None)
        The shared gradient, as :func:`gradients` returns it.
    start : int, optional
        Biased layer to start from; the topmost biased layer by default, which lets the
        most layers be recovered by division. Inputs of layers above it are computed by
        a forward pass from its recovered input.

    Returns
    -------
    WalkBackResult
        A block is reported in ``blocked``, not raised: it depends on the data, and the
        division is never attempted with a zero divisor.

    Raises
    ------
    ValueError
        No layer is biased (the proposition's hypothesis fails), ``start`` is not a biased
        layer, or the gradient does not fit the network (count, shapes, non-finite values).

    Notes
    -----
    Exact for a batch of one. For a batch-averaged gradient, each biased layer's division
    returns the mixture of :func:`batch_mixture_weights`, generally none of the samples;
    an unbiased layer below it is divided with a chain-rule ``dL/dz`` run through the
    mixture's ReLU mask, which no single sample produced. One exception: when the chosen
    row of a biased ReLU layer is active for a single sample only, that sample's weight
    is 1 and it comes back exactly.
    """
    layer_gradients = _check_gradients(network, layer_gradients)
    start = _start_layer(network.biased_layers, start)
    depth = network.depth
    inputs, rows, live_rows = [None] * depth, [None] * depth, [None] * depth
    sensitivity = None
    for layer in range(start, -1, -1):
        weight_gradient, bias_gradient = layer_gradients[layer]
        if bias_gradient is not None:
            sensitivity = bias_gradient
        live = np.flatnonzero(sensitivity)
        live_rows[layer] = int(live.size)
        if live.size == 0:
            shape = f"{weight_gradient.shape[1]} -> {weight_gradient.shape[0]}"
            message = _blocked_message(layer, bias_gradient is not None, shape)
            return WalkBackResult(inputs, rows, live_rows, start, message, layer, None)
        row = int(np.argmax(np.abs(sensitivity)))
        rows[layer] = row
        inputs[layer] = weight_gradient[row] / sensitivity[row]
        if layer > 0:
            # The recovered input is the ReLU output of layer - 1: positive exactly where that unit was live
            # (a dead unit's entry is 0 * g / g = 0 exactly, so the mask carries no rounding error).
            sensitivity = (network.weights[layer].T @ sensitivity) * (inputs[layer] > 0)
    for layer in range(start, depth - 1):
        above = network.weights[layer] @ inputs[layer]
        if network.biases[layer] is not None:
            above = above + network.biases[layer]
        inputs[layer + 1] = np.maximum(above, 0.0)
    return WalkBackResult(inputs, rows, live_rows, start, None, None, inputs[0])


def _start_layer(biased_layers: list[int], start: int | None) -> int:
    if not biased_layers:
        raise GradcoreValueError("no layer has a bias, so no layer hands over dL/dz directly: Proposition 3.1 needs "
                                 "at least one biased fully-connected layer")
    if start is None:
        return biased_layers[-1]
    if start not in biased_layers:
        raise GradcoreValueError(f"the walk-back must start at a biased layer; layer {start} is not one (biased: {biased_layers})")
    return int(start)


# ----------------------------------------------------------------------------------
# Analyses a chapter asserts on
# ----------------------------------------------------------------------------------


def central_difference_check(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, step: float = 1e-6,
                             loss: str = "cross_entropy") -> float:
    """Largest ``|analytic - central difference|`` over every weight and bias entry.

    In float64 with ``step = 1e-6`` the central difference is accurate to about
    ``1e-10``, so a value below ``1e-8`` confirms :func:`gradients`. A pre-activation
    within ``step`` of a ReLU kink would spoil it; random networks are almost never there.
    """
    if not step > 0:
        raise GradcoreValueError(f"the finite-difference step must be positive, got {step}")
    analytic = gradients(network, inputs, labels, loss)
    # Perturb a private copy in place: the original network is never touched.
    probe = DenseNetwork([weight.copy() for weight in network.weights],
                         [None if bias is None else bias.copy() for bias in network.biases])
    worst = 0.0
    for layer in range(network.depth):
        parameters = [(probe.weights[layer], analytic[layer][0])]
        if probe.biases[layer] is not None:
            parameters.append((probe.biases[layer], analytic[layer][1]))
        for parameter, exact in parameters:
            for index in np.ndindex(parameter.shape):
                original = parameter[index]
                parameter[index] = original + step
                upper = loss_value(probe, inputs, labels, loss)
                parameter[index] = original - step
                lower = loss_value(probe, inputs, labels, loss)
                parameter[index] = original
                worst = max(worst, abs((upper - lower) / (2 * step) - exact[index]))
    return worst


class InvarianceRow(NamedTuple):
    """One row of :func:`magnitude_invariance`."""

    scale: float
    reconstruction_error: float  # max |recovered - true| over every layer's input
    euclidean_distance: float  # ||s g - g||
    cosine: float  # cos(s g, g)


def magnitude_invariance(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray,
                         scales: Sequence[float] = (1.0, 1e-2, 1e-4, 1e-6), loss: str = "cross_entropy") -> list[InvarianceRow]:
    """Why direction, not magnitude, carries the input (Geiping et al., 2020, Sec. 3).

    Scales one sample's whole gradient by each factor, as a better-fitted model would
    shrink it, and reports the walk-back's error, the Euclidean distance to the unscaled
    gradient and the cosine with it. The walk-back is a ratio, so the scale cancels and
    the error stays at rounding level; the cosine stays 1; the Euclidean distance,
    ``(1 - s) ||g||``, saturates at the unscaled norm ``||g||`` as ``s -> 0``.

    Raises
    ------
    ValueError
        A batch of more than one sample, a non-positive scale, or a walk-back that is
        blocked for this sample.
    """
    single = _check_inputs(network, inputs, allow_single=True)
    if single.ndim == 2 and len(single) != 1:
        raise GradcoreValueError(f"magnitude invariance is measured on one sample; got a batch of {len(single)}")
    truth = forward(network, single.reshape(1, -1)).inputs
    reference = gradients(network, inputs, labels, loss)
    flat_reference = flatten_gradients(reference)
    rows = []
    for scale in scales:
        if not scale > 0:
            raise GradcoreValueError(f"scales must be positive, got {scale}")
        scaled = scale_gradients(reference, scale)
        result = walk_back(network, scaled)
        if not result.recovered:
            raise GradcoreValueError(f"at scale {scale:g}: {result.blocked}")
        error = max(float(np.abs(recovered - true[0]).max()) for recovered, true in zip(result.inputs, truth))
        flat = flatten_gradients(scaled)
        distance = float(np.linalg.norm(flat - flat_reference))
        cosine = float(flat @ flat_reference / (np.linalg.norm(flat) * np.linalg.norm(flat_reference)))
        rows.append(InvarianceRow(float(scale), error, distance, cosine))
    return rows


@dataclass
class BatchMixture:
    """What the row division returns at a biased layer for a batch-averaged gradient.

    With ``g_k = dL_k/dz_l`` for sample ``k`` and ``a_k`` its input to layer ``l``,

        (dL/dW_l)[i] / (dL/db_l)[i] = sum_k g_k[i] a_k / sum_j g_j[i] = sum_k w_k a_k,

    with ``w_k = g_k[i] / sum_j g_j[i]``. The weights sum to one but are signed: a sample
    whose ``g_k[i]`` has the minority sign enters with a negative weight, and when the
    ``g_k[i]`` nearly cancel the weights are large, so the mixture need not lie inside
    the batch at all.

    Attributes
    ----------
    layer, row : int
        The biased layer and the row the attacker divided.
    weights : numpy.ndarray
        ``w_k``, shaped ``(B,)``, summing to one.
    mixture : numpy.ndarray
        The division computed from the batch gradient, as the attacker sees it.
    layer_inputs : numpy.ndarray
        The true ``a_k``, ``(B, in_l)``; ``weights @ layer_inputs`` equals ``mixture``.
    sensitivities : numpy.ndarray
        ``g_k``, ``(B, out_l)``. At the output layer under cross-entropy, column ``c`` is
        the residual ``p_k[c] - [y_k = c]``.
    """

    layer: int
    row: int
    weights: np.ndarray
    mixture: np.ndarray
    layer_inputs: np.ndarray
    sensitivities: np.ndarray

    @property
    def shares(self) -> np.ndarray:
        """Each sample's share of the mixture, ``|w_k| / sum_j |w_j|`` (non-negative, sums to one)."""
        magnitude = np.abs(self.weights)
        return magnitude / magnitude.sum()

    @property
    def largest_share(self) -> float:
        """Share of the most exposed sample."""
        return float(self.shares.max())

    @property
    def share_spread(self) -> float:
        """Largest over smallest share (``inf`` when a sample contributes nothing)."""
        shares = self.shares
        return float(shares.max() / shares.min()) if shares.min() > 0 else math.inf


def batch_mixture_weights(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, layer: int,
                          row: int | None = None, loss: str = "cross_entropy") -> BatchMixture:
    """The weights with which a batch's samples enter the walk-back's division at ``layer``.

    Parameters
    ----------
    layer : int
        A biased layer (the division needs ``dL/db_l``).
    row : int, optional
        The row the attacker divides; by default the one :func:`walk_back` uses, the
        largest ``|dL/db_l|`` of the batch gradient. At the output layer a row is a class.

    Raises
    ------
    ValueError
        ``layer`` out of range or unbiased, ``row`` out of range, or a zero batch bias
        gradient at ``row`` (the residuals cancel exactly, so the division is undefined).
    """
    if not 0 <= layer < network.depth:
        raise GradcoreValueError(f"layer {layer} does not exist; the network has layers 0 to {network.depth - 1}")
    if network.biases[layer] is None:
        raise GradcoreValueError(f"layer {layer} has no bias, so its dL/dz is not observed and no row can be divided")
    passed, sensitivities = per_sample_sensitivities(network, inputs, labels, loss)
    sensitivity, layer_inputs = sensitivities[layer], passed.inputs[layer]
    weight_gradient, bias_gradient = gradients(network, inputs, labels, loss)[layer]
    if row is None:
        row = int(np.argmax(np.abs(bias_gradient)))
    if not 0 <= row < len(bias_gradient):
        raise GradcoreValueError(f"row {row} does not exist; layer {layer} has {len(bias_gradient)} rows")
    if bias_gradient[row] == 0:
        raise GradcoreValueError(f"the batch bias gradient of layer {layer} is zero at row {row}: the samples' "
                                 "sensitivities cancel exactly, so the division (and the mixture) is undefined")
    column = sensitivity[:, row]
    weights = column / column.sum()
    mixture = weight_gradient[row] / bias_gradient[row]
    return BatchMixture(layer, int(row), weights, mixture, layer_inputs, sensitivity)


@dataclass(frozen=True)
class ShareSurvey:
    """How the walk-back's batch mixture is shared out over many random networks of one weight scale.

    Medians over the networks: the share of the most exposed sample, and the ratio of the
    largest to the smallest share; and the mean top-class probability (the model's confidence).
    """

    scale: float
    trials: int
    largest_share: float
    share_spread: float
    confidence: float


def share_survey(widths: Sequence[int], inputs: np.ndarray, labels: np.ndarray, scale: float, trials: int,
                 rng: np.random.Generator) -> ShareSurvey:
    """Median exposure of a batch at the output layer over ``trials`` random networks of weight ``scale``.

    Each network is :func:`random_network` with biases scaled with the weights (``scale / 4``,
    as the source's construction scales every parameter together), so a small ``scale`` gives a
    near-uniform softmax. The attacker divides the row :func:`walk_back` would, the largest
    ``|dL/db|`` of the output layer. A single network's shares vary widely (the ratio by orders
    of magnitude), so a claim about a regime is a claim about these medians.
    """
    if scale <= 0 or trials <= 0:
        raise GradcoreValueError(f"scale and trials must be positive, got scale={scale}, trials={trials}")
    output_layer = len(widths) - 2
    largest, spread, confident = [], [], []
    for _ in range(int(trials)):
        network = random_network(widths, rng, scale=scale, bias_scale=scale / 4)
        mixture = batch_mixture_weights(network, inputs, labels, output_layer)
        largest.append(mixture.largest_share)
        spread.append(mixture.share_spread)
        confident.append(float(confidence(network, inputs).mean()))
    return ShareSurvey(float(scale), int(trials), float(np.median(largest)), float(np.median(spread)), float(np.mean(confident)))


def output_residuals(network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, row: int) -> np.ndarray:
    """``p_k[row] - [y_k = row]`` under cross-entropy: how wrong the model is about class ``row`` on each sample."""
    inputs, labels = _check_batch(network, inputs, labels, "cross_entropy")
    if not 0 <= row < network.widths[-1]:
        raise GradcoreValueError(f"row {row} is not a class; the network has {network.widths[-1]} outputs")
    probabilities = softmax(forward(network, inputs).output)
    return probabilities[:, row] - (labels == row)


def confidence(network: DenseNetwork, inputs: np.ndarray) -> np.ndarray:
    """Each sample's largest softmax probability: near ``1/C`` for a near-uniform model, near 1 for a confident one."""
    return softmax(forward(network, np.atleast_2d(inputs)).output).max(axis=1)


def dead_layer_network(inputs: np.ndarray, widths: Sequence[int] = (24, 16, 12, 8), dead_layer: int = 1,
                       rng: np.random.Generator | int = 0, margin: float = 1.0) -> DenseNetwork:
    """A network whose hidden ReLU layer ``dead_layer`` is off for ``inputs``: the walk-back's only failure.

    Built from :func:`random_network`, then layer ``dead_layer``'s weights are made
    non-positive and its bias set so that every pre-activation is at most ``-margin``
    for the given input(s). Every unit of that layer outputs 0, so nothing below it
    reaches the loss: the walk-back reports ``blocked`` at that layer, and the gradient of
    that layer and of every layer below it is identically zero. Blocking the attack this
    way also stops those layers from training.

    Parameters
    ----------
    inputs : numpy.ndarray
        The sample ``(D,)`` (or batch ``(B, D)``) for which the layer must be dead.
    widths : sequence of int
        ``(input size, hidden widths..., output size)``.
    dead_layer : int
        A hidden layer, ``0 <= dead_layer < len(widths) - 2``.
    rng : numpy.random.Generator or int
        Generator or seed of the other weights.
    margin : float
        How far below zero every pre-activation of the dead layer sits.
    """
    depth = len(widths) - 1
    if not 0 <= dead_layer < depth - 1:
        raise GradcoreValueError(f"only a hidden layer has a ReLU to kill: dead_layer must be in 0..{depth - 2}, got {dead_layer}")
    if not margin > 0:
        raise GradcoreValueError(f"margin must be positive, got {margin}")
    generator = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    network = random_network(widths, generator, bias=True)
    network.weights[dead_layer] = -np.abs(network.weights[dead_layer])
    layer_input = np.atleast_2d(forward(network, inputs).inputs[dead_layer])
    # The bias cancels the largest pre-activation each unit sees over the batch, then pushes it below zero.
    largest = (layer_input @ network.weights[dead_layer].T).max(axis=0)
    network.biases[dead_layer] = -margin - np.maximum(largest, 0.0)
    return network


@dataclass
class Survey:
    """How often the walk-back is blocked on random networks, and how exact it is otherwise."""

    trials: int
    blocked: int
    worst_error: float  # max |recovered - true| over the network inputs of the unblocked trials
    #: Fewest live (non-zero) rows of dL/dz at any walked layer over all trials: 0 means a block, so
    #: this is how far the survey was from one.
    fewest_live_rows: int | None = None

    @property
    def fraction(self) -> float:
        """Blocked trials over all trials."""
        return self.blocked / self.trials


def survey_random_networks(trials: int, widths: Sequence[int], rng: np.random.Generator, bias: bool | Sequence[bool] = True,
                           scale: float = 1.0) -> Survey:
    """Walk back ``trials`` random networks, each on a random input in ``[0, 1)^D`` with a random label."""
    if trials < 1:
        raise GradcoreValueError(f"at least one trial is needed, got {trials}")
    blocked, worst, fewest = 0, 0.0, None
    for _ in range(trials):
        network = random_network(widths, rng, bias=bias, scale=scale)
        sample = rng.random(network.widths[0])
        label = int(rng.integers(network.widths[-1]))
        result = walk_back(network, gradients(network, sample, label))
        live = min(count for count in result.live_rows if count is not None)
        fewest = live if fewest is None else min(fewest, live)
        if result.recovered:
            worst = max(worst, float(np.abs(result.reconstruction - sample).max()))
        else:
            blocked += 1
    return Survey(trials, blocked, worst, fewest)


def blocked_fraction(trials: int, widths: Sequence[int], rng: np.random.Generator, bias: bool | Sequence[bool] = True,
                     scale: float = 1.0) -> float:
    """Fraction of random networks (random inputs and labels) on which the walk-back is blocked.

    The proposition's condition fails only if, at some layer, every unit the loss sees
    through is inactive; for random weights of sensible width that essentially never
    happens (Geiping et al. call the condition technical).
    """
    return survey_random_networks(trials, widths, rng, bias=bias, scale=scale).fraction


def dead_layer_probability(widths: Sequence[int]) -> float:
    """Probability that :func:`random_network` on a non-zero input has a fully dead hidden layer: ``1 - prod_l (1 - 2^-w_l)``.

    Given its (non-zero) input, each unit of a hidden layer has a pre-activation
    ``w_i . a + b_i`` that is symmetric about zero, independently of the other units,
    because the rows and biases are independent zero-mean Gaussians; so all ``w_l`` units
    are off with probability ``2^-w_l``. A dead layer is, almost surely, the only way the
    walk-back is blocked, so this is the expected :func:`blocked_fraction`: about
    ``2.6e-4`` for hidden widths 16 and 12 (half a blocked network per 2000), below
    ``1e-9`` once every hidden layer has 32 units.
    """
    hidden = [int(width) for width in widths[1:-1]]
    return float(1.0 - np.prod([1.0 - 0.5**width for width in hidden]))


# ----------------------------------------------------------------------------------
# Torch
# ----------------------------------------------------------------------------------


def _linear_layers(model: nn.Module) -> list[tuple[int, nn.Linear]]:
    """``(module index, layer)`` of each Linear in a ``[Flatten...] Linear (ReLU Linear)*`` Sequential."""
    if not isinstance(model, nn.Sequential):
        raise GradcoreValueError("the walk-back needs an nn.Sequential of Flatten, Linear and ReLU modules, "
                                 f"got a {type(model).__name__}")
    modules = list(model)
    position = 0
    while position < len(modules) and isinstance(modules[position], nn.Flatten):
        position += 1
    layers, expect_linear = [], True
    for index in range(position, len(modules)):
        module, wanted = modules[index], (nn.Linear if expect_linear else nn.ReLU)
        if not isinstance(module, wanted):
            raise GradcoreValueError(f"module {index} is {type(module).__name__} where {wanted.__name__} was expected: the walk-back "
                                     "handles an optional Flatten then Linear layers with ReLU between them, ending on a Linear")
        if expect_linear:
            layers.append((index, module))
        expect_linear = not expect_linear
    if not layers or expect_linear:
        raise GradcoreValueError("the model must contain a Linear layer and end on one (a linear output feeding the loss)")
    return layers


def _torch_layer_gradients(model: nn.Module, gradient: Sequence[torch.Tensor], layers: list) -> list:
    parameters = list(model.parameters())
    gradient = tuple(gradient)
    if len(gradient) == 0:
        raise GradcoreValueError(f"the gradient is empty: expected one tensor per parameter ({len(parameters)} for this model)")
    if any(not parameter.requires_grad for parameter in parameters):
        raise GradcoreValueError("every parameter must be trainable: the walk-back divides the gradient of each layer it passes")
    if len(gradient) != len(parameters):
        raise GradcoreValueError(f"the gradient has {len(gradient)} tensors but the model has {len(parameters)} parameters")
    for index, (entry, parameter) in enumerate(zip(gradient, parameters)):
        if not isinstance(entry, torch.Tensor):
            raise GradcoreValueError(f"gradient entry {index} is a {type(entry).__name__}, not a tensor")
        if entry.shape != parameter.shape:
            raise GradcoreValueError(f"gradient entry {index} has shape {tuple(entry.shape)}, its parameter has {tuple(parameter.shape)}")
        if not torch.isfinite(entry).all():
            raise GradcoreValueError(f"gradient entry {index} has NaN or infinite values")
    position = {id(parameter): index for index, parameter in enumerate(parameters)}
    return [(gradient[position[id(layer.weight)]], None if layer.bias is None else gradient[position[id(layer.bias)]])
            for _, layer in layers]


def walk_back_torch(model: nn.Module, gradient: Sequence[torch.Tensor], shape: Sequence[int],
                    start: int | None = None) -> WalkBackResult:
    """:func:`walk_back` for a torch MLP: ``[Flatten] Linear (ReLU Linear)*``, as ``models.build("mlp", ..., activation="relu")``.

    Parameters
    ----------
    model : torch.nn.Sequential
        The shared global model; every parameter trainable.
    gradient : sequence of torch.Tensor
        The shared gradient in ``model.parameters()`` order.
    shape : sequence of int
        Shape of one input, e.g. ``(1, 8, 8)``.
    start : int, optional
        Biased Linear layer (counted among the Linear layers from 0) to start from; the
        topmost biased one by default.

    Returns
    -------
    WalkBackResult
        As from :func:`walk_back`, with tensors in the gradient's dtype and device, and
        ``reconstruction`` shaped ``(1, *shape)``. Like the numpy version, a block is
        reported in ``blocked`` rather than raised (``result.require()`` raises it); a
        block message names the Linear layer and its index in the Sequential.

    Raises
    ------
    ValueError
        A model outside that family, no biased layer, a gradient that does not fit the
        model (empty, count, shapes, non-finite), or a ``shape`` whose size is not the
        first layer's input size.
    """
    layers = _linear_layers(model)
    layer_gradients = _torch_layer_gradients(model, gradient, layers)
    shape = tuple(int(size) for size in shape)
    if math.prod(shape) != layers[0][1].in_features:
        raise GradcoreValueError(f"an input of shape {shape} has {math.prod(shape)} entries, but the first Linear layer "
                                 f"takes {layers[0][1].in_features}")
    start = _start_layer([number for number, (_, layer) in enumerate(layers) if layer.bias is not None], start)
    reference = layer_gradients[start][0]
    weights = [layer.weight.detach().to(reference.device, reference.dtype) for _, layer in layers]
    depth = len(layers)
    inputs, rows, live_rows = [None] * depth, [None] * depth, [None] * depth
    sensitivity = None
    with torch.no_grad():
        for number in range(start, -1, -1):
            weight_gradient, bias_gradient = layer_gradients[number]
            if bias_gradient is not None:
                sensitivity = bias_gradient.to(reference.dtype)
            live = int(torch.count_nonzero(sensitivity))
            live_rows[number] = live
            if live == 0:
                index, layer = layers[number]
                message = _blocked_message(number, bias_gradient is not None,
                                           f"model[{index}], Linear {layer.in_features} -> {layer.out_features}")
                return WalkBackResult(inputs, rows, live_rows, start, message, number, None)
            row = int(torch.argmax(sensitivity.abs()))
            rows[number] = row
            inputs[number] = weight_gradient[row].to(reference.dtype) / sensitivity[row]
            if number > 0:
                sensitivity = (weights[number].T @ sensitivity) * (inputs[number] > 0)
        for number in range(start, depth - 1):
            layer = layers[number][1]
            above = weights[number] @ inputs[number]
            if layer.bias is not None:
                above = above + layer.bias.detach().to(reference.device, reference.dtype)
            inputs[number + 1] = torch.relu(above)
    return WalkBackResult(inputs, rows, live_rows, start, None, None, inputs[0].reshape(1, *shape))


def from_torch(model: nn.Module) -> DenseNetwork:
    """A float64 numpy copy of a torch MLP's weights, for :func:`walk_back` and the analyses."""
    layers = _linear_layers(model)
    return DenseNetwork([layer.weight.detach().double().cpu().numpy() for _, layer in layers],
                        [None if layer.bias is None else layer.bias.detach().double().cpu().numpy() for _, layer in layers])


def gradient_pairs_from_torch(model: nn.Module, gradient: Sequence[torch.Tensor]) -> LayerGradients:
    """A torch gradient (``model.parameters()`` order) as float64 numpy ``(dL/dW_l, dL/db_l)`` pairs."""
    layers = _linear_layers(model)
    return [(weight.detach().double().cpu().numpy(), None if bias is None else bias.detach().double().cpu().numpy())
            for weight, bias in _torch_layer_gradients(model, gradient, layers)]


# ----------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------


def _check_inputs(network: DenseNetwork, inputs: np.ndarray, allow_single: bool) -> np.ndarray:
    inputs = np.asarray(inputs, dtype=np.float64)
    if inputs.ndim not in ((1, 2) if allow_single else (2,)) or inputs.shape[-1] != network.widths[0] or inputs.size == 0:
        raise GradcoreValueError(f"inputs must be shaped ({network.widths[0]},) or (B, {network.widths[0]}) with B >= 1, "
                                 f"got {inputs.shape}")
    if not np.isfinite(inputs).all():
        raise GradcoreValueError("inputs contain NaN or infinite values")
    return inputs


def _check_batch(network: DenseNetwork, inputs: np.ndarray, labels, loss: str) -> tuple[np.ndarray, np.ndarray]:
    if loss not in NUMPY_LOSSES:
        raise GradcoreValueError(f"unknown loss {loss!r}; known losses: {', '.join(NUMPY_LOSSES)}")
    inputs = np.atleast_2d(_check_inputs(network, inputs, allow_single=True))
    batch, classes = len(inputs), network.widths[-1]
    if loss == "cross_entropy":
        labels = np.atleast_1d(np.asarray(labels))
        if not np.issubdtype(labels.dtype, np.integer):
            raise GradcoreValueError(f"cross-entropy labels must be integer class indices, got dtype {labels.dtype}")
        if labels.shape != (batch,):
            raise GradcoreValueError(f"labels shaped {labels.shape} for a batch of {batch}: expected one class index per sample")
        if labels.min() < 0 or labels.max() >= classes:
            raise GradcoreValueError(f"labels must lie in 0..{classes - 1}, got {labels.min()}..{labels.max()}")
        return inputs, labels
    labels = np.atleast_2d(np.asarray(labels, dtype=np.float64))
    if labels.shape != (batch, classes):
        raise GradcoreValueError(f"half-squared-error targets must be shaped ({batch}, {classes}), got {labels.shape}")
    return inputs, labels


def _check_gradients(network: DenseNetwork, layer_gradients: LayerGradients) -> LayerGradients:
    """The gradient as float64 array pairs, after checking it fits the network."""
    layer_gradients = list(layer_gradients)
    if len(layer_gradients) == 0:
        raise GradcoreValueError(f"the gradient is empty: expected one (dL/dW, dL/db) pair per layer ({network.depth} for this network)")
    if len(layer_gradients) != network.depth:
        raise GradcoreValueError(f"the gradient has {len(layer_gradients)} layers but the network has {network.depth}")
    for layer, (pair, weight, bias) in enumerate(zip(layer_gradients, network.weights, network.biases)):
        if len(pair) != 2:
            raise GradcoreValueError(f"gradient of layer {layer} must be a (dL/dW, dL/db) pair, got {len(pair)} entries")
        weight_gradient, bias_gradient = pair
        if np.shape(weight_gradient) != weight.shape:
            raise GradcoreValueError(f"dL/dW of layer {layer} has shape {np.shape(weight_gradient)}, its weight has {weight.shape}")
        if (bias is None) != (bias_gradient is None):
            raise GradcoreValueError(f"layer {layer} {'has no' if bias is None else 'has a'} bias, but its bias gradient is "
                                     f"{'given' if bias is None else 'None'}")
        if bias is not None and np.shape(bias_gradient) != bias.shape:
            raise GradcoreValueError(f"dL/db of layer {layer} has shape {np.shape(bias_gradient)}, its bias has {bias.shape}")
        for name, entry in (("dL/dW", weight_gradient), ("dL/db", bias_gradient)):
            if entry is not None and not np.isfinite(entry).all():
                raise GradcoreValueError(f"{name} of layer {layer} has NaN or infinite values")
    return [(np.asarray(weight_gradient, dtype=np.float64),
             None if bias_gradient is None else np.asarray(bias_gradient, dtype=np.float64))
            for weight_gradient, bias_gradient in layer_gradients]
