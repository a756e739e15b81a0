"""gradcore.attacks.base: the contract every attack honours, the checks before it starts, the one loop.

Outside references: the private inputs and labels themselves, and each attack's own objective
recomputed from its reconstruction.
"""

from __future__ import annotations

import math

import pytest
import torch

from gradcore import attacks, client, data, experiments, generative, models
from gradcore.attacks import AttackResult

#: The GAN-prior attacks' prior: a tiny untrained generator in the mlp case's precision (float64).
_PRIOR = generative.freeze(generative.untrained(generative.Generator((1, 8, 8), 10, latent_dim=4, width=8)).double())

#: Attacks that need more than a short budget. Every other attack runs with ``iterations=5`` if it takes
#: iterations (read off its signature) and with no options otherwise: a new attack needs no entry here.
CONFIGS = {
    "ggl": {"generator": _PRIOR, "generations": 3, "population": 4},
    "gias": {"generator": _PRIOR, "latent_iterations": 3, "parameter_iterations": 2, "candidates": 2},
    "gifd": {"generator": _PRIOR, "latent_iterations": 3, "layer_iterations": 2, "candidates": 2},
    "dlg": {"optimiser": "gd", "lr": 0.1, "iterations": 5, "snapshots": (0, 2, 5)},
    "idlg": {"optimiser": "gd", "lr": 0.1, "iterations": 5, "snapshots": (0, 2, 5)},
}


def short_budget(name: str) -> dict:
    """Five iterations for an attack that iterates, nothing for a closed form (read off its signature)."""
    import inspect

    return {"iterations": 5} if "iterations" in inspect.signature(attacks.ATTACKS[name]).parameters else {}


def _relu_mlp():
    return models.build("mlp", (1, 8, 8), 10, seed=3, widths=(32, 16), activation="relu").double()


def _small_cnn():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(256, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).double()


def _conv_mlp():
    torch.manual_seed(3)
    return models.conv_mlp((1, 8, 8), 10, kernels=4, kernel_size=3, padding=1, hidden=32).double()


#: Attacks that need a particular architecture get it; every other attack sees the sigmoid MLP.
MODEL_FOR = {"walk_back": _relu_mlp, "exclusivity": _relu_mlp, "exclusivity_hybrid": _small_cnn, "two_step": _conv_mlp}


@pytest.mark.parametrize("name", attacks.ATTACKS.names())
@pytest.mark.parametrize("with_truth", [False, True])
def test_every_attack_honours_the_result_contract(name, with_truth, mlp_case):
    model, image, label, shared = mlp_case
    if name in MODEL_FOR:
        model, image = MODEL_FOR[name](), image.double()
        shared = client.shared_gradient(model, image, label)
    config = CONFIGS.get(name, short_budget(name))
    result = attacks.attack(name, model, shared, shape=(1, 8, 8), labels=label, truth=image if with_truth else None,
                            progress=False, **config)
    assert isinstance(result, AttackResult)
    assert result.attack == name and result.seconds > 0 and result.diverged is False
    assert result.reconstruction.shape == (1, 1, 8, 8) and not result.reconstruction.requires_grad
    assert torch.isfinite(result.reconstruction).all()
    expected_keys = {"iteration", "objective"} | ({"mse", "psnr"} if with_truth else set())
    assert set(result.history) == expected_keys
    assert len({len(values) for values in result.history.values()}) == 1
    assert result.history["iteration"][0] == 0
    assert all(math.isfinite(v) for key in ("iteration", "objective", "mse") for v in result.history.get(key, []))
    assert not any(math.isnan(v) for v in result.history.get("psnr", []))  # an exact recovery has PSNR inf
    if "snapshots" in config:
        assert [iteration for iteration, _ in result.snapshots] == list(config["snapshots"])
        assert all(snapshot.shape == (1, 1, 8, 8) for _, snapshot in result.snapshots)
        assert torch.equal(result.snapshots[-1][1], result.reconstruction)
        assert result.history["iteration"] == list(range(config["iterations"] + 1))
    if with_truth:
        assert result.final("psnr") == pytest.approx(result.score(image, "psnr").item(), rel=1e-9)
        assert torch.equal(result.aligned(image), result.reconstruction)


