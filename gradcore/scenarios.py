"""A client's situation as the attacks see it: its private batch and the model the server sent.

A :class:`Scenario` produces what the client shares (optionally defended) and runs any
registered attack on it with the truth attached for scoring; :func:`scenario` and
:func:`scenarios` draw them from a data set. Below :mod:`gradcore.evaluation` (which attacks
scenarios) and :mod:`gradcore.experiments` (the chapters' experiments built on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import torch
from torch import nn

from . import attacks, client, data, gradients, models, specs
from . import validation as check


@dataclass
class Scenario:
    """One client with a private batch, and the model the server sent it."""

    model: nn.Module
    inputs: torch.Tensor
    labels: torch.Tensor
    loss: str
    name: str = ""

    @property
    def shape(self) -> tuple:
        return tuple(self.inputs.shape[1:])

    @property
    def batch_size(self) -> int:
        return len(self.inputs)

    def alone(self, index: int) -> "Scenario":
        """The client holding only sample ``index`` of this batch, with the same model."""
        return Scenario(
            self.model,
            self.inputs[index : index + 1],
            self.labels[index : index + 1],
            self.loss,
            self.name,
        )

    def gradient(
        self, defense: str | Mapping | None = None, seed: int = 0, **defense_options
    ) -> tuple:
        """The gradient the client shares, after ``defense``: a :data:`gradcore.DEFENSES` name with
        ``defense_options``, or a defense spec as the papers' settings hold it (``{"defense":
        "censor",
        "trials": 20}``; see :mod:`gradcore.specs`)."""
        defense, defense_options = _defense(defense, defense_options)
        return client.shared_gradient(
            self.model, self.inputs, self.labels, self.loss, defense, seed, **defense_options
        )

    def update(self, lr: float, epochs: int = 1, batch_size: int | None = None) -> tuple:
        """The FedAvg update ``theta_0 - theta_K`` after local training (see
        :func:`gradcore.gradients.local_update`)."""
        return gradients.local_update(
            self.model, self.inputs, self.labels, self.loss, lr, epochs, batch_size
        )

    def attacker_labels(self, known: bool = True) -> torch.Tensor | None:
        """The labels an attack is given: the client's, or None when ``known`` is False.

        Regression targets are always given: they are what the output layer is matched
        against, not a class the attacker could read off the gradient. Every way of attacking
        a scenario (:meth:`attack`, :func:`gradcore.evaluation.matrix`) goes through here.
        """
        return self.labels if (known or self.loss != "cross_entropy") else None

    def attack(
        self,
        name: str,
        defense: str | Mapping | None = None,
        defense_options: dict | None = None,
        known_labels: bool = True,
        seed: int = 0,
        progress: bool = False,
        local: dict | None = None,
        **config,
    ) -> attacks.AttackResult:
        """Share a (defended) gradient and run the attack ``name`` on it.

        ``known_labels=False`` hides the labels from the attacker, who must infer or
        learn them; regression targets are always known. ``local`` (``lr``, ``epochs``,
        ``batch_size``) makes the client share a FedAvg update after local training
        instead of one gradient, and tells the attack to unroll that training.
        """
        defense, options = _defense(defense, defense_options or {})
        shared = client.share(
            self.model, self.inputs, self.labels, self.loss, defense, seed, local, **options
        )
        if local is not None:
            config["local"] = local
        labels = self.attacker_labels(known_labels)
        return attacks.attack(
            name,
            self.model,
            shared,
            shape=self.shape,
            batch_size=self.batch_size,
            labels=labels,
            loss=self.loss,
            truth=self.inputs,
            seed=seed,
            progress=progress,
            **config,
        )


def _defense(defense: str | Mapping | None, options: Mapping) -> tuple[str | None, dict]:
    """A defense name and its options, from a name and options or from a defense spec.

    A spec's ``defended_rounds`` says when a deployment defends; one shared gradient is
    defended. A ``dp_sgd`` spec changes how the client trains, not one gradient: refused.
    """
    if not isinstance(defense, Mapping):
        return defense, dict(options)
    read = specs.defense_spec(defense)
    if read.dp_sgd is not None:
        raise check.GradcoreValueError(
            "a dp_sgd spec describes how a deployment trains (per-sample clipping and noise), not "
            "one shared gradient; use gradcore.privacy.dp_sgd_gradient"
        )
    repeated = sorted(set(read.options) & set(options))
    if repeated:
        raise check.GradcoreValueError(
            f"defense option {', '.join(repeated)} given twice: in the spec and as an argument"
        )
    return read.name, {**read.options, **options}


def scenario(
    dataset: data.Dataset,
    model: str | nn.Module,
    batch_size: int = 1,
    seed: int = 0,
    num_classes: int | None = None,
    dtype: torch.dtype = torch.float32,
    distinct_labels: bool = False,
    device: str | torch.device = "cpu",
    evaluation_mode: bool | None = None,
    **model_options,
) -> Scenario:
    """Draw a private batch and build a seeded model for it.

    ``model`` is a registry name (a fresh, seeded network) or a network already built,
    e.g. one trained in the chapter. ``evaluation_mode=True`` puts the network in
    evaluation mode (batch norm with its running statistics, which for an untrained
    network is the identity), ``False`` in training mode; ``None`` leaves it as it is. A
    ``linear_unit`` regresses the label's value with the half squared error, as in the DLG linear
    demonstration; every other model classifies with cross-entropy.
    """
    inputs, labels = dataset.batch(batch_size, seed=seed, distinct_labels=distinct_labels)
    if isinstance(model, nn.Module):
        network, model = model.to(device, dtype), type(model).__name__
    else:
        network = models.build(
            model, dataset.shape, num_classes or dataset.num_classes, seed=seed, **model_options
        ).to(device, dtype)
    if evaluation_mode is not None:
        network.train(not evaluation_mode)
    inputs, labels = inputs.to(device, dtype), labels.to(device)
    if model == "linear_unit":
        return Scenario(
            network, inputs, labels.to(dtype), "half_squared_error", f"{model} on {dataset.name}"
        )
    return Scenario(network, inputs, labels, "cross_entropy", f"{model} on {dataset.name}")


def scenarios(
    dataset: data.Dataset,
    model: str | Callable[[int], nn.Module],
    batch_size: int = 1,
    count: int = 1,
    seed: int = 0,
    distinct: bool = False,
    **options,
) -> list[Scenario]:
    """``count`` independent scenarios with seeds ``seed, seed + 1, ...``: a fresh private batch and
    model each.

    ``model`` is a registry name or a function ``seed -> nn.Module`` that builds a fresh
    network (for models the registry does not name, e.g. a reduced MLP); ``options`` go to
    :func:`scenario`. Each batch is drawn on its own, so two scenarios may share an image;
    ``distinct=True`` draws all ``count * batch_size`` images at once without replacement
    (one seeded permutation), so no image is attacked twice.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if not (isinstance(model, str) or callable(model)) or isinstance(model, nn.Module):
        raise TypeError(
            "model must be a registry name or a function seed -> nn.Module (a built network would "
            f"be shared by every scenario), got {type(model).__name__}"
        )
    sources = [dataset] * count
    if distinct:
        if count * batch_size > len(dataset):
            raise check.GradcoreValueError(
                f"{count} distinct batches of {batch_size} need {count * batch_size} images; "
                f"{dataset.name} has {len(dataset)}"
            )
        order = np.random.default_rng(seed).permutation(len(dataset))
        sources = [
            dataset.subset(order[i * batch_size : (i + 1) * batch_size], "drawn")
            for i in range(count)
        ]
    return [
        scenario(
            source,
            model if isinstance(model, str) else model(seed + i),
            batch_size,
            seed=seed + i,
            **options,
        )
        for i, source in enumerate(sources)
    ]
