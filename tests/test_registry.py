"""gradcore.registry: named collections with clear errors."""

from __future__ import annotations

import pytest

import gradcore
from gradcore.registry import Registry, UnknownNameError


def make() -> Registry:
    registry: Registry = Registry("widget")

    @registry.register("beta")
    def beta():
        return "b"

    registry.add("alpha", "a")
    return registry


def test_register_and_lookup():
    registry = make()
    assert registry["alpha"] == "a"
    assert registry["beta"]() == "b"
    assert "alpha" in registry and "gamma" not in registry
    assert registry.names() == ["alpha", "beta"]
    assert list(registry) == ["alpha", "beta"]  # sorted, whatever the registration order
    assert repr(registry) == "Registry('widget': alpha, beta)"


def test_decorator_returns_the_entry_unchanged():
    registry: Registry = Registry("thing")

    def entry():
        return 1

    assert registry.register("x")(entry) is entry
    assert registry.add("y", entry) is entry


@pytest.mark.parametrize("how", ["register", "add"])
def test_duplicate_registration_refused(how):
    registry = make()
    with pytest.raises(ValueError, match="widget 'alpha' is already registered"):
        if how == "register":
            registry.register("alpha")(lambda: None)
        else:
            registry.add("alpha", "again")
    assert registry["alpha"] == "a"  # the first entry survives


def test_unknown_name_lists_known_names():
    registry = make()
    with pytest.raises(KeyError) as caught:
        registry["gamma"]
    assert isinstance(caught.value, UnknownNameError)
    message = str(caught.value)
    assert message == "unknown widget 'gamma'; known widgets: alpha, beta"  # not quoted like a plain KeyError


def test_plural_of_a_kind_ending_in_s():
    registry: Registry = Registry("loss")
    registry.add("l1", None)
    with pytest.raises(KeyError, match="unknown loss 'hinge'; known losses: l1"):
        registry["hinge"]


def test_unknown_name_in_empty_registry():
    with pytest.raises(KeyError, match="known gadgets: none"):
        Registry("gadget")["anything"]


@pytest.mark.parametrize("registry, expected", [
    (gradcore.ATTACKS, {"closed_form", "dlg", "idlg"}),
    (gradcore.DEFENSES, {"none", "noise", "clip", "dp"}),
    (gradcore.METRICS, {"mse", "psnr", "ssim", "lpips", "lpips_vgg"}),
    (gradcore.MODELS, {"linear_unit", "mlp", "lenet", "convnet", "resnet"}),
    (gradcore.DATASETS, {"digits", "photos", "cifar10", "cifar100", "imagefolder"}),
    (gradcore.gradients.LOSSES, {"cross_entropy", "half_squared_error"}),
], ids=["attacks", "defenses", "metrics", "models", "datasets", "losses"])
def test_library_registries_hold_the_documented_entries(registry, expected):
    assert expected <= set(registry.names())
