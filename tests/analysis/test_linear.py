"""gradcore.analysis.linear: the exact numpy analysis of the linear unit.

Outside references: central finite differences of the loss, the digits rows
themselves, the residual-weighted average computed by hand, and torch's autograd
through gradcore's ``linear_unit`` model in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradcore import gradients
from gradcore.analysis import linear


@pytest.fixture
def unit():
    rng = np.random.default_rng(0)
    dimension = 64
    return rng.normal(0, 1 / np.sqrt(dimension), dimension), 0.3


def digit_rows(digits, count, seed=0):
    images, labels = digits.batch(count, seed=seed)
    return images.flatten(1).double().numpy(), labels.double().numpy()


def test_forward(unit, digits):
    weight, bias = unit
    inputs, _ = digit_rows(digits, 3)
    np.testing.assert_allclose(linear.forward(weight, bias, inputs), [x @ weight + bias for x in inputs], rtol=0, atol=1e-14)


@pytest.mark.parametrize("batch", [1, 4])
def test_gradients_match_finite_differences(unit, digits, batch):
    weight, bias = unit
    inputs, targets = digit_rows(digits, batch, seed=batch)
    weight_gradient, bias_gradient = linear.gradients(weight, bias, inputs, targets)
    assert weight_gradient.shape == weight.shape and isinstance(bias_gradient, float)
    numeric_weight = linear.finite_difference(lambda w: linear.loss(w, bias, inputs, targets), weight)
    numeric_bias = linear.finite_difference(lambda b: linear.loss(weight, float(b), inputs, targets), np.array(bias))
    assert np.max(np.abs(weight_gradient - numeric_weight)) < 1e-8
    assert abs(bias_gradient - float(numeric_bias)) < 1e-8


def test_finite_difference_of_a_known_function():
    point = np.array([[0.5, -1.0], [2.0, 0.25]])
    numeric = linear.finite_difference(lambda p: float(np.sum(p**3)), point)
    np.testing.assert_allclose(numeric, 3 * point**2, rtol=0, atol=1e-8)


def test_loss_is_the_half_squared_error(unit, digits):
    weight, bias = unit
    inputs, targets = digit_rows(digits, 5)
    residual = inputs @ weight + bias - targets
    assert linear.loss(weight, bias, inputs, targets) == pytest.approx(0.5 * np.mean(residual**2), rel=1e-15)


def test_closed_form_is_exact_for_one_digit(unit, digits):
    weight, bias = unit
    for seed in range(10):
        inputs, targets = digit_rows(digits, 1, seed=seed)
        weight_gradient, bias_gradient = linear.gradients(weight, bias, inputs[0], targets)
        recovered = linear.closed_form(weight_gradient, bias_gradient)
        assert np.max(np.abs(recovered - inputs[0])) < 1e-12


def test_closed_form_refuses_a_zero_bias_gradient(unit, digits):
    weight, bias = unit
    inputs, _ = digit_rows(digits, 1)
    fitted = linear.forward(weight, bias, inputs)  # the sample is fitted exactly: residual 0
    weight_gradient, bias_gradient = linear.gradients(weight, bias, inputs, fitted)
    assert bias_gradient == 0.0 and not np.any(weight_gradient)
    with pytest.raises(ValueError, match="bias gradient is zero"):
        linear.closed_form(weight_gradient, bias_gradient)


def test_batch_mixture_is_the_residual_weighted_average(unit, digits):
    weight, bias = unit
    inputs, targets = digit_rows(digits, 4, seed=3)
    residual = inputs @ weight + bias - targets
    assert abs(residual.sum()) > 1  # well away from the singular case
    expected = (residual / residual.sum()) @ inputs
    mixture = linear.batch_mixture(*linear.gradients(weight, bias, inputs, targets))
    assert np.max(np.abs(mixture - expected)) < 1e-12
    # It is none of the batch's images.
    assert min(np.max(np.abs(mixture - x)) for x in inputs) > 1e-3


def test_numpy_gradients_agree_with_torch_linear_unit(digits, make_linear_unit):
    model = make_linear_unit(shape=(1, 8, 8), seed=2)
    images, labels = digits.batch(4, seed=5)
    images, labels = images.double(), labels.double()
    weight = model[1].weight.detach().numpy().ravel()
    bias = float(model[1].bias.detach().item())
    torch_weight, torch_bias = gradients.batch_gradient(model, images, labels, "half_squared_error")
    numpy_weight, numpy_bias = linear.gradients(weight, bias, images.flatten(1).numpy(), labels.numpy())
    assert torch_weight.dtype == torch.float64
    np.testing.assert_allclose(torch_weight.numpy().ravel(), numpy_weight, rtol=0, atol=1e-12)
    assert abs(torch_bias.item() - numpy_bias) < 1e-12
    np.testing.assert_allclose(model(images).detach().numpy().ravel(),
                               linear.forward(weight, bias, images.flatten(1).numpy()), rtol=0, atol=1e-12)
    if hasattr(linear, "parameters"):  # (W, b) read off the model, when the helper exists
        read_weight, read_bias = linear.parameters(model)
        np.testing.assert_array_equal(read_weight, weight)
        assert read_bias == bias
