"""The Inverting Gradients attack on a FedAvg update (local training unrolled)."""

import copy

import torch

import gradcore

from gradcore import data, experiments
from gradcore.attacks import inverting


def _case():
    photos = data.load("photos", size=16, per_photo=2)
    case = experiments.scenario(photos, "mlp", 1, seed=0, dtype=torch.float64, widths=(16,))
    return case


def test_unrolled_objective_is_zero_at_the_truth_and_batched_equals_single():
    case = _case()
    local = {"lr": 0.1, "epochs": 3}
    update = case.update(**local)
    single = inverting.batched_objective(case.model, update, case.labels, "cross_entropy", 0.0, 1, local)
    batched = inverting.batched_objective(case.model, update, case.labels, "cross_entropy", 0.0, 2, local)
    stack = torch.stack([case.inputs, torch.rand_like(case.inputs)])
    direction_single, value_single = single(stack[:1])
    direction_batched, value_batched = batched(stack)
    assert abs(value_single.item()) < 1e-10  # one minus a cosine: round-off of the norms
    assert abs(value_batched[0].item() - value_single.item()) < 1e-12
    assert (direction_batched[0] - direction_single[0]).abs().max() < 1e-10
    assert value_batched[1] > 1e-3


def test_attack_on_update_returns_the_contract():
    case = _case()
    result = case.attack("inverting_gradients", local={"lr": 0.01, "epochs": 2}, iterations=12, record_every=4)
    assert result.reconstruction.shape == case.inputs.shape
    assert result.reconstruction.min() >= 0 and result.reconstruction.max() <= 1
    assert result.history["iteration"] == [0, 4, 8, 12]
    assert result.labels.tolist() == case.labels.tolist()


def test_local_update_of_a_training_mode_batchnorm_model_leaves_its_statistics_alone(photos):
    """A client in training mode: batch norm uses batch statistics and the server's running averages stay put."""
    model = gradcore.models.build("convnet", (3, 16, 16), 8, seed=0, width=4).train()
    before = {name: b.clone() for name, b in model.named_buffers()}
    inputs, labels = photos.images[:2], torch.tensor([0, 1])
    update = gradcore.gradients.local_update(model, inputs, labels, lr=0.1, epochs=1)
    single = gradcore.gradients.batch_gradient(copy.deepcopy(model), inputs, labels)  # a copy may move its own statistics
    assert all(torch.allclose(u, 0.1 * g, atol=1e-6) for u, g in zip(update, single))
    assert all(torch.equal(before[name], b) for name, b in model.named_buffers())


def test_a_defended_update_gives_context_aware_defenses_the_client():
    """Soteria needs the client's model and data; a defended FedAvg update must pass them like a gradient does."""
    case = _case()
    result = case.attack("inverting_gradients", defense="soteria", defense_options={"prune": 0.5}, local={"lr": 0.01, "epochs": 1},
                         iterations=2, record_every=1)
    assert result.reconstruction.shape == case.inputs.shape
