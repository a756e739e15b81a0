"""Federated training with non-i.i.d. clients, a defense applied to every client update.

The utility half of a defense's evaluation: does the model still learn when every
client shares a defended gradient? Clients get a Dirichlet label split (Hsu et al.,
2019, the non-i.i.d. benchmark CENSOR uses, Sec. V-C); each round the server samples a
few clients, each computes the gradient of one local mini-batch and defends it, and
the server averages the defended gradients and takes one SGD step (FedSGD, the setting
the gradient-inversion papers attack). A defense can be limited to the first rounds,
as CENSOR prescribes (Sec. III, observation 1). One run per deployment spec, from the same
initial model and client sampling: :func:`gradcore.experiments.deployments.run`.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from . import data as datasets
from . import gradients, privacy
from . import validation as check
from .client import shared_gradient
from .training import accuracy


def dirichlet_split(
    labels: torch.Tensor | np.ndarray, clients: int, alpha: float, seed: int = 0, minimum: int = 1
) -> list[np.ndarray]:
    """Indices of each client's samples: per class, shares drawn from ``Dirichlet(alpha)``.

    Small ``alpha`` gives each client a few dominant classes; large ``alpha`` tends to
    the i.i.d. split. Draws repeat until every client holds at least ``minimum`` samples.
    """
    labels = np.asarray(labels)
    if clients < 1:
        raise ValueError(f"at least one client is needed, got {clients}")
    if alpha <= 0:
        raise ValueError(f"the Dirichlet concentration alpha must be positive, got {alpha}")
    if clients * minimum > len(labels):
        raise ValueError(f"{len(labels)} samples cannot give {clients} clients {minimum} each")
    rng = np.random.default_rng(seed)
    for _ in range(1000):
        parts: list[list[int]] = [[] for _ in range(clients)]
        for label in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == label))
            shares = rng.dirichlet(np.full(clients, alpha))
            cuts = (np.cumsum(shares)[:-1] * len(members)).astype(int)
            for client, chunk in enumerate(np.split(members, cuts)):
                parts[client].extend(chunk.tolist())
        if min(len(p) for p in parts) >= minimum:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(
        f"no Dirichlet({alpha}) split gave all {clients} clients {minimum} samples in 1000 draws; "
        "raise alpha"
    )


@dataclass
class FederatedLog:
    """Test accuracy after selected rounds (round 0 is the initial model)."""

    rounds: list = field(default_factory=list)
    accuracy: list = field(default_factory=list)
    #: DP-SGD runs only: ``{client: privacy.Participation}`` (its sampling rate, the steps it took).
    participation: dict = field(default_factory=dict)
    #: Every run: ``{client: updates it sent}``, what the server saw of each client (its releases).
    releases: dict = field(default_factory=dict)

    def final(self) -> float:
        return self.accuracy[-1]


def fedsgd(
    model: nn.Module,
    train_set: datasets.Dataset,
    test_set: datasets.Dataset,
    rounds: int,
    clients: int = 10,
    per_round: int = 5,
    alpha: float = 0.5,
    batch_size: int = 32,
    lr: float = 0.1,
    defense: str | None = None,
    defense_options: dict | None = None,
    defended_rounds: int | None = None,
    evaluate_every: int = 10,
    seed: int = 0,
    loss: str = "cross_entropy",
    progress: bool = True,
    dp_sgd: dict | None = None,
    client_sampling: str = "fixed",
) -> FederatedLog:
    """FedSGD over a Dirichlet split, every selected client's gradient defended; ``model`` trains in
    place.

    Parameters
    ----------
    rounds : int
        Communication rounds.
    clients, per_round : int
        Clients in all, and sampled per round (the paper: 100 and 10).
    alpha : float
        Dirichlet concentration of :func:`dirichlet_split`.
    batch_size : int
        Local mini-batch per client per round.
    lr : float
        Server step on the averaged gradient.
    defense, defense_options
        A :data:`gradcore.defenses.DEFENSES` name and its options; it sees the client's
        model, batch and loss, so CENSOR can score its candidates.
    defended_rounds : int, optional
        Apply the defense only in the first so many rounds (CENSOR's deployment); all
        rounds when ``None``.
    evaluate_every : int
        Rounds between test-accuracy evaluations.
    dp_sgd : dict, optional
        ``{"noise_multiplier": z, "max_grad_norm": C}``: DP-SGD clients instead of a defense
        (see :func:`fedsgd_snapshots`).
    client_sampling : {"fixed", "poisson"}
        How the round's clients are drawn (see :func:`fedsgd_snapshots`).
    """
    log, _ = fedsgd_snapshots(
        model,
        train_set,
        test_set,
        rounds,
        (),
        clients,
        per_round,
        alpha,
        batch_size,
        lr,
        defense,
        defense_options,
        defended_rounds,
        evaluate_every,
        seed,
        loss,
        progress,
        dp_sgd,
        client_sampling,
    )
    return log


def fedsgd_snapshots(
    model: nn.Module,
    train_set: datasets.Dataset,
    test_set: datasets.Dataset,
    rounds: int,
    at=(0,),
    clients: int = 10,
    per_round: int = 5,
    alpha: float = 0.5,
    batch_size: int = 32,
    lr: float = 0.1,
    defense: str | None = None,
    defense_options: dict | None = None,
    defended_rounds: int | None = None,
    evaluate_every: int = 10,
    seed: int = 0,
    loss: str = "cross_entropy",
    progress: bool = True,
    dp_sgd: dict | None = None,
    client_sampling: str = "fixed",
) -> tuple[FederatedLog, dict]:
    """:func:`fedsgd`, also keeping a copy of the global model the server sends at the rounds
    ``at``.

    The same split, client sampling, defense and server steps as :func:`fedsgd` with the
    same arguments, so the log is identical. ``at`` counts server steps: the copy at ``t``
    is the model after ``t`` steps (``0``: the initial model), on which the clients compute
    the updates of the next round; that round is defended when ``t < defended_rounds``.
    This is what an attacker who picks the round sees (CENSOR, Sec. III, observation 1:
    attacks succeed mostly in the first epochs; Table V: later rounds are harder to invert).

    ``dp_sgd`` (``{"noise_multiplier": z, "max_grad_norm": C}``) makes every client a DP-SGD
    client (:func:`gradcore.privacy.dp_sgd_gradient`: a Poisson-sampled batch of expected size
    about ``batch_size``, per-sample clipping, noise) instead of sharing the gradient of a
    fixed-size batch; the client sampling is the same, and the log records each client's
    sampling rate and steps for :func:`gradcore.privacy.deployment_guarantee`.

    ``client_sampling="fixed"`` draws exactly ``per_round`` clients without replacement;
    ``"poisson"`` lets each client join independently with probability ``per_round /
    clients`` (possibly none), the sampling the client-level accountant assumes
    (DP-FedSGD, McMahan et al., ICLR 2018); either way the server divides the sum of the
    updates by ``per_round`` (the expected count, their fixed-denominator estimator).

    Returns
    -------
    log : FederatedLog
    snapshots : dict
        ``{t: nn.Module}``, deep copies in evaluation mode.
    """
    at = sorted({int(t) for t in at})
    if at and not 0 <= at[0] <= at[-1] < rounds:
        raise ValueError(
            f"snapshot rounds must lie in [0, {rounds - 1}] (the model before the last step), got "
            f"{at}"
        )
    if not 1 <= per_round <= clients:
        raise ValueError(f"clients per round must be between 1 and {clients}, got {per_round}")
    if client_sampling not in ("fixed", "poisson"):
        raise check.GradcoreValueError(
            f"client sampling is 'fixed' or 'poisson', got {client_sampling!r}"
        )
    parts = dirichlet_split(train_set.labels, clients, alpha, seed)
    rng = np.random.default_rng(seed + 1)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    parameters = gradients.trainable(model)
    if dp_sgd is not None and defense is not None:
        raise ValueError(
            "DP-SGD clients add their own noise; give either dp_sgd or a defense, not both "
            f"({defense!r})"
        )
    log = FederatedLog([0], [accuracy(model, test_set)])
    snapshots = {}
    for round_number in tqdm(
        range(1, rounds + 1),
        desc=f"federated ({defense or 'none'})",
        disable=not progress,
        file=sys.stderr,
        mininterval=2.0,
        ncols=80,
    ):
        if round_number - 1 in at:  # the model this round's clients receive
            snapshots[round_number - 1] = copy.deepcopy(model).eval()
        model.train()
        total = [torch.zeros_like(p) for p in parameters]
        defended = defense is not None and (
            defended_rounds is None or round_number <= defended_rounds
        )
        chosen = (
            rng.choice(clients, size=per_round, replace=False)
            if client_sampling == "fixed"
            else np.flatnonzero(rng.random(clients) < per_round / clients)
        )
        for client in chosen:
            own = parts[client]
            pick = rng.choice(own, size=min(batch_size, len(own)), replace=False)
            inputs = train_set.images[pick].to(device, dtype)
            labels = train_set.labels[pick].to(device)
            client_seed = int(rng.integers(2**31))
            if (
                dp_sgd is not None
            ):  # the same draws as above, so every deployment samples the same clients
                update, rate = privacy.dp_sgd_gradient(
                    model,
                    train_set.images[own].to(device, dtype),
                    train_set.labels[own].to(device),
                    batch_size,
                    seed=client_seed,
                    loss=loss,
                    **dp_sgd,
                )
                log.participation.setdefault(int(client), privacy.Participation(rate)).steps += 1
            else:
                update = shared_gradient(
                    model,
                    inputs,
                    labels,
                    loss,
                    defense if defended else None,
                    seed=client_seed,
                    **((defense_options or {}) if defended else {}),
                )
            log.releases[int(client)] = log.releases.get(int(client), 0) + 1
            total = [t + u for t, u in zip(total, update)]
        with torch.no_grad():
            for p, t in zip(parameters, total):
                p -= lr * t / per_round
        if round_number % evaluate_every == 0 or round_number == rounds:
            log.rounds.append(round_number)
            log.accuracy.append(accuracy(model, test_set))
    model.eval()
    return log, snapshots
