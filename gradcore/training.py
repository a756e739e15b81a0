"""Ordinary training, for chapters that attack a trained model.

The papers attack untrained and trained networks alike; pretrained weights are not
available offline, so chapters train small models here on the embedded data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from tqdm import tqdm

from . import data as datasets
from .gradients import loss_function


@dataclass
class TrainingLog:
    """Loss and accuracy on the training set after each epoch."""

    loss: list = field(default_factory=list)
    accuracy: list = field(default_factory=list)


def accuracy(model: nn.Module, dataset: datasets.Dataset, batch_size: int = 256) -> float:
    """Share of ``dataset`` that ``model`` classifies correctly (evaluated in eval mode)."""
    mode = model.training
    model.eval()
    correct = 0
    device = next(model.parameters()).device
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            images = dataset.images[start : start + batch_size].to(device)
            correct += (
                (model(images).argmax(1).cpu() == dataset.labels[start : start + batch_size])
                .sum()
                .item()
            )
    model.train(mode)
    return correct / len(dataset)


def train(
    model: nn.Module,
    dataset: datasets.Dataset,
    epochs: int = 10,
    lr: float = 1e-3,
    batch_size: int = 32,
    seed: int = 0,
    loss: str = "cross_entropy",
    progress: bool = True,
) -> TrainingLog:
    """Train ``model`` in place with Adam on shuffled mini-batches; seeded, so it repeats
    exactly."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    objective = loss_function(loss)
    device = next(model.parameters()).device
    log = TrainingLog()
    model.train()
    for _ in tqdm(range(epochs), desc="training", disable=not progress, mininterval=2.0, ncols=80):
        order = torch.randperm(len(dataset), generator=generator)
        total = 0.0
        for start in range(0, len(dataset), batch_size):
            index = order[start : start + batch_size]
            optimizer.zero_grad()
            value = objective(
                model(dataset.images[index].to(device)), dataset.labels[index].to(device)
            )
            value.backward()
            optimizer.step()
            total += value.item() * len(index)
        log.loss.append(total / len(dataset))
        log.accuracy.append(accuracy(model, dataset))
    model.eval()
    return log
