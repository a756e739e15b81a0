"""The networks the papers attack, written here so torchvision stays optional.

Every constructor is registered by name in :data:`MODELS` and returns a plain
``torch.nn.Module``. ``build("lenet", shape=(3, 32, 32), num_classes=10)`` is the
usual entry point.
"""

from __future__ import annotations

import contextlib
import math
from typing import Sequence

import torch
from torch import nn

from . import validation as check
from .registry import Registry

MODELS: Registry = Registry("model")
ACTIVATIONS: Registry = Registry("activation")
ACTIVATIONS.add("relu", nn.ReLU)
ACTIVATIONS.add("sigmoid", nn.Sigmoid)
ACTIVATIONS.add("tanh", nn.Tanh)
ACTIVATIONS.add("leaky_relu", nn.LeakyReLU)
ACTIVATIONS.add("identity", nn.Identity)


def parse(spec: str) -> tuple[str, dict]:
    """``"resnet(width=8)"`` -> ``("resnet", {"width": 8})``; a plain name has no options.

    A model written with its options is one string, so that a paper's settings can name a
    configured network where they name a model (``gradcore.papers``: the smoke runs build the
    paper's ResNet-18 at a smaller width this way). Values are Python literals.
    """
    import ast

    if not isinstance(spec, str):
        raise check.GradcoreTypeError(
            f"model must be a registry name (a string), got {check.describe(spec)}"
        )
    if "(" not in spec:
        return spec, {}
    try:
        call = ast.parse(spec.strip(), mode="eval").body
        if not isinstance(call, ast.Call) or call.args or not isinstance(call.func, ast.Name):
            raise ValueError
        return call.func.id, {
            keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords
        }
    except (SyntaxError, ValueError):
        raise check.GradcoreValueError(
            f"model {spec!r} is neither a registered name nor NAME(option=value, ...)"
        ) from None


def build(name: str, shape: Sequence[int], num_classes: int, seed: int = 0, **options) -> nn.Module:
    """Build a registered model with seeded initial weights.

    Parameters
    ----------
    name : str
        Registry name: ``linear_unit``, ``mlp``, ``lenet``, ``convnet``, ``resnet``; or a name
        with options, ``"resnet(width=8)"`` (:func:`parse`), which ``options`` may not repeat.
    shape : sequence of int
        Shape of one input, ``(C, H, W)`` or ``(D,)``.
    num_classes : int
        Outputs of the last layer (ignored by ``linear_unit``, which has one).
    seed : int
        Seed of the initial weights.

    Raises
    ------
    GradcoreValueError, GradcoreTypeError
        An input shape that is not a sequence of positive whole numbers (or has the wrong
        number of dimensions for the model), a ``num_classes`` below 1, a non-integer seed,
        or an unknown option or one of the wrong type or range, before anything is built.
    """
    name, written = parse(name)
    repeated = sorted(set(written) & set(options))
    if repeated:
        raise check.GradcoreValueError(
            f"model option {', '.join(repeated)} given twice: in the name and as an argument"
        )
    options = {**written, **options}
    constructor = MODELS[name]
    check.input_shape("shape", shape)
    check.positive_int("num_classes", num_classes)
    check.integer("seed", seed)
    check.options(f"model {name!r}", constructor, options, skip=("shape", "num_classes"))
    dimensions, smallest = IMAGE_MODELS.get(name, (None, 1))
    if dimensions is not None and (len(shape) != dimensions or min(shape[1:]) < smallest):
        raise check.GradcoreValueError(
            f"model {name!r} takes images shaped (C, H, W) with H and W at least {smallest}; got "
            f"shape {tuple(shape)}"
        )
    with seeded(seed):
        return MODELS[name](tuple(shape), num_classes, **options)


