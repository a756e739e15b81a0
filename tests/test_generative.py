"""gradcore.generative: the class-conditional DCGAN the GAN-prior attacks use as their prior.

Outside references: the DCGAN's shapes by hand, brute-force nearest neighbours, the
augmentation's pixels against the image it was drawn from.
"""

from __future__ import annotations

import pytest
import torch

import gradcore
from gradcore import generative


# 8 = 4 * 2, 24 = 3 * 8, 32 = 4 * 8, 28 = 7 * 4 (MNIST), 10 = 5 * 2
@pytest.mark.parametrize("side, stages", [(8, 2), (24, 4), (32, 4), (16, 3), (28, 3), (10, 2)])
def test_generator_doubles_its_way_to_the_image(side, stages):
    generator = generative.Generator((1, side, side), 3, latent_dim=5, width=16)
    assert len(generator.stages) == stages
    labels = torch.tensor([0, 1, 2, 0])
    images = generator(torch.randn(4, 5), labels)
    assert images.shape == (4, 1, side, side)
    assert images.min() >= 0 and images.max() <= 1  # a sigmoid at the end: pixels in [0, 1]
    # The discriminator reads the same side down to one score per image.
    assert generative.Discriminator((1, side, side), 3, width=16)(images, labels).shape == (4,)


def test_features_then_decode_is_the_generator():
    generator = generative.freeze(generative.Generator((1, 8, 8), 2, latent_dim=4, width=8))
    latent, labels = torch.randn(3, 4), torch.tensor([0, 1, 1])
    whole = generator(latent, labels)
    for depth in range(len(generator.stages) + 1):
        assert torch.equal(generator.decode(generator.features(latent, labels, depth), depth), whole)
    assert torch.equal(generator.advance(generator.features(latent, labels, 1), 1, 2), generator.features(latent, labels, 2))


# 18 = 9 * 2 (a stem of 9 is above 7), 7 (no doubling), not square, nothing to double.
@pytest.mark.parametrize("shape", [(1, 18, 18), (1, 7, 7), (1, 8, 6), (1, 1, 1)])
def test_generator_refuses_sides_it_cannot_reach(shape):
    with pytest.raises(gradcore.GradcoreValueError):
        generative.Generator(shape, 2)


def test_augmentation_moves_each_image_by_at_most_one_pixel():
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    moved = generative.augment(images, torch.Generator().manual_seed(1), flips=False)
    padded = torch.nn.functional.pad(images, (1, 1, 1, 1), mode="replicate")
    for image, shifted in zip(padded, moved):
        windows = [image[:, r:r + 8, c:c + 8] for r in range(3) for c in range(3)]
        assert any(torch.equal(shifted, window) for window in windows)
    again = generative.augment(images, torch.Generator().manual_seed(1), flips=False)
    assert torch.equal(moved, again)
    flipped = generative.augment(images, torch.Generator().manual_seed(1), flips=True)
    assert flipped.shape == images.shape


def test_training_is_seeded_and_leaves_a_frozen_generator(digits):
    public = digits.subset(range(64))
    first, log = generative.train_gan(public, steps=3, batch_size=8, latent_dim=4, width=8, seed=2, progress=False)
    second, _ = generative.train_gan(public, steps=3, batch_size=8, latent_dim=4, width=8, seed=2, progress=False)
    other, _ = generative.train_gan(public, steps=3, batch_size=8, latent_dim=4, width=8, seed=3, progress=False)
    for a, b in zip(first.state_dict().values(), second.state_dict().values()):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(first.state_dict().values(), other.state_dict().values()))
    assert not first.training and not any(p.requires_grad for p in first.parameters())
    assert log.steps[-1] == 3 and len(log.generator_loss) == len(log.steps) and log.settings["training images"] == 64
    with pytest.raises(gradcore.GradcoreValueError, match="steps"):
        generative.train_gan(public, steps=0)


def test_frozen_critic_in_the_generator_step_changes_no_bit(digits, monkeypatch):
    # The generator's step freezes the critic, so its backward skips the critic's weight gradients,
    # which nothing reads. The generator must come out exactly as when they are computed.
    public = digits.subset(range(64))
    options = dict(steps=4, batch_size=8, latent_dim=4, width=8, seed=1, progress=False)
    frozen, frozen_log = generative.train_gan(public, **options)
    monkeypatch.setattr(generative.Discriminator, "requires_grad_", lambda self, flag=True: self)
    unfrozen, unfrozen_log = generative.train_gan(public, **options)
    for a, b in zip(frozen.state_dict().values(), unfrozen.state_dict().values()):
        assert torch.equal(a, b)
    assert frozen_log.discriminator_loss == unfrozen_log.discriminator_loss


def test_untrained_prior_has_the_same_architecture_and_fresh_weights():
    trained = generative.freeze(generative.Generator((1, 8, 8), 10, latent_dim=6, width=16))
    fresh = generative.untrained(trained, seed=1)
    assert [p.shape for p in fresh.parameters()] == [p.shape for p in trained.parameters()]
    assert not torch.equal(next(fresh.parameters()), next(trained.parameters()))
    assert torch.equal(next(generative.untrained(trained, seed=1).parameters()), next(fresh.parameters()))
    state = torch.random.get_rng_state()
    generative.untrained(trained, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is left alone


def test_nearest_training_images_is_the_brute_force_answer(digits):
    public = digits.subset(range(50))
    images = torch.rand(7, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    index, mse = generative.nearest_training_images(images, public)
    for image, i, m in zip(images, index, mse):
        errors = [float(((image - candidate) ** 2).mean()) for candidate in public.images]
        assert int(i) == min(range(len(errors)), key=errors.__getitem__)
        assert float(m) == pytest.approx(min(errors), rel=1e-5)
    # A training image is its own nearest neighbour, at distance 0.
    index, mse = generative.nearest_training_images(public.images[[4]], public)
    assert int(index) == 4 and float(mse) == 0


def test_copy_of_is_trainable_and_leaves_the_prior_untouched():
    prior = generative.freeze(generative.Generator((1, 8, 8), 2, latent_dim=4, width=8))
    clone = generative.copy_of(prior)
    assert all(p.requires_grad for p in clone.parameters()) and not any(p.requires_grad for p in prior.parameters())
    with torch.no_grad():
        next(clone.parameters()).add_(1.0)
    assert not torch.equal(next(clone.parameters()), next(prior.parameters()))


def test_sample_is_seeded():
    prior = generative.freeze(generative.Generator((1, 8, 8), 2, latent_dim=4, width=8))
    labels = torch.tensor([0, 1, 0])
    assert torch.equal(generative.sample(prior, labels, 3), generative.sample(prior, labels, 3))
    assert not torch.equal(generative.sample(prior, labels, 3), generative.sample(prior, labels, 4))
