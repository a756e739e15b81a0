"""Reconstruction quality on [0, 1] pixels: MSE, PSNR, SSIM, LPIPS.

Every metric takes ``(reconstruction, truth)`` batches of shape ``(B, C, H, W)`` and
returns one value per image; :data:`METRICS` holds them by name. MSE and PSNR also take
batches of other inputs, ``(B, ...)``. Both batches must be floating-point tensors of
the same shape (uint8 images in 0-255 are refused, not scored as -40 dB), the truth
finite. SSIM follows
Wang et al. (2004) with scikit-image's defaults (7x7 uniform window, sample
covariance), so the two agree to float precision.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F

from . import validation as check
from .registry import Registry

METRICS: Registry = Registry("metric")

#: Which way is better for the attacker, per metric.
HIGHER_IS_BETTER = {"mse": False, "psnr": True, "ssim": True, "lpips": False}


def _check_pair(reconstruction: torch.Tensor, truth: torch.Tensor, images: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Both batches checked (floating, same shape, a finite truth; ``(B, C, H, W)`` when ``images``), as float64."""
    check.tensor("reconstruction", reconstruction, floating=True)
    check.tensor("truth", truth, floating=True)
    if reconstruction.shape != truth.shape:
        raise check.GradcoreValueError(f"reconstruction has shape {tuple(reconstruction.shape)}, truth has {tuple(truth.shape)}")
    if images and reconstruction.dim() != 4:
        raise check.GradcoreValueError(f"expected image batches shaped (B, C, H, W), got {tuple(truth.shape)}")
    if reconstruction.dim() < 2 or len(truth) == 0:
        raise check.GradcoreValueError(f"expected batches shaped (B, ...) with B >= 1, got {tuple(truth.shape)}")
    check.finite("truth", truth)
    return reconstruction.detach().double(), truth.detach().double()


