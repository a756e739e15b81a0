"""What the Flower clients and the curious server agree on, without Flower: the deployment's data.

A deployment is described by two plain, JSON-serialisable objects, so that they can cross
process boundaries (Flower runs each app in a process of its own):

* the *setup*: the model (a :func:`gradcore.models.build` spec), the data set and which of
  its images each client (``partition-id``) holds, the seed and where the server writes what
  it captures;
* the *schedule*: one entry per round, the update every client sends that round (its
  defense, or DP-SGD through Opacus; one local SGD step, FedSGD, or ``local`` FedAvg
  training).

:func:`client_update` is the one function both sides use: Flower's clients call it inside
the deployment, and the book calls it in-process to check that what the server captured is
exactly what gradcore computes for the same batch. :func:`load_captures` reads what the
curious server recorded and :func:`observed_gradient` turns a capture into the gradient the
book's attacks take (Zhu et al., 2019, Sec. 3: the FedSGD update is ``-lr`` times the
gradient; McMahan et al., 2017: a FedAvg update is ``theta_0 - theta_K``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import torch
from torch import nn

from .. import client as sharing
from .. import data, defenses, models, privacy, specs
from .. import gradients as grads
from .. import validation as check

DP_SGD_KEYS = ("noise_multiplier", "max_grad_norm", "batch_size")


def make_setup(
    model: str,
    dataset: str,
    partitions: Sequence[Sequence[int]],
    captures: str | Path,
    seed: int = 0,
    dataset_options: Mapping | None = None,
) -> dict:
    """A deployment's setup: ``partitions[i]`` are the indices of ``dataset`` that client ``i``
    holds."""
    check.integer("seed", seed)
    if not partitions or any(len(part) == 0 for part in partitions):
        raise check.GradcoreValueError(
            f"every client needs at least one image; got partitions {list(partitions)}"
        )
    data.DATASETS[dataset]  # an unknown name fails here, naming the known ones
    models.parse(model)
    return {
        "model": model,
        "dataset": dataset,
        "dataset_options": dict(dataset_options or {}),
        "partitions": [[int(i) for i in part] for part in partitions],
        "captures": str(captures),
        "seed": seed,
    }


def make_round(
    label: str,
    defense: Mapping | None = None,
    lr: float = 0.1,
    local: Mapping | None = None,
    dp_sgd: Mapping | None = None,
) -> dict:
    """One round of the schedule: every client's update that round (see the module docstring)."""
    check.number("lr", lr, low=0, low_open=True)
    if defense is not None and dp_sgd is not None:
        raise check.GradcoreValueError(f"round {label!r}: give a defense or DP-SGD, not both")
    if dp_sgd is not None and sorted(dp_sgd) != sorted(DP_SGD_KEYS):
        raise check.GradcoreValueError(
            f"round {label!r}: DP-SGD takes exactly {', '.join(DP_SGD_KEYS)}; got {sorted(dp_sgd)}"
        )
    if dp_sgd is not None and local is not None:
        raise check.GradcoreValueError(
            f"round {label!r}: DP-SGD here is one step (FedSGD); drop local"
        )
    check.local_training("local", {"lr": lr, **local} if local is not None else None)
    spec = dict(defense) if defense is not None else None
    if spec is not None and specs.defense_spec(spec).name is not None:
        read = specs.defense_spec(spec)
        defenses.check_options(read.name, defenses.DEFENSES[read.name], dict(read.options))
    return {
        "label": str(label),
        "defense": spec,
        "dp_sgd": dict(dp_sgd) if dp_sgd else None,
        "lr": float(lr),
        "local": dict(local) if local else None,
    }


def dataset_of(setup: Mapping) -> data.Dataset:
    return data.load(setup["dataset"], **setup["dataset_options"])


