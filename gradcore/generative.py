"""Generative priors: class-conditional DCGANs trained in the book, for the GAN-prior attacks.

The attacks of Li et al. (GGL, CVPR 2022), Jeon et al. (GIAS, NeurIPS 2021) and Fang et al.
(GIFD, ICCV 2023) search the output space of a generator pretrained on public data of the
private data's distribution (BigGAN, StyleGAN2 in CENSOR's Table I). None of those weights
is on disk, so the book trains its own, on data disjoint from the attacked images, which is
the threat model the attacks assume (the attacker has public data and a GAN trained on it).

The architecture is the DCGAN of Radford, Metz and Chintala (ICLR 2016), scaled down and made
class-conditional by appending a one-hot label to the latent (Mirza and Osindero, 2014) and a
label map to the discriminator's input: the best-studied small GAN, stable with Adam at
``lr 2e-4, beta_1 0.5`` and batch normalisation in the generator, and small enough to train
on two CPU cores in about a minute. The generator is a stack of stages (a dense stem, then
one transposed convolution per doubling of the side), so GIFD can step into the feature map
after any stage (:meth:`Generator.features`, :meth:`Generator.decode`).

Data are tiny here (about 1,600 digits, 180 faces), so training uses a differentiable
augmentation on real and generated images alike (Zhao et al., DiffAugment, NeurIPS 2020:
random one-pixel translations, and horizontal flips where the data allow them); a
nearest-neighbour check (:func:`nearest_training_images`) shows whether it memorised.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from tqdm import tqdm

from . import data as datasets
from . import models
from . import validation as check


class Generator(nn.Module):
    """Class-conditional DCGAN generator: ``(latent, labels) -> images`` in [0, 1].

    Parameters
    ----------
    image_shape : (C, H, W)
        The side must be ``base * 2**k``, ``base`` in 2..7 and ``k >= 1`` (8 = 4 * 2, 24 = 3 * 8,
        28 = 7 * 4 for MNIST, 32 = 4 * 8).
    num_classes : int
        Classes the generator is conditioned on (one-hot appended to the latent).
    latent_dim : int
        Dimension of the Gaussian latent ``z``.
    width : int
        Channels of the first feature map; halved at every doubling of the side.

    Attributes
    ----------
    stages : nn.ModuleList
        The dense stem, then one upsampling block per doubling; the last ends in a sigmoid.
        ``features(z, y, k)`` is the output of the first ``k`` stages, ``decode(h, k)``
        runs the rest.
    """

    def __init__(
        self, image_shape: Sequence[int], num_classes: int, latent_dim: int = 32, width: int = 64
    ):
        super().__init__()
        channels, height, width_pixels = (int(s) for s in image_shape)
        if height != width_pixels:
            raise check.GradcoreValueError(
                f"the generator makes square images; got shape {tuple(image_shape)}"
            )
        base, doublings = height, 0
        # The stem's map is the side halved while it stays even and above 4 (MNIST: 28 -> 14 -> 7).
        while base > 4 and base % 2 == 0:
            base, doublings = base // 2, doublings + 1
        if not 2 <= base <= 7 or doublings == 0:
            raise check.GradcoreValueError(
                f"an image side of {height} is not 2 to 7 times a power of two (at least 2)"
            )
        self.image_shape, self.num_classes, self.latent_dim, self.width = (
            (channels, height, height),
            num_classes,
            latent_dim,
            width,
        )
        widths = [max(width // 2**i, 8) for i in range(doublings + 1)]
        stem = nn.Sequential(
            nn.Linear(latent_dim + num_classes, widths[0] * base * base),
            nn.Unflatten(1, (widths[0], base, base)),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(),
        )
        blocks = []
        for i in range(doublings):
            last = i == doublings - 1
            upsample = nn.ConvTranspose2d(
                widths[i], channels if last else widths[i + 1], 4, stride=2, padding=1
            )
            blocks.append(
                nn.Sequential(upsample, nn.Sigmoid())
                if last
                else nn.Sequential(upsample, nn.BatchNorm2d(widths[i + 1]), nn.ReLU())
            )
        self.stages = nn.ModuleList([stem, *blocks])

    def condition(self, latent: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """The stem's input: the latent with the one-hot labels appended."""
        return torch.cat(
            [latent, F.one_hot(labels.long(), self.num_classes).to(latent.dtype)], dim=1
        )

    def features(self, latent: torch.Tensor, labels: torch.Tensor, depth: int) -> torch.Tensor:
        """The feature map after the first ``depth`` stages (``depth = 0``: the conditioned
        latent)."""
        return self.advance(self.condition(latent, labels), 0, depth)

    def advance(self, hidden: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        """The feature map after ``stop`` stages, from the one after ``start``."""
        for stage in self.stages[start:stop]:
            hidden = stage(hidden)
        return hidden

    def decode(self, hidden: torch.Tensor, depth: int) -> torch.Tensor:
        """The image from the feature map after ``depth`` stages."""
        return self.advance(hidden, depth, len(self.stages))

    def forward(self, latent: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.decode(self.condition(latent, labels), 0)


class Discriminator(nn.Module):
    """DCGAN discriminator: strided convolutions with leaky ReLUs; the label enters as extra input
    maps."""

    def __init__(self, image_shape: Sequence[int], num_classes: int, width: int = 64):
        super().__init__()
        channels, side, _ = (int(s) for s in image_shape)
        self.num_classes = num_classes
        layers, inputs, outputs = [], channels + num_classes, max(width // 4, 8)
        while side > 4:
            layers += [nn.Conv2d(inputs, outputs, 4, stride=2, padding=1), nn.LeakyReLU(0.2)]
            inputs, outputs, side = outputs, min(outputs * 2, width), side // 2
        self.body = nn.Sequential(*layers, nn.Flatten(), nn.Linear(inputs * side * side, 1))

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        maps = F.one_hot(labels.long(), self.num_classes).to(images.dtype)[:, :, None, None]
        return self.body(
            torch.cat([images, maps.expand(-1, -1, *images.shape[2:])], dim=1)
        ).squeeze(1)


def augment(images: torch.Tensor, generator: torch.Generator, flips: bool) -> torch.Tensor:
    """DiffAugment's translation (and flips when allowed): differentiable, one draw per image."""
    count, side, device = len(images), images.shape[-1], images.device
    padded = F.pad(images, (1, 1, 1, 1), mode="replicate")
    # Drawn on the (CPU) generator, so a seed gives the same augmentation on every device.
    shifts = torch.randint(0, 3, (count, 2), generator=generator).to(device)
    rows = torch.arange(side, device=device)[None, :] + shifts[:, :1]
    columns = torch.arange(side, device=device)[None, :] + shifts[:, 1:]
    index = torch.arange(count, device=device)[:, None, None]
    shifted = padded[index, :, rows[:, :, None], columns[:, None, :]].permute(0, 3, 1, 2)
    if flips:
        flip = torch.rand(count, generator=generator).to(device) < 0.5
        shifted = torch.where(flip[:, None, None, None], shifted.flip(-1), shifted)
    return shifted


@dataclass
class GanLog:
    """What training recorded: the losses every ``every`` steps, and the settings."""

    steps: list = field(default_factory=list)
    generator_loss: list = field(default_factory=list)
    discriminator_loss: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)


def train_gan(
    dataset: datasets.Dataset,
    steps: int = 2000,
    batch_size: int = 64,
    latent_dim: int = 32,
    width: int = 64,
    lr: float = 2e-4,
    flips: bool = False,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[Generator, GanLog]:
    """Train a class-conditional DCGAN on ``dataset`` (Radford et al., 2016; non-saturating loss,
    Goodfellow et al., 2014).

    Parameters
    ----------
    dataset : Dataset
        Public training images (never the ones the chapter attacks).
    steps : int
        Generator updates (one discriminator update before each).
    batch_size, latent_dim, width, lr
        DCGAN's Adam (``beta_1 = 0.5``) at ``lr`` for both networks.
    flips : bool
        Augment with horizontal flips too (faces; not digits, whose mirror images are not digits).
    seed : int
        Seeds the initial weights, the batches, the latents and the augmentation (all drawn on
        the CPU, so a seed gives the same draws on every device).
    device : str or torch.device
        Where to train; the generator is returned there (the attacks run it next to the model).

    Returns
    -------
    Generator
        In evaluation mode (batch norm with its running statistics), parameters frozen.
    GanLog
    """
    if not isinstance(dataset, datasets.Dataset):
        raise check.GradcoreTypeError(
            "dataset must be a gradcore Dataset (e.g. gradcore.data.load('digits')); got "
            f"{check.describe(dataset)}"
        )
    if len(dataset.images) == 0:
        raise check.GradcoreValueError(
            f"dataset {dataset.name!r} has no images to train the generator on"
        )
    check.positive_int("steps", steps)
    check.positive_int("batch size", batch_size)
    check.positive_int("latent_dim", latent_dim)
    check.integer("width", width, low=8)  # the narrowest feature map keeps 8 channels
    check.number("lr", lr, low=0, low_open=True)
    check.boolean("flips", flips)
    check.boolean("progress", progress)
    check.integer("seed", seed)
    device = check.device("device", device)
    with models.seeded(seed):
        generator_net = Generator(dataset.shape, dataset.num_classes, latent_dim, width).to(device)
        critic = Discriminator(dataset.shape, dataset.num_classes, width).to(device)
    draws = torch.Generator().manual_seed(seed)
    optimise_g = torch.optim.Adam(generator_net.parameters(), lr=lr, betas=(0.5, 0.999))
    optimise_d = torch.optim.Adam(critic.parameters(), lr=lr, betas=(0.5, 0.999))
    images, labels = dataset.images, dataset.labels
    log = GanLog(
        settings={
            "steps": steps,
            "batch_size": batch_size,
            "latent_dim": latent_dim,
            "width": width,
            "lr": lr,
            "flips": flips,
            "seed": seed,
            "training images": len(dataset),
        }
    )
    every = max(steps // 50, 1)
    for step in tqdm(
        range(1, steps + 1),
        desc="training the GAN",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    ):
        index = torch.randint(0, len(images), (batch_size,), generator=draws)
        real, real_labels = images[index].to(device), labels[index].to(device)
        latent = torch.randn(batch_size, latent_dim, generator=draws).to(device)
        fake_labels = torch.randint(0, dataset.num_classes, (batch_size,), generator=draws).to(
            device
        )
        fake = generator_net(latent, fake_labels)
        real_score = critic(augment(real, draws, flips), real_labels)
        fake_score = critic(augment(fake.detach(), draws, flips), fake_labels)
        discriminator_loss = F.softplus(-real_score).mean() + F.softplus(fake_score).mean()
        optimise_d.zero_grad()
        discriminator_loss.backward()
        optimise_d.step()
        # The critic's own gradients are not needed for the generator's step: frozen, its backward
        # skips them (the generator's gradient is the same, bit for bit).
        critic.requires_grad_(False)
        generator_loss = F.softplus(-critic(augment(fake, draws, flips), fake_labels)).mean()
        optimise_g.zero_grad()
        generator_loss.backward()
        critic.requires_grad_(True)
        optimise_g.step()
        if step % every == 0 or step == steps:
            log.steps.append(step)
            log.generator_loss.append(generator_loss.item())
            log.discriminator_loss.append(discriminator_loss.item())
    return freeze(generator_net), log


def freeze(generator: Generator) -> Generator:
    """The generator in evaluation mode with its parameters frozen (an attack copies what it
    tunes)."""
    generator.eval()
    for parameter in generator.parameters():
        parameter.requires_grad_(False)
    return generator


def untrained(like: Generator, seed: int = 0) -> Generator:
    """A generator of the same architecture with fresh, seeded weights: the control prior that knows
    nothing."""
    with models.seeded(seed):
        fresh = Generator(like.image_shape, like.num_classes, like.latent_dim, like.width)
    return freeze(fresh.to(next(like.parameters()).device))


def sample(generator: Generator, labels: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Images drawn from the generator for ``labels`` (on the CPU), latents from a seeded standard
    normal."""
    device = next(generator.parameters()).device
    latent = torch.randn(
        len(labels), generator.latent_dim, generator=torch.Generator().manual_seed(seed)
    ).to(device)
    with torch.no_grad():
        return generator(latent, labels.to(device)).cpu()


def nearest_training_images(
    images: torch.Tensor, training: datasets.Dataset
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each image, the index of the nearest training image (Euclidean on pixels) and the MSE to
    it.

    A generator that memorised its training set draws samples whose nearest training image
    is almost identical (an MSE near 0); one that generalises draws new images.
    """
    distances = (
        torch.cdist(images.cpu().flatten(1).double(), training.images.flatten(1).double()) ** 2
        / images[0].numel()
    )
    nearest = distances.min(dim=1)
    return nearest.indices, nearest.values.float()


def copy_of(generator: Generator) -> Generator:
    """A trainable copy (GIAS tunes the generator's weights per attacked image)."""
    clone = copy.deepcopy(generator)
    for parameter in clone.parameters():
        parameter.requires_grad_(True)
    return clone
