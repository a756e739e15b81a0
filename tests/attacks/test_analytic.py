"""gradcore.attacks.analytic: the closed form, the minimal-structure attacks (least squares, two-step).

Outside references: the private inputs themselves (the closed forms are exact), the numpy analysis.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradcore
from gradcore import attacks, client, models
from gradcore.analysis import minimal

from .helpers import digit, random_images


def test_closed_form_is_exact_on_the_linear_unit(digits, make_linear_unit):
    model = make_linear_unit(seed=1)
    for seed in range(5):
        image, label = digit(digits, seed)
        target = label.double()
        shared = client.shared_gradient(model, image, target, "half_squared_error")
        result = attacks.attack("closed_form", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error",
                                truth=image, progress=False)
        assert result.reconstruction.shape == (1, 1, 8, 8) and result.reconstruction.dtype == torch.float64
        assert (result.reconstruction - image).abs().max().item() < 1e-10
        assert result.history["iteration"] == [0] and result.history["mse"][0] < 1e-20
        assert torch.equal(result.labels, target)


@pytest.mark.parametrize("activation", ["sigmoid", "relu", "tanh"])
def test_closed_form_is_exact_through_a_biased_first_layer(digits, make_mlp, activation):
    model = make_mlp(widths=(20, 16), activation=activation, seed=2)
    for seed in range(3):
        image, label = digit(digits, seed + 10)
        shared = client.shared_gradient(model, image, label)
        result = attacks.attack("closed_form", model, shared, shape=(1, 8, 8), progress=False)
        assert (result.reconstruction - image).abs().max().item() < 1e-10
        assert result.labels is None  # the closed form recovers inputs only


def test_closed_form_refuses_a_batch(digits, make_mlp):
    model = make_mlp()
    images, labels = digits.batch(2, seed=0)
    shared = client.shared_gradient(model, images.double(), labels)
    with pytest.raises(ValueError, match="single sample; a batch of 2 yields only a mixture"):
        attacks.attack("closed_form", model, shared, shape=(1, 8, 8), batch_size=2, progress=False)


def test_closed_form_needs_a_biased_fully_connected_first_layer(digits, make_mlp, make_lenet):
    image, label = digit(digits)
    unbiased = make_mlp(bias=False)
    with pytest.raises(ValueError, match="needs a bias in the first fully-connected layer"):
        attacks.attack("closed_form", unbiased, client.shared_gradient(unbiased, image, label), shape=(1, 8, 8),
                       progress=False)
    lenet = make_lenet()
    picture = random_images((3, 16, 16))
    with pytest.raises(ValueError, match="first weighted layer is fully connected"):
        attacks.attack("closed_form", lenet, client.shared_gradient(lenet, picture, label), shape=(3, 16, 16),
                       progress=False)


def test_closed_form_needs_the_first_layer_trainable(digits, make_mlp):
    model = make_mlp()
    for parameter in model[1].parameters():
        parameter.requires_grad_(False)
    image, label = digit(digits)
    with pytest.raises(ValueError, match="not trainable"):
        attacks.attack("closed_form", model, client.shared_gradient(model, image, label), shape=(1, 8, 8),
                       progress=False)


def _cnn_case(kernels, **options):
    torch.manual_seed(0)
    model = models.conv_mlp((1, 6, 6), 4, kernels=kernels, **options).double()
    x = torch.rand(1, 1, 6, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return model, x, gradcore.shared_gradient(model, x, torch.tensor([1]))


@pytest.mark.parametrize("activation", ["sigmoid", "tanh"])
def test_two_step_is_exact_when_kernels_suffice(activation):
    model, x, gradient = _cnn_case(4, kernel_size=3, stride=2, padding=1, hidden=5, activation=activation)  # needs 4
    result = minimal.two_step(model, gradient, (1, 6, 6))
    assert result.deconvolution.determined and result.deconvolution.method == "lstsq"
    assert minimal.relative_error(result.input, x.numpy()) < 1e-10
    attacked = gradcore.attack("two_step", model, gradient, shape=(1, 6, 6), truth=x)
    assert attacked.final("mse") < 1e-20 and attacked.seconds > 0 and attacked.history["iteration"] == [0]


def test_two_step_fails_when_kernels_are_short():
    model, x, gradient = _cnn_case(3, kernel_size=3, stride=2, padding=1, hidden=5)  # needs 4
    result = minimal.two_step(model, gradient, (1, 6, 6), iterations=200)
    assert not result.deconvolution.determined and result.deconvolution.rank == 27
    assert minimal.relative_error(result.input, x.numpy()) > 1e-2


def test_two_step_refuses_unsupported_models():
    model = models.build("lenet", (1, 8, 8), 4)
    with pytest.raises(ValueError, match="one convolutional layer"):
        minimal.two_step(model, [p.detach() for p in model.parameters()], (1, 8, 8))
    layer = torch.nn.Conv2d(1, 1, 3)
    with pytest.raises(ValueError, match="deconvolution method must be one of 'auto', 'lstsq', 'optimise'"):
        minimal.deconvolve(layer, np.zeros(36), "sigmoid", 8, method="magic")
    with pytest.raises(ValueError, match="saturated or inactive"):
        minimal.deconvolve(layer, np.zeros(36), "relu", 8)


def test_minimal_mlp_attack_on_a_non_image_input():
    # Issue 14: the attack computed the reconstruction, then failed recording its history
    # because the metrics assumed (B, C, H, W).
    model = models.build("mlp", (7,), 3, seed=0, widths=(5,)).double()
    x = torch.rand(1, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    result = gradcore.attack("minimal_mlp", model, gradcore.shared_gradient(model, x, torch.tensor([1])), shape=(7,), truth=x,
                             progress=False)
    assert result.reconstruction.shape == (1, 7)
    assert result.final("mse") < 1e-25 and result.final("psnr") > 200


def test_minimal_mlp_attack_matches_numpy():
    model = models.build("mlp", (1, 4, 4), 3, seed=0, widths=(1, 6), activation="sigmoid").double()
    x = torch.rand(1, 1, 4, 4, dtype=torch.float64)
    gradient = gradcore.shared_gradient(model, x, torch.tensor([2]))
    result = gradcore.attack("minimal_mlp", model, gradient, shape=(1, 4, 4))
    assert minimal.relative_error(result.reconstruction.numpy(), x.numpy()) < 1e-10
    with pytest.raises(ValueError, match="regularised_matching"):
        gradcore.attack("minimal_mlp", model, gradient, shape=(1, 4, 4), batch_size=2)

