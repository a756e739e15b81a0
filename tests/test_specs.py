"""gradcore.specs: the reserved keys of attack and defense specs, read in one place."""

from __future__ import annotations

import pytest

from gradcore import evaluation, experiments, specs
from gradcore.errors import GradcoreValueError


def test_an_attack_spec_splits_where_it_runs_from_its_options():
    read = specs.attack_spec({"attack": "inverting_gradients", "iterations": 5, "scenarios": ["a"], "defenses": ["none"],
                              "labels": "hidden", "per_defense": {"noise": {"iterations": 9}}})
    assert read.name == "inverting_gradients" and dict(read.options) == {"iterations": 5}
    assert read.runs_on("a", "none") and not read.runs_on("b") and not read.runs_on("a", "noise")
    assert read.config("noise") == {"iterations": 9} and read.config("none") == {"iterations": 5}
    assert read.labels == "hidden"
    assert read.without_limits() == {"attack": "inverting_gradients", "iterations": 5, "labels": "hidden",
                                     "per_defense": {"noise": {"iterations": 9}}}
    anywhere = specs.attack_spec({"attack": "closed_form"})
    assert anywhere.runs_on("any", "any") and anywhere.config() == {} and anywhere.labels == "known"
    with pytest.raises(GradcoreValueError, match="'attack' registry name"):
        specs.attack_spec({"iterations": 5})


def test_a_defense_spec_tells_an_absent_limit_from_every_round():
    read = specs.defense_spec({"defense": "censor", "trials": 20, "defended_rounds": 3})
    assert read.name == "censor" and dict(read.options) == {"trials": 20} and read.defended_rounds == 3
    assert specs.defense_spec({"defense": "clip", "bound": 1.0, "defended_rounds": None}).defended_rounds is None
    assert specs.defense_spec({"defense": None}).defended_rounds is specs.UNSET
    assert specs.defense_spec({"dp_sgd": {"noise_multiplier": 1.0, "max_grad_norm": 4.0}}).name is None


def test_the_matrix_refuses_a_deployments_extras_instead_of_ignoring_them(digits):
    cases = {"B=1": [experiments.scenario(digits, "mlp", 1, seed=0, widths=(8,))]}
    for extra in ({"defended_rounds": 2}, {"dp_sgd": {"noise_multiplier": 1.0, "max_grad_norm": 1.0}}):
        with pytest.raises(GradcoreValueError, match="one round's gradient"):
            evaluation.matrix({"closed": {"attack": "closed_form"}}, {"d": {"defense": "noise", "sigma": 0.1, **extra}},
                              cases, metrics=("mse",), progress=False)


def test_a_scenario_shares_a_gradient_from_a_spec_exactly_as_from_a_name_and_options(digits):
    case = experiments.scenario(digits, "mlp", 2, seed=0, widths=(8,))
    spec = {"defense": "censor", "trials": 3, "lr": 0.1, "defended_rounds": 1}
    from_spec = case.gradient(spec, seed=4)
    from_name = case.gradient("censor", seed=4, trials=3, lr=0.1)
    assert all((a == b).all() for a, b in zip(from_spec, from_name))
    assert all((a == b).all() for a, b in zip(case.gradient({"defense": None}), case.gradient()))
    attacked = case.attack("dlg", spec, iterations=1, seed=4)
    assert attacked.reconstruction.shape == case.inputs.shape


def test_a_scenario_refuses_a_spec_it_cannot_share_once_or_an_option_given_twice(digits):
    case = experiments.scenario(digits, "mlp", 2, seed=0, widths=(8,))
    with pytest.raises(GradcoreValueError, match="dp_sgd spec describes how a deployment trains"):
        case.gradient({"defense": None, "dp_sgd": {"max_grad_norm": 1.0}})
    with pytest.raises(GradcoreValueError, match="trials given twice"):
        case.gradient({"defense": "censor", "trials": 3}, trials=4)