def test_unknown_attack_lists_the_known_ones(mlp_case):
    model, _, _, shared = mlp_case
    with pytest.raises(KeyError) as caught:
        attacks.attack("gradinversion", model, shared, shape=(1, 8, 8))
    assert "unknown attack 'gradinversion'" in str(caught.value)
    known = str(caught.value).split("known attacks: ")[1].split(", ")
    assert {"closed_form", "dlg", "idlg"} <= set(known) and known == sorted(known)


@pytest.mark.parametrize("problem, fragment", [
    ("truth", r"truth has shape \(1, 1, 8, 9\), expected \(1, 1, 8, 8\)"),
    ("labels", "2 labels given for a batch of 1"),
    ("nan", "NaN or infinite"),
    ("batch", "batch size must be at least 1"),
    ("count", "tensors but the model has"),
])
def test_invalid_observations_raise(mlp_case, problem, fragment):
    model, image, label, shared = mlp_case
    options = {"shape": (1, 8, 8), "labels": label, "progress": False}
    if problem == "truth":
        options["truth"] = torch.zeros(1, 1, 8, 9)
    elif problem == "labels":
        options["labels"] = torch.tensor([1, 2])
    elif problem == "nan":
        shared = (shared[0] * math.nan,) + shared[1:]
    elif problem == "batch":
        options["batch_size"] = 0
    elif problem == "count":
        shared = shared[:-1]
    with pytest.raises(ValueError, match=fragment):
        attacks.attack("dlg", model, shared, iterations=1, **options)


def test_a_stalled_lbfgs_stops_early_and_records_what_a_full_run_records(monkeypatch):
    """Once L-BFGS stops moving every later step repeats itself; the loop stops and fills in the same history."""
    from gradcore import attacks as attack_module

    class Unchecked(torch.optim.LBFGS):
        """The same optimiser under another type: the loop does not check it for a stall."""

    steps = []
    original = torch.optim.LBFGS.step
    monkeypatch.setattr(torch.optim.LBFGS, "step", lambda self, closure: steps.append(1) or original(self, closure))
    case = experiments.scenario(data.load("digits", limit=50), "mlp", 1, seed=0, dtype=torch.float64, widths=(16,))
    config = dict(iterations=40, line_search="strong_wolfe", snapshots=(25, 40), record_every=5)
    fast = case.attack("dlg", optimiser="lbfgs", **config)
    fast_steps, steps[:] = len(steps), []
    # The registry's L-BFGS, same settings, as a type the loop does not check.
    monkeypatch.setitem(attack_module.OPTIMISERS._entries, "lbfgs",
                        lambda params, lr, max_iter=20, line_search=None: Unchecked(params, lr=lr, max_iter=max_iter, history_size=100,
                                                                                   line_search_fn=line_search))
    full = case.attack("dlg", optimiser="lbfgs", **config)
    assert len(steps) == 40 and fast_steps < 40  # it did stall, and the check cut it short
    assert torch.equal(fast.reconstruction, full.reconstruction)
    assert fast.history == full.history
    assert all(a == b and torch.equal(x, y) for (a, x), (b, y) in zip(fast.snapshots, full.snapshots))
    assert fast.history["mse"][-1] < 1e-8  # it stalled at the solution, as DLG does on a small MLP


def test_a_float_label_is_refused_not_broadcast(mlp_case):
    # Cross-entropy with a float (B,) target broadcast it against the logits: another loss, a gradient off by up to 2.5.
    model, image, label, shared = mlp_case
    with pytest.raises(TypeError, match=r"labels are a float32 tensor of shape \(1,\): cross-entropy takes integer class indices"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=torch.tensor([3.0]), progress=False)


@pytest.mark.parametrize("labels, fragment", [
    (torch.tensor([12]), r"class indices in 0 .. 9 \(the model has 10 outputs\); got values from 12 to 12"),
    (torch.tensor([-1]), "got values from -1 to -1"),
    ([3], "labels must be a torch.Tensor"),
])
def test_labels_outside_the_classes_are_refused(mlp_case, labels, fragment):
    model, image, label, shared = mlp_case
    with pytest.raises(ValueError, match=fragment):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=labels, progress=False)


