"""The float64 dense network every exact analysis uses, and its analytic gradient.

One :class:`DenseNetwork` (weights, optional biases, one hidden activation, optionally
no activation after the first layer) serves the walk-back of Geiping et al. (2020,
Prop. 3.1; :mod:`gradcore.analysis.walkback`), the closed forms of Qian et al.
(:mod:`gradcore.analysis.minimal`) and the exclusivity analysis of Pan et al. (2022;
:mod:`gradcore.analysis.exclusivity`): its :func:`forward` pass, its batch-mean :func:`loss_value`
and the :func:`gradients` of that loss by backpropagation (checked against finite
differences and against torch in the tests), plus :func:`from_torch` to copy a torch MLP.
Independent of torch except for that conversion.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
from torch import nn

from ..registry import Registry
from ..validation import AttackRefused, GradcoreValueError


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


#: Numpy activations with derivative and inverse; :data:`gradcore.models.ACTIVATIONS` are their
#: torch modules.
ACTIVATION_FUNCTIONS: Registry = Registry("activation function")
# The ReLU derivative is the boolean mask: 1 where the unit was active (z > 0), 0 elsewhere,
# including at the kink.
ACTIVATION_FUNCTIONS.add(
    "relu", Activation(lambda z: np.maximum(z, 0.0), lambda z: z > 0, _relu_inverse)
)
ACTIVATION_FUNCTIONS.add(
    "sigmoid", Activation(_sigmoid, lambda z: _sigmoid(z) * (1 - _sigmoid(z)), _logit)
)
ACTIVATION_FUNCTIONS.add("tanh", Activation(np.tanh, lambda z: 1 - np.tanh(z) ** 2, _tanh_inverse))

NUMPY_LOSSES = ("cross_entropy", "half_squared_error")

#: Per-layer gradient of a :class:`DenseNetwork`: ``(dL/dW_l, dL/db_l)``, the second ``None`` for an
#: unbiased layer.
LayerGradients = list  # list[tuple[np.ndarray, np.ndarray | None]]


# ----------------------------------------------------------------------------------
# The network
# ----------------------------------------------------------------------------------


@dataclass
class DenseNetwork:
    """A fully-connected network in float64: ``z_l = W_l a_l + b_l``, ``a_{l+1} = act(z_l)``.

    Attributes
    ----------
    weights : list of numpy.ndarray
        ``W_l`` shaped ``(out_l, in_l)``; consecutive layers must chain.
    biases : list of (numpy.ndarray or None), optional
        ``b_l`` shaped ``(out_l,)``, or ``None`` for an unbiased layer; omitted, no layer
        is biased.
    activation : str
        The hidden layers' activation, a name in :data:`ACTIVATION_FUNCTIONS` (ReLU by
        default; the walk-back needs it, the minimal-structure closed forms take any).
    first_activation : bool
        ``False``: the first hidden layer feeds the second linearly, the network after
        exclusivity reduction (Pan et al., 2022, Sec. 6).

    The last layer is linear (its output is the logits of the cross-entropy, or the
    prediction of the half squared error).
    """

    weights: list
    biases: list | None = None
    activation: str = "relu"
    first_activation: bool = True

    def __post_init__(self):
        ACTIVATION_FUNCTIONS[self.activation]  # unknown names fail here, naming the known ones
        if len(self.weights) == 0:
            raise GradcoreValueError(
                "a network needs at least one layer; got an empty list of weights"
            )
        self.weights = [np.array(weight, dtype=np.float64) for weight in self.weights]
        if self.biases is None:
            self.biases = [None] * len(self.weights)
        if len(self.biases) != len(self.weights):
            raise GradcoreValueError(
                f"{len(self.weights)} weight matrices but {len(self.biases)} biases (use None for "
                "an unbiased layer)"
            )
        self.biases = [
            None if bias is None else np.array(bias, dtype=np.float64) for bias in self.biases
        ]
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if weight.ndim != 2 or weight.size == 0:
                raise GradcoreValueError(
                    f"weight of layer {layer} must be a non-empty (out, in) matrix, got shape "
                    f"{weight.shape}"
                )
            if bias is not None and bias.shape != (weight.shape[0],):
                raise GradcoreValueError(
                    f"bias of layer {layer} has shape {bias.shape}, expected ({weight.shape[0]},)"
                )
            if layer > 0 and weight.shape[1] != self.weights[layer - 1].shape[0]:
                raise GradcoreValueError(
                    f"layer {layer} takes {weight.shape[1]} inputs but layer {layer - 1} has "
                    f"{self.weights[layer - 1].shape[0]} outputs"
                )

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
        return DenseNetwork(
            [weight * factor for weight in self.weights],
            [None if bias is None else bias * factor for bias in self.biases],
            self.activation,
            self.first_activation,
        )

    def activated(self, layer: int) -> bool:
        """Whether layer ``layer``'s output passes the activation (every hidden layer but, reduced,
        the first)."""
        return layer < self.depth - 1 and (layer > 0 or self.first_activation)

    def with_first_activation(self, first_activation: bool) -> "DenseNetwork":
        """This network with or without the first hidden layer's activation (the same arrays, not
        copies)."""
        if first_activation == self.first_activation:
            return self
        variant = copy.copy(self)
        variant.first_activation = first_activation
        return variant


def random_network(
    widths: Sequence[int],
    rng: np.random.Generator,
    bias: bool | Sequence[bool] = True,
    scale: float = 1.0,
    bias_scale: float = 0.3,
    activation: str = "relu",
) -> DenseNetwork:
    """A random :class:`DenseNetwork` with ``W_l ~ N(0, scale^2 / in_l)`` and ``b_l ~ N(0,
    bias_scale^2)``.

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
    activation : str
        The hidden layers' activation (see :class:`DenseNetwork`).
    """
    widths = [int(width) for width in widths]
    if len(widths) < 2 or min(widths) < 1:
        raise GradcoreValueError(
            "widths must list the input size and at least one layer's output size, all positive; "
            f"got {widths}"
        )
    depth = len(widths) - 1
    has_bias = (
        [bool(bias)] * depth
        if isinstance(bias, (bool, np.bool_))
        else [bool(flag) for flag in bias]
    )
    if len(has_bias) != depth:
        raise GradcoreValueError(
            f"bias flags for {len(has_bias)} layers given, but the widths describe {depth} layers"
        )
    weights = [
        rng.normal(0.0, scale / math.sqrt(fan_in), (fan_out, fan_in))
        for fan_in, fan_out in zip(widths[:-1], widths[1:])
    ]
    biases = [
        rng.normal(0.0, bias_scale, fan_out) if flag else None
        for fan_out, flag in zip(widths[1:], has_bias)
    ]
    return DenseNetwork(weights, biases, activation)


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
        ``act(z_l)`` for activated hidden layers, ``z_l`` itself for the (linear) output layer
        (and for a reduced network's first layer).
    """

    inputs: list
    pre_activations: list
    activations: list

    @property
    def output(self) -> np.ndarray:
        """The network output (logits)."""
        return self.activations[-1]


