"""Tests of gradcore.experiments.deployments: FedSGD once per deployment spec, and where each is weakest."""

from __future__ import annotations

import math

import pytest
import torch

from gradcore import attacks, data, defenses, evaluation, experiments, models
from gradcore.experiments import deployments


def _logs(*arguments, **options) -> dict:
    return deployments.logs(deployments.run(*arguments, **options))


def _reduced_cases(digits, batch_size, reduce, seeds=(0,)):
    def build(seed):
        model = models.fcn(digits.shape, 10, (32, 16), seed=seed)
        return defenses.exclusivity_reduction(model) if reduce else model

    return [experiments.scenario(digits, build(s), batch_size, seed=s, dtype=torch.float64) for s in seeds]


def test_with_architecture_adds_a_column_blocked_attacks_score_gray(digits):
    if "exclusivity" not in attacks.ATTACKS:
        pytest.skip("the exclusivity attack is not registered")
    cases = {"B=1": _reduced_cases(digits, 1, False), "other": _reduced_cases(digits, 1, False, seeds=(1,))}
    specs = {"closed": {"attack": "closed_form"}, "excl": {"attack": "exclusivity"}, "walk": {"attack": "walk_back"},
             "adaptive": {"attack": "closed_form", "defenses": ["none"]}}
    result = evaluation.matrix(specs, {"none": {"defense": None}}, cases, metrics=("mse", "psnr"), progress=False)
    assert result.value("B=1", "excl", "none", "mse") < 1e-12
    deployments.with_architecture(result, specs, "reduced", {"B=1": _reduced_cases(digits, 1, True)}, progress=False)
    assert result.defenses == ["none", "reduced"]
    # The closed form divides a weight row by its bias entry: no ReLU is needed, reduction does not stop it.
    assert result.value("B=1", "closed", "reduced", "mse") < 1e-12
    truth = cases["B=1"][0].inputs
    gray = float(((truth - 0.5) ** 2).mean())
    for name in ("excl", "walk"):  # both need a ReLU after the first layer: refused, scored as the gray guess
        assert result.value("B=1", name, "reduced", "mse") == pytest.approx(gray, rel=1e-12)
        assert len(result.cell("B=1", name, "reduced").errors) == 1 and ("B=1", name) not in result.skipped
    assert "ReLU" in result.cell("B=1", "excl", "reduced").error
    assert math.isnan(result.value("other", "closed", "reduced", "mse"))  # no reduced model given: n/a
    assert math.isnan(result.value("B=1", "adaptive", "reduced", "mse"))  # limited to other defenses
    assert result.to_gray("B=1", "excl", "reduced") == pytest.approx(1.0)
    assert result.stopped("reduced") == (2, 3) and result.stopped("none") == (0, 8)
    assert result.stopped("reduced", attacks=["closed"]) == (0, 1)


def test_a_model_name_and_a_build_function_give_the_same_run(digits):
    """One entry point for every deployment experiment: a registered model by name, or any network (an architectural
    defense) by a function; the same initial weights give the same log, other weights another."""
    options = dict(clients=4, per_round=2, batch_size=8, lr=0.5, evaluate_every=2, progress=False)
    by_name = deployments.run(digits, "mlp", {"none": {"defense": None}}, 4, seed=0, model_options={"widths": (8,)},
                              **options)
    built = deployments.run(digits, lambda: models.build("mlp", digits.shape, 10, seed=0, widths=(8,)),
                            {"none": {"defense": None}}, 4, seed=0, **options)
    assert built["none"].log.rounds == by_name["none"].log.rounds
    assert built["none"].log.accuracy == by_name["none"].log.accuracy and built["none"].snapshots == {}
    other = deployments.run(digits, lambda: models.build("mlp", digits.shape, 10, seed=1, widths=(8,)),
                            {"none": {"defense": None}}, 4, seed=0, **options)
    assert other["none"].log.accuracy != by_name["none"].log.accuracy


def test_over_rounds_defends_only_the_defended_rounds(digits):
    build = lambda: models.build("mlp", digits.shape, 10, seed=0, widths=(16,))  # noqa: E731
    specs = {"none": {"defense": None}, "noise first": {"defense": "noise", "sigma": 1.0, "defended_rounds": 2}}
    runs = deployments.run(digits, build, specs, 6, at=(0, 3), seed=0, clients=4, per_round=2, batch_size=8, lr=0.5,
                           evaluate_every=3, progress=False)
    assert set(runs) == set(specs) and sorted(runs["none"].snapshots) == [0, 3]
    grid = deployments.over_rounds({"closed": {"attack": "closed_form"}}, specs, {k: run.snapshots for k, run in runs.items()},
                                   digits, images=1, progress=False)
    assert grid.scenarios == ["round 0", "round 3"] and grid.defenses == ["none", "noise first"]
    assert grid.to_gray("round 0", "closed", "none") < 1e-6 and grid.to_gray("round 3", "closed", "none") < 1e-6
    assert grid.to_gray("round 0", "closed", "noise first") > 0.5  # defended: noise of standard deviation 1
    assert grid.to_gray("round 3", "closed", "noise first") < 1e-6  # past the defended rounds: the raw gradient
    assert grid.weakest("noise first")[:2] == ("round 3", "closed")


