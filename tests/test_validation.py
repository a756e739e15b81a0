"""gradcore.validation: the checks at the boundary, and property-based tests of the public API.

Two halves. The first tests the checkers themselves: what they accept, what they refuse
and what the messages say. The second uses hypothesis: for random valid inputs the
defenses keep their contracts (clip never exceeds its bound and leaves a gradient inside
it bit for bit; sparsify keeps exactly k; CENSOR is orthogonal and norm-preserving at any
scale; no defense turns a finite gradient into a non-finite one), and for random invalid
inputs every entry point raises one of the library's errors instead of returning. The
"ci" hypothesis profile (tests/conftest.py) keeps the examples few and repeatable.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradcore
from gradcore import (
    attacks,
    client,
    data,
    defenses,
    generative,
    gradients,
    metrics,
    models,
    privacy,
    validation,
)
from gradcore.analysis import dense, exclusivity, minimal, walkback
from gradcore.registry import UnknownNameError
from gradcore.validation import GradcoreError, GradcoreTypeError, GradcoreValueError

# One tiny client, built once (hypothesis runs a test body many times; fixtures would be rebuilt or shared unsafely).
MODEL = models.build("mlp", (1, 4, 4), 3, seed=0, widths=(5,)).double()
INPUTS = torch.rand((2, 1, 4, 4), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
LABELS = torch.tensor([0, 2])
GRADIENT = client.shared_gradient(MODEL, INPUTS, LABELS)
CONTEXT = {"model": MODEL, "inputs": INPUTS, "labels": LABELS, "loss": "cross_entropy"}
# An untrained generator and a client of its 8x8 images (the smallest side it draws), for the GAN-prior attacks.
GENERATOR = generative.Generator((1, 8, 8), 3, latent_dim=4, width=8).double().eval()
GAN_MODEL = models.build("mlp", (1, 8, 8), 3, seed=0, widths=(5,)).double()
GAN_GRADIENT = client.shared_gradient(GAN_MODEL, torch.rand((2, 1, 8, 8), generator=torch.Generator().manual_seed(0),
                                                            dtype=torch.float64), LABELS)
DIGITS = data.load("digits", limit=32)
DP = {"defense": "dp", "bound": 1.0, "sigma": 0.5}
PROTOCOL = privacy.Protocol("client", 0.25, 10)


# ----------------------------------------------------------------------------------
# The checkers
# ----------------------------------------------------------------------------------


def test_errors_are_the_library_s_own_and_keep_old_callers_working():
    assert issubclass(GradcoreValueError, ValueError) and issubclass(GradcoreValueError, GradcoreError)
    assert issubclass(GradcoreTypeError, TypeError) and issubclass(GradcoreTypeError, ValueError)
    assert issubclass(UnknownNameError, KeyError) and issubclass(UnknownNameError, GradcoreError)
    assert issubclass(exclusivity.NotInsecureError, GradcoreValueError)


@pytest.mark.parametrize("value, error, fragment", [
    (0, GradcoreValueError, "iterations must be at least 1; got 0"),
    (-5, GradcoreValueError, "at least 1; got -5"),
    (2.0, GradcoreTypeError, "write 2, not 2.0"),
    (2.5, GradcoreTypeError, "must be a whole number at least 1; got 2.5 (a float)"),
    ("3", GradcoreTypeError, "got '3' (a str)"),
    (True, GradcoreTypeError, "got True (a bool)"),
    (None, GradcoreTypeError, "got None"),
])
def test_counts_refuse_what_is_not_a_positive_whole_number(value, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        validation.positive_int("iterations", value)


def test_counts_accept_numpy_integers_and_none_where_allowed():
    validation.positive_int("iterations", np.int64(3))
    validation.positive_int("limit", None, allow_none=True)
    validation.integer("seed", -7)


@pytest.mark.parametrize("value, error, fragment", [
    (float("nan"), GradcoreValueError, "must be a finite number >= 0; got nan"),
    (float("inf"), GradcoreValueError, "got inf"),
    (-0.5, GradcoreValueError, "must be >= 0; got -0.5"),
    ("0.1", GradcoreTypeError, "pass the number itself, e.g. 0.1, not a string"),
    ([0.1], GradcoreTypeError, r"got \[0.1\] \(a list\)"),
    (False, GradcoreTypeError, "got False"),
])
def test_numbers_refuse_non_finite_wrong_kind_and_out_of_range(value, error, fragment):
    with pytest.raises(error, match=fragment):
        validation.number("sigma", value, low=0)


def test_numbers_accept_ints_numpy_scalars_and_zero_dim_tensors_and_name_open_intervals():
    for value in (1, 0.5, np.float32(0.25), torch.tensor(0.75)):
        validation.number("keep", value, low=0, high=1, low_open=True)
    with pytest.raises(GradcoreValueError, match=r"keep must be in \(0, 1\]; got 0"):
        validation.number("keep", 0, low=0, high=1, low_open=True)
    with pytest.raises(GradcoreValueError, match=r"prune must be in \[0, 1\); got 1.0"):
        validation.number("prune", 1.0, low=0, high=1, high_open=True)


def test_options_name_the_unknown_the_missing_and_the_owner():
    with pytest.raises(GradcoreTypeError, match="defense 'noise' has no option 'sigmas'; its options: sigma"):
        defenses.defend(GRADIENT, "noise", sigmas=0.1)
    with pytest.raises(GradcoreTypeError, match="defense 'clip' needs the option bound"):
        defenses.defend(GRADIENT, "clip")
    with pytest.raises(GradcoreTypeError, match="attack 'dlg' has no option 'iteration'"):
        gradcore.attack("dlg", MODEL, GRADIENT, shape=(1, 4, 4), batch_size=2, labels=LABELS, iteration=3)
    with pytest.raises(GradcoreTypeError, match="dataset 'digits' has no option 'size'"):
        data.load("digits", size=8)
    with pytest.raises(GradcoreValueError, match=r"line_search \(option of attack 'dlg'\) must be one of None, 'strong_wolfe'"):
        gradcore.attack("dlg", MODEL, GRADIENT, shape=(1, 4, 4), batch_size=2, labels=LABELS, line_search="wolfe")
    with pytest.raises(GradcoreValueError, match=r"'lr' of local \(option of attack 'inverting_gradients'\) must be > 0; got 0"):
        gradcore.attack("inverting_gradients", MODEL, GRADIENT, shape=(1, 4, 4), batch_size=2, labels=LABELS, local={"lr": 0})


def test_inputs_for_checks_dtype_device_shape_emptiness_and_finiteness():
    assert validation.inputs_for(MODEL, INPUTS) == (3,)
    with pytest.raises(GradcoreValueError, match=r"inputs are float32 but the model's parameters are float64"):
        validation.inputs_for(MODEL, INPUTS.float())
    with pytest.raises(GradcoreValueError, match="empty batch"):
        validation.inputs_for(MODEL, INPUTS[:0])
    with pytest.raises(GradcoreValueError, match=r"add the batch dimension: inputs.unsqueeze\(0\)"):
        validation.inputs_for(MODEL, INPUTS[0, 0, 0])
    with pytest.raises(GradcoreValueError, match="1 NaN or infinite"):
        validation.inputs_for(MODEL, torch.where(torch.arange(32).reshape(2, 1, 4, 4) == 5, math.nan, INPUTS))
    with pytest.raises(GradcoreValueError, match=r"inputs of shape \(1, 5, 5\) \(one sample\) do not fit the model"):
        validation.inputs_for(MODEL, torch.zeros(1, 1, 5, 5, dtype=torch.float64))
    with pytest.raises(GradcoreTypeError, match="convert with torch.as_tensor"):
        validation.inputs_for(MODEL, INPUTS.numpy())


def test_the_probe_leaves_the_model_as_it_was():
    model = models.build("convnet", (3, 9, 9), 2, seed=0, width=2).train()
    before = [b.clone() for b in model.buffers()]
    assert validation.model_outputs(model, (3, 9, 9)) == (2,)
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(a, b) for a, b in zip(before, model.buffers()))  # batch norm statistics untouched
    model.eval()
    validation.model_outputs(model, (3, 9, 9))
    assert not any(m.training for m in model.modules())


def test_targets_for_cross_entropy_and_regression():
    validation.targets_for("labels", LABELS, 2, (3,), "cross_entropy")
    validation.targets_for("labels", torch.full((2, 3), 1 / 3), 2, (3,), "cross_entropy")  # probabilities
    validation.targets_for("targets", torch.tensor([0.5, 2.0]), 2, (1,), "half_squared_error")
    with pytest.raises(GradcoreTypeError, match=r"cross-entropy takes integer class indices shaped \(2,\)"):
        validation.targets_for("labels", torch.tensor([1.0, 2.0]), 2, (3,), "cross_entropy")
    with pytest.raises(GradcoreValueError, match=r"class indices in 0 .. 2 \(the model has 3 outputs\); got values from 0 to 3"):
        validation.targets_for("labels", torch.tensor([0, 3]), 2, (3,), "cross_entropy")
    with pytest.raises(GradcoreValueError, match=r"hold 1 target value\(s\) per sample"):
        validation.targets_for("targets", torch.zeros(2, 2), 2, (1,), "half_squared_error")
    with pytest.raises(GradcoreTypeError, match="must be a torch.Tensor; got \\[0, 1\\]"):
        validation.targets_for("labels", [0, 1], 2, (3,), "cross_entropy")


def test_gradient_names_the_parameter_of_a_bad_entry():
    bad = list(GRADIENT)
    bad[1] = bad[1].clone()
    bad[1][0] = math.inf
    with pytest.raises(GradcoreValueError, match=r"gradient entry 1 \(parameter '1.bias'\) \(shape \(5,\)\) has 1 NaN or infinite"):
        validation.gradient(bad, MODEL)
    with pytest.raises(GradcoreValueError, match=r"entry 2 \(parameter '3.weight'\) is float32, its parameter float64"):
        validation.gradient(GRADIENT[:2] + (GRADIENT[2].float(),) + GRADIENT[3:], MODEL)
    with pytest.raises(GradcoreValueError, match="a gradient has one dtype and one device"):
        validation.gradient((GRADIENT[0], GRADIENT[1].float()))
    with pytest.raises(GradcoreTypeError, match="must be a sequence of tensors"):
        validation.gradient(GRADIENT[0])
    with pytest.raises(GradcoreTypeError, match="must be a floating-point tensor"):
        validation.gradient((torch.ones(3, dtype=torch.int64),))


def test_validation_alters_nothing_it_accepts():
    # The checks only refuse: a valid call computes what it computed without them.
    direct = tuple(g.detach() for g in gradients.batch_gradient(MODEL, INPUTS, LABELS))
    assert all(torch.equal(a, b) for a, b in zip(direct, GRADIENT))
    shape = [1, 4, 4]
    observation = attacks.Observation(MODEL, list(GRADIENT), shape, 2, LABELS)
    assert isinstance(observation.gradient, tuple) and all(a is b for a, b in zip(observation.gradient, GRADIENT))
    assert observation.labels is LABELS and observation.shape == (1, 4, 4)


# ----------------------------------------------------------------------------------
# Properties of the defenses, for random valid inputs
# ----------------------------------------------------------------------------------

DTYPES = st.sampled_from([torch.float32, torch.float64])
SCALES = st.integers(-30, 30).map(lambda exponent: 10.0 ** exponent)


@st.composite
def gradients_at_scale(draw, shapes=None, nonzero=False):
    """A random gradient (one tensor per shape), its entries in [-1, 1] times a power of ten in 1e-30..1e30."""
    dtype, scale = draw(DTYPES), draw(SCALES)
    if shapes is None:
        shapes = draw(st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=2).map(tuple), min_size=1, max_size=3))
    elements = st.floats(-1, 1, allow_nan=False, width=32)
    if nonzero:
        elements = elements.filter(lambda value: abs(value) > 1e-3)
    entries = [draw(hnp.arrays(np.float64, shape, elements=elements)) for shape in shapes]
    return tuple(torch.as_tensor(entry * scale).to(dtype) for entry in entries)


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32 if tensor.dtype == torch.float32 else torch.int64)


@given(gradient=gradients_at_scale(), bound=st.floats(1e-3, 1e3))
def test_clip_never_exceeds_its_bound_and_leaves_a_gradient_inside_it_bit_for_bit(gradient, bound):
    clipped = defenses.defend(gradient, "clip", bound=bound)
    total = defenses.measured_norm(gradient)
    assert defenses.measured_norm(clipped) <= bound
    assert all(c.dtype == g.dtype and c.shape == g.shape for c, g in zip(clipped, gradient))
    if total <= bound:
        assert all(torch.equal(bits(c), bits(g)) for c, g in zip(clipped, gradient))
    else:
        tolerance = 1e-5 if gradient[0].dtype == torch.float32 else 1e-12
        assert defenses.measured_norm(clipped) >= bound * (1 - tolerance)
        factor = bound / total  # one factor for the whole gradient: the direction is kept
        for c, g in zip(clipped, gradient):
            torch.testing.assert_close(c.double(), g.double() * factor, rtol=2 * tolerance, atol=bound * tolerance)


@given(gradient=gradients_at_scale(nonzero=True), keep=st.floats(0.01, 1.0))
def test_sparsify_keeps_exactly_k_of_each_layer(gradient, keep):
    sparse = defenses.defend(gradient, "sparsify", keep=keep)
    for s, g in zip(sparse, gradient):
        k = defenses.kept_count(g.numel(), keep)
        kept = s.reshape(-1) != 0
        assert int(kept.sum()) == k
        assert torch.equal(s.reshape(-1)[kept], g.reshape(-1)[kept])  # kept entries are the originals
        if k < g.numel():
            assert g.reshape(-1)[kept].abs().min() >= g.reshape(-1)[~kept].abs().max()  # and the largest ones


CENSOR_MODEL = models.build("mlp", (1, 2, 2), 3, seed=0, widths=(3,)).double()
CENSOR_SHAPES = [tuple(p.shape) for p in CENSOR_MODEL.parameters()]


@given(gradient=gradients_at_scale(shapes=CENSOR_SHAPES, nonzero=True), seed=st.integers(0, 2**16),
       layerwise=st.booleans())
def test_censor_is_orthogonal_and_norm_preserving_at_any_scale(gradient, seed, layerwise):
    model = CENSOR_MODEL.to(gradient[0].dtype)
    inputs = torch.rand((2, 1, 2, 2), generator=torch.Generator().manual_seed(0), dtype=gradient[0].dtype)
    context = {"model": model, "inputs": inputs, "labels": torch.tensor([0, 1]), "loss": "cross_entropy"}
    shared = defenses.defend(gradient, "censor", seed=seed, context=context, trials=2, layerwise=layerwise)
    tolerance = 1e-4 if gradient[0].dtype == torch.float32 else 1e-10
    pairs = list(zip(shared, gradient)) if layerwise else [(gradients.flatten(shared), gradients.flatten(gradient))]
    for s, g in pairs:
        assert torch.isfinite(s).all()
        # Measured on the tensors divided by the largest |entry| of g (exact to a power of two): no over- or underflow.
        unit = float(g.abs().max())
        s64, g64 = s.double() / unit, g.double() / unit
        assert float(s64.norm()) == pytest.approx(float(g64.norm()), rel=tolerance)
        if g.numel() > 1:
            assert abs(float((s64 * g64).sum())) <= tolerance * float(s64.norm() * g64.norm())


#: Values each defense option may take here, by option name: a new defense built from known options needs no edit.
#: CENSOR's ``trials`` is kept small, its ``perturbations`` left to the defense (it draws its own).
OPTION_VALUES = {
    "sigma": st.floats(0, 1e3), "bound": st.floats(1e-6, 1e6), "keep": st.floats(0.01, 1.0),
    "prune": st.floats(0.0, 0.99), "trials": st.integers(1, 3), "projection": st.sampled_from(["exact", "public"]),
    "layerwise": st.booleans(), "lr": st.floats(1e-3, 1.0),
}
UNDRAWN = {"perturbations"}


def defense_options(name: str):
    """Options for the registered defense ``name``, read off its signature: required ones always, others sometimes."""
    import inspect

    skip = {"gradient", "generator", *defenses.CONTEXT, *UNDRAWN}
    parameters = {key: p for key, p in inspect.signature(defenses.DEFENSES[name]).parameters.items() if key not in skip}
    lacking = sorted(set(parameters) - set(OPTION_VALUES))
    assert not lacking, f"defense {name!r} has options with no values to draw here: add {lacking} to OPTION_VALUES"
    required = {key: OPTION_VALUES[key] for key, p in parameters.items() if p.default is inspect.Parameter.empty}
    optional = {key: OPTION_VALUES[key] for key, p in parameters.items() if p.default is not inspect.Parameter.empty}
    return st.fixed_dictionaries(required, optional=optional)


@given(data_=st.data(), name=st.sampled_from(sorted(defenses.DEFENSES.names())),
       gradient=gradients_at_scale(shapes=CENSOR_SHAPES))
def test_no_defense_turns_a_finite_gradient_into_a_non_finite_one(data_, name, gradient):
    options = data_.draw(defense_options(name))
    model = CENSOR_MODEL.to(gradient[0].dtype)
    inputs = torch.rand((2, 1, 2, 2), generator=torch.Generator().manual_seed(0), dtype=gradient[0].dtype)
    context = {"model": model, "inputs": inputs, "labels": torch.tensor([0, 1]), "loss": "cross_entropy"}
    shared = defenses.defend(gradient, name, seed=1, context=context, **options)
    assert len(shared) == len(gradient)
    assert all(torch.isfinite(s).all() and s.dtype == g.dtype and s.shape == g.shape for s, g in zip(shared, gradient))


# ----------------------------------------------------------------------------------
# Invalid input: every call raises one of the library's errors, and never returns
# ----------------------------------------------------------------------------------

NOT_A_NUMBER = st.one_of(st.text(max_size=4), st.booleans(), st.none(), st.lists(st.integers(), max_size=2),
                         st.just(float("nan")), st.just(float("inf")), st.just(-float("inf")))
BAD_COUNT = st.one_of(st.integers(max_value=0), st.floats(allow_nan=True), NOT_A_NUMBER)
BAD_POSITIVE = st.one_of(st.floats(max_value=0.0), NOT_A_NUMBER)
BAD_NON_NEGATIVE = st.one_of(st.floats(max_value=-1e-300), NOT_A_NUMBER)
BAD_FRACTION = st.one_of(st.floats(max_value=0.0), st.floats(min_value=1.0000001), NOT_A_NUMBER)
BAD_SHAPE = st.one_of(st.just(()), st.just((0, 4, 4)), st.just((-1,)), st.just((1, 4.0, 4)), st.just("1x4x4"), st.just(None),
                      st.just((1, 5, 5)), st.just((3, 4, 4)))


def _attack(**changes):
    arguments = dict(name="dlg", model=MODEL, gradient=GRADIENT, shape=(1, 4, 4), batch_size=2, labels=LABELS, progress=False,
                     iterations=1)
    arguments.update(changes)
    return gradcore.attack(arguments.pop("name"), arguments.pop("model"), arguments.pop("gradient"), **arguments)


def _gan_attack(name, **options):
    return gradcore.attack(name, GAN_MODEL, GAN_GRADIENT, shape=(1, 8, 8), batch_size=2, labels=LABELS, progress=False,
                           generator=GENERATOR, **options)


def _train_gan(**changes):
    arguments = dict(dataset=DIGITS, steps=1, progress=False)
    arguments.update(changes)
    return generative.train_gan(arguments.pop("dataset"), **arguments)


def _nan_at(tensor: torch.Tensor, index: int, value: float) -> torch.Tensor:
    flat = tensor.clone().reshape(-1)
    flat[index % flat.numel()] = value
    return flat.reshape(tensor.shape)


BAD_CALLS = {
    # attack and Observation
    "attack iterations": (BAD_COUNT, lambda v: _attack(iterations=v)),
    "attack lr": (BAD_POSITIVE, lambda v: _attack(lr=v)),
    "attack max_iter": (BAD_COUNT, lambda v: _attack(max_iter=v)),
    "attack decay": (st.sampled_from(["cosin", None, 1, 0.5]), lambda v: _attack(name="inverting_gradients", decay=v)),
    "attack record_every": (BAD_COUNT, lambda v: _attack(record_every=v)),
    "attack batch_size": (BAD_COUNT, lambda v: _attack(batch_size=v)),
    "attack seed": (st.one_of(st.floats(), st.text(max_size=3), st.none()), lambda v: _attack(seed=v)),
    "attack shape": (BAD_SHAPE, lambda v: _attack(shape=v)),
    "attack labels": (st.one_of(st.just(torch.tensor([0.0, 2.0])), st.just(torch.tensor([0, 3])), st.just(torch.tensor([-1, 0])),
                                st.just(torch.tensor([0])), st.just([0, 2]), st.just(torch.tensor([[0], [2]]))),
                      lambda v: _attack(labels=v)),
    "attack gradient": (st.tuples(st.integers(0, 3), st.integers(0, 100), st.sampled_from([math.nan, math.inf, -math.inf])),
                        lambda v: _attack(gradient=GRADIENT[:v[0]] + (_nan_at(GRADIENT[v[0]], v[1], v[2]),) + GRADIENT[v[0] + 1:])),
    "attack truth": (st.sampled_from([torch.zeros(2, 1, 4, 5, dtype=torch.float64), torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
                                      torch.full((2, 1, 4, 4), math.nan, dtype=torch.float64)]), lambda v: _attack(truth=v)),
    "infer_labels batch_size": (BAD_COUNT, lambda v: attacks.infer_labels(MODEL, GRADIENT, v)),
    # the client
    "shared_gradient inputs": (st.sampled_from([INPUTS[:0], INPUTS.float(), INPUTS[:, :, :3], INPUTS.numpy(), INPUTS[0],
                                                torch.full_like(INPUTS, math.nan)]),
                               lambda v: client.shared_gradient(MODEL, v, LABELS)),
    "shared_gradient targets": (st.sampled_from([torch.tensor([3.0, 1.0]), torch.tensor([12, 0]), torch.tensor([0]), [0, 1]]),
                                lambda v: client.shared_gradient(MODEL, INPUTS, v)),
    "per_sample_gradients targets": (st.sampled_from([torch.tensor([3.0, 1.0]), torch.tensor([0, -1])]),
                                     lambda v: gradients.per_sample_gradients(MODEL, INPUTS, v)),
    "local_update lr": (BAD_POSITIVE, lambda v: gradients.local_update(MODEL, INPUTS, LABELS, lr=v)),
    "local_update epochs": (BAD_COUNT, lambda v: gradients.local_update(MODEL, INPUTS, LABELS, epochs=v)),
    # defenses
    "noise sigma": (BAD_NON_NEGATIVE, lambda v: defenses.defend(GRADIENT, "noise", sigma=v)),
    "clip bound": (BAD_POSITIVE, lambda v: defenses.defend(GRADIENT, "clip", bound=v)),
    "sparsify keep": (BAD_FRACTION, lambda v: defenses.defend(GRADIENT, "sparsify", keep=v)),
    "censor trials": (BAD_COUNT, lambda v: defenses.defend(GRADIENT, "censor", context=CONTEXT, trials=v)),
    "shared_gradient defense option": (BAD_NON_NEGATIVE, lambda v: client.shared_gradient(MODEL, INPUTS, LABELS, defense="noise",
                                                                                               sigma=v)),
    "defend gradient": (st.tuples(st.integers(0, 3), st.integers(0, 100), st.sampled_from([math.nan, math.inf])),
                        lambda v: defenses.defend(GRADIENT[:v[0]] + (_nan_at(GRADIENT[v[0]], v[1], v[2]),) + GRADIENT[v[0] + 1:], "clip",
                                                  bound=1.0)),
    # models, data, metrics
    "build num_classes": (BAD_COUNT, lambda v: models.build("mlp", (1, 4, 4), v)),
    "build shape": (st.sampled_from([(), (0, 4, 4), (1, -4, 4), "1x4x4", None, (1, 4.0, 4)]), lambda v: models.build("mlp", v, 3)),
    "build widths": (st.sampled_from([(0,), (-3,), (2.5,), "8", 8]), lambda v: models.build("mlp", (1, 4, 4), 3, widths=v)),
    "load size": (BAD_COUNT, lambda v: data.load("photos", size=v)),
    "load crop_fraction": (BAD_FRACTION, lambda v: data.load("photos", crop_fraction=v)),
    "psnr data_range": (BAD_POSITIVE, lambda v: metrics.psnr(INPUTS, INPUTS, data_range=v)),
    "metric pair": (st.sampled_from([(INPUTS, INPUTS[:1]), ((INPUTS * 255).to(torch.uint8), INPUTS), (INPUTS, INPUTS.flatten())]),
                    lambda v: metrics.mse(*v)),
    "align pair": (st.sampled_from([(INPUTS, INPUTS[:1]), (INPUTS, INPUTS.long())]), lambda v: metrics.align(*v)),
    "metric reconstruction": (st.sampled_from([torch.full_like(INPUTS, math.nan), INPUTS.clone().index_fill_(0, torch.tensor([1]), math.inf)]),
                              lambda v: metrics.psnr(v, INPUTS)),
    "photos size": (BAD_COUNT, lambda v: data.photos(size=v)),
    "photos per_photo": (BAD_COUNT, lambda v: data.photos(per_photo=v)),
    # the GAN prior and the GAN-prior attacks
    "train_gan dataset": (st.sampled_from(["digits", None, INPUTS]), lambda v: _train_gan(dataset=v)),
    "train_gan latent_dim": (BAD_COUNT, lambda v: _train_gan(latent_dim=v)),
    "train_gan width": (st.one_of(st.integers(max_value=7), NOT_A_NUMBER), lambda v: _train_gan(width=v)),
    "train_gan lr": (BAD_POSITIVE, lambda v: _train_gan(lr=v)),
    "train_gan flips": (st.sampled_from(["no", 1, None]), lambda v: _train_gan(flips=v)),
    "train_gan device": (st.sampled_from(["nosuch", 3.5, "gpu"]), lambda v: _train_gan(device=v)),
    "train_gan seed": (st.sampled_from([0.5, "0", None]), lambda v: _train_gan(seed=v)),
    "gias parameter_lr": (BAD_POSITIVE, lambda v: _gan_attack("gias", latent_iterations=1, parameter_iterations=1, parameter_lr=v)),
    "gias unknown option": (st.sampled_from(["parameter_weight", "steps"]), lambda v: _gan_attack("gias", **{v: -1})),
    "gifd feature_lr": (BAD_POSITIVE, lambda v: _gan_attack("gifd", latent_iterations=1, layer_iterations=1, feature_lr=v)),
    "ggl generations": (BAD_COUNT, lambda v: _gan_attack("ggl", generations=v)),
    # differential privacy
    "guarantee spec": (st.sampled_from([None, "dp", {"defense": "dp", "bound": 1.0}, {"defense": "dp", "sigma": 1.0},
                                        {"dp_sgd": {"max_grad_norm": 1.0}}, {**DP, "sigma": "0.5"}, {**DP, "bound": 0.0},
                                        {"defense": "noise", "sigma": 0.1}]),
                       lambda v: privacy.guarantee(v, PROTOCOL)),
    "guarantee protocol": (st.sampled_from(["sample", None, 3]), lambda v: privacy.guarantee(DP, v)),
    "epsilon steps": (st.one_of(st.integers(max_value=-1), st.just("ten"), st.none(), st.just(math.nan), st.floats(0.1, 0.9)),
                      lambda v: privacy.epsilon(1.0, 0.1, v)),
    "epsilon sample rate": (BAD_FRACTION, lambda v: privacy.epsilon(1.0, v, 10)),
    "Protocol batch_size": (BAD_COUNT, lambda v: privacy.Protocol("sample", 0.1, 10, batch_size=v)),
    "dp_sgd_gradient labels": (st.sampled_from([torch.tensor([0, 5]), torch.tensor([-1, 0]), torch.tensor([0.0, 1.0]), torch.tensor([0])]),
                               lambda v: privacy.dp_sgd_gradient(MODEL, INPUTS, v, 2, 1.0, 1.0)),
    "dp_sgd_gradient images": (st.sampled_from([INPUTS.float(), INPUTS[:, :, :3], torch.full_like(INPUTS, math.nan)]),
                               lambda v: privacy.dp_sgd_gradient(MODEL, v, LABELS, 2, 1.0, 1.0)),
    "share local": (st.sampled_from([{"epochs": 1}, {"lr": -1.0}, {"lr": 0.1, "steps": 2}, "0.1"]),
                    lambda v: client.share(MODEL, INPUTS, LABELS, local=v)),
    # minimal structure and exclusivity
    "conv_counting kernels": (BAD_COUNT, lambda v: minimal.conv_counting(8, 1, v, 3)),
    "first_layer_inversion tolerance": (BAD_POSITIVE, lambda v: minimal.first_layer_inversion(np.ones((2, 3)), np.ones(2), tolerance=v)),
    "two_step iterations": (BAD_COUNT, lambda v: minimal.two_step(models.conv_mlp((1, 4, 4), 3), [p.detach() for p in
                                                                                                  models.conv_mlp((1, 4, 4), 3).parameters()],
                                                                  (1, 4, 4), iterations=v)),
    "reconstruct batch_size": (BAD_COUNT, lambda v: exclusivity.reconstruct(
        dense.from_torch(MODEL), walkback.gradient_pairs_from_torch(MODEL, GRADIENT), v)),
    "artifact target": (st.one_of(st.tuples(st.integers(2, 99), st.integers(0, 15)), st.tuples(st.integers(0, 1), st.integers(16, 99)),
                                  st.tuples(st.integers(max_value=-1), st.integers(0, 15)), st.just("flip"), st.just(3)),
                        lambda v: exclusivity.artifact_batch(dense.from_torch(MODEL), INPUTS.flatten(1).numpy(), LABELS.numpy(),
                                                             target=v)),
}


@given(data_=st.data(), call=st.sampled_from(sorted(BAD_CALLS)))
def test_every_bad_call_raises_a_library_error_and_never_returns(data_, call):
    strategy, function = BAD_CALLS[call]
    value = data_.draw(strategy, label=call)
    with pytest.raises(GradcoreError):
        function(value)


#: One bad value per kind of call, so that each is refused at least once whatever hypothesis draws.
REPRESENTATIVE = {
    "attack iterations": -5, "attack lr": "0.1", "attack max_iter": 2.5, "attack decay": "cosin", "attack record_every": 0, "attack batch_size": 2.0,
    "attack seed": "0", "attack shape": (0, 4, 4), "attack labels": torch.tensor([0.0, 2.0]), "attack gradient": (1, 0, math.nan),
    "attack truth": torch.zeros(2, 1, 4, 4, dtype=torch.uint8), "infer_labels batch_size": 0,
    "shared_gradient inputs": INPUTS[:0], "shared_gradient targets": torch.tensor([12, 0]),
    "per_sample_gradients targets": torch.tensor([0, -1]), "local_update lr": -1e-4, "local_update epochs": 0,
    "noise sigma": float("nan"), "clip bound": 0.0, "sparsify keep": 1.5, "censor trials": 2.5,
    "shared_gradient defense option": "0.1", "defend gradient": (3, 0, math.inf), "build num_classes": 0,
    "build shape": (1, -4, 4), "build widths": (0,), "load size": 0, "load crop_fraction": 0.0, "psnr data_range": -1.0,
    "metric pair": ((INPUTS * 255).to(torch.uint8), INPUTS), "align pair": (INPUTS, INPUTS[:1]), "conv_counting kernels": 0,
    "first_layer_inversion tolerance": -1.0, "two_step iterations": 0, "reconstruct batch_size": 0, "artifact target": (99, 0),
    "metric reconstruction": torch.full_like(INPUTS, math.nan), "photos size": 0, "photos per_photo": -1,
    "train_gan dataset": "digits", "train_gan latent_dim": -1, "train_gan width": 0, "train_gan lr": math.inf,
    "train_gan flips": "no", "train_gan device": "nosuch", "train_gan seed": 0.5, "gias parameter_lr": -1e-3,
    "gias unknown option": "parameter_weight", "gifd feature_lr": -1.0, "ggl generations": 0,
    "guarantee spec": {"defense": "dp", "bound": 1.0}, "guarantee protocol": "sample", "epsilon steps": "ten",
    "epsilon sample rate": 0.0, "Protocol batch_size": "x", "dp_sgd_gradient labels": torch.tensor([0, 5]),
    "dp_sgd_gradient images": INPUTS.float(), "share local": {"epochs": 1},
}


@pytest.mark.parametrize("call", sorted(BAD_CALLS))
def test_each_kind_of_bad_call_is_refused(call):
    assert set(REPRESENTATIVE) == set(BAD_CALLS)
    with pytest.raises(GradcoreError):
        BAD_CALLS[call][1](REPRESENTATIVE[call])


@given(model_shape=st.sampled_from([(1, 4, 4), (16,)]), bad_inputs=st.sampled_from(["dtype", "shape", "empty", "nan"]))
def test_a_model_never_runs_on_inputs_it_cannot_take(model_shape, bad_inputs):
    model = models.build("mlp", model_shape, 3, seed=0, widths=(4,)).double()
    inputs = torch.rand((2, *model_shape), dtype=torch.float64)
    inputs = {"dtype": inputs.float(), "shape": inputs.reshape(2, -1)[:, :15], "empty": inputs[:0],
              "nan": torch.full_like(inputs, math.nan)}[bad_inputs]
    with pytest.raises(GradcoreValueError):
        client.shared_gradient(model, inputs, torch.tensor([0, 1])[: len(inputs)])


def test_no_notebook_or_file_is_touched_by_a_refused_call(tmp_path, monkeypatch):
    # Errors are raised before any work: nothing half-written anywhere.
    monkeypatch.chdir(tmp_path)
    for call in ("attack iterations", "load size", "clip bound"):
        with pytest.raises(GradcoreError):
            BAD_CALLS[call][1](-1)
    assert list(tmp_path.iterdir()) == []


def test_every_registered_function_accepts_its_own_defaults_passed_explicitly():
    """A shared option rule may be stricter than one function (``size=None`` keeps CIFAR's native 32x32)."""
    import inspect

    for registry in (gradcore.ATTACKS, gradcore.DEFENSES, gradcore.MODELS, gradcore.DATASETS, gradcore.METRICS):
        for name in registry.names():
            parameters = inspect.signature(registry[name]).parameters
            defaults = {key: p.default for key, p in parameters.items()
                        if key in validation.OPTION_RULES and p.default is not inspect.Parameter.empty}
            required = [key for key, p in parameters.items() if p.default is inspect.Parameter.empty]
            validation.options(f"{name!r}", registry[name], defaults, skip=required)


def test_an_explicit_default_is_accepted_but_the_same_value_elsewhere_is_still_refused():
    assert data.load("cifar10_samples", size=None).shape == (3, 32, 32)
    with pytest.raises(GradcoreTypeError, match="size"):
        data.load("photos", size=None)
