"""Proposition 3.1 of Inverting Gradients, executed: walk a ReLU network's input out of its
gradient.

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

* float64 numpy, on the dense network of :mod:`gradcore.analysis.dense` (its forward pass and
  analytic gradient): :func:`walk_back`, and the analyses a
  chapter asserts on: :func:`central_difference_check`, :func:`magnitude_invariance`,
  :func:`batch_mixture_weights`, :func:`dead_layer_network`, :func:`blocked_fraction`;
* torch: :func:`walk_back_torch` for the ``nn.Sequential`` MLPs that
  ``gradcore.models.build("mlp", ..., activation="relu")`` returns, and
  :func:`gradient_pairs_from_torch` (with :func:`gradcore.analysis.dense.from_torch`) to compare the
  two.

The walk itself is written once (:func:`_walk`) for numpy arrays and torch tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from ..validation import AttackRefused, GradcoreValueError
from .dense import (
    DenseNetwork,
    LayerGradients,
    check_batch,
    check_gradients,
    check_inputs,
    flatten_gradients,
    forward,
    gradients,
    linear_layers,
    loss_value,
    per_sample_sensitivities,
    random_network,
    scale_gradients,
    softmax,
)

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
            raise AttackRefused(self.blocked)
        return self.reconstruction


def _blocked_message(layer: int, biased: bool, description: str = "") -> str:
    where = f"layer {layer}{f' ({description})' if description else ''}"
    if biased:
        reason = (
            f"every entry of its bias gradient dL/db_{layer} (= dL/dz_{layer} for one sample) "
            "is zero"
        )
    else:
        reason = f"every entry of dL/dz_{layer}, carried down by the chain rule, is zero"
    return (
        f"walk-back blocked at {where}: {reason}, so no row of dL/dW_{layer} can be divided out. "
        "None of this layer's outputs influences the loss (for a ReLU layer: all its units are "
        "inactive); for a single sample the gradient of this layer and of every layer below it is "
        "then zero"
    )


def walk_back(
    network: DenseNetwork, layer_gradients: LayerGradients, start: int | None = None
) -> WalkBackResult:
    """Recover every layer's input from a single sample's gradient (Geiping et al., 2020, Prop.
    3.1).

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
    _require_relu(network)
    layer_gradients = check_gradients(network, layer_gradients)
    start = _start_layer(network.biased_layers, start)
    shapes = [f"{weight.shape[1]} -> {weight.shape[0]}" for weight in network.weights]
    result = _walk(network.weights, network.biases, layer_gradients, start, shapes, _NUMPY)
    result.reconstruction = None if result.blocked else result.inputs[0]
    return result


class _ArrayOperations(NamedTuple):
    """The three operations of the walk that numpy and torch spell differently."""

    count_nonzero: Callable
    argmax_abs: Callable
    relu: Callable


_NUMPY = _ArrayOperations(
    lambda a: int(np.count_nonzero(a)),
    lambda a: int(np.argmax(np.abs(a))),
    lambda a: np.maximum(a, 0.0),
)
_TORCH = _ArrayOperations(
    lambda a: int(torch.count_nonzero(a)), lambda a: int(torch.argmax(a.abs())), torch.relu
)


def _walk(
    weights: list,
    biases: list,
    layer_gradients: list,
    start: int,
    descriptions: list[str],
    operations: _ArrayOperations,
) -> WalkBackResult:
    """Prop. 3.1's division, layer by layer from ``start`` down to the input, then forward up to the
    output.

    ``weights``, ``biases`` and ``layer_gradients`` are arrays or tensors of one kind (and
    dtype); ``descriptions`` name each layer in a block message.
    """
    depth = len(weights)
    inputs, rows, live_rows = [None] * depth, [None] * depth, [None] * depth
    sensitivity = None
    for layer in range(start, -1, -1):
        weight_gradient, bias_gradient = layer_gradients[layer]
        if bias_gradient is not None:
            sensitivity = bias_gradient
        live_rows[layer] = operations.count_nonzero(sensitivity)
        if live_rows[layer] == 0:
            message = _blocked_message(layer, bias_gradient is not None, descriptions[layer])
            return WalkBackResult(inputs, rows, live_rows, start, message, layer, None)
        row = operations.argmax_abs(sensitivity)
        rows[layer] = row
        inputs[layer] = weight_gradient[row] / sensitivity[row]
        if layer > 0:
            # The recovered input is the ReLU output of layer - 1: positive exactly where that unit
            # was live (a dead unit's entry is 0 * g / g = 0 exactly, so the mask carries no
            # rounding error).
            sensitivity = (weights[layer].T @ sensitivity) * (inputs[layer] > 0)
    for layer in range(start, depth - 1):
        above = weights[layer] @ inputs[layer]
        if biases[layer] is not None:
            above = above + biases[layer]
        inputs[layer + 1] = operations.relu(above)
    return WalkBackResult(inputs, rows, live_rows, start, None, None, None)