def partition(
    setup: Mapping, dataset: data.Dataset, partition_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The images and labels client ``partition_id`` holds."""
    if not 0 <= partition_id < len(setup["partitions"]):
        raise check.GradcoreValueError(
            f"partition-id {partition_id} out of range: the setup has {len(setup['partitions'])} "
            "clients"
        )
    indices = torch.tensor(setup["partitions"][partition_id])
    return dataset.images[indices], dataset.labels[indices]


def global_model(setup: Mapping, dataset: data.Dataset) -> nn.Module:
    """The model the server starts from (seeded by the setup)."""
    return models.build(
        setup["model"], tuple(dataset.images.shape[1:]), len(dataset.classes), seed=setup["seed"]
    )


def client_seed(setup: Mapping, server_round: int, partition_id: int) -> int:
    """The seed of a client's defense in one round: different per round and client, fixed per
    deployment."""
    return 1000 * int(setup["seed"]) + 10 * int(server_round) + int(partition_id)


def client_update(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, round_spec: Mapping, seed: int
) -> grads.Gradient:
    """``theta_0 - theta_1``: what the client's training moves its weights by, after its defense.

    One local step (``local`` is None) moves them by ``lr`` times the shared gradient: the
    gradient defended by ``defense``, or DP-SGD's noisy clipped gradient computed by Opacus
    (Abadi et al., 2016, Algorithm 1). With ``local``, the defended FedAvg update of
    :func:`gradcore.client.share`.
    """
    spec = dict(round_spec["defense"] or {})
    name = spec.pop("defense", None)
    lr = round_spec["lr"]
    if round_spec["dp_sgd"] is not None:
        gradient, _ = privacy.dp_sgd_gradient(
            model, images, labels, seed=seed, **round_spec["dp_sgd"]
        )
        return tuple(lr * g for g in gradient)
    if round_spec["local"] is not None:
        return sharing.share(
            model,
            images,
            labels,
            defense=name,
            seed=seed,
            local={"lr": lr, **round_spec["local"]},
            **spec,
        )
    return tuple(
        lr * g
        for g in sharing.shared_gradient(model, images, labels, defense=name, seed=seed, **spec)
    )


def updated_state(model: nn.Module, update: Sequence[torch.Tensor]) -> dict:
    """The client's state dict after moving its trainable weights by ``-update``."""
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    names = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    for name, step in zip(names, update, strict=True):
        state[name] = state[name] - step
    return state


@dataclass(frozen=True)
class Capture:
    """What the curious server recorded of one client in one round: the model sent, the model
    returned."""

    server_round: int
    partition_id: int
    round_spec: dict
    sent: dict
    returned: dict
    num_examples: int

    @property
    def label(self) -> str:
        return self.round_spec["label"]


def capture_path(directory: str | Path, server_round: int, partition_id: int) -> Path:
    return Path(directory) / f"round{server_round:03d}-client{partition_id:03d}.pt"


def save_capture(directory: str | Path, capture: Capture) -> Path:
    path = capture_path(directory, capture.server_round, capture.partition_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "server_round": capture.server_round,
            "partition_id": capture.partition_id,
            "round_spec": json.dumps(capture.round_spec),
            "sent": capture.sent,
            "returned": capture.returned,
            "num_examples": capture.num_examples,
        },
        path,
    )
    return path


def load_captures(directory: str | Path) -> list[Capture]:
    """Every capture the server wrote under ``directory``, by round then client."""
    paths = sorted(Path(directory).glob("round*-client*.pt"))
    if not paths:
        raise check.GradcoreValueError(
            f"no captures under {directory}: did the deployment run (gradcore.flower.run)?"
        )
    out = []
    for path in paths:
        raw = torch.load(path, weights_only=True)
        out.append(
            Capture(
                raw["server_round"],
                raw["partition_id"],
                json.loads(raw["round_spec"]),
                raw["sent"],
                raw["returned"],
                raw["num_examples"],
            )
        )
    return out


def received_model(setup: Mapping, dataset: data.Dataset, capture: Capture) -> nn.Module:
    """The global model as the server sent it that round (what the attacker differentiates)."""
    model = global_model(setup, dataset)
    model.load_state_dict(capture.sent)
    return model


def observed_update(model: nn.Module, capture: Capture) -> grads.Gradient:
    """``theta_sent - theta_returned`` per trainable parameter, in the model's parameter order."""
    names = [name for name, parameter in model.named_parameters() if parameter.requires_grad]
    return tuple((capture.sent[name] - capture.returned[name]).detach() for name in names)


def observed_gradient(model: nn.Module, capture: Capture) -> grads.Gradient:
    """The gradient the attacks take: the one-step update divided by the step size.

    A FedAvg round (``local`` training) has no single gradient: attack :func:`observed_update`
    with the unrolled attack of the Inverting Gradients chapter instead.
    """
    if capture.round_spec["local"] is not None:
        raise check.GradcoreValueError(
            f"round {capture.server_round} ({capture.label}) trained locally for several steps: "
            "its update is not one gradient; use observed_update"
        )
    return tuple(step / capture.round_spec["lr"] for step in observed_update(model, capture))