def forward(network: DenseNetwork, inputs: np.ndarray) -> ForwardPass:
    """Forward pass of one sample ``(D,)`` or a batch ``(B, D)``; entries keep that leading
    shape."""
    inputs = check_inputs(network, inputs, allow_single=True)
    function = ACTIVATION_FUNCTIONS[network.activation].forward
    layer_inputs, pre_activations, activations = [], [], []
    current = inputs
    for layer, (weight, bias) in enumerate(zip(network.weights, network.biases)):
        layer_inputs.append(current)
        pre_activation = current @ weight.T
        if bias is not None:
            pre_activation = pre_activation + bias
        activation = function(pre_activation) if network.activated(layer) else pre_activation
        pre_activations.append(pre_activation)
        activations.append(activation)
        current = activation
    return ForwardPass(layer_inputs, pre_activations, activations)


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, shifted by the maximum so it cannot overflow."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def loss_value(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, loss: str = "cross_entropy"
) -> float:
    """The batch-mean loss: cross-entropy on class indices, or ``(1/2B) sum_k ||o_k - y_k||^2``."""
    inputs, labels = check_batch(network, inputs, labels, loss)
    output = forward(network, inputs).output
    if loss == "cross_entropy":
        shifted = output - output.max(axis=1, keepdims=True)
        log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return float(-log_probabilities[np.arange(len(labels)), labels].mean())
    return float(0.5 * ((output - labels) ** 2).sum(axis=1).mean())


