"""The Inverting Gradients attack on a FedAvg update (local training unrolled)."""

import torch

from gradcore import data, experiments, inverting


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