def test_strength_sweep_stops_at_the_first_level_without_a_leak(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))]}
    attacks_ = {"closed": {"attack": "closed_form"}}
    sweep, first = deployments.strength_sweep(attacks_, cases, "noise", "sigma", (0.0, 1e-9, 10.0), level=0.9)
    assert sweep.defenses == ["sigma 0", "sigma 1e-09", "sigma 10"]
    assert sweep.to_gray("B=1", "closed", "sigma 0") < 1e-6 and first == 10.0
    assert sweep.to_gray("B=1", "closed", "sigma 10") >= 0.9
    never, none_found = deployments.strength_sweep(attacks_, cases, "noise", "sigma", (0.0, 1e-9), level=0.9)
    assert none_found is None and len(never.cells) == 2


def test_strength_sweep_starts_from_an_existing_column(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(16,))]}
    attacks_ = {"closed": {"attack": "closed_form"}}
    first = evaluation.matrix(attacks_, {"weak": {"defense": "noise", "sigma": 1e-9}}, cases, metrics=("mse", "psnr"),
                              progress=False)
    sweep, stops = deployments.strength_sweep(attacks_, cases, "noise", "sigma", (1e-9, 10.0), level=0.9, start=first,
                                             start_label="weak")
    assert sweep.cell("B=1", "closed", "sigma 1e-09").scores == first.cell("B=1", "closed", "weak").scores
    assert stops == 10.0 and sweep.leaking("sigma 1e-09", 0.9) == 1 and sweep.leaking("sigma 10", 0.9) == 0


def test_censor_in_every_round_does_not_descend(digits):
    train_set, test_set = data.split(digits, 0.25, seed=0)
    options = dict(clients=4, per_round=2, alpha=1.0, batch_size=16, lr=0.5, evaluate_every=20, progress=False, seed=1)
    logs = _logs(digits, "mlp", {"none": {"defense": None}, "censor": {"defense": "censor", "trials": 3}},
                             rounds=20, model_options={"widths": (16,)}, **options)
    assert logs["none"].final() > logs["censor"].final() + 0.2


def test_defended_rounds_per_defense_and_withholding(digits):
    """A spec's own defended_rounds limits that defense alone; withholding in every round never moves the model."""
    options = dict(clients=4, per_round=2, alpha=1.0, batch_size=16, lr=0.5, evaluate_every=10, progress=False, seed=1)
    specs = {"none": {"defense": None},
             "clip, global limit": {"defense": "clip", "bound": 1e-12},
             "clip, first 10": {"defense": "clip", "bound": 1e-12, "defended_rounds": 10},
             "withhold, first 10": {"defense": "withhold", "defended_rounds": 10}}
    logs = _logs(digits, "mlp", specs, rounds=40, model_options={"widths": (16,)}, defended_rounds=2, **options)
    # Limited to 10 rounds, withholding (and clipping to ~0) freezes the model for 10 rounds, then it learns.
    for label in ("withhold, first 10", "clip, first 10"):
        limited = logs[label]
        assert limited.accuracy[:2] == [limited.accuracy[0]] * 2  # rounds 0 and 10
        assert limited.final() > limited.accuracy[0] + 0.2
    # The global limit still applies to specs without their own: clipping in rounds 1-2 only, then learning.
    assert logs["clip, global limit"].final() > logs["clip, global limit"].accuracy[0] + 0.2


def test_defended_rounds_none_in_a_spec_means_every_round(digits):
    options = dict(clients=4, per_round=2, alpha=1.0, batch_size=16, lr=0.5, evaluate_every=10, progress=False, seed=1)
    logs = _logs(digits, "mlp", {"frozen": {"defense": "withhold", "defended_rounds": None}}, rounds=20,
                             model_options={"widths": (16,)}, defended_rounds=2, **options)
    assert logs["frozen"].accuracy == [logs["frozen"].accuracy[0]] * 3


def test_training_and_test_is_the_split_a_run_trains_on():
    digits = data.load("digits")
    train, test = deployments.training_and_test(digits, 0.25, seed=3)
    expected_train, expected_test = data.split(digits, 0.25, 3)
    assert torch.equal(train.images, expected_train.images)
    assert torch.equal(test.labels, expected_test.labels)
    # The clients' data and the test set are disjoint: a public sample can come from the latter.
    data.check_disjoint(test, train.images, "the test set")
    assert deployments.training_and_test(train, test_set=test) == (train, test)