def per_sample_sensitivities(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, loss: str = "cross_entropy"
) -> tuple[ForwardPass, list]:
    """``dL_k/dz_l`` of each sample's own loss at every layer, shaped ``(B, out_l)``.

    At the output this is the residual: ``p_k - onehot(y_k)`` for the cross-entropy,
    ``o_k - y_k`` for the half squared error. The batch-mean gradient's sensitivity is
    their mean over ``k``.
    """
    inputs, labels = check_batch(network, inputs, labels, loss)
    passed = forward(network, inputs)
    output = passed.output
    if loss == "cross_entropy":
        residual = softmax(output)
        residual[np.arange(len(labels)), labels] -= 1.0
    else:
        residual = output - labels
    sensitivities = [None] * network.depth
    sensitivities[-1] = residual
    derivative = ACTIVATION_FUNCTIONS[network.activation].derivative
    for layer in range(network.depth - 1, 0, -1):
        below = sensitivities[layer] @ network.weights[layer]
        if network.activated(layer - 1):
            below = below * derivative(passed.pre_activations[layer - 1])
        sensitivities[layer - 1] = below
    return passed, sensitivities


def gradients(
    network: DenseNetwork, inputs: np.ndarray, labels: np.ndarray, loss: str = "cross_entropy"
) -> LayerGradients:
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
    """Every entry of a gradient multiplied by ``factor`` (what a smaller loss does to its
    magnitude)."""
    return [
        (weight * factor, None if bias is None else bias * factor)
        for weight, bias in layer_gradients
    ]


def flatten_gradients(layer_gradients: LayerGradients) -> np.ndarray:
    """All entries of a gradient as one vector, layer by layer, weight before bias."""
    parts = []
    for weight, bias in layer_gradients:
        parts.append(np.ravel(weight))
        if bias is not None:
            parts.append(np.ravel(bias))
    return np.concatenate(parts)


# ----------------------------------------------------------------------------------
# Torch
# ----------------------------------------------------------------------------------

