"""gradcore.models: the attacked networks, built by name with seeded weights."""

from __future__ import annotations

import math

import pytest
import torch

from gradcore import models
from gradcore.validation import GradcoreTypeError, GradcoreValueError

#: Small but valid settings per registered model: (input shape, options).
SETTINGS = {
    "linear_unit": ((1, 8, 8), {}),
    "mlp": ((1, 8, 8), {"widths": (16, 8)}),
    "lenet": ((3, 16, 16), {}),
    "convnet": ((3, 32, 32), {"width": 4}),  # two 3x3 max-pools need 32x32
    "resnet": ((3, 16, 16), {"depth": 18, "width": 8}),
}


@pytest.mark.parametrize("name", models.MODELS.names())
def test_every_model_builds_and_runs_forward(name):
    assert name in SETTINGS, f"add small settings for the new model {name!r} to SETTINGS"
    shape, options = SETTINGS[name]
    model = models.build(name, shape, 7, seed=0, **options)
    assert isinstance(model, torch.nn.Module)
    outputs = model(torch.rand(2, *shape))
    assert outputs.shape == (2, 1 if name == "linear_unit" else 7)
    assert torch.isfinite(outputs).all()
    assert models.count_parameters(model) > 0


@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 28, 28), (3, 17, 15)])
def test_lenet_handles_any_image_side(shape):
    assert models.build("lenet", shape, 10)(torch.rand(1, *shape)).shape == (1, 10)


def test_resnet_50_uses_bottlenecks():
    model = models.build("resnet", (3, 16, 16), 5, depth=50, width=4)
    assert model(torch.rand(1, 3, 16, 16)).shape == (1, 5)
    assert model[-1].in_features == 4 * 8 * 4  # width * 2**3 * bottleneck expansion


def test_bad_resnet_depth_raises():
    with pytest.raises(ValueError, match=r"ResNet depth must be one of \[18, 34, 50, 101\], got 20"):
        models.build("resnet", (3, 32, 32), 10, depth=20)


def test_unknown_model_and_activation():
    with pytest.raises(KeyError, match=r"unknown model 'vit'; known models: (?=.*convnet)(?=.*lenet)(?=.*linear_unit)(?=.*resnet)"):
        models.build("vit", (3, 32, 32), 10)
    with pytest.raises(KeyError, match="unknown activation 'gelu'"):
        models.build("mlp", (4,), 2, activation="gelu")


def test_build_is_seeded():
    first = models.build("lenet", (3, 16, 16), 10, seed=5).state_dict()
    again = models.build("lenet", (3, 16, 16), 10, seed=5).state_dict()
    other = models.build("lenet", (3, 16, 16), 10, seed=6).state_dict()
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not any(torch.equal(first[k], other[k]) for k in first)


def test_build_restores_the_global_random_state():
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    models.build("mlp", (1, 8, 8), 10, seed=9)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(torch.rand(5), expected)


def test_build_restores_the_random_state_even_when_it_fails():
    state = torch.random.get_rng_state()
    with pytest.raises(ValueError):
        models.build("resnet", (3, 32, 32), 10, seed=1, depth=7)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_lenet_dlg_initialisation_is_uniform_in_half_unit_interval():
    model = models.build("lenet", (3, 32, 32), 10, seed=0)
    values = torch.cat([p.detach().ravel() for p in model.parameters()])
    assert values.min().item() >= -0.5 and values.max().item() <= 0.5
    assert values.min().item() < -0.49 and values.max().item() > 0.49  # it spans the interval
    assert abs(values.mean().item()) < 0.01 and values.std().item() == pytest.approx(1 / math.sqrt(12), rel=0.03)
    default = models.build("lenet", (3, 32, 32), 10, seed=0, init="default")
    assert not torch.equal(default[0].weight, model[0].weight)
    with pytest.raises(ValueError, match="unknown LeNet init 'xavier'"):
        models.build("lenet", (3, 32, 32), 10, init="xavier")


def test_lenet_architecture_follows_dlg():
    model = models.build("lenet", (3, 32, 32), 100)
    convolutions = [m for m in model if isinstance(m, torch.nn.Conv2d)]
    assert [c.stride for c in convolutions] == [(2, 2), (2, 2), (1, 1)]
    assert all(c.kernel_size == (5, 5) and c.out_channels == 12 for c in convolutions)
    assert sum(isinstance(m, torch.nn.Sigmoid) for m in model) == 3
    assert model[-1].in_features == 768 and model[-1].out_features == 100


def test_linear_unit_initialisation():
    model = models.build("linear_unit", (1, 32, 32), 10, seed=0)  # num_classes is ignored: one output
    layer = model[1]
    assert layer.weight.shape == (1, 1024) and layer.bias.shape == (1,)
    assert layer.bias.item() == 0.0
    assert layer.weight.std().item() == pytest.approx(1 / 32, rel=0.1)


