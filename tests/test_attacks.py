"""gradcore.attacks: the closed form, label inference, DLG and iDLG behind one contract.

Outside references: the private inputs and labels themselves (the attacks must
recover them), and the attack's own objective recomputed from its reconstruction.
"""

from __future__ import annotations

import math

import pytest
import torch

import gradcore
from gradcore import client
from gradcore import attacks, data, experiments, gradients, minimal, models
from gradcore.attacks import AttackResult


def digit(digits, seed=0, dtype=torch.float64):
    images, labels = digits.batch(1, seed=seed)
    return images.to(dtype), labels


def random_images(shape, batch=1, seed=0, dtype=torch.float32):
    return torch.rand((batch, *shape), generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------------------------
# Closed form
# ----------------------------------------------------------------------------------


def test_closed_form_is_exact_on_the_linear_unit(digits, make_linear_unit):
    model = make_linear_unit(seed=1)
    for seed in range(5):
        image, label = digit(digits, seed)
        target = label.double()
        shared = client.shared_gradient(model, image, target, "half_squared_error")
        result = attacks.attack("closed_form", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error",
                                truth=image, progress=False)
        assert result.reconstruction.shape == (1, 1, 8, 8) and result.reconstruction.dtype == torch.float64
        assert (result.reconstruction - image).abs().max().item() < 1e-10
        assert result.history["iteration"] == [0] and result.history["mse"][0] < 1e-20
        assert torch.equal(result.labels, target)


@pytest.mark.parametrize("activation", ["sigmoid", "relu", "tanh"])
def test_closed_form_is_exact_through_a_biased_first_layer(digits, make_mlp, activation):
    model = make_mlp(widths=(20, 16), activation=activation, seed=2)
    for seed in range(3):
        image, label = digit(digits, seed + 10)
        shared = client.shared_gradient(model, image, label)
        result = attacks.attack("closed_form", model, shared, shape=(1, 8, 8), progress=False)
        assert (result.reconstruction - image).abs().max().item() < 1e-10
        assert result.labels is None  # the closed form recovers inputs only


def test_closed_form_refuses_a_batch(digits, make_mlp):
    model = make_mlp()
    images, labels = digits.batch(2, seed=0)
    shared = client.shared_gradient(model, images.double(), labels)
    with pytest.raises(ValueError, match="single sample; a batch of 2 yields only a mixture"):
        attacks.attack("closed_form", model, shared, shape=(1, 8, 8), batch_size=2, progress=False)


def test_closed_form_needs_a_biased_fully_connected_first_layer(digits, make_mlp, make_lenet):
    image, label = digit(digits)
    unbiased = make_mlp(bias=False)
    with pytest.raises(ValueError, match="needs a bias in the first fully-connected layer"):
        attacks.attack("closed_form", unbiased, client.shared_gradient(unbiased, image, label), shape=(1, 8, 8),
                       progress=False)
    lenet = make_lenet()
    picture = random_images((3, 16, 16))
    with pytest.raises(ValueError, match="first weighted layer is fully connected"):
        attacks.attack("closed_form", lenet, client.shared_gradient(lenet, picture, label), shape=(3, 16, 16),
                       progress=False)


def test_closed_form_needs_the_first_layer_trainable(digits, make_mlp):
    model = make_mlp()
    for parameter in model[1].parameters():
        parameter.requires_grad_(False)
    image, label = digit(digits)
    with pytest.raises(ValueError, match="not trainable"):
        attacks.attack("closed_form", model, client.shared_gradient(model, image, label), shape=(1, 8, 8),
                       progress=False)


# ----------------------------------------------------------------------------------
# Label inference (iDLG)
# ----------------------------------------------------------------------------------


def test_infer_labels_is_exact_for_single_samples_on_lenet():
    generator = torch.Generator().manual_seed(0)
    for seed in range(50):
        model = models.build("lenet", (3, 16, 16), 10, seed=seed)
        image = torch.rand((1, 3, 16, 16), generator=generator)
        label = torch.randint(0, 10, (1,), generator=generator)
        inferred = attacks.infer_labels(model, client.shared_gradient(model, image, label))
        assert inferred.dtype == torch.int64 and inferred.shape == (1,)
        assert inferred.item() == label.item(), f"seed {seed}"


def test_infer_labels_is_exact_for_single_samples_on_a_relu_mlp(digits, make_mlp):
    for seed in range(50):
        model = make_mlp(widths=(32,), activation="relu", seed=seed, dtype=torch.float32)
        image, label = digit(digits, seed, dtype=torch.float32)
        assert attacks.infer_labels(model, client.shared_gradient(model, image, label)).item() == label.item()


def test_infer_labels_for_a_batch_returns_sorted_labels(make_lenet):
    model = make_lenet()
    images = random_images((3, 16, 16), batch=3)
    labels = torch.tensor([7, 1, 4])
    inferred = attacks.infer_labels(model, client.shared_gradient(model, images, labels), batch_size=3)
    assert inferred.shape == (3,) and inferred.dtype == torch.int64
    assert torch.equal(inferred, inferred.sort().values)
    assert ((0 <= inferred) & (inferred < 10)).all()


def test_idlg_recovers_the_label(make_lenet):
    model = make_lenet(seed=4)
    image, label = random_images((3, 16, 16), seed=4), torch.tensor([6])
    result = attacks.attack("idlg", model, client.shared_gradient(model, image, label), shape=(3, 16, 16),
                            iterations=1, max_iter=2, progress=False)
    assert result.attack == "idlg"
    assert torch.equal(result.labels, label)


# ----------------------------------------------------------------------------------
# DLG
# ----------------------------------------------------------------------------------


def test_dlg_gradient_descent_on_the_linear_unit_converges(digits, make_linear_unit):
    model = make_linear_unit(seed=0)
    image, label = digit(digits, 0)
    target = label.double()
    shared = client.shared_gradient(model, image, target, "half_squared_error")
    result = attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error", truth=image,
                            optimiser="gd", lr=0.005, iterations=400, progress=False)
    mse = result.history["mse"]
    assert not result.diverged
    assert mse[-1] < 1e-12 * mse[0]  # many orders of magnitude
    assert max(mse[200:]) < min(mse[:10])  # and down to stay
    assert result.history["objective"][-1] < 1e-12 * result.history["objective"][0]
    assert (result.reconstruction - image).abs().max().item() < 1e-6