_TORCH_ACTIVATIONS = {nn.ReLU: "relu", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh"}


def linear_layers(model: nn.Module) -> tuple[list[tuple[int, nn.Linear]], str, bool]:
    """Parse ``[Flatten...] Linear (Act Linear)*`` with one kind of activation (ReLU, sigmoid or
    tanh).

    Returns ``(module index, layer)`` of each Linear, the activation's name and whether
    the first Linear is followed by it (``False`` for ``Linear Linear ...``, a network
    after exclusivity reduction). Raises ``ValueError`` naming the first module that does
    not fit.
    """
    if not isinstance(model, nn.Sequential):
        raise AttackRefused(
            "needs an nn.Sequential of Flatten, Linear and activation modules, got a "
            f"{type(model).__name__}"
        )
    modules = list(model)
    position = 0
    while position < len(modules) and isinstance(modules[position], nn.Flatten):
        position += 1
    layers, kinds, first_activation = [], set(), True
    for index in range(position, len(modules)):
        module = modules[index]
        if isinstance(module, nn.Linear):
            if layers and not isinstance(modules[index - 1], tuple(_TORCH_ACTIVATIONS)):
                if len(layers) != 1:
                    raise AttackRefused(
                        f"module {index} is a Linear straight after a Linear: only the first two "
                        "Linear layers may meet without an activation (exclusivity reduction)"
                    )
                first_activation = False
            layers.append((index, module))
        elif (
            type(module) in _TORCH_ACTIVATIONS
            and layers
            and isinstance(modules[index - 1], nn.Linear)
        ):
            kinds.add(_TORCH_ACTIVATIONS[type(module)])
        else:
            raise AttackRefused(
                f"module {index} is {type(module).__name__} where a Linear or an activation (ReLU, "
                "sigmoid, tanh) after a Linear was expected: an optional Flatten, then Linear "
                "layers with one kind of activation between them, ending on a Linear"
            )
    if not layers or not isinstance(modules[-1], nn.Linear):
        raise AttackRefused(
            "the model must contain a Linear layer and end on one (a linear output feeding the "
            "loss)"
        )
    if len(kinds) > 1:
        raise AttackRefused(
            f"the model mixes activations ({', '.join(sorted(kinds))}); one kind is supported"
        )
    return layers, kinds.pop() if kinds else "relu", first_activation


def from_torch(model: nn.Module) -> DenseNetwork:
    """A float64 numpy copy of a torch MLP (``models.build("mlp", ...)``, or one after exclusivity
    reduction)."""
    layers, activation, first_activation = linear_layers(model)
    return DenseNetwork(
        [layer.weight.detach().double().cpu().numpy() for _, layer in layers],
        [
            None if layer.bias is None else layer.bias.detach().double().cpu().numpy()
            for _, layer in layers
        ],
        activation,
        first_activation,
    )


# ----------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------


def check_inputs(network: DenseNetwork, inputs: np.ndarray, allow_single: bool) -> np.ndarray:
    """Finite inputs ``(D,)`` (when ``allow_single``) or ``(B, D)`` for the network, as float64."""
    inputs = np.asarray(inputs, dtype=np.float64)
    if (
        inputs.ndim not in ((1, 2) if allow_single else (2,))
        or inputs.shape[-1] != network.widths[0]
        or inputs.size == 0
    ):
        raise GradcoreValueError(
            f"inputs must be shaped ({network.widths[0]},) or (B, {network.widths[0]}) with B >= "
            f"1, got {inputs.shape}"
        )
    if not np.isfinite(inputs).all():
        raise GradcoreValueError("inputs contain NaN or infinite values")
    return inputs


def check_batch(
    network: DenseNetwork, inputs: np.ndarray, labels, loss: str
) -> tuple[np.ndarray, np.ndarray]:
    """A batch and its labels (class indices) or targets that fit the network and the loss, as
    arrays."""
    if loss not in NUMPY_LOSSES:
        raise GradcoreValueError(f"unknown loss {loss!r}; known losses: {', '.join(NUMPY_LOSSES)}")
    inputs = np.atleast_2d(check_inputs(network, inputs, allow_single=True))
    batch, classes = len(inputs), network.widths[-1]
    if loss == "cross_entropy":
        labels = np.atleast_1d(np.asarray(labels))
        if not np.issubdtype(labels.dtype, np.integer):
            raise GradcoreValueError(
                f"cross-entropy labels must be integer class indices, got dtype {labels.dtype}"
            )
        if labels.shape != (batch,):
            raise GradcoreValueError(
                f"labels shaped {labels.shape} for a batch of {batch}: expected one class index "
                "per sample"
            )
        if labels.min() < 0 or labels.max() >= classes:
            raise GradcoreValueError(
                f"labels must lie in 0..{classes - 1}, got {labels.min()}..{labels.max()}"
            )
        return inputs, labels
    labels = np.atleast_2d(np.asarray(labels, dtype=np.float64))
    if labels.shape != (batch, classes):
        raise GradcoreValueError(
            f"half-squared-error targets must be shaped ({batch}, {classes}), got {labels.shape}"
        )
    return inputs, labels


def check_gradients(network: DenseNetwork, layer_gradients: LayerGradients) -> LayerGradients:
    """The gradient as float64 array pairs, after checking it fits the network."""
    layer_gradients = list(layer_gradients)
    if len(layer_gradients) == 0:
        raise GradcoreValueError(
            f"the gradient is empty: expected one (dL/dW, dL/db) pair per layer ({network.depth} "
            "for this network)"
        )
    if len(layer_gradients) != network.depth:
        raise GradcoreValueError(
            f"the gradient has {len(layer_gradients)} layers but the network has {network.depth}"
        )
    for layer, (pair, weight, bias) in enumerate(
        zip(layer_gradients, network.weights, network.biases)
    ):
        if len(pair) != 2:
            raise GradcoreValueError(
                f"gradient of layer {layer} must be a (dL/dW, dL/db) pair, got {len(pair)} entries"
            )
        weight_gradient, bias_gradient = pair
        if np.shape(weight_gradient) != weight.shape:
            raise GradcoreValueError(
                f"dL/dW of layer {layer} has shape {np.shape(weight_gradient)}, its weight has "
                f"{weight.shape}"
            )
        if (bias is None) != (bias_gradient is None):
            raise GradcoreValueError(
                f"layer {layer} {'has no' if bias is None else 'has a'} bias, but its bias "
                f"gradient is {'given' if bias is None else 'None'}"
            )
        if bias is not None and np.shape(bias_gradient) != bias.shape:
            raise GradcoreValueError(
                f"dL/db of layer {layer} has shape {np.shape(bias_gradient)}, its bias has "
                f"{bias.shape}"
            )
        for name, entry in (("dL/dW", weight_gradient), ("dL/db", bias_gradient)):
            if entry is not None and not np.isfinite(entry).all():
                raise GradcoreValueError(f"{name} of layer {layer} has NaN or infinite values")
    return [
        (
            np.asarray(weight_gradient, dtype=np.float64),
            None if bias_gradient is None else np.asarray(bias_gradient, dtype=np.float64),
        )
        for weight_gradient, bias_gradient in layer_gradients
    ]