@METRICS.register("mse")
def mse(reconstruction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image (or per sample of any batch ``(B, ...)``)."""
    reconstruction, truth = _check_pair(reconstruction, truth, images=False)
    return (reconstruction - truth).pow(2).flatten(1).mean(1)


@METRICS.register("psnr")
def psnr(reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio per image in dB, ``10 log10(range^2 / MSE)``; ``data_range`` is the pixels' span (1 for [0, 1])."""
    check.number("data_range", data_range, low=0, low_open=True)
    return 10 * torch.log10(data_range**2 / mse(reconstruction, truth))


@METRICS.register("ssim")
def ssim(reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0, window: int = 7) -> torch.Tensor:
    """Structural similarity per image, averaged over channels (Wang et al., 2004, Eq. 13).

    Matches ``skimage.metrics.structural_similarity`` with its defaults: a uniform
    ``window`` x ``window`` window, sample covariance, and the mean over the region
    whose windows lie inside the image (scikit-image crops the same border).
    """
    check.number("data_range", data_range, low=0, low_open=True)
    check.integer("window", window, low=2)
    reconstruction, truth = _check_pair(reconstruction, truth)
    if min(truth.shape[-2:]) < window:
        raise check.GradcoreValueError(f"SSIM needs images of at least {window}x{window} pixels, got {tuple(truth.shape[-2:])}")
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
    index = ((2 * mean_x * mean_y + c1) * (2 * cov + c2)) / ((mean_x**2 + mean_y**2 + c1) * (var_x + var_y + c2))
    return index.flatten(1).mean(1).reshape(-1, channels).mean(1)


#: torchvision's file names for the ImageNet backbones the ``lpips`` package builds on.
LPIPS_BACKBONES = {
    "alex": "alexnet-owt-7be5be79.pth",
    "vgg": "vgg16-397923af.pth",
    "squeeze": "squeezenet1_1-b8a52dc0.pth",
}
_lpips_models: dict = {}


def lpips_backbone_path(net: str = "alex") -> Path:
    """Where torchvision looks for the ImageNet weights of an LPIPS backbone."""
    if net not in LPIPS_BACKBONES:
        raise check.GradcoreValueError(f"unknown LPIPS backbone {net!r}; known: {', '.join(LPIPS_BACKBONES)}")
    return Path(torch.hub.get_dir()) / "checkpoints" / LPIPS_BACKBONES[net]


def lpips_available(net: str = "alex") -> bool:
    """Whether LPIPS can run offline: the package imports and the backbone file is present."""
    try:
        import lpips  # noqa: F401
    except ImportError:
        return False
    return lpips_backbone_path(net).exists()


@METRICS.register("lpips")
def lpips(reconstruction: torch.Tensor, truth: torch.Tensor, net: str = "alex") -> torch.Tensor:
    """Learned perceptual distance (Zhang et al., 2018) through the ``lpips`` package.

    Raises
    ------
    FileNotFoundError
        When the backbone's ImageNet weights are not in the torch hub cache. gradcore
        never downloads them and never substitutes another network.
    """
    _check_pair(reconstruction, truth)
    path = lpips_backbone_path(net)
    if not path.exists():
        raise FileNotFoundError(
            f"LPIPS needs the ImageNet weights of its {net!r} backbone at {path} (torchvision's file "
            f"{LPIPS_BACKBONES[net]}). gradcore never downloads weights: copy that file there (or set "
            "TORCH_HOME to a folder whose hub/checkpoints holds it) and run again.")
    if min(truth.shape[-2:]) < 32:
        raise check.GradcoreValueError(f"LPIPS's ImageNet backbone needs images of at least 32x32 pixels, got {tuple(truth.shape[-2:])}; "
                                       "upsample both batches first")
    import lpips as lpips_package

    if net not in _lpips_models:
        _lpips_models[net] = lpips_package.LPIPS(net=net, verbose=False).eval()
    reconstruction, truth = _check_pair(reconstruction, truth)
    if truth.shape[1] == 1:  # the backbone expects colour
        reconstruction, truth = reconstruction.repeat(1, 3, 1, 1), truth.repeat(1, 3, 1, 1)
    network = _lpips_models[net].to(truth.device)
    with torch.no_grad():
        return network(reconstruction.float(), truth.float(), normalize=True).flatten().double()


def measure(name: str, reconstruction: torch.Tensor, truth: torch.Tensor, **options) -> torch.Tensor:
    """A metric by registry name, per image."""
    return METRICS[name](reconstruction, truth, **options)


def align(reconstruction: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """Permutation of the reconstructions that best matches the truth by MSE.

    A joint attack on a batch recovers the images in an arbitrary order; scoring
    compares each private image with the reconstruction assigned to it by the
    Hungarian algorithm. Returns indices ``p`` so that ``reconstruction[p]`` lines up.
    """
    from scipy.optimize import linear_sum_assignment

    _check_pair(reconstruction, truth, images=False)  # a batch of 3 against one of 2 would match only partly
    truth, candidates = truth.detach().flatten(1).double(), reconstruction.detach().flatten(1).double()
    # A diverging attack leaves finite pixels so large that squared distances overflow to inf, which the
    # assignment refuses; dividing both batches by one factor >= 1 keeps the optimum (and is 1 for images).
    scale = torch.clamp(torch.maximum(truth.abs().max(), candidates.abs().max()), min=1.0)
    cost = torch.cdist(truth / scale, candidates / scale).pow(2)
    _, columns = linear_sum_assignment(cost.cpu().numpy())
    return torch.as_tensor(columns, device=reconstruction.device)


def circular_shift_psnr(reconstruction: torch.Tensor, truth: torch.Tensor, data_range: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
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
        ``(B, 2)`` the (rows, columns) by which ``torch.roll`` moves the reconstruction onto the truth.
    """
    check.number("data_range", data_range, low=0, low_open=True)
    reconstruction, truth = _check_pair(reconstruction, truth)
    height, width = truth.shape[-2:]
    correlation = torch.fft.ifft2(torch.fft.fft2(truth) * torch.fft.fft2(reconstruction).conj()).real.sum(1)
    energy = reconstruction.pow(2).flatten(1).sum(1) + truth.pow(2).flatten(1).sum(1)
    squared_error = (energy[:, None, None] - 2 * correlation).clamp(min=0) / truth[0].numel()
    best = squared_error.flatten(1).argmin(1)
    shift = torch.stack([best // width, best % width], dim=1)
    error = squared_error.flatten(1).gather(1, best[:, None]).squeeze(1)
    return 10 * torch.log10(data_range**2 / error), shift


def best_matches(reconstruction: torch.Tensor, truth: torch.Tensor, metric: str = "psnr") -> tuple[torch.Tensor, torch.Tensor]:
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
        raise check.GradcoreValueError(f"need two image batches of the same image shape, got {tuple(reconstruction.shape)} and {tuple(truth.shape)}")
    better_high = HIGHER_IS_BETTER[metric] if metric in HIGHER_IS_BETTER else True
    scores = torch.stack([measure(metric, reconstruction, truth[j].expand_as(reconstruction)) for j in range(len(truth))], dim=1)
    score, match = (scores.max(1) if better_high else scores.min(1))
    return match, score
