"""The README's "Adding an attack" and "Adding a defense", followed step by step.

A toy attack (return the gray image, via ``AttackResult.one_shot``) and a toy defense
(halve the gradient) are registered as the README says, then found by name, run by
``gradcore.attack`` and ``gradcore.shared_gradient``, and scored in an attack x defense
matrix next to the built-in ones. The registries are restored afterwards.
"""

from __future__ import annotations

import pytest
import torch

import gradcore
from gradcore import data, defenses, evaluation, experiments
from gradcore.attacks.base import (
    ATTACKS,
    AttackResult,
    Observation,
    OptimiserSteps,
    optimise,
)


@pytest.fixture
def registered():
    @ATTACKS.register("toy_gray")
    def toy_gray(observation: Observation, level: float = 0.5) -> AttackResult:
        """Guess a flat image: the attacker who learned nothing."""
        return AttackResult.one_shot(observation, torch.full((observation.batch_size, *observation.shape), level))

    @ATTACKS.register("toy_descent")
    def toy_descent(observation: Observation, iterations: int = 3) -> AttackResult:
        """Pull a dummy towards gray by gradient descent: an iterative attack through the shared loop."""
        dummy = torch.zeros((observation.batch_size, *observation.shape), requires_grad=True)
        optimizer = torch.optim.SGD([dummy], lr=0.5)

        def closure():
            optimizer.zero_grad()
            value = (dummy - 0.5).pow(2).sum()
            value.backward()
            return value

        steps = OptimiserSteps(optimizer, closure, dummy, lambda current: float((current - 0.5).pow(2).sum()))
        return optimise(observation, steps, iterations, "toy descent")

    @defenses.DEFENSES.register("toy_halve")
    def toy_halve(gradient, generator: torch.Generator, factor: float = 0.5):
        """Scale the gradient down."""
        if factor <= 0:
            raise gradcore.GradcoreValueError(f"factor must be positive, got {factor}")
        return tuple(g * factor for g in gradient)

    yield
    for registry, name in ((ATTACKS, "toy_gray"), (ATTACKS, "toy_descent"), (defenses.DEFENSES, "toy_halve")):
        registry._entries.pop(name)


def test_a_new_attack_and_defense_appear_everywhere_a_user_looks(registered):
    assert "toy_gray" in gradcore.ATTACKS and "toy_descent" in gradcore.ATTACKS and "toy_halve" in gradcore.DEFENSES
    digits = data.load("digits", limit=50)
    case = experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,), activation="relu")
    halved = gradcore.shared_gradient(case.model, case.inputs, case.labels, defense="toy_halve", factor=0.5)
    assert all(torch.equal(h, g * 0.5) for h, g in zip(halved, case.gradient()))
    result = gradcore.attack("toy_descent", case.model, case.gradient(), shape=case.shape, truth=case.inputs, progress=False)
    assert result.history["iteration"] == [0, 1, 2, 3] and result.attack == "toy_descent"
    with pytest.raises(gradcore.GradcoreError, match="levle"):  # a mistyped setting is named, not ignored
        gradcore.attack("toy_gray", case.model, case.gradient(), shape=case.shape, levle=0.3)
    grid = evaluation.matrix({"toy": {"attack": "toy_gray"}, "walk-back": {"attack": "walk_back"}},
                             {"none": {"defense": None}, "halve": {"defense": "toy_halve", "factor": 0.5}},
                             {"digits": [case]}, metrics=("mse",), progress=False)
    table = repr(grid.table("mse"))
    assert "toy | digits" in table and "halve" in table
    assert grid.to_gray("digits", "toy", "halve") == pytest.approx(1.0)
    assert grid.to_gray("digits", "walk-back", "halve") < 1e-6  # halving keeps the ratio the walk-back divides
