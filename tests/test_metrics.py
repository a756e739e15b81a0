"""gradcore.metrics: MSE, PSNR, SSIM and batch alignment (LPIPS: test_lpips.py).

Outside references: numpy for MSE, scikit-image's ``peak_signal_noise_ratio`` and
``structural_similarity`` for PSNR and SSIM, a known permutation for ``align``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

from gradcore import metrics


def noisy_pair(shape, seed=0, noise=0.1):
    generator = torch.Generator().manual_seed(seed)
    truth = torch.rand(shape, generator=generator, dtype=torch.float64)
    reconstruction = (truth + noise * torch.randn(shape, generator=generator, dtype=torch.float64)).clamp(0, 1)
    return reconstruction, truth


PAIRS = {"rgb32": (3, 3, 32, 32), "gray8": (2, 1, 8, 8)}


@pytest.mark.parametrize("name", PAIRS)
def test_mse_against_numpy(name):
    reconstruction, truth = noisy_pair(PAIRS[name])
    expected = ((reconstruction.numpy() - truth.numpy()) ** 2).reshape(len(truth), -1).mean(axis=1)
    np.testing.assert_allclose(metrics.mse(reconstruction, truth).numpy(), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", PAIRS)
def test_psnr_against_scikit_image(name):
    reconstruction, truth = noisy_pair(PAIRS[name], seed=1)
    expected = [peak_signal_noise_ratio(t.numpy(), r.numpy(), data_range=1) for r, t in zip(reconstruction, truth)]
    result = metrics.psnr(reconstruction, truth)
    assert result.shape == (len(truth),)
    np.testing.assert_allclose(result.numpy(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", PAIRS)
def test_ssim_against_scikit_image(name):
    reconstruction, truth = noisy_pair(PAIRS[name], seed=2)
    expected = [structural_similarity(t.numpy(), r.numpy(), data_range=1, channel_axis=0)
                for r, t in zip(reconstruction, truth)]
    result = metrics.ssim(reconstruction, truth)
    assert result.shape == (len(truth),)
    np.testing.assert_allclose(result.numpy(), expected, rtol=0, atol=1e-6)


def test_ssim_is_one_for_identical_images_and_float32_inputs_work():
    _, truth = noisy_pair((2, 3, 16, 16))
    np.testing.assert_allclose(metrics.ssim(truth.float(), truth.float()).numpy(), [1.0, 1.0], atol=1e-12)
    assert metrics.ssim(truth.float(), truth.float()).dtype == torch.float64


def test_psnr_of_a_known_error():
    truth = torch.zeros(1, 1, 4, 4)
    assert metrics.psnr(truth + 0.1, truth).item() == pytest.approx(20.0, abs=1e-5)  # 10 log10(1 / 0.01)
    assert metrics.psnr(truth + 0.1, truth, data_range=255).item() == pytest.approx(20 + 20 * np.log10(255), abs=1e-4)


@pytest.mark.parametrize("metric", ["mse", "psnr", "ssim"])
def test_shape_mismatch_raises(metric):
    with pytest.raises(ValueError, match=r"reconstruction has shape \(2, 1, 8, 8\), truth has \(2, 1, 8, 9\)"):
        metrics.measure(metric, torch.rand(2, 1, 8, 8), torch.rand(2, 1, 8, 9))


def test_non_batched_images_raise():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        metrics.ssim(torch.rand(8, 8), torch.rand(8, 8))
    with pytest.raises(ValueError, match=r"\(B, \.\.\.\) with B >= 1"):
        metrics.mse(torch.rand(8), torch.rand(8))


def test_too_small_for_ssim_raises():
    with pytest.raises(ValueError, match="at least 7x7"):
        metrics.ssim(torch.rand(1, 1, 6, 8), torch.rand(1, 1, 6, 8))
    with pytest.raises(ValueError, match="at least 9x9"):
        metrics.ssim(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8), window=9)


def test_measure_and_the_registry():
    reconstruction, truth = noisy_pair((2, 1, 8, 8))
    assert torch.equal(metrics.measure("psnr", reconstruction, truth), metrics.psnr(reconstruction, truth))
    with pytest.raises(KeyError, match=r"unknown metric 'fid'; known metrics: (?=.*lpips)(?=.*mse)(?=.*psnr)(?=.*ssim)"):
        metrics.measure("fid", reconstruction, truth)
    assert set(metrics.HIGHER_IS_BETTER) == set(metrics.METRICS.names())


def test_align_recovers_a_known_permutation():
    generator = torch.Generator().manual_seed(3)
    truth = torch.rand((6, 3, 8, 8), generator=generator)
    shuffle = torch.tensor([4, 0, 5, 2, 1, 3])
    reconstruction = truth[shuffle] + 0.05 * torch.randn((6, 3, 8, 8), generator=generator)
    order = metrics.align(reconstruction, truth)
    assert torch.equal(order, torch.argsort(shuffle))  # the inverse permutation
    assert torch.allclose(reconstruction[order], truth, atol=0.3)
    assert torch.equal(metrics.align(truth, truth), torch.arange(6))


def test_align_survives_huge_but_finite_reconstructions():
    # What a diverging float64 attack leaves behind: finite values whose squared distances overflow.
    truth = torch.rand(2, 1, 4, 4, dtype=torch.float64)
    reconstruction = torch.stack([truth[1] * 1e200, truth[0] + 0.01])
    order = metrics.align(reconstruction, truth)
    assert torch.equal(order, torch.tensor([1, 0]))


def test_circular_shift_psnr_finds_the_roll_and_matches_a_brute_force_search():
    generator = torch.Generator().manual_seed(0)
    truth = torch.rand((2, 3, 8, 8), generator=generator)
    shifted = torch.stack([torch.roll(truth[0], (3, 5), dims=(1, 2)), truth[1] * 0.5])
    psnr, shift = metrics.circular_shift_psnr(shifted, truth)
    assert psnr[0] > 150  # an exact roll: the error is float64 cancellation only
    assert torch.equal(torch.roll(shifted[0], tuple(shift[0].tolist()), dims=(1, 2)), truth[0])
    brute = max(metrics.psnr(torch.roll(shifted[1:], (r, c), dims=(2, 3)), truth[1:]).item() for r in range(8) for c in range(8))
    assert abs(psnr[1].item() - brute) < 1e-9


def test_best_matches_picks_the_nearest_original_not_an_assignment():
    generator = torch.Generator().manual_seed(1)
    truth = torch.rand((3, 1, 8, 8), generator=generator)
    reconstruction = torch.stack([truth[2], truth[2] + 0.01, truth[0]])
    match, score = metrics.best_matches(reconstruction, truth)
    assert match.tolist() == [2, 2, 0]
    assert torch.allclose(score[1], metrics.psnr(reconstruction[1:2], truth[2:3])[0])
    with pytest.raises(ValueError, match="same image shape"):
        metrics.best_matches(reconstruction, torch.rand((3, 3, 8, 8)))


# ----------------------------------------------------------------------------------
# Issue 14: what the metrics are given is checked
# ----------------------------------------------------------------------------------


def test_uint8_images_are_refused_with_the_conversion():
    # PSNR of uint8 images in 0-255 came out at -40 dB.
    truth = (torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8)
    for metric in ("mse", "psnr", "ssim"):
        with pytest.raises(TypeError, match=r"must be a floating-point tensor; got a uint8 tensor .* images.float\(\) / 255"):
            metrics.measure(metric, truth, truth)
    assert metrics.psnr(truth.float() / 255, truth.float() / 255 + 0.1).mean().item() == pytest.approx(20.0, abs=1e-4)


def test_align_refuses_batches_of_different_sizes():
    # Batches of 3 and 2 gave a partial match.
    with pytest.raises(ValueError, match=r"reconstruction has shape \(3, 1, 4, 4\), truth has \(2, 1, 4, 4\)"):
        metrics.align(torch.rand(3, 1, 4, 4), torch.rand(2, 1, 4, 4))


def test_metrics_take_batches_of_vectors_but_ssim_needs_images():
    truth = torch.rand(3, 7, dtype=torch.float64)
    assert metrics.mse(truth + 0.1, truth).shape == (3,)
    assert metrics.psnr(truth + 0.1, truth)[0].item() == pytest.approx(20.0, abs=1e-9)
    assert metrics.align(truth[[2, 0, 1]], truth).tolist() == [1, 2, 0]
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        metrics.ssim(truth, truth)


@pytest.mark.parametrize("call, fragment", [
    (lambda x: metrics.psnr(x, x, data_range=0), "data_range must be > 0; got 0"),
    (lambda x: metrics.ssim(x, x, window=1), "window must be at least 2; got 1"),
    (lambda x: metrics.mse(x, torch.full_like(x, float("nan"))), "truth .* has 392 NaN or infinite values"),
    (lambda x: metrics.circular_shift_psnr(x, x, data_range=float("inf")), "data_range must be a finite number > 0; got inf"),
])
def test_options_and_a_non_finite_truth_are_refused(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call(torch.rand(2, 1, 14, 14))
