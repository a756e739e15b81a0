"""Tests of gradcore.experiments.diagnostics: what a defense does to the gradient, and what it costs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gradcore import data, experiments, gradients, models
from gradcore.experiments import diagnostics


def tiny_case(seed: int = 0, batch: int = 2):
    """A float64 MLP on 8x8 inputs with a batch and its gradient."""
    model = models.build("mlp", (1, 8, 8), 4, seed=seed, widths=(12,)).double()
    inputs = torch.rand((batch, 1, 8, 8), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    labels = torch.arange(batch) % 4
    return model, inputs, labels, tuple(g.detach() for g in gradients.batch_gradient(model, inputs, labels))


def test_the_exact_projection_is_orthogonal_the_released_one_is_not():
    _, _, _, gradient = tiny_case()
    cosines = diagnostics.projection_cosines(gradient, torch.Generator().manual_seed(0))
    assert len(cosines["exact"]) == len(cosines["public"]) == len(cosines["norms"]) == len(gradient)
    assert max(abs(c) for c in cosines["exact"]) < 1e-12
    assert max(abs(c) for c in cosines["public"]) > 1e-3


def test_misdirection_reports_the_reconstruction_against_both_images():
    photos = data.load("photos", size=16, per_photo=2)
    case = experiments.scenario(photos, "lenet", 1, seed=0)
    decoy, label = photos.batch(1, seed=5)
    lure = diagnostics.misdirection(case, decoy, label, "inverting_gradients", iterations=2)
    assert set(lure) >= {"reconstruction", "mse_private", "mse_decoy", "mse_gray_decoy", "labels"}
    assert lure["mse_gray_decoy"] == pytest.approx(float(((decoy.double() - 0.5) ** 2).mean()))


def test_gradient_effects_and_layer_helpers(digits):
    case = experiments.scenario(digits, "mlp", 1, seed=0, widths=(8,))
    table = diagnostics.gradient_effects(case, {"none": {"defense": None}, "clip": {"defense": "clip", "bound": 1e-3}})
    text = repr(table)
    assert "none" in text and "1.0000" in text
    true = case.gradient()
    assert diagnostics.layer_cosines(true, true) == pytest.approx([1.0] * len(true))
    assert diagnostics.norm_ratios([2 * t for t in true], true) == pytest.approx([2.0] * len(true))


def test_clipping_keeps_the_direction_and_says_where_it_acts():
    digits = data.load("digits", limit=100)
    cases = experiments.scenarios(digits, "mlp", 1, 3, seed=0, widths=(16,))
    norms = [float(gradients.norm(case.gradient())) for case in cases]
    bound = sorted(norms)[1]  # acts on the largest gradient only
    least, active = diagnostics.clipped_direction(cases, bound)
    assert active == 1 and abs(least - 1) < 1e-12
    assert diagnostics.gradient_norms(cases) == pytest.approx(norms, rel=1e-6)


def test_acting_clip_clips_every_case(digits):
    cases = experiments.scenarios(digits, "mlp", 1, 3, seed=0, widths=(16,))
    spec = diagnostics.acting_clip(cases)
    assert spec["defense"] == "clip"
    assert spec["bound"] == pytest.approx(0.5 * min(diagnostics.gradient_norms(cases)))
    # Every clipped gradient has the bound's norm: the bound acted on each case.
    for case in cases:
        clipped = case.gradient("clip", bound=spec["bound"])
        assert float(gradients.norm(clipped)) == pytest.approx(spec["bound"], rel=1e-5)
    assert diagnostics.clipped_direction(cases, spec["bound"])[1] == len(cases)
    with pytest.raises(ValueError, match="fraction"):
        diagnostics.acting_clip(cases, fraction=1.0)



def test_overhead_is_a_positive_ratio_and_checks_repeats():
    model, inputs, labels, _ = tiny_case()
    ratio = diagnostics.overhead(model, inputs, labels, "censor", repeats=2, trials=2)
    assert np.isfinite(ratio) and ratio > 0
    with pytest.raises(ValueError, match="repeats"):
        diagnostics.overhead(model, inputs, labels, "none", repeats=0)


def test_overheads_interleaved_gives_one_positive_ratio_per_defense():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    inputs, labels = torch.rand(2, 12), torch.tensor([0, 2])
    specs = {"clip": {"defense": "clip", "bound": 1.0}, "censor": {"defense": "censor", "trials": 2}}
    ratios = diagnostics.overheads(model, inputs, labels, specs, repeats=2)
    assert set(ratios) == set(specs) and all(r > 0 for r in ratios.values())
    with pytest.raises(ValueError, match="repeats"):
        diagnostics.overheads(model, inputs, labels, specs, repeats=0)

