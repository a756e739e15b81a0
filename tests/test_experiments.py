"""Scenario builders: seeded, independent cases for the chapters."""

import pytest
import torch

from gradcore import data, experiments, exclusivity


@pytest.fixture(scope="module")
def digits():
    return data.load("digits", limit=200)


def test_scenarios_match_single_scenarios_seed_by_seed(digits):
    cases = experiments.scenarios(digits, "mlp", 2, count=3, seed=5, widths=(16,))
    assert len(cases) == 3
    for offset, case in enumerate(cases):
        alone = experiments.scenario(digits, "mlp", 2, seed=5 + offset, widths=(16,))
        assert torch.equal(case.inputs, alone.inputs) and torch.equal(case.labels, alone.labels)
        assert all(torch.equal(a, b) for a, b in zip(case.model.parameters(), alone.model.parameters()))
    assert not torch.equal(cases[0].inputs, cases[1].inputs)


def test_scenarios_build_a_fresh_model_per_case_from_a_function(digits):
    def build(seed):
        return exclusivity.reduced_mlp(digits.shape, digits.num_classes, (16, 8), seed=seed, reduce=False)

    cases = experiments.scenarios(digits, build, 1, count=2, seed=0)
    assert cases[0].model is not cases[1].model
    assert all(torch.equal(a, b) for a, b in zip(cases[1].model.parameters(), build(1).parameters()))


def test_scenarios_reject_a_shared_model_and_an_empty_count(digits):
    with pytest.raises(TypeError, match="shared"):
        experiments.scenarios(digits, torch.nn.Linear(64, 10), 1, count=2)
    with pytest.raises(ValueError, match="count"):
        experiments.scenarios(digits, "mlp", 1, count=0)


def test_final_table_prints_a_diverged_run_as_diverged():
    class Run:
        def __init__(self, value, diverged):
            self.value, self.diverged = value, diverged

        def final(self, key):
            return self.value

    table = experiments.final_table({"step": {"small": Run(2e-7, False), "large": Run(2.28e156, True)}}, "mse")
    assert table.rows == [["step", "small", "2e-07", ""], ["step", "large", "diverged (> 1000)", "diverged"]]
