"""gradcore.attacks.matching: DLG (Zhu et al., 2019) and iDLG's label inference (Zhao et al., 2020).

Outside references: the private inputs and labels, and the attack's own objective recomputed.
"""

from __future__ import annotations

import math

import pytest
import torch

import gradcore
from gradcore import attacks, client, gradients, models

from .helpers import digit, random_images


def test_infer_labels_is_exact_for_single_samples_on_lenet():
    generator = torch.Generator().manual_seed(0)
    for seed in range(50):
        model = models.build("lenet", (3, 16, 16), 10, seed=seed)
        image = torch.rand((1, 3, 16, 16), generator=generator)
        label = torch.randint(0, 10, (1,), generator=generator)
        inferred = attacks.infer_labels(model, client.shared_gradient(model, image, label))
        assert inferred.dtype == torch.int64 and inferred.shape == (1,)
        assert inferred.item() == label.item(), f"seed {seed}"


def test_infer_labels_is_exact_for_single_samples_on_a_relu_mlp(digits, make_mlp):
    for seed in range(50):
        model = make_mlp(widths=(32,), activation="relu", seed=seed, dtype=torch.float32)
        image, label = digit(digits, seed, dtype=torch.float32)
        assert attacks.infer_labels(model, client.shared_gradient(model, image, label)).item() == label.item()


def test_infer_labels_for_a_batch_returns_sorted_labels(make_lenet):
    model = make_lenet()
    images = random_images((3, 16, 16), batch=3)
    labels = torch.tensor([7, 1, 4])
    inferred = attacks.infer_labels(model, client.shared_gradient(model, images, labels), batch_size=3)
    assert inferred.shape == (3,) and inferred.dtype == torch.int64
    assert torch.equal(inferred, inferred.sort().values)
    assert ((0 <= inferred) & (inferred < 10)).all()


def test_idlg_recovers_the_label(make_lenet):
    model = make_lenet(seed=4)
    image, label = random_images((3, 16, 16), seed=4), torch.tensor([6])
    result = attacks.attack("idlg", model, client.shared_gradient(model, image, label), shape=(3, 16, 16),
                            iterations=1, max_iter=2, progress=False)
    assert result.attack == "idlg"
    assert torch.equal(result.labels, label)


def test_dlg_gradient_descent_on_the_linear_unit_converges(digits, make_linear_unit):
    model = make_linear_unit(seed=0)
    image, label = digit(digits, 0)
    target = label.double()
    shared = client.shared_gradient(model, image, target, "half_squared_error")
    result = attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error", truth=image,
                            optimiser="gd", lr=0.005, iterations=400, progress=False)
    mse = result.history["mse"]
    assert not result.diverged
    assert mse[-1] < 1e-12 * mse[0]  # many orders of magnitude
    assert max(mse[200:]) < min(mse[:10])  # and down to stay
    assert result.history["objective"][-1] < 1e-12 * result.history["objective"][0]
    assert (result.reconstruction - image).abs().max().item() < 1e-6


def test_dlg_lbfgs_on_lenet_reduces_the_objective(make_lenet):
    model = make_lenet(seed=1)
    image, label = random_images((3, 16, 16), seed=1), torch.tensor([2])
    shared = client.shared_gradient(model, image, label)
    result = attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, truth=image, iterations=3, max_iter=5,
                            progress=False)
    objective = result.history["objective"]
    assert objective[-1] < 0.5 * objective[0]
    assert result.history["iteration"] == [0, 1, 2, 3]


def test_dlg_history_records_the_objective_of_the_recorded_iterate(make_lenet):
    model = make_lenet(seed=2)
    image, label = random_images((3, 16, 16), seed=2), torch.tensor([5])
    shared = client.shared_gradient(model, image, label)
    result = attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, optimiser="gd", lr=0.1, iterations=3,
                            progress=False)
    recomputed = attacks.euclidean_distance(gradients.batch_gradient(model, result.reconstruction, label), shared).item()
    assert result.history["objective"][-1] == pytest.approx(recomputed, rel=1e-5)
    assert result.history["objective"][1] != result.history["objective"][0]


def dlg_on_lenet(seed, **config):
    model = models.build("lenet", (3, 16, 16), 10, seed=0)
    image, label = random_images((3, 16, 16), seed=9), torch.tensor([1])
    shared = client.shared_gradient(model, image, label)
    return attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, seed=seed, iterations=2, max_iter=3,
                          progress=False, **config)


def test_dlg_is_reproducible_with_its_seed():
    first, again, other = dlg_on_lenet(3), dlg_on_lenet(3), dlg_on_lenet(4)
    assert torch.equal(first.reconstruction, again.reconstruction)
    assert first.history["objective"] == again.history["objective"]
    assert not torch.equal(first.reconstruction, other.reconstruction)