def _require_relu(network: DenseNetwork) -> None:
    if network.activation != "relu" or not network.first_activation:
        raise AttackRefused(
            "the walk-back reads active units off a ReLU network; this one uses "
            f"{network.activation}"
            + ("" if network.first_activation else " and has no activation after its first layer")
        )


def _start_layer(biased_layers: list[int], start: int | None) -> int:
    if not biased_layers:
        raise AttackRefused(
            "no layer has a bias, so no layer hands over dL/dz directly: Proposition 3.1 needs at "
            "least one biased fully-connected layer"
        )
    if start is None:
        return biased_layers[-1]
    if start not in biased_layers:
        raise GradcoreValueError(
            f"the walk-back must start at a biased layer; layer {start} is not one (biased: "
            f"{biased_layers})"
        )
    return int(start)


# ----------------------------------------------------------------------------------
# Analyses a chapter asserts on
# ----------------------------------------------------------------------------------


def central_difference_check(
    network: DenseNetwork,
    inputs: np.ndarray,
    labels: np.ndarray,
    step: float = 1e-6,
    loss: str = "cross_entropy",
) -> float:
    """Largest ``|analytic - central difference|`` over every weight and bias entry.

    In float64 with ``step = 1e-6`` the central difference is accurate to about
    ``1e-10``, so a value below ``1e-8`` confirms :func:`gradients`. A pre-activation
    within ``step`` of a ReLU kink would spoil it; random networks are almost never there.
    """
    if not step > 0:
        raise GradcoreValueError(f"the finite-difference step must be positive, got {step}")
    analytic = gradients(network, inputs, labels, loss)
    # Perturb a private copy in place: the original network is never touched.
    probe = DenseNetwork(
        [weight.copy() for weight in network.weights],
        [None if bias is None else bias.copy() for bias in network.biases],
        network.activation,
        network.first_activation,
    )
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


def magnitude_invariance(
    network: DenseNetwork,
    inputs: np.ndarray,
    labels: np.ndarray,
    scales: Sequence[float] = (1.0, 1e-2, 1e-4, 1e-6),
    loss: str = "cross_entropy",
) -> list[InvarianceRow]:
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
    single = check_inputs(network, inputs, allow_single=True)
    if single.ndim == 2 and len(single) != 1:
        raise GradcoreValueError(
            f"magnitude invariance is measured on one sample; got a batch of {len(single)}"
        )
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
        error = max(
            float(np.abs(recovered - true[0]).max())
            for recovered, true in zip(result.inputs, truth)
        )
        flat = flatten_gradients(scaled)
        distance = float(np.linalg.norm(flat - flat_reference))
        cosine = float(
            flat @ flat_reference / (np.linalg.norm(flat) * np.linalg.norm(flat_reference))
        )
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
        """Each sample's share of the mixture, ``|w_k| / sum_j |w_j|`` (non-negative, sums to
        one)."""
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


def batch_mixture_weights(
    network: DenseNetwork,
    inputs: np.ndarray,
    labels: np.ndarray,
    layer: int,
    row: int | None = None,
    loss: str = "cross_entropy",
) -> BatchMixture:
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
        raise GradcoreValueError(
            f"layer {layer} does not exist; the network has layers 0 to {network.depth - 1}"
        )
    if network.biases[layer] is None:
        raise GradcoreValueError(
            f"layer {layer} has no bias, so its dL/dz is not observed and no row can be divided"
        )
    passed, sensitivities = per_sample_sensitivities(network, inputs, labels, loss)
    sensitivity, layer_inputs = sensitivities[layer], passed.inputs[layer]
    weight_gradient, bias_gradient = gradients(network, inputs, labels, loss)[layer]
    if row is None:
        row = int(np.argmax(np.abs(bias_gradient)))
    if not 0 <= row < len(bias_gradient):
        raise GradcoreValueError(
            f"row {row} does not exist; layer {layer} has {len(bias_gradient)} rows"
        )
    if bias_gradient[row] == 0:
        raise GradcoreValueError(
            f"the batch bias gradient of layer {layer} is zero at row {row}: the samples' "
            "sensitivities cancel exactly, so the division (and the mixture) is undefined"
        )
    column = sensitivity[:, row]
    weights = column / column.sum()
    mixture = weight_gradient[row] / bias_gradient[row]
    return BatchMixture(layer, int(row), weights, mixture, layer_inputs, sensitivity)