def test_dlg_lbfgs_on_lenet_reduces_the_objective(make_lenet):
    model = make_lenet(seed=1)
    image, label = random_images((3, 16, 16), seed=1), torch.tensor([2])
    shared = client.shared_gradient(model, image, label)
    result = attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, truth=image, iterations=3, max_iter=5,
                            progress=False)
    objective = result.history["objective"]
    assert objective[-1] < 0.5 * objective[0]
    assert result.history["iteration"] == [0, 1, 2, 3]


def test_dlg_history_records_the_objective_of_the_recorded_iterate(make_lenet):
    model = make_lenet(seed=2)
    image, label = random_images((3, 16, 16), seed=2), torch.tensor([5])
    shared = client.shared_gradient(model, image, label)
    result = attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, optimiser="gd", lr=0.1, iterations=3,
                            progress=False)
    recomputed = attacks.euclidean_distance(gradients.batch_gradient(model, result.reconstruction, label), shared).item()
    assert result.history["objective"][-1] == pytest.approx(recomputed, rel=1e-5)
    assert result.history["objective"][1] != result.history["objective"][0]


def dlg_on_lenet(seed, **config):
    model = models.build("lenet", (3, 16, 16), 10, seed=0)
    image, label = random_images((3, 16, 16), seed=9), torch.tensor([1])
    shared = client.shared_gradient(model, image, label)
    return attacks.attack("dlg", model, shared, shape=(3, 16, 16), labels=label, seed=seed, iterations=2, max_iter=3,
                          progress=False, **config)


