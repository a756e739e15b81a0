"""gradcore.gradients: what a client computes and shares.

Outside references: central finite differences of the loss (float64), the
single-sample gradient, numpy for norms, and the defenses applied by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from gradcore import client, gradients


def finite_difference_gradient(model, inputs, targets, loss, step=1e-6):
    """Central differences of the batch-mean loss with respect to every trainable parameter."""
    objective = gradients.loss_function(loss)
    result = []
    with torch.no_grad():
        for parameter in gradients.trainable(model):
            estimate = torch.zeros_like(parameter)
            flat, out = parameter.view(-1), estimate.view(-1)
            for index in range(flat.numel()):
                original = flat[index].item()
                flat[index] = original + step
                upper = objective(model(inputs), targets).item()
                flat[index] = original - step
                lower = objective(model(inputs), targets).item()
                flat[index] = original
                out[index] = (upper - lower) / (2 * step)
            result.append(estimate)
    return tuple(result)


def sample(shape=(1, 8, 8), batch=3, num_classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.rand((batch, *shape), generator=generator, dtype=torch.float64)
    labels = torch.randint(0, num_classes, (batch,), generator=generator)
    return inputs, labels


# ----------------------------------------------------------------------------------
# batch_gradient against finite differences
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["cross_entropy", "half_squared_error"])
def test_batch_gradient_matches_finite_differences_on_sigmoid_mlp(make_mlp, loss):
    model = make_mlp(shape=(6,), num_classes=4, widths=(5,), activation="sigmoid", seed=1)
    inputs, labels = sample(shape=(6,), batch=3, num_classes=4, seed=2)
    targets = labels if loss == "cross_entropy" else F.one_hot(labels, 4).double()
    analytic = gradients.batch_gradient(model, inputs, targets, loss)
    numeric = finite_difference_gradient(model, inputs, targets, loss)
    assert len(analytic) == len(list(model.parameters())) == 4
    for a, n in zip(analytic, numeric):
        assert a.dtype == torch.float64 and a.shape == n.shape
        torch.testing.assert_close(a, n, rtol=0, atol=1e-8)


def test_batch_gradient_matches_finite_differences_on_linear_unit(make_linear_unit):
    model = make_linear_unit(shape=(1, 3, 3), seed=3)
    inputs, _ = sample(shape=(1, 3, 3), batch=4, seed=4)
    targets = torch.tensor([[0.5], [1.0], [-2.0], [3.0]], dtype=torch.float64)
    analytic = gradients.batch_gradient(model, inputs, targets, "half_squared_error")
    numeric = finite_difference_gradient(model, inputs, targets, "half_squared_error")
    for a, n in zip(analytic, numeric):
        torch.testing.assert_close(a, n, rtol=0, atol=1e-8)
    # ... and the closed form the DLG source prints: dW = (1/B) sum_j r_j x_j, db = mean r_j.
    residual = model(inputs) - targets
    torch.testing.assert_close(analytic[0], (residual * inputs.flatten(1)).mean(0, keepdim=True), rtol=0, atol=1e-14)
    torch.testing.assert_close(analytic[1], residual.mean(0), rtol=0, atol=1e-14)


def test_soft_label_cross_entropy_equals_index_cross_entropy_on_one_hot(make_mlp):
    model = make_mlp(shape=(6,), num_classes=4, widths=(5,))
    inputs, labels = sample(shape=(6,), batch=5, num_classes=4)
    hard = gradients.batch_gradient(model, inputs, labels)
    soft = gradients.batch_gradient(model, inputs, F.one_hot(labels, 4).double())
    for h, s in zip(hard, soft):
        torch.testing.assert_close(h, s, rtol=0, atol=1e-14)


def test_half_squared_error_against_numpy():
    outputs = torch.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=torch.float64)
    targets = torch.tensor([[0.0, 2.5], [1.0, 1.0]], dtype=torch.float64)
    expected = 0.5 * np.mean(np.sum((outputs.numpy() - targets.numpy()) ** 2, axis=1))
    assert gradients.half_squared_error(outputs, targets).item() == pytest.approx(expected, abs=1e-15)


def test_create_graph_keeps_the_gradient_differentiable_in_the_inputs(make_mlp):
    model = make_mlp(shape=(6,), num_classes=4, widths=(5,))
    inputs, labels = sample(shape=(6,), batch=2, num_classes=4)
    inputs.requires_grad_(True)
    gradient = gradients.batch_gradient(model, inputs, labels, create_graph=True)
    second = torch.autograd.grad(sum(g.pow(2).sum() for g in gradient), inputs)[0]
    assert second.shape == inputs.shape and torch.isfinite(second).all() and second.abs().sum() > 0
    plain = gradients.batch_gradient(model, inputs.detach(), labels)
    assert not any(g.requires_grad for g in plain)


def test_loss_function_lookup():
    assert gradients.loss_function("cross_entropy") is gradients.cross_entropy
    custom = lambda o, t: o.sum()  # noqa: E731
    assert gradients.loss_function(custom) is custom
    with pytest.raises(KeyError, match=r"unknown loss 'hinge'; known losses: (?=.*cross_entropy)(?=.*half_squared_error)"):
        gradients.loss_function("hinge")


def test_trainable_skips_frozen_parameters(make_mlp):
    model = make_mlp(shape=(6,), num_classes=4, widths=(5,))
    model[1].bias.requires_grad_(False)
    assert len(gradients.trainable(model)) == 3
    inputs, labels = sample(shape=(6,), batch=2, num_classes=4)
    assert [g.shape for g in gradients.batch_gradient(model, inputs, labels)] == [(5, 6), (4, 5), (4,)]


# ----------------------------------------------------------------------------------
# per_sample_gradients
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model_name", ["mlp_relu", "mlp_sigmoid", "lenet"])
def test_per_sample_gradients_average_to_the_batch_gradient(model_name, make_mlp, make_lenet):
    if model_name == "lenet":
        model, shape = make_lenet(shape=(3, 16, 16), num_classes=5, dtype=torch.float64), (3, 16, 16)
    else:
        model, shape = make_mlp(shape=(1, 8, 8), num_classes=5, widths=(7,), activation=model_name[4:]), (1, 8, 8)
    inputs, labels = sample(shape=shape, batch=4, num_classes=5, seed=5)
    per_sample = gradients.per_sample_gradients(model, inputs, labels)
    batch = gradients.batch_gradient(model, inputs, labels)
    assert len(per_sample) == len(batch)
    for s, b in zip(per_sample, batch):
        assert s.shape == (4, *b.shape)
        torch.testing.assert_close(s.mean(0), b, rtol=0, atol=1e-10)
    for j in range(4):
        single = gradients.batch_gradient(model, inputs[j : j + 1], labels[j : j + 1])
        for s, g in zip(per_sample, single):
            torch.testing.assert_close(s[j], g, rtol=0, atol=1e-10)


def test_per_sample_gradients_with_regression_targets(make_linear_unit):
    model = make_linear_unit(shape=(1, 4, 4))
    inputs, _ = sample(shape=(1, 4, 4), batch=3)
    targets = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    per_sample = gradients.per_sample_gradients(model, inputs, targets, "half_squared_error")
    batch = gradients.batch_gradient(model, inputs, targets, "half_squared_error")
    for s, b in zip(per_sample, batch):
        torch.testing.assert_close(s.mean(0), b, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------
# validate
# ----------------------------------------------------------------------------------


@pytest.fixture
def valid(make_mlp):
    model = make_mlp(shape=(6,), num_classes=4, widths=(5,))
    inputs, labels = sample(shape=(6,), batch=2, num_classes=4)
    return model, client.shared_gradient(model, inputs, labels)


def test_validate_accepts_a_real_gradient(valid):
    model, gradient = valid
    checked = gradients.validate(list(gradient), model)
    assert isinstance(checked, tuple) and all(c is g for c, g in zip(checked, gradient))


def test_validate_accepts_a_partly_zero_gradient(valid):
    model, gradient = valid
    gradients.validate((torch.zeros_like(gradient[0]),) + gradient[1:], model)


@pytest.mark.parametrize("problem, fragments", [
    ("empty", ["empty", "4 for this model"]),
    ("count", ["3 tensors", "4 trainable parameters"]),
    ("shape", ["entry 2", "shape (5, 4)", "(4, 5)"]),
    ("type", ["entry 1", "must be a tensor", "float64 array"]),
    ("nan", ["entry 3", "1 NaN or infinite"]),
    ("inf", ["entry 0", "2 NaN or infinite"]),
    ("zero", ["zero everywhere"]),
])
def test_validate_names_the_problem(valid, problem, fragments):
    model, gradient = valid
    gradient = list(gradient)
    if problem == "empty":
        gradient = []
    elif problem == "count":
        gradient = gradient[:3]
    elif problem == "shape":
        gradient[2] = gradient[2].T
    elif problem == "type":
        gradient[1] = gradient[1].numpy()
    elif problem == "nan":
        gradient[3] = gradient[3].clone()
        gradient[3][1] = math.nan
    elif problem == "inf":
        gradient[0] = gradient[0].clone()
        gradient[0][0, 0], gradient[0][1, 1] = math.inf, -math.inf
    elif problem == "zero":
        gradient = [torch.zeros_like(g) for g in gradient]
    with pytest.raises(ValueError) as caught:
        gradients.validate(gradient, model)
    for fragment in fragments:
        assert fragment in str(caught.value)


# ----------------------------------------------------------------------------------
# flatten and norm
# ----------------------------------------------------------------------------------


def test_flatten_and_norm_against_numpy():
    generator = torch.Generator().manual_seed(0)
    gradient = (torch.randn((3, 4), generator=generator, dtype=torch.float64),
                torch.randn((5,), generator=generator, dtype=torch.float64))
    flat = gradients.flatten(gradient)
    expected = np.concatenate([g.numpy().ravel() for g in gradient])
    np.testing.assert_array_equal(flat.numpy(), expected)
    assert gradients.norm(gradient).item() == pytest.approx(np.linalg.norm(expected), rel=1e-14)


# ----------------------------------------------------------------------------------
# Issue 14: what the client is given is checked before anything is computed
# ----------------------------------------------------------------------------------


def test_a_float_label_is_refused_not_broadcast(make_mlp):
    model = make_mlp()
    inputs, _ = sample(batch=1)
    with pytest.raises(TypeError, match=r"targets are a float32 tensor of shape \(1,\): cross-entropy takes integer class indices"):
        client.shared_gradient(model, inputs, torch.tensor([3.0]))
    probabilities = torch.full((1, 10), 0.1, dtype=torch.float64)  # per-class probabilities remain welcome
    assert len(client.shared_gradient(model, inputs, probabilities)) == 4


def test_an_empty_batch_is_refused(make_mlp):
    # It returned a gradient of zeros.
    model = make_mlp()
    inputs, labels = sample(batch=1)
    with pytest.raises(ValueError, match=r"inputs is an empty batch \(shape \(0, 1, 8, 8\)\)"):
        client.shared_gradient(model, inputs[:0], labels[:0])


@pytest.mark.parametrize("labels, fragment", [
    (torch.tensor([12]), r"class indices in 0 .. 9 \(the model has 10 outputs\); got values from 12 to 12"),
    (torch.tensor([-1]), "got values from -1 to -1"),
    (torch.tensor([1, 2]), "2 targets given for a batch of 1"),
])
def test_labels_outside_the_classes_are_refused(make_mlp, labels, fragment):
    # torch answered "IndexError: Target 12 is out of bounds".
    model = make_mlp()
    inputs, _ = sample(batch=1)
    for function in (client.shared_gradient, gradients.per_sample_gradients, gradients.local_update):
        with pytest.raises(ValueError, match=fragment):
            function(model, inputs, labels)


def test_inputs_of_the_wrong_shape_or_dtype_are_named(make_mlp, make_lenet):
    # torch answered "mat1 and mat2 shapes cannot be multiplied" or a reshape error.
    model = make_mlp()
    inputs, labels = sample(batch=2)
    with pytest.raises(ValueError, match=r"inputs are float32 but the model's parameters are float64: convert one to the other"):
        client.shared_gradient(model, inputs.float(), labels)
    with pytest.raises(ValueError, match=r"inputs of shape \(3, 8, 8\) \(one sample\) do not fit the model"):
        client.shared_gradient(model, inputs.repeat(1, 3, 1, 1), labels)
    lenet = make_lenet()
    with pytest.raises(ValueError, match=r"inputs of shape \(3, 20, 20\) \(one sample\) do not fit the model"):
        client.shared_gradient(lenet, torch.rand(1, 3, 20, 20), torch.tensor([1]))


def test_local_update_checks_its_step_and_epochs(make_mlp):
    model = make_mlp()
    inputs, labels = sample(batch=2)
    with pytest.raises(ValueError, match="lr must be > 0; got -0.1"):
        gradients.local_update(model, inputs, labels, lr=-0.1)
    with pytest.raises(TypeError, match="epochs must be a whole number at least 1; got 1.5"):
        gradients.local_update(model, inputs, labels, epochs=1.5)