@dataclass(frozen=True)
class ShareSurvey:
    """How the walk-back's batch mixture is shared out over many random networks of one weight
    scale.

    Medians over the networks: the share of the most exposed sample, and the ratio of the
    largest to the smallest share; and the mean top-class probability (the model's confidence).
    """

    scale: float
    trials: int
    largest_share: float
    share_spread: float
    confidence: float


def share_survey(
    widths: Sequence[int],
    inputs: np.ndarray,
    labels: np.ndarray,
    scale: float,
    trials: int,
    rng: np.random.Generator,
) -> ShareSurvey:
    """Median exposure of a batch at the output layer over ``trials`` random networks of weight
    ``scale``.

    Each network is :func:`random_network` with biases scaled with the weights (``scale / 4``,
    as the source's construction scales every parameter together), so a small ``scale`` gives a
    near-uniform softmax. The attacker divides the row :func:`walk_back` would, the largest
    ``|dL/db|`` of the output layer. A single network's shares vary widely (the ratio by orders
    of magnitude), so a claim about a regime is a claim about these medians.
    """
    if scale <= 0 or trials <= 0:
        raise GradcoreValueError(
            f"scale and trials must be positive, got scale={scale}, trials={trials}"
        )
    output_layer = len(widths) - 2
    largest, spread, confident = [], [], []
    for _ in range(int(trials)):
        network = random_network(widths, rng, scale=scale, bias_scale=scale / 4)
        mixture = batch_mixture_weights(network, inputs, labels, output_layer)
        largest.append(mixture.largest_share)
        spread.append(mixture.share_spread)
        confident.append(float(confidence(network, inputs).mean()))
    return ShareSurvey(
        float(scale),
        int(trials),
        float(np.median(largest)),
        float(np.median(spread)),
        float(np.mean(confident)),
    )


def output_residuals(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, row: int
) -> np.ndarray:
    """``p_k[row] - [y_k = row]`` under cross-entropy: how wrong the model is about class ``row`` on
    each sample."""
    inputs, labels = check_batch(network, inputs, labels, "cross_entropy")
    if not 0 <= row < network.widths[-1]:
        raise GradcoreValueError(
            f"row {row} is not a class; the network has {network.widths[-1]} outputs"
        )
    probabilities = softmax(forward(network, inputs).output)
    return probabilities[:, row] - (labels == row)


def confidence(network: DenseNetwork, inputs: np.ndarray) -> np.ndarray:
    """Each sample's largest softmax probability: near ``1/C`` for a near-uniform model, near 1 for
    a confident one."""
    return softmax(forward(network, np.atleast_2d(inputs)).output).max(axis=1)


def dead_layer_network(
    inputs: np.ndarray,
    widths: Sequence[int] = (24, 16, 12, 8),
    dead_layer: int = 1,
    rng: np.random.Generator | int = 0,
    margin: float = 1.0,
) -> DenseNetwork:
    """A network whose hidden ReLU layer ``dead_layer`` is off for ``inputs``: the walk-back's only
    failure.

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
        raise GradcoreValueError(
            f"only a hidden layer has a ReLU to kill: dead_layer must be in 0..{depth - 2}, got "
            f"{dead_layer}"
        )
    if not margin > 0:
        raise GradcoreValueError(f"margin must be positive, got {margin}")
    generator = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    network = random_network(widths, generator, bias=True)
    network.weights[dead_layer] = -np.abs(network.weights[dead_layer])
    layer_input = np.atleast_2d(forward(network, inputs).inputs[dead_layer])
    # The bias cancels the largest pre-activation each unit sees over the batch, then pushes it
    # below zero.
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


def survey_random_networks(
    trials: int,
    widths: Sequence[int],
    rng: np.random.Generator,
    bias: bool | Sequence[bool] = True,
    scale: float = 1.0,
) -> Survey:
    """Walk back ``trials`` random networks, each on a random input in ``[0, 1)^D`` with a random
    label."""
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


def blocked_fraction(
    trials: int,
    widths: Sequence[int],
    rng: np.random.Generator,
    bias: bool | Sequence[bool] = True,
    scale: float = 1.0,
) -> float:
    """Fraction of random networks (random inputs and labels) on which the walk-back is blocked.

    The proposition's condition fails only if, at some layer, every unit the loss sees
    through is inactive; for random weights of sensible width that essentially never
    happens (Geiping et al. call the condition technical).
    """
    return survey_random_networks(trials, widths, rng, bias=bias, scale=scale).fraction


def dead_layer_probability(widths: Sequence[int]) -> float:
    """Probability that :func:`random_network` on a non-zero input has a fully dead hidden layer:
    ``1 - prod_l (1 - 2^-w_l)``.

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
    """``(module index, layer)`` of each Linear in a ``[Flatten...] Linear (ReLU Linear)*``
    Sequential.

    :func:`gradcore.analysis.dense.linear_layers` parses the network; the walk-back adds its own
    condition, a ReLU after every hidden Linear (Proposition 3.1 divides through ReLU layers).
    """
    layers, activation, first_activation = linear_layers(model)
    if not first_activation:
        raise AttackRefused(
            "the walk-back needs a ReLU after every hidden Linear; this network has none after its "
            "first (exclusivity reduction)"
        )
    if activation != "relu":
        raise AttackRefused(
            f"the walk-back needs ReLU between the Linear layers; this network uses {activation}"
        )
    return layers


