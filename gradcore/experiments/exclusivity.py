"""The neuron-exclusivity chapter's experiments that run attacks (Pan et al., USENIX Security 2022).

The analysis itself (exclusive neurons, surveys, artifact batches, reduction) is
:mod:`gradcore.exclusivity`; the attacks are :mod:`gradcore.attacks.exclusivity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import attacks, data, defenses, models, training
from .. import gradients as grads
from .. import validation as check


@dataclass
class LearningSweep:
    """Result of :func:`learning_attack_sweep`: per width and batch size, the optimisation attack's PSNRs."""

    psnr: dict  # {width: {batch size: [mean PSNR of each batch]}}
    threshold: float  # dB: a batch counts as recovered at or above it

    def recovered(self, width: int, batch_size: int) -> float:
        """Share of the batches recovered (mean PSNR at least :attr:`threshold`)."""
        values = self.psnr[width][batch_size]
        return float(np.mean([value >= self.threshold for value in values]))

    def by_batch(self) -> dict:
        """``{batch size: recovered share}``, pooled over the widths."""
        sizes = next(iter(self.psnr.values()))
        return {size: float(np.mean([self.recovered(width, size) for width in self.psnr])) for size in sizes}

    def by_width(self) -> dict:
        """``{width: recovered share}``, pooled over the batch sizes."""
        return {width: float(np.mean([self.recovered(width, size) for size in sizes])) for width, sizes in self.psnr.items()}


def learning_attack_sweep(dataset: data.Dataset, widths: Sequence[int], batch_sizes: Sequence[int], trials: int,
                          attack_config: dict, seed: int = 0, threshold: float = 40.0) -> LearningSweep:
    """How a learning-based attack fares across widths and batch sizes (Pan et al., Theorem 1's trend).

    Theorem 1 bounds the average reconstruction error of learning-based attacks: the bound
    grows with the batch size and the input dimension and shrinks as the layers widen. Here
    DLG (``gradcore.attack("dlg", ...)`` with the labels given and ``attack_config``) attacks
    ``trials`` random batches per batch size on float64 ``(d0-w-w-K)`` ReLU FCNs, one per width;
    batch ``t`` of size ``M`` is ``dataset.batch(M, seed=seed * 1000 + t)``, the same for every width.
    """
    check.positive_int("trials", trials)
    check.integers("batch_sizes", batch_sizes, low=1)
    psnr: dict = {}
    for width in widths:
        model = models.build("mlp", dataset.shape, dataset.num_classes, seed=seed, widths=(width, width)).double()
        psnr[width] = {}
        for size in batch_sizes:
            values = []
            for trial in range(trials):
                inputs, labels = dataset.batch(size, seed=seed * 1000 + trial)
                inputs = inputs.double()
                gradient = grads.batch_gradient(model, inputs, labels)
                result = attacks.attack("dlg", model, gradient, shape=dataset.shape, batch_size=size, labels=labels, truth=inputs,
                                        seed=seed, progress=False, **attack_config)
                values.append(float(result.score(inputs, "psnr").mean()))
            psnr[width][size] = values
    return LearningSweep(psnr, threshold)


def reduction_accuracy(dataset: data.Dataset, widths: Sequence[int], epochs: int, lr: float, holdout: int,
                       seed: int = 0) -> dict:
    """Held-out accuracy of the FCN with and without its first ReLU, same initial weights and training (Sec. 6).

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
