"""The neuron-exclusivity chapter's experiments (Pan et al., USENIX Security 2022).

Surveys over widths and training, the Fig. 5 sweeps, the reduction's accuracy and the
attack sweeps: networks built, trained and measured. The exact analysis they measure with
(exclusive neurons, the secure boundary, artifact batches) is :mod:`gradcore.analysis.exclusivity`;
the attacks are :mod:`gradcore.attacks.exclusivity`; the reduction is
:func:`gradcore.defenses.exclusivity_reduction`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from .. import attacks, data, defenses, models, training
from .. import gradients as grads
from .. import validation as check
from ..analysis import dense
from ..analysis.blas import single_thread
from ..analysis.exclusivity import Artifact, artifact_batch, find_batch, moved_share, survey


@dataclass
class LearningSweep:
    """Result of :func:`learning_attack_sweep`: per width and batch size, the optimisation attack's
    PSNRs."""

    psnr: dict  # {width: {batch size: [mean PSNR of each batch]}}
    threshold: float  # dB: a batch counts as recovered at or above it

    def recovered(self, width: int, batch_size: int) -> float:
        """Share of the batches recovered (mean PSNR at least :attr:`threshold`)."""
        values = self.psnr[width][batch_size]
        return float(np.mean([value >= self.threshold for value in values]))

    def by_batch(self) -> dict:
        """``{batch size: recovered share}``, pooled over the widths."""
        sizes = next(iter(self.psnr.values()))
        return {
            size: float(np.mean([self.recovered(width, size) for width in self.psnr]))
            for size in sizes
        }

    def by_width(self) -> dict:
        """``{width: recovered share}``, pooled over the batch sizes."""
        return {
            width: float(np.mean([self.recovered(width, size) for size in sizes]))
            for width, sizes in self.psnr.items()
        }


def learning_attack_sweep(
    dataset: data.Dataset,
    widths: Sequence[int],
    batch_sizes: Sequence[int],
    trials: int,
    attack_config: dict,
    seed: int = 0,
    threshold: float = 40.0,
) -> LearningSweep:
    """How a learning-based attack fares across widths and batch sizes (Pan et al., Theorem 1's
    trend).

    Theorem 1 bounds the average reconstruction error of learning-based attacks: the bound
    grows with the batch size and the input dimension and shrinks as the layers widen. Here
    DLG (``gradcore.attack("dlg", ...)`` with the labels given and ``attack_config``) attacks
    ``trials`` random batches per batch size on float64 ``(d0-w-w-K)`` ReLU FCNs, one per width;
    batch ``t`` of size ``M`` is ``dataset.batch(M, seed=seed * 1000 + t)``, the same for every
    width.
    """
    check.positive_int("trials", trials)
    check.integers("batch_sizes", batch_sizes, low=1)
    psnr: dict = {}
    for width in widths:
        model = models.build(
            "mlp", dataset.shape, dataset.num_classes, seed=seed, widths=(width, width)
        ).double()
        psnr[width] = {}
        for size in batch_sizes:
            values = []
            for trial in range(trials):
                inputs, labels = dataset.batch(size, seed=seed * 1000 + trial)
                inputs = inputs.double()
                gradient = grads.batch_gradient(model, inputs, labels)
                result = attacks.attack(
                    "dlg",
                    model,
                    gradient,
                    shape=dataset.shape,
                    batch_size=size,
                    labels=labels,
                    truth=inputs,
                    seed=seed,
                    progress=False,
                    **attack_config,
                )
                values.append(float(result.score(inputs, "psnr").mean()))
            psnr[width][size] = values
    return LearningSweep(psnr, threshold)


def dlg_on_insecure_batches(
    dataset: data.Dataset,
    model: torch.nn.Module,
    count: int,
    batch_size: int,
    attack_config: dict,
    rng: np.random.Generator,
    tries: int = 200,
    seed: int = 0,
) -> list[float]:
    """Mean PSNR of DLG (labels given) on ``count`` random insecure batches of one float64 FCN.

    The control behind "the deterministic attack stably outperforms learning-based attacks"
    (Pan et al., Sec. 4 and 7.2): whether DLG recovers an insecure batch is a matter of the
    batch, so the comparison is only informative where DLG fails on most of them. Batches are
    drawn with :func:`gradcore.analysis.exclusivity.find_batch` (``rng``, ``tries``) from
    ``dataset``.
    """
    check.positive_int("count", count)
    network = dense.from_torch(model)
    pixels = dataset.images.reshape(len(dataset), -1).double().numpy()
    values = []
    for _ in range(count):
        index = find_batch(network, pixels, batch_size, "insecure", rng, tries=tries)
        inputs, labels = dataset.images[index].double(), dataset.labels[index]
        gradient = grads.batch_gradient(model, inputs, labels)
        result = attacks.attack(
            "dlg",
            model,
            gradient,
            shape=dataset.shape,
            batch_size=batch_size,
            labels=labels,
            truth=inputs,
            seed=seed,
            progress=False,
            **attack_config,
        )
        values.append(float(result.score(inputs, "psnr").mean()))
    return values


def visible_artifacts(
    dataset: data.Dataset,
    network,
    batch_size: int,
    count: int,
    rng: np.random.Generator,
    moved: float,
    gradient_error: float,
    first_relu: bool = True,
) -> int:
    """How many of ``count`` random batches have an artifact batch that moves some pixel by
    ``moved`` or more.

    Theorem 2 of Pan et al.: a batch in the secure state shares its average gradient with
    other batches; whether one of them differs visibly inside the pixel box depends on the
    batch (pixels already at 0 or 1 cannot move outwards), so the claim is a rate over draws.
    An artifact counts only if its gradient stays within ``gradient_error`` of the true one.
    """
    check.positive_int("count", count)
    pixels = dataset.images.reshape(len(dataset), -1).double().numpy()
    found = 0
    for _ in range(count):
        index = rng.choice(len(dataset), batch_size, replace=False)
        artifact = artifact_batch(
            network, pixels[index], dataset.labels[index].numpy(), first_relu=first_relu
        )
        found += int(
            artifact.largest_change >= moved and artifact.gradient_difference <= gradient_error
        )
    return found


def reduction_accuracy(
    dataset: data.Dataset,
    widths: Sequence[int],
    epochs: int,
    lr: float,
    holdout: int,
    seed: int = 0,
) -> dict:
    """Held-out accuracy of the FCN with and without its first ReLU, same initial weights and
    training (Sec. 6).

    The last ``holdout`` samples of a seeded permutation are held out (:func:`gradcore.data.split`).
    Returns ``{"with first ReLU": (model, accuracy), "reduced": (model, accuracy)}``.
    """
    train_set, test_set = data.split(dataset, holdout / len(dataset), seed)
    if len(test_set) != holdout:
        raise ValueError(f"holding out {holdout} of {len(dataset)} samples left {len(test_set)}")
    results = {}
    for name, reduce in (("with first ReLU", False), ("reduced", True)):
        model = models.fcn(dataset.shape, dataset.num_classes, widths, seed=seed)
        model = defenses.exclusivity_reduction(model) if reduce else model
        training.train(model, train_set, epochs=epochs, lr=lr, seed=seed, progress=False)
        results[name] = (model, training.accuracy(model, test_set))
    return results


def survey_widths(
    dataset: data.Dataset,
    widths: Sequence[int],
    batch_sizes: Sequence[int],
    trials: int,
    seed: int = 0,
    epochs: int = 0,
    lr: float = 1e-3,
) -> tuple[dict, dict]:
    """:func:`survey` of ``models.build("mlp", widths=(w, w))`` for each ``w``, at initialisation or
    after ``epochs`` of training.

    Returns
    -------
    points : dict
        ``width -> list of SurveyPoint``, one per batch size.
    accuracies : dict
        ``width -> training-set accuracy`` of the surveyed network.
    """
    images = dataset.images.reshape(len(dataset), -1).double().numpy()
    labels = dataset.labels.numpy()
    points, accuracies = {}, {}
    for width in widths:
        model = models.build(
            "mlp", dataset.shape, dataset.num_classes, seed=seed, widths=(width, width)
        )
        if epochs:
            training.train(model, dataset, epochs=epochs, lr=lr, seed=seed, progress=False)
        accuracies[width] = training.accuracy(model, dataset)
        with single_thread():
            points[width] = survey(
                dense.from_torch(model),
                images,
                labels,
                batch_sizes,
                trials,
                np.random.default_rng(seed),
            )
    return points, accuracies


@dataclass
class PerturbationRow:
    """One first-layer width of :func:`perturbation_sweep`."""

    width: int
    dimension: int  # of the perturbation subspace used (first batch)
    largest_change: float  # lower bound of the largest one-pixel change (Fig. 5, left)
    mean_change: float  # mean |change| per pixel of the "invert" artifact batches
    gradient_difference: float  # max |G(artifact) - G(truth)| over the programmes solved
    moved_share: float = (
        0.0  # share of pixels the "invert" artifacts move by at least ``moved`` of the range
    )


def perturbation_sweep(
    dataset: data.Dataset,
    widths: Sequence[int],
    second_width: int,
    batch_size: int,
    pixels: int,
    seed: int = 0,
    batches: int = 1,
    moved: float = 0.25,
) -> list[PerturbationRow]:
    """Fig. 5 (left): artifact batches on ``(d0-w-second_width-K)`` FCNs for each first width ``w``.

    For each width, a fresh ``models.build("mlp")`` network and ``batches`` batches without
    exclusivity (drawn until :func:`analyse` calls them secure), the ``invert`` programme of
    :func:`artifact_batch` on each, and ``pixels`` one-pixel programmes on the first. The
    largest one-pixel change saturates at the whole range on images with pixels at 0 and 1;
    the mean change and the share of pixels moved by ``moved`` of the range, averaged over the
    batches, show how the room shrinks as the first layer widens.
    """
    check.positive_int("batches", batches)
    images = dataset.images.reshape(len(dataset), -1).double().numpy()
    labels = dataset.labels.numpy()
    rng = np.random.default_rng(seed)
    rows = []
    with single_thread():
        for width in widths:
            network = dense.from_torch(
                models.build(
                    "mlp",
                    dataset.shape,
                    dataset.num_classes,
                    seed=seed,
                    widths=(width, second_width),
                )
            )
            indices = [
                find_batch(network, images, batch_size, "secure", rng) for _ in range(batches)
            ]
            inverted = [
                artifact_batch(network, images[index], labels[index], "invert") for index in indices
            ]
            largest = max(artifact.largest_change for artifact in inverted)
            difference = max(artifact.gradient_difference for artifact in inverted)
            for _ in range(pixels):
                target = (int(rng.integers(batch_size)), int(rng.integers(images.shape[1])))
                single = artifact_batch(network, images[indices[0]], labels[indices[0]], target)
                largest, difference = (
                    max(largest, single.largest_change),
                    max(difference, single.gradient_difference),
                )
            mean_change = float(
                np.mean([np.abs(a.inputs - images[i]).mean() for a, i in zip(inverted, indices)])
            )
            share = float(
                np.mean(
                    [moved_share(a.inputs, images[i], moved) for a, i in zip(inverted, indices)]
                )
            )
            rows.append(
                PerturbationRow(
                    width, inverted[0].dimension, largest, mean_change, difference, share
                )
            )
    return rows


def figure5_artifact(
    dataset: data.Dataset,
    widths: Sequence[int],
    batch_size: int,
    rng: np.random.Generator,
    seed: int = 0,
) -> tuple[np.ndarray, Artifact]:
    """Fig. 5 (right): a secure batch on a seeded ``(d0-widths-K)`` FCN and its ``invert`` artifact
    batch.

    Returns the batch's indices into ``dataset`` and the :class:`Artifact`.
    """
    images = dataset.images.reshape(len(dataset), -1).double().numpy()
    network = dense.from_torch(
        models.build("mlp", dataset.shape, dataset.num_classes, seed=seed, widths=tuple(widths))
    )
    with single_thread():
        index = find_batch(network, images, batch_size, "secure", rng)
        return index, artifact_batch(network, images[index], dataset.labels[index].numpy())


def artifact_rows(
    dataset: data.Dataset, index: np.ndarray, artifact: Artifact
) -> tuple[torch.Tensor, list]:
    """The true images and ``[("artifact", ...), ("|difference|", ...)]``, for
    :func:`gradcore.plots.reconstruction_grid`."""
    truth = dataset.images[index]
    images = torch.as_tensor(artifact.inputs, dtype=torch.float32).reshape(truth.shape)
    return truth, [("artifact", images), ("|difference|", (images - truth).abs())]