def test_mlp_layers_and_parameter_count():
    model = models.build("mlp", (1, 8, 8), 10, widths=(100,), activation="tanh")
    assert isinstance(model[2], torch.nn.Tanh)
    assert models.count_parameters(model) == 64 * 100 + 100 + 100 * 10 + 10
    unbiased = models.build("mlp", (1, 8, 8), 10, widths=(100,), bias=False)
    assert models.count_parameters(unbiased) == 64 * 100 + 100 * 10
    model[1].weight.requires_grad_(False)
    assert models.count_parameters(model) == 100 + 100 * 10 + 10


# ----------------------------------------------------------------------------------
# Issue 14: build checks its arguments before building
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arguments, error, fragment", [
    ((("mlp", (1, 8, 8), 0)), ValueError, "num_classes must be at least 1; got 0"),
    ((("mlp", (1, 8, 8), 2.0)), TypeError, "num_classes must be a whole number at least 1; got 2.0"),
    ((("mlp", (1, 0, 8), 10)), ValueError, r"shape\[1\] must be at least 1; got 0"),
    ((("mlp", "1x8x8", 10)), TypeError, "shape must be a sequence of whole numbers"),
    ((("lenet", (64,), 10)), ValueError, r"model 'lenet' takes images shaped \(C, H, W\)"),
    ((("convnet", (3, 8, 8), 10)), ValueError, "H and W at least 9"),
])
def test_bad_arguments_are_refused_before_building(arguments, error, fragment):
    # num_classes=0 used to build a network with no output.
    with pytest.raises(error, match=fragment):
        models.build(*arguments)


def test_bad_options_name_the_option():
    with pytest.raises(ValueError, match=r"widths \(option of model 'mlp'\)\[0\] must be at least 1; got 0"):
        models.build("mlp", (1, 8, 8), 10, widths=(0,))
    with pytest.raises(TypeError, match="model 'lenet' has no option 'widths'; its options: init"):
        models.build("lenet", (3, 16, 16), 10, widths=(8,))
    with pytest.raises(TypeError, match=r"seed must be a whole number"):
        models.build("mlp", (1, 8, 8), 10, seed="0")


def test_fcn_and_hybrid_cnn_seed_the_global_generator_and_repeat():
    first = models.fcn((1, 8, 8), 10, (16, 8), seed=4)
    state = torch.random.get_rng_state()
    again = models.fcn((1, 8, 8), 10, (16, 8), seed=4)
    assert torch.equal(state, torch.random.get_rng_state())  # left where building from seed 4 leaves it
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), again.parameters()))
    assert [type(m).__name__ for m in first] == ["Flatten", "Linear", "ReLU", "Linear", "ReLU", "Linear"]
    cnn = models.hybrid_cnn((3, 8, 8), 5, channels=4, width=12, seed=1)
    assert cnn(torch.rand(2, 3, 8, 8)).shape == (2, 5)


def test_a_model_named_with_its_options_is_that_model_configured():
    assert models.parse("resnet(width=8)") == ("resnet", {"width": 8})
    assert models.parse("lenet") == ("lenet", {})
    narrow = models.build("resnet(width=8)", (3, 32, 32), 10, seed=0)
    same = models.build("resnet", (3, 32, 32), 10, seed=0, width=8)
    assert all(torch.equal(a, b) for a, b in zip(narrow.state_dict().values(), same.state_dict().values()))
    for bad in ("resnet(8)", "resnet(width=8", "resnet(width=wide)", "resnet(width=8)(1)"):
        with pytest.raises(GradcoreValueError, match="neither a registered name"):
            models.build(bad, (3, 32, 32), 10)
    with pytest.raises(GradcoreValueError, match="width given twice"):
        models.build("resnet(width=8)", (3, 32, 32), 10, width=4)
    with pytest.raises(GradcoreTypeError, match="registry name"):
        models.build(8, (3, 32, 32), 10)


def test_seeded_gives_the_callers_random_stream_back_and_repeats_itself():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    with models.seeded(5):
        first = torch.rand(2)
    assert torch.equal(torch.rand(3), expected)  # the block did not move the caller's stream
    with models.seeded(5):
        assert torch.equal(torch.rand(2), first)


def test_output_layer_is_the_last_linear_or_none():
    mlp = models.build("mlp", (1, 4, 4), 3, widths=(5,))
    assert models.output_layer(mlp) is mlp[-1]
    assert models.output_layer(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())) is None


def test_the_convnet_has_the_papers_convolution_biases_unless_told_not_to():
    with_bias = models.build("convnet", (3, 9, 9), 2, width=2)
    without = models.build("convnet", (3, 9, 9), 2, width=2, bias=False)
    convolutions = [m for m in with_bias.modules() if isinstance(m, torch.nn.Conv2d)]
    assert all(m.bias is not None for m in convolutions)
    assert all(m.bias is None for m in without.modules() if isinstance(m, torch.nn.Conv2d))
    count = sum(p.numel() for p in with_bias.parameters()) - sum(p.numel() for p in without.parameters())
    assert count == sum(m.out_channels for m in convolutions)