def test_dlg_is_reproducible_with_its_seed():
    first, again, other = dlg_on_lenet(3), dlg_on_lenet(3), dlg_on_lenet(4)
    assert torch.equal(first.reconstruction, again.reconstruction)
    assert first.history["objective"] == again.history["objective"]
    assert not torch.equal(first.reconstruction, other.reconstruction)


def test_dlg_learns_soft_labels_when_none_are_given(make_lenet):
    model = make_lenet()
    images, labels = random_images((3, 16, 16), batch=2), torch.tensor([3, 8])
    result = attacks.attack("dlg", model, client.shared_gradient(model, images, labels), shape=(3, 16, 16),
                            batch_size=2, optimiser="adam", lr=0.05, iterations=2, progress=False)
    assert result.labels.shape == (2,) and result.labels.dtype == torch.int64


def test_dlg_keeps_the_model_precision(digits, make_mlp):
    model = make_mlp()
    image, label = digit(digits)
    result = attacks.attack("dlg", model, client.shared_gradient(model, image, label), shape=(1, 8, 8), labels=label,
                            optimiser="gd", iterations=1, progress=False)
    assert result.reconstruction.dtype == torch.float64


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_diverging_run_is_flagged_and_keeps_a_finite_reconstruction(digits, make_linear_unit, dtype):
    model = make_linear_unit(dtype=dtype)
    image, label = digit(digits, dtype=dtype)
    target = label.to(dtype)
    shared = client.shared_gradient(model, image, target, "half_squared_error")
    result = attacks.attack("dlg", model, shared, shape=(1, 8, 8), labels=target, loss="half_squared_error", truth=image,
                            optimiser="gd", lr=1e6, iterations=50, snapshots=(0, 50), progress=False)
    assert result.diverged
    assert torch.isfinite(result.reconstruction).all()
    assert len(result.history["iteration"]) < 51  # it stopped early
    assert len({len(values) for values in result.history.values()}) == 1
    assert [iteration for iteration, _ in result.snapshots] == [0]


def test_dlg_rejects_learning_labels_for_a_regression_loss(make_linear_unit, digits):
    model = make_linear_unit()
    image, label = digit(digits)
    shared = client.shared_gradient(model, image, label.double(), "half_squared_error")
    with pytest.raises(ValueError, match="labels can only be learned for a cross-entropy loss"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), loss="half_squared_error", progress=False)


@pytest.mark.parametrize("option, value, fragment", [
    ("optimiser", "newton", r"unknown optimiser 'newton'; known optimisers: (?=.*adam)(?=.*\bgd\b)(?=.*lbfgs)"),
    ("init", "zeros", r"unknown initialisation 'zeros'; known initialisations: (?=.*gray)(?=.*\brand\b)(?=.*randn)"),
])
def test_dlg_unknown_options(digits, make_mlp, option, value, fragment):
    model = make_mlp()
    image, label = digit(digits)
    with pytest.raises(KeyError, match=fragment):
        attacks.attack("dlg", model, client.shared_gradient(model, image, label), shape=(1, 8, 8), labels=label,
                       iterations=1, progress=False, **{option: value})


# ----------------------------------------------------------------------------------
# The shared contract
# ----------------------------------------------------------------------------------

CONFIGS = {
    "closed_form": {},
    "minimal_mlp": {},
    "exclusivity": {},
    "walk_back": {},
    "dlg": {"optimiser": "gd", "lr": 0.1, "iterations": 5, "snapshots": (0, 2, 5)},
    "idlg": {"optimiser": "gd", "lr": 0.1, "iterations": 5, "snapshots": (0, 2, 5)},
}


@pytest.fixture
def mlp_case(digits, make_mlp):
    model = make_mlp(widths=(16,), activation="sigmoid", seed=3)
    image, label = digit(digits, 7)
    return model, image, label, client.shared_gradient(model, image, label)


def _relu_mlp():
    return models.build("mlp", (1, 8, 8), 10, seed=3, widths=(32, 16), activation="relu").double()


def _small_cnn():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(256, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)).double()


