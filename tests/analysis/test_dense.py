"""gradcore.analysis.dense: the float64 dense network every exact analysis shares, and its gradient.

Outside references: central differences of the loss and torch autograd
(``batch_gradient``) for the gradients, with ReLU, sigmoid and tanh activations and
without the first activation (exclusivity reduction).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from networks import WIDTHS, network_and_sample, torch_mlp  # noqa: E402

import gradcore
from gradcore import defenses, models
from gradcore import gradients as grads
from gradcore.analysis import dense
from gradcore.analysis import walkback as wb


@pytest.mark.parametrize("bias, loss", [(True, "cross_entropy"), ([False, False, True], "cross_entropy"),
                                        ([True, False, True], "half_squared_error")])
def test_analytic_gradients_match_central_differences(bias, loss):
    network, sample, label = network_and_sample(1, bias=bias)
    target = label if loss == "cross_entropy" else np.random.default_rng(2).normal(size=WIDTHS[-1])
    assert wb.central_difference_check(network, sample, target, step=1e-6, loss=loss) < 1e-8
    batch = np.random.default_rng(3).random((3, WIDTHS[0]))
    labels = np.array([0, 5, 5]) if loss == "cross_entropy" else np.random.default_rng(4).normal(size=(3, WIDTHS[-1]))
    assert wb.central_difference_check(network, batch, labels, loss=loss) < 1e-8


@pytest.mark.parametrize("loss", ["cross_entropy", "half_squared_error"])
def test_analytic_gradients_match_torch_autograd_on_a_batch(loss):
    model = torch_mlp(seed=5)
    images = torch.rand((4, 1, 8, 8), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    labels = torch.tensor([1, 7, 7, 3]) if loss == "cross_entropy" else torch.randn((4, 10), dtype=torch.float64)
    reference = wb.gradient_pairs_from_torch(model, grads.batch_gradient(model, images, labels, loss))
    ours = dense.gradients(dense.from_torch(model), images.reshape(4, -1).numpy(), labels.numpy(), loss)
    for (weight, bias), (weight_reference, bias_reference) in zip(ours, reference):
        assert np.abs(weight - weight_reference).max() < 1e-12 and np.abs(bias - bias_reference).max() < 1e-12


def test_dense_gradients_match_central_differences_with_sigmoids():
    rng = np.random.default_rng(1)
    network = dense.random_network((5, 4, 3, 3), rng, activation="sigmoid")
    x, y = rng.normal(size=(2, 5)), np.array([0, 2])
    analytic = dense.gradients(network, x, y)
    for layer in (0, 2):
        for parameter, index in ((network.weights[layer], 0), (network.biases[layer], 1)):
            numeric = np.zeros_like(parameter)
            for position in np.ndindex(parameter.shape):
                parameter[position] += 1e-6
                up = dense.loss_value(network, x, y)
                parameter[position] -= 2e-6
                numeric[position] = (up - dense.loss_value(network, x, y)) / 2e-6
                parameter[position] += 1e-6
            assert np.abs(numeric - analytic[layer][index]).max() < 1e-8


def test_dense_gradients_match_torch_autograd_with_tanh():
    model = models.build("mlp", (1, 4, 4), 5, seed=0, widths=(6, 5), activation="tanh").double()
    x, y = torch.rand(3, 1, 4, 4, dtype=torch.float64), torch.tensor([0, 4, 2])
    torch_gradient = gradcore.batch_gradient(model, x, y)
    ours = dense.gradients(dense.from_torch(model), x.flatten(1).numpy(), y.numpy())
    flat = [array for pair in ours for array in pair]
    assert all(np.allclose(a, t.numpy(), atol=1e-14) for a, t in zip(flat, torch_gradient))


def test_a_reduced_network_matches_torch_without_the_first_relu():
    model = defenses.exclusivity_reduction(models.fcn((1, 8, 8), 10, (16, 12), seed=0)).double()
    network = dense.from_torch(model)
    assert network.activation == "relu" and not network.first_activation
    images = torch.rand((3, 1, 8, 8), dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    labels = torch.tensor([2, 0, 9])
    reference = [t.numpy() for t in grads.batch_gradient(model, images, labels)]
    ours = [array for pair in dense.gradients(network, images.reshape(3, -1).numpy(), labels.numpy()) for array in pair]
    assert all(np.abs(a - r).max() < 1e-12 for a, r in zip(ours, reference))
    assert network.with_first_activation(True).weights[0] is network.weights[0]
    assert network.with_first_activation(False) is network


def test_from_torch_reads_the_activation_and_refuses_what_it_cannot_copy():
    assert dense.from_torch(models.build("mlp", (1, 4, 4), 3, seed=0, widths=(5,), activation="sigmoid")).activation == "sigmoid"
    mixed = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3), torch.nn.Tanh(),
                                torch.nn.Linear(3, 2))
    with pytest.raises(gradcore.GradcoreValueError, match="mixes activations"):
        dense.from_torch(mixed)
    with pytest.raises(gradcore.GradcoreValueError, match="module 1 is Conv2d"):
        dense.from_torch(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Conv2d(1, 1, 3)))
    with pytest.raises(gradcore.GradcoreValueError, match="end on one"):
        dense.from_torch(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
    with pytest.raises(KeyError):
        dense.DenseNetwork([np.ones((2, 3))], activation="swish")