@pytest.mark.parametrize("config, error, fragment", [
    ({"iterations": -5}, ValueError, r"iterations \(option of attack 'dlg'\) must be at least 1; got -5"),
    ({"iterations": 0}, ValueError, "must be at least 1; got 0"),
    ({"lr": "1"}, TypeError, r"lr \(option of attack 'dlg'\) must be a finite number > 0"),
    ({"record_every": 2.0}, TypeError, "write 2, not 2.0"),
    ({"snapshots": (0, -1)}, ValueError, r"snapshots \(option of attack 'dlg'\)\[1\] must be at least 0"),
    ({"steps": 3}, TypeError, "attack 'dlg' has no option 'steps'"),
])
def test_attack_settings_are_checked_before_the_attack_starts(mlp_case, config, error, fragment):
    # iterations=-5 returned the random start as a reconstruction.
    model, image, label, shared = mlp_case
    with pytest.raises(error, match=fragment):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=label, progress=False, **config)


def test_batch_size_must_be_a_whole_number(mlp_case):
    model, image, label, shared = mlp_case
    with pytest.raises(TypeError, match=r"batch size must be a whole number at least 1; got 2.0 \(a float\) \(write 2, not 2.0\)"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), batch_size=2.0, progress=False)


@pytest.mark.parametrize("shape", [(3, 8, 8), (1, 9, 9)])
def test_a_shape_the_model_cannot_take_is_named(mlp_case, shape):
    model, image, label, shared = mlp_case
    with pytest.raises(ValueError, match=rf"inputs of shape \({shape[0]}, {shape[1]}, {shape[2]}\) \(one sample\) do not fit the model"):
        attacks.attack("dlg", model, shared, shape=shape, labels=label, progress=False)


def test_a_gradient_in_another_dtype_than_the_model_is_refused(mlp_case):
    model, image, label, shared = mlp_case
    with pytest.raises(ValueError, match=r"gradient entry 0 \(parameter '1.weight'\) is float32, its parameter float64"):
        attacks.attack("dlg", model, tuple(g.float() for g in shared), shape=(1, 8, 8), labels=label, progress=False)


def test_every_attack_lives_in_a_family_module_and_is_registered_on_import():
    import gradcore.attacks as package

    families = {"matching", "inverting", "analytic", "exclusivity", "regularised", "generative"}
    for name in package.ATTACKS.names():
        module = package.ATTACKS[name].__module__
        assert module.startswith("gradcore.attacks.") and module.split(".")[-1] in families, (name, module)


def test_one_shot_result_records_iteration_zero(mlp_case):
    model, image, label, shared = mlp_case
    observation = attacks.Observation(model, shared, (1, 8, 8), 1, truth=image, progress=False)
    result = AttackResult.one_shot(observation, image.clone().requires_grad_(True), label, objective=0.5)
    assert not result.reconstruction.requires_grad
    assert result.history["iteration"] == [0] and result.history["objective"] == [0.5]
    assert result.history["mse"] == [0.0] and result.labels is label


def test_optimise_stops_on_a_non_finite_objective(mlp_case):
    model, image, label, shared = mlp_case
    observation = attacks.Observation(model, shared, (1, 8, 8), 1, progress=False)

    class Blowup(attacks.Steps):
        def __init__(self):
            self.value, self.x = 1.0, torch.zeros(1, 1, 8, 8)

        def step(self):
            self.value *= 1e200
            self.x = self.x + 1
            return torch.tensor(self.value, dtype=torch.float64)

        def current(self):
            return self.x.clone()

        def objective(self, current):
            return self.value

    result = attacks.optimise(observation, Blowup(), iterations=5)
    assert result.diverged and result.history["iteration"] == [0, 1]
    assert torch.equal(result.reconstruction, torch.ones(1, 1, 8, 8))



def test_a_model_without_an_output_layer_is_refused_naming_what_needed_it():
    from gradcore.attacks.base import last_linear
    from gradcore.errors import AttackRefused

    convolutional = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU())
    with pytest.raises(AttackRefused, match="label inference needs a fully-connected output layer"):
        last_linear(convolutional)
    with pytest.raises(AttackRefused, match="^imitating Soteria"):
        last_linear(convolutional, "imitating Soteria's pruned representation")
