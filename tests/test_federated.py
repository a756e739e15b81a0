"""gradcore.federated: the Dirichlet split and FedSGD with a defense in the first rounds.

Outside references: set arithmetic on the split, numpy statistics of class shares, and
the parameters before and after rounds whose updates a defense scales to nothing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradcore import data, federated, models


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=400)


def test_dirichlet_split_is_a_partition_and_reproducible(digits):
    parts = federated.dirichlet_split(digits.labels, 8, alpha=0.5, seed=3, minimum=5)
    everything = np.concatenate(parts)
    assert len(everything) == len(digits) and len(np.unique(everything)) == len(digits)
    assert min(len(p) for p in parts) >= 5
    again = federated.dirichlet_split(digits.labels, 8, alpha=0.5, seed=3, minimum=5)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def test_small_alpha_skews_the_clients_labels(digits):
    labels = digits.labels.numpy()

    def dominant_share(alpha):
        parts = federated.dirichlet_split(labels, 10, alpha=alpha, seed=0)
        return np.mean([np.bincount(labels[p], minlength=10).max() / len(p) for p in parts])

    assert dominant_share(0.05) > 0.6 > dominant_share(100.0)
    assert dominant_share(100.0) < 0.25  # near the i.i.d. 1/10 (plus sampling noise)


@pytest.mark.parametrize("arguments, fragment", [
    ({"clients": 0, "alpha": 1.0}, "at least one client"),
    ({"clients": 4, "alpha": 0.0}, "alpha must be positive"),
    ({"clients": 300, "alpha": 1.0, "minimum": 2}, "cannot give 300 clients"),
])
def test_dirichlet_split_errors(digits, arguments, fragment):
    with pytest.raises(ValueError, match=fragment):
        federated.dirichlet_split(digits.labels, **arguments)


def test_training_learns_and_a_defense_acts_only_in_its_rounds(digits):
    train_set, test_set = data.split(digits, 0.25, seed=0)
    assert len(train_set) == 300 and len(test_set) == 100
    options = dict(clients=4, per_round=2, alpha=1.0, batch_size=16, lr=0.5, evaluate_every=5, progress=False)

    def parameters(model):
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    # A clip to a vanishing norm makes the defended rounds' updates vanish: nothing moves in them.
    frozen = models.build("mlp", digits.shape, 10, seed=0, widths=(16,))
    start = parameters(frozen)
    federated.fedsgd(frozen, train_set, test_set, rounds=2, defense="clip", defense_options={"bound": 1e-12},
                    defended_rounds=2, **options)
    assert (parameters(frozen) - start).abs().max() < 1e-10
    moving = models.build("mlp", digits.shape, 10, seed=0, widths=(16,))
    federated.fedsgd(moving, train_set, test_set, rounds=3, defense="clip", defense_options={"bound": 1e-12},
                    defended_rounds=2, **options)
    assert (parameters(moving) - start).abs().max() > 1e-4

    model = models.build("mlp", digits.shape, 10, seed=0, widths=(16,))
    log = federated.fedsgd(model, train_set, test_set, rounds=30, **options)
    assert log.rounds == [0, 5, 10, 15, 20, 25, 30]
    assert log.final() > log.accuracy[0] + 0.3


def test_clients_per_round_is_checked(digits):
    train_set, test_set = data.split(digits, 0.25)
    model = models.build("mlp", digits.shape, 10, seed=0, widths=(4,))
    with pytest.raises(ValueError, match="clients per round"):
        federated.fedsgd(model, train_set, test_set, rounds=1, clients=3, per_round=4, progress=False)
    with pytest.raises(ValueError, match="test fraction"):
        data.split(digits, 1.0)


def test_poisson_client_sampling_draws_each_client_at_the_rate(digits):
    train_set, test_set = data.split(digits, 0.25)
    runs = {}
    for sampling in ("fixed", "poisson"):
        model = models.build("mlp", digits.shape, 10, seed=0, widths=(4,))
        runs[sampling] = federated.fedsgd(model, train_set, test_set, rounds=200, clients=4, per_round=1, lr=0.0,
                                          progress=False, client_sampling=sampling)
    fixed, poisson = (sum(log.releases.values()) for log in runs.values())
    assert fixed == 200  # exactly one client per round
    # Poisson at rate 1/4 over 4 clients and 200 rounds: 200 expected updates, standard deviation sqrt(150) ~ 12.
    assert poisson != 200 and abs(poisson - 200) < 5 * 150 ** 0.5
    assert all(abs(count - 50) < 5 * 37.5 ** 0.5 for count in runs["poisson"].releases.values())
    with pytest.raises(ValueError, match="client sampling"):
        federated.fedsgd(models.build("mlp", digits.shape, 10, seed=0, widths=(4,)), train_set, test_set, rounds=1,
                         progress=False, client_sampling="round-robin")
