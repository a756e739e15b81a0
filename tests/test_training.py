"""Training helper and the FedAvg client update."""

import copy

import pytest
import torch

from gradcore import data, experiments, gradients, models, training


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=200)


def test_train_is_seeded_and_learns(digits):
    first = models.build("mlp", digits.shape, 10, seed=0, widths=(32,))
    second = copy.deepcopy(first)
    log = training.train(first, digits, epochs=5, lr=1e-2, seed=3, progress=False)
    training.train(second, digits, epochs=5, lr=1e-2, seed=3, progress=False)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
    assert log.accuracy[-1] > 0.8 and log.loss[-1] < log.loss[0]
    assert training.accuracy(first, digits) == pytest.approx(log.accuracy[-1])


def _manual_sgd(model, inputs, labels, lr, epochs, batch_size):
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr)
    for _ in range(epochs):
        for start in range(0, len(inputs), batch_size):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(trained(inputs[start:start + batch_size]), labels[start:start + batch_size]).backward()
            optimizer.step()
    return [p0.detach() - p1.detach() for p0, p1 in zip(model.parameters(), trained.parameters())]


@pytest.mark.parametrize("epochs,batch_size", [(1, None), (3, 2), (2, 3)])
def test_local_update_matches_torch_sgd(digits, epochs, batch_size):
    case = experiments.scenario(digits, "mlp", 4, seed=1, dtype=torch.float64, widths=(16,))
    update = gradients.local_update(case.model, case.inputs, case.labels, lr=0.1, epochs=epochs, batch_size=batch_size)
    expected = _manual_sgd(case.model, case.inputs, case.labels, 0.1, epochs, batch_size or 4)
    assert max((a - b).abs().max().item() for a, b in zip(update, expected)) < 1e-12


def test_one_full_batch_step_is_lr_times_gradient(digits):
    case = experiments.scenario(digits, "mlp", 3, seed=2, dtype=torch.float64, widths=(8,))
    update = gradients.local_update(case.model, case.inputs, case.labels, lr=0.5)
    gradient = gradients.batch_gradient(case.model, case.inputs, case.labels)
    assert max((u - 0.5 * g).abs().max().item() for u, g in zip(update, gradient)) < 1e-14


def test_local_update_leaves_model_untouched_and_checks_arguments(digits):
    case = experiments.scenario(digits, "mlp", 4, seed=0, widths=(8,))
    before = [p.detach().clone() for p in case.model.parameters()]
    gradients.local_update(case.model, case.inputs, case.labels, lr=1.0, epochs=2, batch_size=2)
    assert all(torch.equal(a, b) for a, b in zip(before, case.model.parameters()))
    with pytest.raises(ValueError, match="epochs"):
        gradients.local_update(case.model, case.inputs, case.labels, epochs=0)
    with pytest.raises(ValueError, match="local batch size"):
        gradients.local_update(case.model, case.inputs, case.labels, batch_size=5)


def test_unrolled_update_is_differentiable_in_the_inputs(digits):
    case = experiments.scenario(digits, "mlp", 2, seed=0, dtype=torch.float64, widths=(8,))
    params = {n: p.detach() for n, p in case.model.named_parameters()}
    inputs = case.inputs.clone().requires_grad_(True)
    after = gradients.unrolled_update(case.model, params, inputs, case.labels, "cross_entropy", 0.1, 2, 1)
    total = sum(v.sum() for v in after.values())
    (derivative,) = torch.autograd.grad(total, inputs)
    assert derivative.abs().sum() > 0


def test_scenario_accepts_a_built_model(digits):
    model = models.build("mlp", digits.shape, 10, seed=5, widths=(8,))
    case = experiments.scenario(digits, model, 2, seed=1)
    assert case.model is model and case.batch_size == 2 and case.loss == "cross_entropy"