def test_dlg_learns_soft_labels_when_none_are_given(make_lenet):
    model = make_lenet()
    images, labels = random_images((3, 16, 16), batch=2), torch.tensor([3, 8])
    result = attacks.attack("dlg", model, client.shared_gradient(model, images, labels), shape=(3, 16, 16),
                            batch_size=2, optimiser="adam", lr=0.05, iterations=2, progress=False)
    assert result.labels.shape == (2,) and result.labels.dtype == torch.int64


def test_dlg_keeps_the_model_precision(digits, make_mlp):
    model = make_mlp()
    image, label = digit(digits)
    result = attacks.attack("dlg", model, client.shared_gradient(model, image, label), shape=(1, 8, 8), labels=label,
                            optimiser="gd", iterations=1, progress=False)
    assert result.reconstruction.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_diverging_run_is_flagged_and_keeps_a_finite_reconstruction(digits, make_linear_unit, dtype):
    model = make_linear_unit(dtype=dtype)
    image, label = digit(digits, dtype=dtype)
    target = label.to(dtype)
    shared = client.shared_gradient(model, image, target, "half_squared_error")
    result = attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error", truth=image,
                            optimiser="gd", lr=1e6, iterations=50, snapshots=(0, 50), progress=False)
    assert result.diverged
    assert torch.isfinite(result.reconstruction).all()
    assert len(result.history["iteration"]) < 51  # it stopped early
    assert len({len(values) for values in result.history.values()}) == 1
    assert [iteration for iteration, _ in result.snapshots] == [0]


def test_dlg_rejects_learning_labels_for_a_regression_loss(make_linear_unit, digits):
    model = make_linear_unit()
    image, label = digit(digits)
    shared = client.shared_gradient(model, image, label.double(), "half_squared_error")
    with pytest.raises(ValueError, match="labels can only be learned for a cross-entropy loss"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), loss="half_squared_error", progress=False)


@pytest.mark.parametrize("option, value, fragment", [
    ("optimiser", "newton", r"unknown optimiser 'newton'; known optimisers: (?=.*adam)(?=.*\bgd\b)(?=.*lbfgs)"),
    ("init", "zeros", r"unknown initialisation 'zeros'; known initialisations: (?=.*gray)(?=.*\brand\b)(?=.*randn)"),
])
def test_dlg_unknown_options(digits, make_mlp, option, value, fragment):
    model = make_mlp()
    image, label = digit(digits)
    with pytest.raises(KeyError, match=fragment):
        attacks.attack("dlg", model, client.shared_gradient(model, image, label), shape=(1, 8, 8), labels=label,
                       iterations=1, progress=False, **{option: value})


def test_dlg_reconstructs_a_whole_batch_and_records_every_so_often(make_lenet):
    model = make_lenet()
    images, labels = random_images((3, 16, 16), batch=3), torch.tensor([0, 4, 9])
    result = attacks.attack("dlg", model, client.shared_gradient(model, images, labels), shape=[3, 16, 16],
                            batch_size=3, labels=labels, truth=images, optimiser="gd", lr=0.1, iterations=5,
                            record_every=2, init="gray", snapshots=[0, 3], progress=False)
    assert result.reconstruction.shape == (3, 3, 16, 16)
    assert result.history["iteration"] == [0, 2, 4, 5]
    assert [iteration for iteration, _ in result.snapshots] == [0, 3]
    assert torch.equal(result.snapshots[0][1], torch.full((3, 3, 16, 16), 0.5))
    assert result.score(images, "mse").shape == (3,)


def test_infer_labels_checks_its_batch_size(mlp_case):
    # batch_size=0 divided by zero inside the heuristic.
    model, image, label, shared = mlp_case
    with pytest.raises(ValueError, match="batch_size must be at least 1; got 0"):
        attacks.infer_labels(model, shared, batch_size=0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        attacks.infer_labels(model, (shared[0] * math.nan,) + shared[1:])


def test_idlg_leaves_the_callers_observation_alone(mlp_case):
    model, image, label, shared = mlp_case
    observation = attacks.Observation(model, shared, (1, 8, 8), 1, progress=False)
    result = attacks.ATTACKS["idlg"](observation, optimiser="gd", lr=0.1, iterations=2)
    assert observation.labels is None
    assert result.labels.tolist() == label.tolist()


def test_dlg_restarts_keep_the_start_with_the_smallest_gradient_distance(mlp_case):
    model, image, label, shared = mlp_case
    config = {"optimiser": "gd", "lr": 0.1, "iterations": 5, "labels": label, "truth": image, "progress": False}
    single = attacks.attack("dlg", model, shared, shape=(1, 8, 8), **config)
    assert torch.equal(attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=1, **config).reconstruction,
                       single.reconstruction)
    several = attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=3, **config)
    assert several.final("objective") <= single.final("objective")
    satisfied = attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=3, restart_above=1e9, **config)
    assert torch.equal(satisfied.reconstruction, single.reconstruction)  # the first start was good enough
    with pytest.raises(gradcore.GradcoreValueError, match="restarts"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=0, **config)