@contextlib.contextmanager
def seeded(seed: int):
    """Run the block with torch's CPU generator seeded, and give the caller's generator state back
    after.

    What builds a network with seeded weights uses it, so that building one never moves the
    random stream of the code around it.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def output_layer(model: nn.Module) -> nn.Linear | None:
    """The model's last ``nn.Linear`` (its fully-connected output layer), or None if it has none.

    Label inference (iDLG), soft labels, Soteria and the GAN-prior attacks read it; each
    caller says in its own words why it needs one.
    """
    layers = [module for module in model.modules() if isinstance(module, nn.Linear)]
    return layers[-1] if layers else None


#: Models that take images: ``name -> (dimensions of one input, smallest height and width)``.
#: The ConvNet's two 3x3 max-pools leave nothing of an image under 9 pixels.
IMAGE_MODELS = {"lenet": (3, 1), "convnet": (3, 9), "resnet": (3, 1)}


@MODELS.register("linear_unit")
def linear_unit(shape: Sequence[int], num_classes: int = 1) -> nn.Module:
    """One linear unit ``o = W.x + b`` on the flattened input (the DLG warm-up model).

    Weights are drawn from N(0, 1/D) and the bias is zero; the model is frozen in the
    sense that the attack only ever reads its gradient and never updates it.
    """
    model = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 1))
    nn.init.normal_(model[1].weight, std=1.0 / math.sqrt(math.prod(shape)))
    nn.init.zeros_(model[1].bias)
    return model


@MODELS.register("mlp")
def mlp(
    shape: Sequence[int],
    num_classes: int,
    widths: Sequence[int] = (100,),
    activation: str = "relu",
    bias: bool = True,
) -> nn.Sequential:
    """Fully-connected network: ``widths`` hidden layers, each followed by ``activation``."""
    layers: list[nn.Module] = [nn.Flatten()]
    features = math.prod(shape)
    for width in widths:
        layers += [nn.Linear(features, width, bias=bias), ACTIVATIONS[activation]()]
        features = width
    layers.append(nn.Linear(features, num_classes, bias=bias))
    return nn.Sequential(*layers)


@MODELS.register("lenet")
def lenet(shape: Sequence[int], num_classes: int, init: str = "dlg") -> nn.Sequential:
    """The sigmoid LeNet variant of Zhu et al. (2019), Deep Leakage from Gradients.

    Three 5x5 convolutions of 12 channels (strides 2, 2, 1) with sigmoid activations and
    one linear layer. ``init="dlg"`` draws every weight and bias from U(-0.5, 0.5) as the
    DLG authors did; a twice-differentiable, non-saturated start is what makes the
    L-BFGS attack work.
    """
    channels, height, width = shape
    model = nn.Sequential(
        nn.Conv2d(channels, 12, 5, padding=2, stride=2),
        nn.Sigmoid(),
        nn.Conv2d(12, 12, 5, padding=2, stride=2),
        nn.Sigmoid(),
        nn.Conv2d(12, 12, 5, padding=2, stride=1),
        nn.Sigmoid(),
        nn.Flatten(),
        nn.Linear(12 * math.ceil(height / 4) * math.ceil(width / 4), num_classes),
    )
    if init == "dlg":
        for parameter in model.parameters():
            nn.init.uniform_(parameter, -0.5, 0.5)
    elif init != "default":
        raise check.GradcoreValueError(f"unknown LeNet init {init!r}; use 'dlg' or 'default'")
    return model


def _conv_block(
    inputs: int, outputs: int, padding_mode: str, bias: bool = False
) -> list[nn.Module]:
    return [
        nn.Conv2d(inputs, outputs, 3, padding=1, padding_mode=padding_mode, bias=bias),
        nn.BatchNorm2d(outputs),
        nn.ReLU(),
    ]


@MODELS.register("convnet")
def convnet(
    shape: Sequence[int],
    num_classes: int,
    width: int = 64,
    padding_mode: str = "zeros",
    bias: bool = True,
) -> nn.Sequential:
    """The eight-layer ConvNet of Geiping et al. (2020), Inverting Gradients, Sec. 5.

    Channels ``w, 2w, 2w, 4w, 4w, 4w`` then a 3x3 max-pool, ``4w, 4w`` and another
    max-pool, then one linear layer; every convolution is 3x3 with batch norm and ReLU.
    The convolutions carry biases, as in the authors' model (and breaching's ``ConvNet``):
    a bias's gradient is the sum of its channel's backpropagated signal over the image,
    and the attack reads it. On four real CIFAR-10 test images, 500 iterations of the
    cosine attack end 1.2 to 4.2 dB closer to a flat image with ``bias=False``
    (``bench/ig_floor.py --no-bias``).
    """
    channels = [shape[0], width, 2 * width, 2 * width, 4 * width, 4 * width, 4 * width]
    layers: list[nn.Module] = []
    for inputs, outputs in zip(channels[:-1], channels[1:]):
        layers += _conv_block(inputs, outputs, padding_mode, bias)
    layers.append(nn.MaxPool2d(3))
    layers += _conv_block(4 * width, 4 * width, padding_mode, bias) + _conv_block(
        4 * width, 4 * width, padding_mode, bias
    )
    layers += [nn.MaxPool2d(3), nn.Flatten()]
    side_h, side_w = shape[1] // 9, shape[2] // 9
    layers.append(nn.Linear(4 * width * side_h * side_w, num_classes))
    return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inputs: int, planes: int, stride: int, padding_mode: str):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, planes, 3, stride, 1, bias=False, padding_mode=padding_mode),
            nn.BatchNorm2d(planes),
            nn.ReLU(),
            nn.Conv2d(planes, planes, 3, 1, 1, bias=False, padding_mode=padding_mode),
            nn.BatchNorm2d(planes),
        )
        self.shortcut = _shortcut(inputs, planes * self.expansion, stride)

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inputs: int, planes: int, stride: int, padding_mode: str):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False, padding_mode=padding_mode),
            nn.BatchNorm2d(planes),
            nn.ReLU(),
            nn.Conv2d(planes, planes * 4, 1, bias=False),
            nn.BatchNorm2d(planes * 4),
        )
        self.shortcut = _shortcut(inputs, planes * self.expansion, stride)

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def _shortcut(inputs: int, outputs: int, stride: int) -> nn.Module:
    if stride == 1 and inputs == outputs:
        return nn.Identity()
    return nn.Sequential(nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs))


#: Blocks per stage of the CIFAR-style ResNets (He et al., 2016).
RESNET_DEPTHS = {
    18: (_BasicBlock, (2, 2, 2, 2)),
    34: (_BasicBlock, (3, 4, 6, 3)),
    50: (_Bottleneck, (3, 4, 6, 3)),
    101: (_Bottleneck, (3, 4, 23, 3)),
}


@MODELS.register("resnet")
def resnet(
    shape: Sequence[int],
    num_classes: int,
    depth: int = 18,
    width: int = 64,
    padding_mode: str = "zeros",
) -> nn.Sequential:
    """CIFAR-style ResNet: 3x3 stem, four stages of base ``width`` x (1, 2, 4, 8).

    ``depth`` is 18, 34, 50 or 101; ``width`` is the base width Geiping et al. vary
    (16 to 128) in their width experiment.
    """
    if depth not in RESNET_DEPTHS:
        raise check.GradcoreValueError(
            f"ResNet depth must be one of {sorted(RESNET_DEPTHS)}, got {depth}"
        )
    block, counts = RESNET_DEPTHS[depth]
    layers: list[nn.Module] = [
        nn.Conv2d(shape[0], width, 3, 1, 1, bias=False, padding_mode=padding_mode),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    inputs = width
    for stage, count in enumerate(counts):
        planes = width * 2**stage
        for index in range(count):
            layers.append(block(inputs, planes, 2 if stage > 0 and index == 0 else 1, padding_mode))
            inputs = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inputs, num_classes)]
    return nn.Sequential(*layers)


def fcn(
    shape: Sequence[int], num_classes: int, widths: Sequence[int], seed: int = 0
) -> nn.Sequential:
    """The ReLU FCN of Pan et al. (USENIX Security 2022, Sec. 5): ``[Flatten] Linear (ReLU
    Linear)*``.

    Seeds the global generator with ``seed`` and builds the layers from it, as the
    neuron-exclusivity and what-protects chapters were executed with (unlike :func:`build`,
    which puts the generator back afterwards); the weights do not depend on the activations,
    so :func:`gradcore.defenses.exclusivity_reduction` of it has the same initial weights.
    """
    check.input_shape("shape", shape)
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Flatten()]
    features = math.prod(shape)
    for width in widths:
        layers += [nn.Linear(features, width), nn.ReLU()]
        features = width
    layers.append(nn.Linear(features, num_classes))
    return nn.Sequential(*layers)


def hybrid_cnn(
    shape: Sequence[int], num_classes: int, channels: int, width: int, seed: int = 0
) -> nn.Sequential:
    """A CNN as the hybrid exclusivity attack sees it (Pan et al., Sec. 5, Fig. 4): two 3x3 conv +
    ReLU
    layers (the trunk), then a one-hidden-layer ReLU FCN head. Seeds the global generator, as
    :func:`fcn`."""
    torch.manual_seed(seed)
    features = channels * math.prod(shape[1:])
    return nn.Sequential(
        nn.Conv2d(shape[0], channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(channels, channels, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(features, width),
        nn.ReLU(),
        nn.Linear(width, num_classes),
    )


def conv_mlp(
    shape: Sequence[int],
    num_classes: int,
    kernels: int = 4,
    kernel_size: int = 3,
    stride: int = 1,
    padding: int = 1,
    hidden: int | None = 32,
    activation: str = "sigmoid",
) -> nn.Sequential:
    """One convolution, then (``hidden`` units of) a dense layer, then the output: Qian et al.'s
    CNN.

    ``hidden=None`` feeds the convolution straight into the output layer. Built from the
    global generator as it stands (seed it first), like the minimal-structure chapter does.
    """
    convolution = nn.Conv2d(shape[0], kernels, kernel_size, stride, padding)
    with torch.no_grad():  # the dense layer's width is what the convolution puts out
        features = convolution(torch.zeros(1, *shape)).numel()
    layers = [convolution, ACTIVATIONS[activation](), nn.Flatten()]
    if hidden is not None:
        layers += [nn.Linear(features, hidden), ACTIVATIONS[activation]()]
        features = hidden
    return nn.Sequential(*layers, nn.Linear(features, num_classes))


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