def _conv_mlp():
    torch.manual_seed(3)
    return minimal.conv_mlp((1, 8, 8), 10, kernels=4, kernel_size=3, padding=1, hidden=32).double()


#: Attacks that need a particular architecture get it; every other attack sees the sigmoid MLP.
MODEL_FOR = {"walk_back": _relu_mlp, "exclusivity": _relu_mlp, "exclusivity_hybrid": _small_cnn, "two_step": _conv_mlp}


@pytest.mark.parametrize("name", attacks.ATTACKS.names())
@pytest.mark.parametrize("with_truth", [False, True])
def test_every_attack_honours_the_result_contract(name, with_truth, mlp_case):
    model, image, label, shared = mlp_case
    if name in MODEL_FOR:
        model, image = MODEL_FOR[name](), image.double()
        shared = client.shared_gradient(model, image, label)
    config = CONFIGS.get(name, {"iterations": 5})
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


def test_dlg_reconstructs_a_whole_batch_and_records_every_so_often(make_lenet):
    model = make_lenet()
    images, labels = random_images((3, 16, 16), batch=3), torch.tensor([0, 4, 9])
    result = attacks.attack("dlg", model, client.shared_gradient(model, images, labels), shape=[3, 16, 16],
                            batch_size=3, labels=labels, truth=images, optimiser="gd", lr=0.1, iterations=5,
                            record_every=2, init="gray", snapshots=[0, 3], progress=False)
    assert result.reconstruction.shape == (3, 3, 16, 16)
    assert result.history["iteration"] == [0, 2, 4, 5]
    assert [iteration for iteration, _ in result.snapshots] == [0, 3]
    assert torch.equal(result.snapshots[0][1], torch.full((3, 3, 16, 16), 0.5))
    assert result.score(images, "mse").shape == (3,)


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


# ----------------------------------------------------------------------------------
# Issue 14: bad input gets a clear error before the attack starts, never garbage
# ----------------------------------------------------------------------------------


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


def test_infer_labels_checks_its_batch_size(mlp_case):
    # batch_size=0 divided by zero inside the heuristic.
    model, image, label, shared = mlp_case
    with pytest.raises(ValueError, match="batch_size must be at least 1; got 0"):
        attacks.infer_labels(model, shared, batch_size=0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        attacks.infer_labels(model, (shared[0] * math.nan,) + shared[1:])


def test_every_attack_lives_in_a_family_module_and_is_registered_on_import():
    import gradcore.attacks as package

    families = {"matching", "inverting", "analytic", "exclusivity", "regularised"}
    for name in package.ATTACKS.names():
        module = package.ATTACKS[name].__module__
        assert module.startswith("gradcore.attacks.") and module.split(".")[-1] in families, (name, module)


def test_idlg_leaves_the_callers_observation_alone(mlp_case):
    model, image, label, shared = mlp_case
    observation = attacks.Observation(model, shared, (1, 8, 8), 1, progress=False)
    result = attacks.ATTACKS["idlg"](observation, optimiser="gd", lr=0.1, iterations=2)
    assert observation.labels is None
    assert result.labels.tolist() == label.tolist()


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


def test_dlg_restarts_keep_the_start_with_the_smallest_gradient_distance(mlp_case):
    model, image, label, shared = mlp_case
    config = {"optimiser": "gd", "lr": 0.1, "iterations": 5, "labels": label, "truth": image, "progress": False}
    single = attacks.attack("dlg", model, shared, shape=(1, 8, 8), **config)
    assert torch.equal(attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=1, **config).reconstruction,
                       single.reconstruction)
    several = attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=3, **config)
    assert several.final("objective") <= single.final("objective")
    satisfied = attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=3, restart_above=1e9, **config)
    assert torch.equal(satisfied.reconstruction, single.reconstruction)  # the first start was good enough
    with pytest.raises(gradcore.GradcoreValueError, match="restarts"):
        attacks.attack("dlg", model, shared, shape=(1, 8, 8), restarts=0, **config)