def _torch_layer_gradients(
    model: nn.Module, gradient: Sequence[torch.Tensor], layers: list
) -> list:
    parameters = list(model.parameters())
    gradient = tuple(gradient)
    if len(gradient) == 0:
        raise GradcoreValueError(
            f"the gradient is empty: expected one tensor per parameter ({len(parameters)} for this "
            "model)"
        )
    if any(not parameter.requires_grad for parameter in parameters):
        raise GradcoreValueError(
            "every parameter must be trainable: the walk-back divides the gradient of each layer "
            "it passes"
        )
    if len(gradient) != len(parameters):
        raise GradcoreValueError(
            f"the gradient has {len(gradient)} tensors but the model has {len(parameters)} "
            "parameters"
        )
    for index, (entry, parameter) in enumerate(zip(gradient, parameters)):
        if not isinstance(entry, torch.Tensor):
            raise GradcoreValueError(
                f"gradient entry {index} is a {type(entry).__name__}, not a tensor"
            )
        if entry.shape != parameter.shape:
            raise GradcoreValueError(
                f"gradient entry {index} has shape {tuple(entry.shape)}, its parameter has "
                f"{tuple(parameter.shape)}"
            )
        if not torch.isfinite(entry).all():
            raise GradcoreValueError(f"gradient entry {index} has NaN or infinite values")
    position = {id(parameter): index for index, parameter in enumerate(parameters)}
    return [
        (
            gradient[position[id(layer.weight)]],
            None if layer.bias is None else gradient[position[id(layer.bias)]],
        )
        for _, layer in layers
    ]


def walk_back_torch(
    model: nn.Module,
    gradient: Sequence[torch.Tensor],
    shape: Sequence[int],
    start: int | None = None,
) -> WalkBackResult:
    """:func:`walk_back` for a torch MLP: ``[Flatten] Linear (ReLU Linear)*``, as
    ``models.build("mlp", ..., activation="relu")``.

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
        raise GradcoreValueError(
            f"an input of shape {shape} has {math.prod(shape)} entries, but the first Linear layer "
            f"takes {layers[0][1].in_features}"
        )
    start = _start_layer(
        [number for number, (_, layer) in enumerate(layers) if layer.bias is not None], start
    )
    reference = layer_gradients[start][0]
    place = dict(device=reference.device, dtype=reference.dtype)
    weights = [layer.weight.detach().to(**place) for _, layer in layers]
    biases = [
        None if layer.bias is None else layer.bias.detach().to(**place) for _, layer in layers
    ]
    layer_gradients = [
        (weight.to(reference.dtype), None if bias is None else bias.to(reference.dtype))
        for weight, bias in layer_gradients
    ]
    descriptions = [
        f"model[{index}], Linear {layer.in_features} -> {layer.out_features}"
        for index, layer in layers
    ]
    with torch.no_grad():
        result = _walk(weights, biases, layer_gradients, start, descriptions, _TORCH)
    result.reconstruction = None if result.blocked else result.inputs[0].reshape(1, *shape)
    return result


def gradient_pairs_from_torch(model: nn.Module, gradient: Sequence[torch.Tensor]) -> LayerGradients:
    """A torch ReLU MLP's gradient (``model.parameters()`` order) as float64 numpy ``(dL/dW_l,
    dL/db_l)`` pairs."""
    layers = _linear_layers(model)
    return [
        (
            weight.detach().double().cpu().numpy(),
            None if bias is None else bias.detach().double().cpu().numpy(),
        )
        for weight, bias in _torch_layer_gradients(model, gradient, layers)
    ]
