"""gradcore.attacks.generative: GGL, GIAS and GIFD behind the attack contract.

Outside references: a private image the generator can draw exactly (every attack must find
it), the l1-ball projection against an independent bisection, the KL term against
``torch.distributions``, the vectorised population distance against a loop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gradcore
from gradcore import client, generative, models
from gradcore.attacks import generative as gan_attacks

BUDGETS = {"ggl": {"generations": 60, "population": 16, "sigma": 0.5, "kl_weight": 0.0},
           "gias": {"latent_iterations": 150, "parameter_iterations": 20, "lr": 0.05, "candidates": 8},
           "gifd": {"latent_iterations": 150, "layer_iterations": 20, "lr": 0.05, "candidates": 8}}


@pytest.fixture
def in_range():
    """A tiny generator, a LeNet, and a private image the generator draws exactly: G(z*, y)."""
    prior = generative.untrained(generative.Generator((1, 8, 8), 3, latent_dim=3, width=8), seed=0)
    latent, label = torch.tensor([[0.8, -0.5, 0.3]]), torch.tensor([2])
    with torch.no_grad():
        image = prior(latent, label)
    model = models.build("lenet", (1, 8, 8), 3, seed=1)
    return prior, model, image, label, client.shared_gradient(model, image, label)


@pytest.mark.parametrize("name", ["ggl", "gias", "gifd"])
def test_each_attack_finds_an_image_the_generator_draws(in_range, name):
    prior, model, image, label, gradient = in_range
    before = [p.clone() for p in prior.parameters()]
    result = gradcore.attack(name, model, gradient, shape=(1, 8, 8), truth=image, progress=False, generator=prior,
                             **BUDGETS[name])
    gray = gradcore.metrics.mse(torch.full_like(image, 0.5), image).item()
    assert result.final("mse") < 1e-3 * gray, result.final("mse")  # 30 dB above the gray guess
    assert result.labels.tolist() == [2]  # read off the gradient (labels were not given)
    assert result.attack == name and result.reconstruction.shape == (1, 1, 8, 8)
    assert set(result.history) == {"iteration", "objective", "mse", "psnr"}
    assert result.history["objective"][-1] <= result.history["objective"][0]
    assert all(torch.equal(a, b) for a, b in zip(before, prior.parameters()))  # the prior is not modified


@pytest.mark.parametrize("name", ["ggl", "gias", "gifd"])
def test_attacks_repeat_with_their_seed(in_range, name):
    prior, model, image, label, gradient = in_range
    small = {key: min(value, 5) if isinstance(value, int) else value for key, value in BUDGETS[name].items()}
    small["population"] = 8 if name == "ggl" else None
    small = {k: v for k, v in small.items() if v is not None}
    runs = [gradcore.attack(name, model, gradient, shape=(1, 8, 8), labels=label, seed=4, progress=False, generator=prior,
                            **small) for _ in range(2)]
    assert torch.equal(runs[0].reconstruction, runs[1].reconstruction)


def test_ggl_leaves_numpys_global_generator_as_it_was(in_range):
    prior, model, image, label, gradient = in_range
    np.random.seed(123)
    expected = np.random.rand()
    np.random.seed(123)
    gradcore.attack("ggl", model, gradient, shape=(1, 8, 8), labels=label, progress=False, generator=prior, generations=2,
                    population=4)
    assert np.random.rand() == expected


def test_wrong_priors_are_refused_with_the_reason(in_range):
    prior, model, image, label, gradient = in_range
    with pytest.raises(gradcore.GradcoreTypeError, match="Generator"):
        gradcore.attack("gias", model, gradient, shape=(1, 8, 8), progress=False, generator=model)
    wide = generative.Generator((1, 16, 16), 3, latent_dim=3, width=8)
    with pytest.raises(gradcore.GradcoreValueError, match="shaped"):
        gradcore.attack("gifd", model, gradient, shape=(1, 8, 8), progress=False, generator=wide)
    few = generative.Generator((1, 8, 8), 2, latent_dim=3, width=8)
    with pytest.raises(gradcore.GradcoreValueError, match="beyond the generator"):
        gradcore.attack("ggl", model, gradient, shape=(1, 8, 8), labels=torch.tensor([2]), progress=False, generator=few)
    with pytest.raises(gradcore.GradcoreValueError, match="float64"):
        gradcore.attack("ggl", model.double(), [g.double() for g in gradient], shape=(1, 8, 8), progress=False,
                        generator=prior)
    with pytest.raises(gradcore.GradcoreTypeError, match="generator"):
        gradcore.attack("gias", model, gradient, shape=(1, 8, 8), progress=False)  # the prior is required


def _bisection_projection(vector, radius):
    """Soft-thresholding at the theta found by bisection: an independent route to the same projection."""
    low, high = 0.0, float(vector.abs().max())
    for _ in range(200):
        theta = (low + high) / 2
        if (vector.abs() - theta).clamp_min(0).sum() > radius:
            low = theta
        else:
            high = theta
    return vector.sign() * (vector.abs() - high).clamp_min(0)


@pytest.mark.parametrize("seed", range(5))
def test_l1_projection_matches_bisection(seed):
    draws = torch.Generator().manual_seed(seed)
    centre = torch.randn(4, 5, dtype=torch.float64, generator=draws)
    vector = centre + 3 * torch.randn(4, 5, dtype=torch.float64, generator=draws)
    radius = 2.5
    projected = gan_attacks.project_l1_ball(vector, centre, radius)
    assert float((projected - centre).abs().sum()) == pytest.approx(radius, rel=1e-9)
    assert torch.allclose(projected - centre, _bisection_projection(vector - centre, radius), atol=1e-9)
    inside = centre + 0.01 * (vector - centre)
    assert torch.equal(gan_attacks.project_l1_ball(inside, centre, radius), inside)
    assert torch.equal(gan_attacks.project_l1_ball(vector, centre, 0.0), centre)


def test_kl_term_is_the_gaussian_kl_of_the_latents_entries():
    latent = torch.randn(3, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 1.7 + 0.4
    mean, std = latent.mean(dim=1), latent.std(dim=1, unbiased=False)
    expected = torch.distributions.kl_divergence(torch.distributions.Normal(mean, std), torch.distributions.Normal(0.0, 1.0))
    assert float(gan_attacks.kl_to_standard_normal(latent)) == pytest.approx(float(expected.sum()), rel=1e-12)
    standard = torch.tensor([[1.0, -1.0, 1.0, -1.0]], dtype=torch.float64)  # mean 0, variance 1
    assert float(gan_attacks.kl_to_standard_normal(standard)) == pytest.approx(0.0, abs=1e-12)


def test_population_distance_is_the_loop_of_single_distances(in_range):
    prior, model, image, label, gradient = in_range
    observation = gradcore.attacks.Observation(model, gradient, (1, 8, 8), 1, label, progress=False)
    stack = torch.rand(5, 1, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    vectorised = gan_attacks.population_distance(observation, label)(stack)
    single = gan_attacks.gradient_distance(observation, label)
    looped = torch.stack([single(images, False) for images in stack])
    assert torch.allclose(vectorised, looped, atol=1e-6)
    assert float(single(image, False)) == pytest.approx(0.0, abs=1e-6)  # the private image matches exactly


@pytest.mark.parametrize("name", ["ggl", "gias", "gifd"])
def test_attacks_follow_the_precision_of_model_and_prior(in_range, name):
    prior, model, image, label, gradient = in_range
    prior64, model64 = generative.freeze(generative.copy_of(prior).double()), model.double()
    gradient64 = client.shared_gradient(model64, image.double(), label)
    small = {"ggl": {"generations": 2, "population": 4}, "gias": {"latent_iterations": 2, "parameter_iterations": 2},
             "gifd": {"latent_iterations": 2, "layer_iterations": 2}}[name]
    result = gradcore.attack(name, model64, gradient64, shape=(1, 8, 8), labels=label, progress=False, generator=prior64,
                             **small)
    assert result.reconstruction.dtype == torch.float64


def test_population_l2_distance_is_the_released_sum_over_tensors(in_range):
    prior, model, image, label, gradient = in_range
    observation = gradcore.attacks.Observation(model, gradient, (1, 8, 8), 1, label, progress=False)
    stack = torch.rand(3, 1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    vectorised = gan_attacks.population_distance(observation, label, "l2")(stack)
    looped = []
    for images in stack:
        trial = gradcore.batch_gradient(model, images, label)
        looped.append(sum((t - g).pow(2).sum() for t, g in zip(trial, gradient)) / len(gradient))
    assert torch.allclose(vectorised, torch.stack(looped), rtol=1e-5)
    with pytest.raises(gradcore.registry.UnknownNameError, match="gradient distance"):
        gan_attacks.population_distance(observation, label, "l3")


@pytest.mark.parametrize("defense, options, emulation", [("clip", {"bound": 0.05}, "clipping"),
                                                         ("sparsify", {"keep": 0.2}, "compression"),
                                                         ("soteria", {"prune": 0.3}, "representation")])
def test_an_emulated_defense_gives_the_private_image_the_shared_gradient_back(in_range, defense, options, emulation):
    prior, model, image, label, gradient = in_range
    defended = client.shared_gradient(model, image, label, defense=defense, **options)
    observation = gradcore.attacks.Observation(model, defended, (1, 8, 8), 1, label, progress=False)
    stack = image.unsqueeze(0)
    blind = gan_attacks.population_distance(observation, label, "l2")(stack)
    imitated = gan_attacks.population_distance(observation, label, "l2", emulate=emulation)(stack)
    # GGL's released imitation reads the defense's parameter off the shared gradient: the private image scores 0 again.
    assert float(imitated) < 1e-6 * float(blind), (float(imitated), float(blind))


def test_noise_emulation_adds_fresh_noise_of_the_given_scale(in_range):
    prior, model, image, label, gradient = in_range
    observation = gradcore.attacks.Observation(model, gradient, (1, 8, 8), 1, label, progress=False)
    distance = gan_attacks.population_distance(observation, label, "l2", emulate="noise", noise_sigma=0.1)
    first, second = float(distance(image.unsqueeze(0))), float(distance(image.unsqueeze(0)))
    entries = sum(g.numel() for g in gradient)
    assert first != second and first == pytest.approx(0.01 * entries / len(gradient), rel=0.2)
    with pytest.raises(gradcore.registry.UnknownNameError, match="unknown defense emulation"):
        gan_attacks.population_distance(observation, label, emulate="rounding")


def test_gias_tunes_one_generator_copy_per_image_with_the_latent_fixed(in_range, monkeypatch):
    prior, model, image, label, gradient = in_range
    copies = []
    original = gan_attacks.copy_of
    monkeypatch.setattr(gan_attacks, "copy_of", lambda generator: copies.append(original(generator)) or copies[-1])
    images = torch.cat([image, image.flip(-1)])
    labels = torch.tensor([2, 1])
    shared = client.shared_gradient(model, images, labels)
    gradcore.attack("gias", model, shared, shape=(1, 8, 8), batch_size=2, labels=labels, progress=False, generator=prior,
                    latent_iterations=3, parameter_iterations=3)
    assert len(copies) == 2  # one copy per image of the batch
    moved = [any(not torch.equal(a, b) for a, b in zip(copy.parameters(), prior.parameters())) for copy in copies]
    assert all(moved)
