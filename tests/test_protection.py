"""gradcore.experiments.protection: the what-protects pages build the same settings, attacks and deployments."""

import pytest
import torch
from torch import nn

from gradcore import data, evaluation, experiments, papers
from gradcore.experiments import protection


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=200)


def test_the_mlp_builder_removes_exactly_the_first_relu_when_reducing(digits):
    plain, reduced = protection.mlp_builder(digits, (8, 16))(3), protection.mlp_builder(digits, (8, 16), reduce=True)(3)
    relus = [sum(isinstance(m, nn.ReLU) for m in model) for model in (plain, reduced)]
    assert relus == [2, 1]
    # Same weights: the reduction changes the architecture, not the initialisation.
    assert all(torch.equal(a, b) for a, b in zip(plain.parameters(), reduced.parameters()))


def test_the_utility_builder_starts_every_run_from_the_same_weights(digits):
    build = protection.utility_builder(digits, (16,), seed=4)
    assert all(torch.equal(a, b) for a, b in zip(build().parameters(), build().parameters()))


def test_deployments_add_censor_in_its_first_rounds_only():
    settings = papers.WHAT_PROTECTS.settings("ci")
    found = protection.deployments(settings)
    assert set(found) == set(settings.defenses) | {"censor T=20, first rounds"}
    first = found["censor T=20, first rounds"]
    assert first["defended_rounds"] == settings.censor_rounds
    assert {k: v for k, v in first.items() if k != "defended_rounds"} == settings.defenses["censor T=20"]
    assert "defended_rounds" not in settings.defenses["censor T=20"]  # the settings are not modified


def test_reduction_cases_draw_the_same_images_with_and_without_reduction(digits):
    plain = protection.reduction_cases(digits, (4, 8), 6, 2, False, seed=1)
    reduced = protection.reduction_cases(digits, (4, 8), 6, 2, True, seed=1)
    assert list(plain) == ["1 image", "batch 6"] and plain["batch 6"][0].inputs.shape[0] == 6
    for label in plain:
        assert all(torch.equal(a.inputs, b.inputs) for a, b in zip(plain[label], reduced[label]))


def test_runs_against_lists_only_the_pairs_that_ran(digits):
    build = protection.mlp_builder(digits, (16,))
    cases = {"one": experiments.scenarios(digits, build, 1, 1, seed=0),
             "other": experiments.scenarios(digits, build, 1, 1, seed=1)}
    attacks = {"walk": {"attack": "walk_back", "scenarios": ["one"]},
               "exclusive": {"attack": "exclusivity", "scenarios": ["other"]}}
    grid = evaluation.matrix(attacks, {"none": {"defense": None}}, cases, metrics=("mse",), progress=False)
    assert protection.runs_against(grid, ["walk", "exclusive"], "none") == [("one", "walk"), ("other", "exclusive")]
    assert protection.runs_against(grid, ["walk"], "none") == [("one", "walk")]
