"""gradcore.defenses: clipping, Gaussian noise and their DP-SGD composition.

Outside references: numpy norms, the sample statistics of many draws, and the
defenses composed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradcore import defenses, gradients


def gradient_of_norm(target: float, seed: int = 0) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    gradient = (torch.randn((4, 5), generator=generator, dtype=torch.float64),
                torch.randn((5,), generator=generator, dtype=torch.float64))
    scale = target / gradients.norm(gradient)
    return tuple(g * scale for g in gradient)


def numpy_norm(gradient) -> float:
    return float(np.linalg.norm(np.concatenate([g.numpy().ravel() for g in gradient])))


def test_none_shares_the_gradient_unchanged():
    gradient = gradient_of_norm(3.0)
    assert all(d is g for d, g in zip(defenses.defend(gradient, "none"), gradient))


def test_clip_bounds_the_global_norm_and_keeps_the_direction():
    gradient = gradient_of_norm(10.0)
    clipped = defenses.defend(gradient, "clip", bound=1.0)
    assert isinstance(clipped, tuple) and [c.shape for c in clipped] == [g.shape for g in gradient]
    assert numpy_norm(clipped) == pytest.approx(1.0, rel=1e-10)
    for c, g in zip(clipped, gradient):
        torch.testing.assert_close(c, g / 10.0, rtol=1e-10, atol=0)


def test_clip_leaves_a_small_gradient_untouched():
    gradient = gradient_of_norm(0.5)
    clipped = defenses.defend(gradient, "clip", bound=1.0)
    assert all(torch.equal(c, g) for c, g in zip(clipped, gradient))


def test_noise_has_the_requested_standard_deviation():
    zero = (torch.zeros((300, 200), dtype=torch.float64), torch.zeros(1000, dtype=torch.float64))
    noisy = defenses.defend(zero, "noise", seed=1, sigma=0.05)
    samples = torch.cat([n.ravel() for n in noisy]).numpy()
    assert noisy[0].dtype == torch.float64
    # 61,000 draws: the sample std is within ~0.3% of sigma (1 / sqrt(2n)); allow 3%.
    assert samples.std() == pytest.approx(0.05, rel=0.03)
    assert abs(samples.mean()) < 5 * 0.05 / np.sqrt(samples.size)
    # Independent entries: neighbours are uncorrelated.
    assert abs(np.corrcoef(samples[:-1], samples[1:])[0, 1]) < 0.03


def test_noise_is_added_to_the_gradient_and_is_reproducible():
    gradient = gradient_of_norm(2.0)
    first = defenses.defend(gradient, "noise", seed=3, sigma=0.1)
    again = defenses.defend(gradient, "noise", seed=3, sigma=0.1)
    other = defenses.defend(gradient, "noise", seed=4, sigma=0.1)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not any(torch.equal(a, b) for a, b in zip(first, other))
    # The same seeded draw, scaled: the noise is sigma times a fixed standard normal sample.
    doubled = defenses.defend(gradient, "noise", seed=3, sigma=0.2)
    for f, d, g in zip(first, doubled, gradient):
        torch.testing.assert_close(d - g, 2 * (f - g), rtol=1e-12, atol=1e-15)
    zero_sigma = defenses.defend(gradient, "noise", seed=3, sigma=0.0)
    assert all(torch.equal(z, g) for z, g in zip(zero_sigma, gradient))


def test_dp_is_clip_then_noise():
    gradient = gradient_of_norm(10.0)
    dp = defenses.defend(gradient, "dp", seed=5, bound=1.0, sigma=0.01)
    by_hand = defenses.defend(defenses.defend(gradient, "clip", bound=1.0), "noise", seed=5, sigma=0.01)
    assert all(torch.equal(a, b) for a, b in zip(dp, by_hand))
    noise_then_clip = defenses.defend(defenses.defend(gradient, "noise", seed=5, sigma=0.01), "clip", bound=1.0)
    assert not all(torch.equal(a, b) for a, b in zip(dp, noise_then_clip))


def test_unknown_defense_names_the_known_ones():
    with pytest.raises(KeyError) as caught:
        defenses.defend(gradient_of_norm(1.0), "soteria")
    message = str(caught.value)
    assert "unknown defense 'soteria'" in message
    for name in ("clip", "dp", "noise", "none"):
        assert name in message


@pytest.mark.parametrize("name, options, fragment", [
    ("noise", {"sigma": -0.1}, "sigma must be non-negative"),
    ("clip", {"bound": 0.0}, "bound must be positive"),
    ("clip", {"bound": -1.0}, "bound must be positive"),
    ("dp", {"bound": 1.0, "sigma": -1.0}, "sigma must be non-negative"),
    ("dp", {"bound": 0.0, "sigma": 1.0}, "bound must be positive"),
])
def test_invalid_options_raise(name, options, fragment):
    with pytest.raises(ValueError, match=fragment):
        defenses.defend(gradient_of_norm(1.0), name, **options)


def test_missing_option_raises_type_error():
    with pytest.raises(TypeError):
        defenses.defend(gradient_of_norm(1.0), "noise")
